"""The `netem` shaper: a veth pair per link, `tc qdisc netem` per direction.

UNTESTED ON THE DEVELOPMENT MACHINE: its kernel has no netem qdisc, so only
probe.netem_available(), the auto selection and the error path are exercised
there; the conformance suite skips this backend with that reason. The code is
kept deliberately plain (the `ip`/`tc` commands) so it can be checked by eye.

Per direction, the egress qdisc of the SENDING end carries the impairments:
netem (delay/jitter/loss or gemodel/duplicate, reorder only when asked) with
`rate` and `limit` (queue in packets). Carrier down = both ends down.
Known difference from wire: netem with jitter may reorder even when
`reorder` is False (kernels >= 3.x keep order only when a rate is set); and
capture is not implemented here (use tcpdump on the interfaces); and
`duplex: half` is refused: a qdisc per sending end cannot share one medium
between the two directions.
"""
from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

from testbed import registry
from node.errors import UserError
from testbed.shaping.base import DirectionCounters, LinkEnd, Shaper, link_duplex
from testbed.topology.model import Direction

log = logging.getLogger(__name__)


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise UserError(f"`{' '.join(args)}` failed: {r.stderr.strip() or r.returncode}.")
    return r


def netem_args(d: Direction) -> list[str]:
    args = ["limit", str(d.queue)]
    if d.delay or d.jitter:
        args += ["delay", f"{d.delay * 1e6:.0f}us"]
        if d.jitter:
            args += [f"{d.jitter * 1e6:.0f}us"]
    if d.gilbert is not None:
        g = d.gilbert
        # tc-netem(8): gemodel p r 1-h 1-k, where 1-h / 1-k are the loss probabilities in bad / good state
        args += ["loss", "gemodel", f"{g.p * 100}%", f"{g.r * 100}%", f"{g.loss_bad * 100}%",
                 f"{g.loss_good * 100}%"]
    elif d.loss:
        args += ["loss", "random", f"{d.loss * 100}%"]
    if d.duplicate:
        args += ["duplicate", f"{d.duplicate * 100}%"]
    if d.rate:
        args += ["rate", f"{int(d.rate)}bit"]
    return args


def check_duplex(link_id: str, a_to_b: Direction, b_to_a: Direction) -> None:
    """Refuse half duplex before anything is created: netem shapes each sending end on its own."""
    if link_duplex(link_id, a_to_b, b_to_a) == "half":
        raise UserError(f"link {link_id}: the netem shaper cannot emulate duplex: half (its two directions are "
                        f"independent qdiscs); use --shaper wire.")


