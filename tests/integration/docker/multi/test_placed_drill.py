"""The nemesis drill's quick cell over the rig's two engines, with the second machine's clock 0.5 s ahead.

Placement: n1, n3, n6 on m1 and n2, n4, n5 on m2, so four ring links cross the engines and the timeline's kill -9s
of n4 and n5, their restarts, the pause of n2 and both partitions hit hosts of m2; a link fault (down, then up)
on the crossing link n5-n6 is added. The loss checker must find 0 lost and 0 duplicated, and events.jsonl names
the machine of every node fault. The same run is the clock test: m2's clock service and its daemons run
WANBED_TEST_MACHINE_CLOCK_OFFSET ahead; the agents' exchange must find that offset within half the probe's
round trip, and the delays corrected by machines.json are never negative and carry no offset. The partitions'
chains are made in m2's containers by m2's agent and removed at the heals; every link is captured, and each link
across the engines comes back as one pcap of both directions, as many frames as its counters counted."""
from __future__ import annotations

import ipaddress
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from node import clockmodel
from spark_analysis.pcap_ingest import _side_nets
from testbed import image
from testbed.accounting import check_run
from testbed.agent.placed import TEST_MACHINE_OFFSET_ENV
from testbed.docker_engine import Engine, docker
from testbed.network import partition_chain
from testbed.runtime.docker import run_containers

from .conftest import Machines

pytestmark = [pytest.mark.xdist_group("docker-multi"), pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[4]
DRILL = REPO / "scenarios" / "drill-nemesis.yaml"
ON_M2 = ("n2", "n4", "n5")
CROSSING = "n5-n6"
OFFSET = 0.5          # s: m2's clock ahead of the controller's; far above any delay of the drill's quick cell
LINK_FAULT = [{"at": "7s", "action": "link_down", "target": CROSSING},
              {"at": "8s", "action": "link_up", "target": CROSSING}]


def _scenario(tmp_path: Path, machines: Machines) -> Path:
    s = yaml.safe_load(DRILL.read_text())
    # every link captured: the agents write the captures, the controller collects them (split links merged)
    s.update(runtime="docker", shaper="wire", capture="all")
    s["placement"] = {"machines": [{"name": e.name, "engine": e.host, "cores": 1,
                                    "address": machines.addresses[e.name]} for e in machines.engines],
                      "strategy": {h: "m2" if h in ON_M2 else "m1" for h in (f"n{i}" for i in range(1, 7))}}
    s["quick"]["faults"] = s["quick"]["faults"] + LINK_FAULT
    # one cell of the two: the faults and the placement do not depend on the mode
    s["quick"]["sweep"] = {"grid": {"nodes.all.mode": ["fragmenting"]}, "reps": 1}
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(s, sort_keys=False))
    return path


def _chain_in(engine: Engine, container: str, chain: str) -> bool | None:
    """Whether the container's network namespace on `engine` holds the chain; None when it is not running."""
    pid = docker(["inspect", "--format", "{{.State.Pid}}", container], check=False, engine=engine).stdout.strip()
    if not pid.isdigit() or int(pid) <= 0:
        return None
    r = subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-w", "-S"], capture_output=True, text=True)
    return f"-N {chain}" in r.stdout if r.returncode == 0 else None


def _watch_partition_chains(p: subprocess.Popen, out: Path, engine: Engine) -> dict:
    """While the run goes on: the hosts of `engine` whose container held the run's partition chain after a
    partition event (written once the fault is applied), and those that held it after a heal which no later
    partition of theirs follows (a later partition may be applied before its event is written)."""
    observed: list[tuple[int, str, bool]] = []     # (index of the last partition/heal event, host, chain there)
    evs: list[dict] = []
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
        found = list(out.glob("*/*/topology.json"))
        events = found[0].parent / "events.jsonl" if found else None
        if events is None or not events.exists():
            continue
        evs = [e for e in _jsonl(events) if e.get("event") in ("partition", "heal")]
        if not evs:
            continue
        topo = json.loads(found[0].read_text())
        chain = partition_chain(topo["run_id"])
        last = evs[-1]
        hosts = [h for side in last["target"] for h in side] if last["event"] == "partition" else list(ON_M2)
        for h in (h for h in hosts if h in ON_M2):
            has = _chain_in(engine, next(x["netns"] for x in topo["hosts"] if x["name"] == h), chain)
            if has is not None:
                observed.append((len(evs) - 1, h, has))
    seen: dict = {"partition": sorted({h for i, h, has in observed if has and evs[i]["event"] == "partition"}),
                  "checks_healed": 0, "heal": []}
    for i, h, has in observed:
        later = any(h in side for e in evs[i + 1:] if e["event"] == "partition" for side in e["target"])
        if evs[i]["event"] == "heal" and not later:
            seen["checks_healed"] += 1
            if has and h not in seen["heal"]:
                seen["heal"].append(h)
    return seen


