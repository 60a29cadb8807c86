"""The wire shaper of a network whose hosts live on several machines: one emulator half per machine.

A link with both ends on one machine is an ordinary link of that machine's
emulator. A link whose ends are on two machines is split: each half holds the
TAP of its own end and sends the direction leaving it, impaired once, over the
UDP tunnel of that machine pair (testbed/shaping/tunnel.py); the other half
writes it to its TAP as it arrives. The tunnel of a pair is opened, connected
and measured when its first split link is added; its one-way delay is taken
off the configured delay at each sending half, and a configured delay below it
is refused naming the link.

Control: set_params and set_carrier go to both halves of a split link (each
half also tells the other of a carrier change, so a change made at either half
alone still applies to the whole link). counters() adds up the two halves: the
sending half counts the impairment drops and duplicates, the receiving half
the frames it wrote. A split link's capture is one file per half, holding the
direction delivered there: `<name>.<machine>.pcap` beside the requested path
(in a placed run the agents' halves write them in the agents, and the
controller copies them out and merges them into the requested path:
testbed/agent/controller.py, testbed/shaping/pcapmerge.py).

By default every half is a process on this machine (tests and benchmarks split
a link across two emulator processes); in a placed network each machine's agent
runs its half (testbed/agent/controller.py passes them in as `halves`).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from node.errors import UserError
from testbed.shaping import tunnel
from testbed.shaping.base import DirectionCounters, LinkEnd, Shaper, link_duplex
from testbed.shaping.tunnel import TunnelEstimate
from testbed.shaping.wire import WireShaper, direction_to_wire
from testbed.topology.model import Direction

PROBES = 50                 # per tunnel and direction: a median of 50 round trips
PROBE_INTERVAL = 0.002      # s between probes: 0.1 s per tunnel, and probes do not queue behind each other
MEASURE_TIMEOUT = 10.0      # s for a tunnel's probes to come back before the machine pair is unreachable


@dataclass(frozen=True)
class SplitLink:
    machines: tuple[str, ...]       # (machine,) for a link inside one machine, (machine of a, machine of b) else
    number: int = 0                 # split links: the link number in the tunnel header


class SplitWireShaper(Shaper):
    name = "wire"

    def __init__(self, run_id: str, workdir: Path, machines: dict[str, str], placement: dict[str, str],
                 state: dict[str, Any] | None = None, halves: dict[str, WireShaper] | None = None) -> None:
        """machines: name -> the address its emulator's tunnels bind and are reached at; placement: netns -> machine.
        halves: machine -> its emulator half when already started elsewhere (by the machine's agent,
        testbed/agent/controller.py, also when restoring from `state`); by default each half is a process on
        this machine."""
        self.run_id = run_id
        self.workdir = Path(workdir)
        self.machines = dict(machines)
        self.placement = dict(placement)
        self.halves: dict[str, WireShaper] = {}
        self.links: dict[str, SplitLink] = {}
        self.tunnels: dict[tuple[str, str], dict[str, TunnelEstimate]] = {}
        self._closed = False
        if state is not None:
            self.halves = halves if halves is not None else \
                {m: WireShaper(run_id, Path(s["workdir"]), state=s) for m, s in state["halves"].items()}
            self.links = {k: SplitLink(tuple(v["machines"]), v["number"]) for k, v in state["links"].items()}
            for key, est in state["tunnels"].items():
                m1, m2 = key.split("|")
                self.tunnels[(m1, m2)] = {m: TunnelEstimate(**e) for m, e in est.items()}
            return
        if len(self.machines) < 2:
            raise UserError("a network split over machines needs at least two machines.")
        if halves is not None:
            self.halves = {m: halves[m] for m in self.machines}
            return
        try:
            for i, m in enumerate(self.machines):
                self.halves[m] = WireShaper(run_id, self.workdir / m, half=i)
        except BaseException:
            self.close()
            raise

    # ---- tunnels -------------------------------------------------------
    def machine_of(self, end: LinkEnd) -> str:
        m = self.placement.get(end.netns)
        if m is None or m not in self.halves:
            raise UserError(f"namespace {end.netns} is placed on no machine of this network.")
        return m

    def tunnel(self, m1: str, m2: str) -> dict[str, TunnelEstimate]:
        """The measured tunnel between two machines (opened, connected and measured on first use):
        {machine: estimate of the one-way delay of what that machine sends}."""
        key = (min(m1, m2), max(m1, m2))
        if key in self.tunnels:
            return self.tunnels[key]
        a, b = key
        ports = {m: self.halves[m].request({"op": "tunnel_open", "peer": other, "bind": self.machines[m]})["port"]
                 for m, other in ((a, b), (b, a))}
        for m, other in ((a, b), (b, a)):
            self.halves[m].request({"op": "tunnel_connect", "peer": other, "host": self.machines[other],
                                    "port": ports[other]})
        for m, other in ((a, b), (b, a)):
            self.halves[m].request({"op": "tunnel_measure", "peer": other, "probes": PROBES,
                                    "interval": PROBE_INTERVAL})
        found: dict[str, TunnelEstimate] = {}
        deadline = time.monotonic() + MEASURE_TIMEOUT
        while len(found) < 2:
            for m, other in ((a, b), (b, a)):
                if m in found:
                    continue
                r = self.halves[m].request({"op": "tunnel_status", "peer": other})
                if r["done"] and r["back"] == 0:
                    raise UserError(f"no probe came back over the tunnel from machine {m} ({self.machines[m]}) to "
                                    f"machine {other} ({self.machines[other]}): is that address reachable?")
                if r["done"]:
                    found[m] = TunnelEstimate(r["delay"], r["minimum"], r["jitter"], r["back"])
            if len(found) < 2:
                if time.monotonic() > deadline:
                    raise UserError(f"the tunnel between machines {a} and {b} was not measured within "
                                    f"{MEASURE_TIMEOUT:.0f} s.")
                time.sleep(0.02)
        self.tunnels[key] = found
        return found

    def _check_delays(self, link_id: str, link: SplitLink, dirs: tuple[Direction | None, Direction | None]) -> None:
        est = self.tunnel(*link.machines)
        for i, d in enumerate(dirs):
            if d is None:
                continue
            sender, receiver = link.machines[i], link.machines[1 - i]
            err = tunnel.delay_error(link_id, i, d.delay, receiver, est[sender].delay)
            if err:
                raise UserError(err + ".")

    # ---- Shaper API --------------------------------------------------
    def add_link(self, link_id: str, a: LinkEnd, b: LinkEnd, a_to_b: Direction, b_to_a: Direction,
                 pcap: Path | None = None, snaplen: int = 128) -> None:
        if link_id in self.links:
            raise UserError(f"link {link_id} exists.")
        ma, mb = self.machine_of(a), self.machine_of(b)
        if ma == mb:
            self.halves[ma].add_link(link_id, a, b, a_to_b, b_to_a, pcap=pcap, snaplen=snaplen)
            self.links[link_id] = SplitLink((ma,))
            return
        for end in (a, b):
            if not end.ifname or len(end.ifname) > 15:
                raise UserError(f"interface name {end.ifname!r} must be 1 to 15 characters.")
        if link_duplex(link_id, a_to_b, b_to_a) != "full":
            raise UserError(f"link {link_id}: half duplex needs both ends on one machine (one transmitter), "
                            f"but its ends are on {ma} and {mb}.")
        link = SplitLink((ma, mb), number=len(self.links) + 1)
        self._check_delays(link_id, link, (a_to_b, b_to_a))     # before either half makes anything
        for end_name, end, m, other in (("a", a, ma, mb), ("b", b, mb, ma)):
            self.halves[m].request({
                "op": "add_remote", "link_id": link_id, "number": link.number, "peer": other, "end": end_name,
                "local": {"netns": end.netns, "ifname": end.ifname},
                "a_to_b": direction_to_wire(a_to_b), "b_to_a": direction_to_wire(b_to_a), "duplex": "full",
                "pcap": str(pcap.with_name(f"{pcap.stem}.{m}{pcap.suffix}")) if pcap else None,
                "snaplen": snaplen})
            self.links[link_id] = link

    def _link(self, link_id: str) -> SplitLink:
        link = self.links.get(link_id)
        if link is None:
            raise UserError(f"wire emulator: unknown link {link_id!r}.")
        return link

    def set_params(self, link_id: str, a_to_b: Direction | None, b_to_a: Direction | None) -> None:
        link = self._link(link_id)
        if len(link.machines) == 2:
            self._check_delays(link_id, link, (a_to_b, b_to_a))
        for m in link.machines:
            self.halves[m].set_params(link_id, a_to_b, b_to_a)

    def set_carrier(self, link_id: str, up: bool) -> None:
        for m in self._link(link_id).machines:
            self.halves[m].set_carrier(link_id, up)

    def counters(self, link_id: str) -> tuple[DirectionCounters, DirectionCounters]:
        total = (DirectionCounters(), DirectionCounters())
        for m in self._link(link_id).machines:
            for acc, part in zip(total, self.halves[m].counters(link_id)):
                for f in fields(DirectionCounters):
                    setattr(acc, f.name, getattr(acc, f.name) + getattr(part, f.name))
        return total

    def counters_all(self) -> dict[str, tuple[DirectionCounters, DirectionCounters]]:
        """One batched read per emulator half, summed per link as counters() sums them."""
        per_half = {m: h.counters_all() for m, h in self.halves.items()}
        out: dict[str, tuple[DirectionCounters, DirectionCounters]] = {}
        zero = (DirectionCounters(), DirectionCounters())
        for link_id, link in self.links.items():
            total = (DirectionCounters(), DirectionCounters())
            for m in link.machines:
                for acc, part in zip(total, per_half.get(m, {}).get(link_id, zero)):
                    for f in fields(DirectionCounters):
                        setattr(acc, f.name, getattr(acc, f.name) + getattr(part, f.name))
            out[link_id] = total
        return out

    def tunnel_counters(self, link_id: str) -> dict[str, int]:
        """A split link's datagrams: sent by the sending halves, and lost between the halves (sequence gaps)."""
        link = self._link(link_id)
        out = {"sent": 0, "lost": 0}
        for m in link.machines if len(link.machines) == 2 else ():
            t = self.halves[m].request({"op": "counters", "link_id": link_id})["tunnel"]
            out["sent"] += t["sent"]
            out["lost"] += t["lost"]
        return out

    def state(self) -> dict[str, Any]:
        return {"backend": "wire-split", "run_id": self.run_id, "workdir": str(self.workdir),
                "machines": self.machines, "placement": self.placement,
                "halves": {m: h.state() for m, h in self.halves.items()},
                "links": {k: {"machines": list(v.machines), "number": v.number} for k, v in self.links.items()},
                "tunnels": {f"{a}|{b}": {m: asdict(e) for m, e in est.items()}
                            for (a, b), est in self.tunnels.items()}}

    def detach(self) -> None:
        for h in self.halves.values():
            h.detach()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for h in self.halves.values():
            h.close()