class NetemShaper(Shaper):
    name = "netem"

    def __init__(self, run_id: str, workdir: Path, state: dict[str, Any] | None = None) -> None:
        self.run_id = run_id
        self.workdir = Path(workdir)
        self.links: dict[str, dict[str, Any]] = dict((state or {}).get("links", {}))
        self._tmp = len(self.links)
        self._netlink: dict[str, Any] = {}     # netns -> open pyroute2 NetNS, kept between samples (opening costs)

    def _tc(self, end: dict[str, str], d: Direction, verb: str) -> None:
        _run(["ip", "netns", "exec", end["netns"], "tc", "qdisc", verb, "dev", end["ifname"], "root", "netem",
              *netem_args(d)])

    def add_link(self, link_id: str, a: LinkEnd, b: LinkEnd, a_to_b: Direction, b_to_a: Direction,
                 pcap: Path | None = None) -> None:
        check_duplex(link_id, a_to_b, b_to_a)
        pfx = registry.prefix(self.run_id)
        ta, tb = f"{pfx}v{self._tmp}", f"{pfx}v{self._tmp + 1}"
        self._tmp += 2
        _run(["ip", "link", "add", ta, "type", "veth", "peer", "name", tb])
        for tmp, end in ((ta, a), (tb, b)):
            _run(["ip", "link", "set", "dev", tmp, "netns", end.netns])
            _run(["ip", "-n", end.netns, "link", "set", "dev", tmp, "name", end.ifname, "up"])
        ea, eb = {"netns": a.netns, "ifname": a.ifname}, {"netns": b.netns, "ifname": b.ifname}
        self._tc(ea, a_to_b, "add")
        self._tc(eb, b_to_a, "add")
        self.links[link_id] = {"a": ea, "b": eb}
        if pcap:
            log.warning("netem shaper: capture is not implemented for this backend (link %s)", link_id)

    def set_params(self, link_id: str, a_to_b: Direction | None, b_to_a: Direction | None) -> None:
        link = self._link(link_id)
        if a_to_b is not None:
            self._tc(link["a"], a_to_b, "change")
        if b_to_a is not None:
            self._tc(link["b"], b_to_a, "change")

    def set_carrier(self, link_id: str, up: bool) -> None:
        link = self._link(link_id)
        for end in (link["a"], link["b"]):
            _run(["ip", "-n", end["netns"], "link", "set", "dev", end["ifname"], "up" if up else "down"])

    def counters(self, link_id: str) -> tuple[DirectionCounters, DirectionCounters]:
        link = self._link(link_id)
        out = []
        for end in (link["a"], link["b"]):
            r = _run(["ip", "netns", "exec", end["netns"], "tc", "-s", "qdisc", "show", "dev", end["ifname"]])
            c = DirectionCounters()
            words = r.stdout.split()
            if "Sent" in words:
                i = words.index("Sent")
                c.bytes, c.packets = int(words[i + 1]), int(words[i + 3])
                c.dropped_queue = int(words[i + 6].rstrip(","))
            out.append(c)
        return out[0], out[1]

    def counters_all(self) -> dict[str, tuple[DirectionCounters, DirectionCounters]]:
        """Every link's counters over netlink (pyroute2): one qdisc dump and one link dump per host namespace,
        whatever the number of links; `tc` per link end would fork hundreds of processes a second."""
        wanted: dict[str, set[str]] = {}
        for link in self.links.values():
            for end in (link["a"], link["b"]):
                wanted.setdefault(end["netns"], set()).add(end["ifname"])
        stats = {ns: self._root_qdisc_stats(ns, names) for ns, names in wanted.items()}
        out = {}
        for link_id, link in self.links.items():
            pair = [stats[end["netns"]].get(end["ifname"], DirectionCounters()) for end in (link["a"], link["b"])]
            out[link_id] = (pair[0], pair[1])
        return out

    def _root_qdisc_stats(self, netns: str, names: set[str]) -> dict[str, DirectionCounters]:
        from pyroute2 import NetNS
        nl = self._netlink.get(netns)
        if nl is None:
            nl = self._netlink[netns] = NetNS(netns)
        try:
            index = {m["index"]: m.get_attr("IFLA_IFNAME") for m in nl.get_links()}
            qdiscs = list(nl.get_qdiscs())
        except Exception:
            # the namespace went away (or its socket broke): open it afresh next time
            self._netlink.pop(netns, None)
            nl.close()
            raise
        out: dict[str, DirectionCounters] = {}
        for q in qdiscs:
            name = index.get(q["index"])
            if name not in names or q["parent"] != 0xFFFFFFFF:     # the root qdisc carries the impairments
                continue
            st = q.get_attr("TCA_STATS") or {}
            out[name] = DirectionCounters(packets=int(st.get("packets", 0)), bytes=int(st.get("bytes", 0)),
                                          dropped_queue=int(st.get("drop", 0)))
        return out

    def _link(self, link_id: str) -> dict[str, Any]:
        if link_id not in self.links:
            raise UserError(f"unknown link {link_id!r}.")
        return self.links[link_id]

    def state(self) -> dict[str, Any]:
        return {"backend": "netem", "run_id": self.run_id, "workdir": str(self.workdir), "links": self.links}

    def close(self) -> None:
        for nl in self._netlink.values():
            nl.close()
        self._netlink.clear()
        for link in self.links.values():
            end = link["a"]             # deleting one veth end removes its peer
            _run(["ip", "-n", end["netns"], "link", "del", "dev", end["ifname"]], check=False)
        self.links.clear()