def _frames(path: Path) -> list[tuple[float, bytes]]:
    """(timestamp, captured bytes) of each record of a nanosecond pcap as the wire emulator writes it."""
    raw = path.read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack_from("<IHHiIII", raw)
    assert (magic, linktype) == (0xA1B23C4D, 1), (path, hex(magic), linktype)
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, ns, caplen, _ = struct.unpack_from("<IIII", raw, off)
        out.append((sec + ns * 1e-9, raw[off + 16:off + 16 + caplen]))
        off += 16 + caplen
    assert off == len(raw), path
    return out


def _check_split_captures(rep: Path, topo: dict, crossing: list[str]) -> None:
    """Each link across the machines has one pcap/<link>.pcap (the halves' files merged, none left over), in time
    order, with IPv4 frames of both directions (told apart as the report does: by what each side routes over the
    link), and as many frames around the last counter sample as the link's counters (links.jsonl) had counted."""
    assert not list((rep / "pcap").glob("*.m[12].pcap")), sorted((rep / "pcap").iterdir())
    assert {p.stem for p in (rep / "pcap").glob("*.pcap")} == {lk["name"] for lk in topo["links"]}
    samples = [json.loads(x) for x in (rep / "links.jsonl").read_text().splitlines() if x.strip()]
    for name in crossing:
        frames = _frames(rep / "pcap" / f"{name}.pcap")
        assert [t for t, _ in frames] == sorted(t for t, _ in frames), name
        link = next(lk for lk in topo["links"] if lk["name"] == name)
        a_nets, _ = (tuple(ipaddress.ip_network(n, strict=False) for n in side)
                     for side in _side_nets(topo, link))
        ways = {"a_to_b": 0, "b_to_a": 0}
        for _, f in frames:
            if len(f) >= 34 and f[12:14] == b"\x08\x00":
                dst = ipaddress.ip_address(f[30:34])
                ways["a_to_b" if any(dst in n for n in a_nets) else "b_to_a"] += 1
        prev, last = [x for x in samples if x["link"] == name][-2:]
        counted = last["a_to_b"]["packets"] + last["b_to_a"]["packets"]
        # a sample's counters are read after the previous sample's timestamp and before its own: every frame
        # captured up to the previous timestamp is in the count, and none captured after its own
        after_prev = sum(1 for t, _ in frames if t <= prev["ts"])
        before = sum(1 for t, _ in frames if t <= last["ts"])
        print(f"{name}: {len(frames)} frames captured ({ways['a_to_b']} IPv4 a->b, {ways['b_to_a']} b->a); "
              f"counters at the last sample {counted}, frames up to it {before}")
        assert ways["a_to_b"] > 0 and ways["b_to_a"] > 0, (name, ways)
        assert after_prev <= counted <= before, (name, after_prev, counted, before)



