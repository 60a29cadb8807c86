"""links.jsonl from a real shaped link: the sampler's counters move when traffic flows, in one batched read;
and the netem backend's batched read over netlink."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from node import schema
from testbed import registry
from testbed.experiment.linkmon import LinkMonitor
from testbed.shaping.netem import NetemShaper

INTERVAL = 0.2


def test_link_records_count_the_traffic_that_crossed(rig_factory, tmp_path: Path) -> None:
    rig = rig_factory()
    calls = []

    def read():
        calls.append(1)
        return rig.shaper.counters_all()
    mon = LinkMonitor(tmp_path / "links.jsonl", read, {rig.link_id: ("a", "b")}, interval=INTERVAL)
    mon.start()
    try:
        assert len(rig.ping(10, interval=0.05)) >= 8
    finally:
        mon.stop()
    recs = [json.loads(l) for l in (tmp_path / "links.jsonl").read_text().splitlines()]
    assert len(recs) == mon.samples == len(calls) >= 2      # one line per link and sample, one read per sample
    assert all(schema.validate("link", r) == [] for r in recs)
    first, last = recs[0], recs[-1]
    assert last["link"] == rig.link_id and (last["a"], last["b"]) == ("a", "b")
    # echo requests go a->b, replies b->a: both directions counted, and a rate seen while they flowed
    assert last["a_to_b"]["packets"] - first["a_to_b"]["packets"] >= 8
    assert last["b_to_a"]["packets"] - first["b_to_a"]["packets"] >= 8
    assert last["a_to_b"]["bytes"] > first["a_to_b"]["bytes"]
    assert any(r["a_to_b"]["bps"] > 0 for r in recs)


def test_the_netem_backend_reads_every_link_end_over_netlink(tmp_path: Path) -> None:
    """netem's batched read without a netem qdisc (this kernel may lack one): its netlink path reads the root
    qdisc of each link end, here a pfifo, whose counters the kernel keeps the same way."""
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces")
    run_id = registry.new_run_id()
    registry.register(run_id, "test")
    pfx = registry.prefix(run_id)
    ns_a, ns_b = pfx + "a", pfx + "b"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)
    shaper = NetemShaper(run_id, tmp_path, state={"links": {"l": {"a": {"netns": ns_a, "ifname": "eth1"},
                                                                  "b": {"netns": ns_b, "ifname": "eth1"}}}})
    try:
        ip("netns", "add", ns_a)
        ip("netns", "add", ns_b)
        ip("link", "add", pfx + "x", "type", "veth", "peer", "name", pfx + "y")
        for dev, ns, addr in ((pfx + "x", ns_a, "10.78.0.1/24"), (pfx + "y", ns_b, "10.78.0.2/24")):
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "link", "set", dev, "name", "eth1", "up")
            ip("-n", ns, "addr", "add", addr, "dev", "eth1")
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth1", "root", "pfifo"],
                           check=True, capture_output=True)
        before = shaper.counters_all()["l"]
        subprocess.run(["ip", "netns", "exec", ns_a, "ping", "-n", "-q", "-c", "5", "-i", "0.05", "10.78.0.2"],
                       check=True, capture_output=True)
        after = shaper.counters_all()["l"]
        assert after[0].packets - before[0].packets >= 5 and after[0].bytes > before[0].bytes   # requests a->b
        assert after[1].packets - before[1].packets >= 5                                         # replies b->a
    finally:
        shaper.close()         # closes its netlink sockets; the veth goes with the namespaces
        for ns in (ns_a, ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        registry.unregister(run_id)
