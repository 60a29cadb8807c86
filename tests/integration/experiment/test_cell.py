"""One repetition end to end (testbed.experiment.cell.run_cell) on real namespaces and daemons.

Scenarios are small and short (a few wall seconds) at time_scale 1: the point
is the plumbing — configs, health, workload, faults, drain, teardown,
records and summary — and the guarantees: nothing lost, nothing twice.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from testbed import registry
from node.errors import UserError
from testbed.experiment import cell as cell_mod
from testbed.experiment.daemons import NodeDaemons
from testbed.experiment.progress import NullProgress
from testbed.runtime.netns import list_netns
from testbed.scenario.loader import load_text
from tests.integration.support import recoveries

pytestmark = [pytest.mark.root, pytest.mark.timeout(240)]

BASE = """
name: celltest
seed: 7
duration: {duration}
topology: {{generator: linear, params: {{n: 4}}}}
link_defaults: {{rate: 20Mbit}}
nodes:
  all:
    mode: {mode}
    fragment_size: 1000
    metrics_interval: 0.5
    session: {{keepalive: 0.3, hold_time: 1.5, backoff_min: 0.05, backoff_max: 0.5}}
workload:
  warmup: 0.5
  drain: 40
  generators:
    - nodes: all
      interarrival: {{dist: constant, mean: {interarrival}}}
      size: {{dist: fixed, bytes: {size}}}
{generators}{faults}
"""


def scenario(mode: str = "fragmenting", duration: float = 5.0, interarrival: float = 0.4, size: int = 3500,
             faults: str = "", generators: str = ""):
    return load_text(BASE.format(mode=mode, duration=duration, interarrival=interarrival, size=size,
                                 faults=faults, generators=generators), "celltest.yaml")


@pytest.fixture
def rep_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: a concurrent pytest session may prune it under running daemons.
    d = Path(tempfile.mkdtemp(prefix="wanbed-cell-test-"))
    try:
        yield d / "default" / "1"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run_id_of(rep_dir: Path) -> str:
    return json.loads((rep_dir / "topology.json").read_text())["run_id"]


def assert_torn_down(rep_dir: Path) -> None:
    rid = run_id_of(rep_dir)
    left = [n for n in list_netns() if registry.run_id_of(n) == rid]
    assert left == [], f"namespaces of run {rid} left behind: {left}"


def accepted_ids(rep_dir: Path) -> set[str]:
    ids = set()
    for f in rep_dir.glob("nodes/*/submissions.jsonl"):
        ids |= {r["msg_id"] for r in lines(f) if r["accepted"]}
    return ids


def deliveries(rep_dir: Path) -> list[dict]:
    out = []
    for f in rep_dir.glob("nodes/*/deliveries.jsonl"):
        out += lines(f)
    return out


@pytest.mark.parametrize("mode", ["fragmenting", "non-fragmenting"])
def test_cell_runs_to_a_complete_run_directory(rep_dir: Path, mode: str) -> None:
    s = scenario(mode)
    result = cell_mod.run_cell(s, rep_dir, NullProgress(), threading.Event())
    assert result.complete, result.reason
    assert (rep_dir / ".complete").exists()
    for name in ("scenario.yaml", "topology.json", "summary.json", "host.jsonl"):
        assert (rep_dir / name).exists(), name
    for n in ("n1", "n2", "n3", "n4"):
        assert (rep_dir / "nodes" / n / "node.yaml").exists()
        assert lines(rep_dir / "nodes" / n / "metrics.jsonl"), f"{n} wrote no metrics"
    accepted = accepted_ids(rep_dir)
    got = deliveries(rep_dir)
    # 4 nodes, one message every 0.4 s for 5 s each: about 50 planned; every accepted one arrives once
    assert len(accepted) >= 20
    assert {d["msg_id"] for d in got} == accepted
    assert len(got) == len(accepted), "a message was delivered twice"
    assert all(d["mode"] == mode for d in got)
    summ = json.loads((rep_dir / "summary.json").read_text())
    assert summ["complete"] is True
    assert summ["lost"] == 0 and summ["duplicates"] == 0
    assert summ["delivered"] == len(accepted)
    assert_torn_down(rep_dir)


def test_relay_kill_restart_and_link_cut_lose_nothing(rep_dir: Path) -> None:
    # The cut is the relay's own outgoing link, so the relay holds messages when it is killed: on top of
    # the base load n1 sends n4 a message every `stream` s, each crosses n2, and from the cut on n2 can
    # hand none of them to n3 (a down link drops every frame, acknowledgements included). Between the
    # cut and the kill n1 submits (kill - cut) / stream of them, so n2's spool cannot be empty.
    cut, kill, stream = 1.0, 1.5, 0.1
    faults = f"""faults:
  - {{at: {cut}, action: link_down, target: n2-n3}}
  - {{at: {kill}, action: kill, target: n2}}
  - {{at: 3.0, action: restart, target: n2}}
  - {{at: 3.5, action: link_up, target: n2-n3}}
