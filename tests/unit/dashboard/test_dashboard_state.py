"""The dashboard's state model on a small recorded run directory: topology.json as Network.describe() writes it
(with the generator and the hosts' attributes), links.jsonl as the link sampler writes it, and the nodes'
records; an experiment folder followed from repetition to repetition with progress.jsonl as the runner tees it."""
from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import pytest

from node import schema
from node.errors import UserError
from testbed.dashboard.state import ExperimentState, RunState, open_source
from testbed.experiment import runner
from testbed.experiment.linkmon import link_records
from testbed.experiment.progress import NullProgress, ProgressLog
from testbed.network import Network
from testbed.scenario import load
from testbed.shaping.base import DirectionCounters
from testbed.topology import addressing, generators
from testbed.topology.model import Direction

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_700_000_000.0


def append(path: Path, *records: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def write_topology(run: Path, net: Network) -> None:
    tmp = run / "topology.json.tmp"
    tmp.write_text(json.dumps(net.describe()))
    tmp.replace(run / "topology.json")          # replaced, as Network._save_state does


def metrics_line(ts: float) -> dict:
    return {"ts": ts, "node": "c1n1", "spool_messages": 3, "spool_bytes": 300, "delivered": 5, "held_messages": 1,
            "orphans": 0,
            "neighbours": {"c1g1": {"queue_messages": 2, "up": True}, "c1n2": {"queue_messages": 1, "up": False}}}


@pytest.fixture
def net() -> Network:
    topo = generators.clusters(k=2, n=2, defaults=Direction(delay=0.01, rate=1e6))
    topo.links[1].a_to_b.rate = None            # one unlimited direction
    return Network(topo, addressing.plan(topo), generator="clusters")


@pytest.fixture
def run(tmp_path: Path, net: Network) -> Path:
    """A repetition's directory, 2 s into the run."""
    run = tmp_path / "exp" / "default" / "1"
    run.mkdir(parents=True)
    write_topology(run, net)
    l0, l1 = net.topology.links[0], net.topology.links[1]
    ends = {l.name: (l.a, l.b) for l in net.topology.links}
    first = {l0.name: (DirectionCounters(), DirectionCounters()), l1.name: (DirectionCounters(), DirectionCounters())}
    second = {l0.name: (DirectionCounters(packets=100, bytes=62_500), DirectionCounters(packets=1, bytes=100,
                                                                                       dropped_queue=2)),
              l1.name: (DirectionCounters(packets=10, bytes=1250), DirectionCounters())}
    append(run / "links.jsonl", *link_records(T0, ends, first, None, 1.0),
           *link_records(T0 + 1, ends, second, first, 1.0))
    append(run / "events.jsonl", {"ts": T0 + 1.5, "node": "testbed", "event": "link_down", "target": l0.name})
    append(run / "host.jsonl", {"ts": T0 + 1, "node": "testbed", "cpu_percent": 12.5, "mem_percent": 40.0})
    append(run / "nodes" / "c1n1" / "metrics.jsonl", metrics_line(T0 + 1))
    append(run / "nodes" / "c1n1" / "routes.jsonl",
           {"ts": T0, "node": "c1n1", "dst": "c2n1", "next_hop": "c1g1", "cost": 2, "reason": "initial"},
           {"ts": T0 + 1.8, "node": "c1n1", "dst": "c2n1", "next_hop": "c1n2", "cost": 3, "reason": "switch"})
    return run


def test_link_records_match_the_schema_and_count_bits_per_second(net: Network) -> None:
    l0 = net.topology.links[0]
    first = {l0.name: (DirectionCounters(bytes=1000), DirectionCounters())}
    second = {l0.name: (DirectionCounters(bytes=3500, packets=5), DirectionCounters())}
    [rec] = link_records(T0, {l0.name: (l0.a, l0.b)}, second, first, 0.5)
    assert schema.validate("link", rec) == []
    assert rec["a_to_b"]["bps"] == 8 * 2500 / 0.5 and rec["b_to_a"]["bps"] == 0
    assert (rec["link"], rec["a"], rec["b"]) == (l0.name, l0.a, l0.b)


def test_topology_json_has_the_generator_and_the_hosts_attributes(tmp_path: Path) -> None:
    scenario = load(str(ROOT / "scenarios" / "quickstart.yaml"))
    assert Network.from_scenario(scenario, tmp_path).generator == scenario.topology.generator
    topo = generators.clusters(k=2, n=1)
    desc = Network(topo, addressing.plan(topo), generator="clusters").describe()
    assert desc["generator"] == "clusters"
    assert {h["name"]: h["attrs"] for h in desc["hosts"]} == {"c1g1": {"cluster": 1}, "c1n1": {"cluster": 1},
                                                             "c2g1": {"cluster": 2}, "c2n1": {"cluster": 2}}


def test_the_state_of_a_recorded_run(run: Path, net: Network) -> None:
    st = open_source(run)
    assert isinstance(st, RunState) and st.poll()
    s = st.snapshot()
    assert s["counts"] == {"hosts": len(net.topology.nodes), "links": len(net.topology.links)}
    assert s["generator"] == "clusters" and s["hosts"][0]["attrs"] == {"cluster": 1}
    l0, l1 = s["links"][0], s["links"][1]
    assert l0["a_to_b"]["bps"] == 500_000.0 and l0["a_to_b"]["utilisation"] == 0.5      # against 1 Mbit/s
    assert l0["b_to_a"]["drops"]["dropped_queue"] == 2 and l0["a_to_b"]["delay"] == 0.01
    assert l1["a_to_b"]["utilisation"] is None and l1["b_to_a"]["utilisation"] == 0.0    # unlimited: none
    n = s["nodes"]["c1n1"]
    assert (n["queue_messages"], n["spool_messages"], n["held_messages"]) == (3, 3, 1)
    assert [e["event"] for e in s["timeline"]] == ["link_down", "switch"]                # the initial table is not
    assert [r["reason"] for r in s["routes"]] == ["initial", "switch"]
    assert s["host"]["cpu_percent"] == 12.5 and s["panels"] == {} and s["problems"] == []
    assert not st.poll()                                          # nothing new: no change, no event

    # the link is cut: topology.json is replaced; a broker and a bad line appear
    net.topology.links[0].up = False
    write_topology(run, net)
    append(run / "nodes" / "c2n1" / "metrics.jsonl", {"ts": T0 + 2, "node": "c2n1", "spool_messages": 0,
                                                      "spool_bytes": 0, "delivered": 0, "neighbours": {},
                                                      "broker": {"published": 4}})
    with open(run / "events.jsonl", "a") as f:
        f.write('{"ts": 3, "node": "testbed"}\n')
    append(run / "nodes" / "c1n1" / "metrics.jsonl", {**metrics_line(T0 + 2), "neighbours": {"c1g1": {
        "queue_messages": "many"}}})                  # passes the schema, not the reading of it
    assert st.poll()
    s = st.snapshot()
    assert s["links"][0]["state"] == "down"
    assert s["panels"]["broker"]["c2n1"]["published"] == 4
    assert [p["text"].split(":")[0] for p in s["problems"]] == ["events.jsonl line 2",
                                                                "nodes/c1n1/metrics.jsonl line 2"]
    assert s["nodes"]["c1n1"]["queue_messages"] == 3                   # the last good line stands


def test_replay_at_a_time_leaves_out_what_came_later(run: Path, net: Network) -> None:
    net.topology.links[0].up = False                     # the run ended with the link cut
    write_topology(run, net)
    st = RunState(run, until=T0 + 1.6)
    st.poll()
    s = st.snapshot()
    assert [e["event"] for e in s["timeline"]] == ["link_down"]
    assert s["last_ts"] == T0 + 1.5 and s["links"][0]["state"] == "down"
    st = RunState(run, until=T0 + 1.0)
    st.poll()
    s = st.snapshot()
    assert s["timeline"] == [] and s["links"][0]["state"] == "up"     # before the cut, whatever the end says
    assert s["links"][0]["a_to_b"]["bps"] == 500_000.0                # the link sample of T0 + 1


def test_a_folder_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is not a run directory"):
        open_source(tmp_path)
    with pytest.raises(UserError, match="is not a directory"):
        open_source(tmp_path / "missing")
    assert isinstance(open_source(tmp_path / "later", check=False, experiment=True), ExperimentState)


class PhasedCell:
    """A cell runner that reports phases and a tick, and leaves a topology.json."""

    def __init__(self, net: Network) -> None:
        self.net = net

    def __call__(self, scenario, rep_dir: Path, progress, stop: threading.Event):
        progress.phase(rep_dir.parent.name, int(rep_dir.name), "workload")
        progress.tick(2.0, 10.0, 7, 5)
        write_topology(rep_dir, self.net)
        (rep_dir / runner.COMPLETE_MARKER).write_text("")
        return type("R", (), {"complete": True, "reason": "", "summary": {"complete": True, "lost": 0}})()


def test_the_runner_tees_progress_and_an_experiment_is_followed_rep_by_rep(tmp_path: Path, net: Network) -> None:
    scen = tmp_path / "loop.yaml"
    scen.write_text("name: loop\nduration: 10s\ntopology: {generator: ring, params: {n: 3}}\n"
                    "workload: {generators: [{nodes: all}]}\nsweep: {reps: 2}\n")
    out = tmp_path / "out"
    runner.run_experiment(str(scen), out, None, False, False, [], NullProgress(), run_cell=PhasedCell(net),
                          stream=io.StringIO())
    lines = [json.loads(l) for l in (out / "progress.jsonl").read_text().splitlines()]
    assert [l["event"] for l in lines] == ["repetitions", "phase", "tick", "phase", "tick"]
    assert lines[3] | {"ts": 0} == {"ts": 0, "node": "testbed", "event": "phase", "cell": "default", "rep": 2,
                                    "phase": "workload"}
    st = open_source(out)
    assert isinstance(st, ExperimentState) and st.poll()
    s = st.snapshot()
    assert s["experiment"]["showing"] == "default/2" and s["phase"]["rep"] == 2
    assert s["progress"]["delivered"] == 5 and s["counts"]["hosts"] == len(net.topology.nodes)
    # while rep 1 runs again (as experiment.json says), the view switches to it
    doc = json.loads((out / "experiment.json").read_text())
    doc["cells"][0]["reps"][0]["status"] = "running"
    (out / "experiment.json.tmp").write_text(json.dumps(doc))
    os.replace(out / "experiment.json.tmp", out / "experiment.json")
    assert st.poll() and st.snapshot()["experiment"]["showing"] == "default/1"
    # RUN_DIR naming one repetition: that one alone, with its own phases
    one = open_source(out / "default" / "1")
    assert isinstance(one, ExperimentState) and one.poll()
    s = one.snapshot()
    assert s["experiment"]["showing"] == "default/1" and s["phase"]["rep"] == 1 and s["counts"]["links"] > 0


def test_progress_log_passes_everything_on_and_an_unwritable_file_costs_only_its_lines(tmp_path: Path) -> None:
    class Console(NullProgress):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def event(self, text: str) -> None:
            self.seen.append(text)

        def close(self) -> None:
            self.seen.append("closed")
    inner = Console()
    tee = ProgressLog(inner, tmp_path / "missing-dir" / "progress.jsonl")    # cannot be written
    tee.event("fault applied")
    tee.phase("c", 1, "drain")
    tee.close()                                                              # what the console offers, too
    assert inner.seen == ["fault applied", "closed"]
    tee = ProgressLog(inner, tmp_path / "progress.jsonl")
    tee.event("x")
    [rec] = [json.loads(l) for l in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert rec | {"ts": 0} == {"ts": 0, "node": "testbed", "event": "message", "text": "x"}


def test_an_experiment_json_that_counts_its_repetitions_is_shown_without_them(tmp_path: Path) -> None:
    """Older and hand-made experiment.json files give `reps` as a count, not a list of folders."""
    (tmp_path / "experiment.json").write_text(json.dumps({"cells": [{"id": "ps", "params": {}, "reps": 1}]}))
    state = open_source(tmp_path, experiment=True)
    state.poll()
    assert state.snapshot()["experiment"]["reps"] == []
