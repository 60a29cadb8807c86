"""links.jsonl from a real shaped link: the sampler's counters move when traffic flows, in one batched read."""
from __future__ import annotations

import json
from pathlib import Path

from node import schema
from testbed.experiment.linkmon import LinkMonitor

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