"""
    stream_gen = f"""    - nodes: [n1]
      interarrival: {{dist: constant, mean: {stream}}}
      size: {{dist: fixed, bytes: 3500}}
      recipients: {{choice: fixed, nodes: [n4]}}
"""
    s = scenario(duration=6.0, faults=faults, generators=stream_gen)
    events: list[str] = []

    class Recorder(NullProgress):
        def event(self, text: str) -> None:
            events.append(text)

    result = cell_mod.run_cell(s, rep_dir, Recorder(), threading.Event())
    assert result.complete, result.reason
    applied = [e["event"] for e in lines(rep_dir / "events.jsonl")]
    for ev in ("link_down", "kill", "restart", "link_up"):
        assert ev in applied, f"{ev} not recorded in events.jsonl: {applied}"
    assert not any("FAILED" in e for e in events), events
    accepted = accepted_ids(rep_dir)
    got = deliveries(rep_dir)
    assert {d["msg_id"] for d in got} == accepted
    assert len(got) == len(accepted)
    # submissions to n2 while it was down were offered but never reached it: recorded by the driver
    unreachable = lines(rep_dir / "workload.jsonl")
    assert unreachable and all(r["node"] == "n2" and not r["accepted"] for r in unreachable)
    summ = result.summary
    assert summ["lost"] == 0 and summ["duplicates"] == 0
    # a kill mid-run is no mismatch between the driver's accepted set and the nodes' records
    assert result.verdict is not None and result.verdict.ok(), result.verdict.to_dict()
    # the kill hit data in flight: the restarted n2 found messages for n3 in its spool (its first start
    # found none), at least the pieces of what n1 accepted for n4 from the cut until one stream interval
    # before the kill (time enough to reach n2 over an idle 20 Mbit/s link)
    at = {e["event"]: e["ts"] for e in lines(rep_dir / "events.jsonl")}
    stuck = [r for r in lines(rep_dir / "nodes" / "n1" / "submissions.jsonl")
             if r["accepted"] and r["dst"] == "n4" and at["link_down"] <= r["ts"] <= at["kill"] - stream]
    found = recoveries(rep_dir / "nodes" / "n2" / "node.log")
    print(f"n2 at its restart: {found[-1]}; n1 accepted {len(stuck)} messages for n4 between cut and kill")
    assert len(found) == 2 and found[0]["pieces"] == 0, found
    assert stuck, "n1 submitted nothing for n4 between the cut and the kill"
    assert found[1]["queued"] >= sum(r["fragments"] for r in stuck), (found, stuck)
    assert_torn_down(rep_dir)


def test_stop_request_tears_down_promptly_and_marks_incomplete(rep_dir: Path) -> None:
    s = scenario(duration=60.0)
    stop = threading.Event()
    phases: list[str] = []

    class Watch(NullProgress):
        def phase(self, cell: str, rep: int, name: str) -> None:
            phases.append(name)
            if name == "workload":
                threading.Timer(1.5, stop.set).start()

    t0 = time.monotonic()
    result = cell_mod.run_cell(s, rep_dir, Watch(), stop)
    took = time.monotonic() - t0
    assert not result.complete and result.reason == "interrupted"
    assert not (rep_dir / ".complete").exists()
    assert json.loads((rep_dir / "summary.json").read_text())["complete"] is False
    assert "drain" not in phases and phases[-1] == "teardown"
    # far less than the 60 s duration: set-up, 1.5 s of workload, teardown (daemons get TERM_GRACE at most)
    assert took < 45, f"stopping took {took:.1f} s"
    assert accepted_ids(rep_dir), "what was collected before the stop must stay"
    assert_torn_down(rep_dir)


def test_daemon_that_never_becomes_healthy_is_named_with_its_log(rep_dir: Path, monkeypatch) -> None:
    real_argv = NodeDaemons._argv

    def argv(self: NodeDaemons, node: str) -> list[str]:
        if node == "n3":
            return ["sh", "-c", "echo 'cannot open the spool: boom' >&2; exit 3"]
        return real_argv(self, node)

    monkeypatch.setattr(NodeDaemons, "_argv", argv)
    with pytest.raises(UserError) as info:
        cell_mod.run_cell(scenario(), rep_dir, NullProgress(), threading.Event())
    text = str(info.value)
    assert "n3" in text and "boom" in text
    assert not (rep_dir / ".complete").exists()
    assert json.loads((rep_dir / "summary.json").read_text())["complete"] is False
    assert_torn_down(rep_dir)