def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_nemesis_drill_and_clock_offset_over_two_engines(machines: Machines, node_image: image.BuildResult,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(_scenario(tmp_path, machines)), "--quick",
                          "--out", str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, TEST_MACHINE_OFFSET_ENV: f"m2={OFFSET}"})
    seen = _watch_partition_chains(p, out, machines.engines[1])
    output, _ = p.communicate(timeout=540)
    wall = time.monotonic() - t0
    assert p.returncode == 0, output[-6000:]
    [rep] = [p.parent for p in out.glob("*/*/summary.json")]
    topo = json.loads((rep / "topology.json").read_text())
    machine = {h["name"]: h["machine"] for h in topo["hosts"]}
    assert {h for h, m in machine.items() if m == "m2"} == set(ON_M2)
    assert run_containers(topo["run_id"], machines.engines[0]) == []
    assert run_containers(topo["run_id"], machines.engines[1]) == []

    # -- the drill: every fault applied, those of m2's hosts named with their machine; nothing lost
    evs = _jsonl(rep / "events.jsonl")
    assert not [e for e in evs if e["event"] == "fault_failed"], evs
    node_faults = [e for e in evs if e["event"] in ("kill", "restart", "pause", "resume")]
    assert {(e["event"], e["target"]) for e in node_faults if e.get("machine") == "m2"} >= \
        {("kill", "n4"), ("restart", "n4"), ("kill", "n5"), ("restart", "n5"), ("pause", "n2"), ("resume", "n2")}
    assert all(e["machine"] == machine[e["target"]] for e in node_faults)
    assert [e["machines"] for e in evs if e["event"] == "partition"] == [["m1", "m2"], ["m1", "m2"]]
    assert [(e["event"], e["machines"]) for e in evs if e["target"] == CROSSING] == \
        [("link_down", ["m1", "m2"]), ("link_up", ["m1", "m2"])]
    # the partitions' chains were made in m2's containers by m2's agent while partitioned, and gone once healed
    print(f"partition chains seen in m2's containers: while partitioned {seen['partition']}, "
          f"after a heal {seen['heal']} (checks after a heal: {seen['checks_healed']})")
    assert set(seen["partition"]) == set(ON_M2), seen
    assert seen["heal"] == [] and seen["checks_healed"] > 0, seen
    v = check_run(rep)
    print(f"placed drill: {wall:.1f} s wall; accepted {v.accepted}, delivered {v.delivered}, lost {v.lost}, "
          f"duplicate {v.duplicate}, late {v.late}")
    assert v.accepted > 0 and v.delivered == v.accepted
    assert v.lost == 0 and v.duplicate == 0 and v.extra_deliveries == 0 and v.late == 0
    assert v.problems == 0, (v.first_problems, v.spool_problems)
    summary = json.loads((rep / "summary.json").read_text())
    assert summary["complete"] and summary["lost"] == 0 and summary["duplicates"] == 0

    # -- the captures: the links across the engines each one merged pcap, read as the report reads it
    crossing = [lk["name"] for lk in topo["links"] if machine[lk["a"]] != machine[lk["b"]]]
    assert CROSSING in crossing and len(crossing) == 4, crossing
    _check_split_captures(rep, topo, crossing)

    # -- the clocks: each machine's offset found within half its best probe's round trip, at start and end
    doc = json.loads((rep / clockmodel.MACHINES_FILE).read_text())
    for name, injected in (("m1", 0.0), ("m2", OFFSET)):
        for when in ("start", "end"):
            est = doc["machines"][name][when]
            print(f"{name} {when}: offset {est['offset'] * 1e3:.3f} ms, round trip {est['rtt'] * 1e3:.3f} ms")
            assert abs(est["offset"] - injected) <= est["rtt"] / 2 + 1e-6, (name, when, est)
    assert "clock" in summary and summary["clock"]["machines"]["m2"]["offset_s"] == pytest.approx(OFFSET, abs=0.01)

    # -- the delays: raw ones carry the offset (negative from m2 to m1), corrected ones neither
    clocks = clockmodel.load(rep)
    assert clocks is not None and not clocks.problem
    raw: dict[tuple[str, str], list[float]] = {("m1", "m2"): [], ("m2", "m1"): []}
    fixed: dict[tuple[str, str], list[float]] = {("m1", "m2"): [], ("m2", "m1"): []}
    for d in rep.glob("nodes/*/deliveries.jsonl"):
        for rec in _jsonl(d):
            if rec.get("kind", "delivery") != "delivery" or "submit_ts" not in rec:
                continue
            pair = (machine[rec["src"]], machine[rec["node"]])
            if pair in raw:
                raw[pair].append(rec["deliver_ts"] - rec["submit_ts"])
                fixed[pair].append(clocks.correct(rec["node"], rec["deliver_ts"])
                                   - clocks.correct(rec["src"], rec["submit_ts"]))
    assert all(raw.values()), {k: len(x) for k, x in raw.items()}
    print("smallest delays m1->m2, m2->m1: raw "
          + ", ".join(f"{min(x) * 1e3:.1f} ms" for x in raw.values()) + "; corrected "
          + ", ".join(f"{min(x) * 1e3:.1f} ms" for x in fixed.values()))
    assert min(raw[("m2", "m1")]) < 0 and min(raw[("m1", "m2")]) >= OFFSET     # the offset is there uncorrected
    slack = 2 * clocks.uncertainty
    assert min(min(x) for x in fixed.values()) >= -slack                      # not negative once corrected
    assert min(fixed[("m1", "m2")]) < OFFSET / 2                              # nor inflated by the offset
