"""summary.summarize / write_summary / check on run directories written by the test as real files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.experiment import summary
from tests.unit.experiment.experiment_scenarios import ring_scenario
from tests.unit.experiment.spool_support import piece, write_spool

pytestmark = pytest.mark.timeout(30)

K = 0.1        # time_scale of the crafted run: model delay = wall delay / K
T0 = 1_700_000_000.0


def scen():
    return ring_scenario([{"interarrival": {"dist": "normal", "mean": 50}, "size": {"fragment_size": 1000}}],
                         n=4, duration=3600, seed=99,
                         extra={"time_scale": K, "nodes": {"all": {"mode": "non-fragmenting"}}})


def sub(node: str, msg_id: str, dst: str | list[str], size: int, accepted: bool = True, reason: str = "") -> dict:
    return {"ts": T0, "node": node, "msg_id": msg_id, "src": node, "dst": dst, "size": size,
            "accepted": accepted, "reason": reason}


def dlv(node: str, msg_id: str, src: str, size: int, delay: float, at: float = 0.0) -> dict:
    return {"ts": T0 + at + delay, "node": node, "msg_id": msg_id, "src": src, "dst": node, "size": size,
            "fragments": 1, "mode": "non-fragmenting", "submit_ts": T0 + at, "deliver_ts": T0 + at + delay, "hops": 2}


def write_lines(path: Path, records: list, raw: list[str] = ()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        for line in raw:
            f.write(line)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    rep = tmp_path / "exp1" / "mode-non-fragmenting" / "2"
    nodes = rep / "nodes"
    write_lines(nodes / "n1" / "submissions.jsonl", [
        sub("n1", "m1", "n2", 1000),                     # 1 fragment
        sub("n1", "m2", "n3", 5000),                     # 5 fragments
        sub("n1", "m3", ["n2", "n4"], 50_000),           # 50 fragments, two recipients
        sub("n1", "", "n2", 1000, False, "input buffers full: 3 of 50"),
        sub("n1", "", "n3", 1000, False, "input buffers full: 5 of 50"),
        sub("n1", "", "n4", 900_000, False, "message too large"),
    ])
    write_lines(nodes / "n2" / "submissions.jsonl", [
        sub("n2", "m4", "n1", 200_000),                  # 200 fragments
        sub("n2", "m5", "n3", 2000),                     # reported undeliverable
        sub("n2", "m6", "n4", 1000),                     # undelivered
        sub("n2", "m7", "n4", 1000),                     # undelivered
    ])
    write_lines(rep / "workload.jsonl", [sub("n3", "", ["n1"], 1000, False, "node unreachable: daemon killed")])
    write_lines(nodes / "n2" / "deliveries.jsonl", [dlv("n2", "m1", "n1", 1000, 1.0),
                                                   dlv("n2", "m1", "n1", 1000, 5.0),     # duplicate, later
                                                   dlv("n2", "m3", "n1", 50_000, 3.0)])
    write_lines(nodes / "n3" / "deliveries.jsonl", [dlv("n3", "m2", "n1", 5000, 2.0)])
    write_lines(nodes / "n4" / "deliveries.jsonl", [dlv("n4", "m3", "n1", 50_000, 5.0)],
                raw=["this is not json\n",
                     json.dumps({"ts": T0, "node": "n4", "msg_id": "m9"}) + "\n",   # missing fields
                     '{"ts": 1, "node": "n4", "msg_'])                               # cut off by a kill
    write_lines(nodes / "n1" / "deliveries.jsonl", [dlv("n1", "m4", "n2", 200_000, 10.0)])
    write_lines(nodes / "n2" / "reports.jsonl", [
        {"ts": T0, "node": "n2", "event": "ndr_made", "msg_id": "m5", "dst": "n3", "reason": "expired: lifetime"},
        {"ts": T0, "node": "n2", "event": "ndr_delivered", "msg_id": "m5", "dst": "n3", "reason": "expired"}])
    write_lines(rep / "host.jsonl", [{"ts": T0 + i, "node": "testbed", "cpu_percent": c, "mem_percent": 30.0}
                                     for i, c in enumerate([95, 99] + [40] * 8)])
    write_lines(rep / "events.jsonl", [{"ts": T0, "node": "testbed", "event": "kill", "target": "n3"},
                                       {"ts": T0 + 5, "node": "testbed", "event": "restart", "target": "n3"}])
    (rep / "scenario.yaml").write_text("name: wl\n")
    (rep / "topology.json").write_text("{}\n")
    for n in ("n1", "n3", "n4"):
        write_spool(nodes / n / "spool.db")
    write_spool(nodes / "n2" / "spool.db", [piece("m6", "n4")])       # m6 still held at n2; m7 nowhere: lost
    return rep


def test_headline_counts(run_dir: Path) -> None:
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": False, "in_flight": 1, "remaining": {"n2": 1}})
    assert (s["experiment"], s["cell"], s["rep"]) == ("exp1", "mode-non-fragmenting", 2)
    assert (s["mode"], s["seed"], s["time_scale"], s["scenario"]) == ("non-fragmenting", 99, K, "wl")
    assert s["offered"] == 11 and s["accepted"] == 7 and s["refused"] == 4 and s["unreachable"] == 1
    assert s["refused_by_reason"] == {"input buffers full": 2, "message too large": 1, "node unreachable": 1}
    assert s["copies"] == 8
    assert s["delivered"] == 5 and s["duplicates"] == 1
    assert s["ndr"] == 1 and s["ndr_by_reason"] == {"expired": 1}
    assert s["reports"] == {"ndr_delivered": 1, "ndr_made": 1}
    assert s["undelivered"] == 2                    # m6 and m7
    assert s["in_flight_at_end"] == 1 and s["lost"] == 1 and s["late"] == 1
    assert s["late_where"] == {"n2": {"queued": 1}}
    assert s["unexpected_deliveries"] == 0
    assert s["events"] == {"kill": 1, "restart": 1}
    assert s["complete"] is True and s["reason"] == ""
    assert s["missing_files"] == []


@pytest.mark.parametrize("drain,in_flight", [
    ({"empty": True, "in_flight": 0}, 0),
    ({"empty": False, "in_flight": 5}, 5),
    ({"empty": False, "in_flight": 0, "remaining": {"n3": "daemon killed"}}, 0),
    (None, None),                                   # never drained
])
def test_lost_and_late_come_from_the_spools_not_the_drain(run_dir: Path, drain: dict | None,
                                                        in_flight: int | None) -> None:
    """The drain's count (node Stats) undercounts what is held; the checker reads the spools instead."""
    s = summary.summarize(run_dir, scen(), complete=drain is not None, drain=drain)
    assert s["undelivered"] == 2 and s["in_flight_at_end"] == in_flight
    assert s["lost"] == 1 and s["late"] == 1           # m7 held nowhere, m6 held at n2, whatever the drain said


def test_delays_by_size_bucket_and_throughput(run_dir: Path) -> None:
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    d = s["delay"]
    # first delivery of each copy counts: m1 took 1 s wall (its duplicate at 5 s is ignored)
    assert d["1"]["count"] == 1 and d["1"]["mean_wall_s"] == pytest.approx(1.0)
    assert d["1"]["mean_model_s"] == pytest.approx(1.0 / K)
    assert d["2-30"]["count"] == 1 and d["2-30"]["p50_model_s"] == pytest.approx(20.0)
    b = d["31-100"]      # m3 to n2 (3 s) and to n4 (5 s); nearest-rank p50 = 3, p99 = 5
    assert (b["count"], b["mean_wall_s"], b["p50_wall_s"], b["p99_wall_s"]) == (2, 4.0, 3.0, 5.0)
    assert d[">100"]["count"] == 1 and d[">100"]["mean_model_s"] == pytest.approx(100.0)
    o = d["overall"]     # wall delays 1, 2, 3, 5, 10
    assert o["count"] == 5 and o["mean_wall_s"] == pytest.approx(4.2) and o["mean_model_s"] == pytest.approx(42.0)
    assert o["p50_wall_s"] == 3.0 and o["p99_wall_s"] == 10.0
    # messages of 2+ fragments delivered: m2, m3 x2, m4 = 4 over 3600 model s = 1 model hour, 360 wall s
    t = s["throughput"]
    assert t["messages_2plus"] == 4
    assert t["per_model_hour"] == pytest.approx(4.0)
    assert t["per_wall_second"] == pytest.approx(4 / 360, rel=1e-4)
    assert s["fragment_size"] == 1000


def test_schema_problems_reported_not_raised(run_dir: Path) -> None:
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    assert s["schema"]["problems"] == 3
    first = s["schema"]["first"]
    assert any("nodes/n4/deliveries.jsonl:2: not a JSON line" in p for p in first)
    assert any("nodes/n4/deliveries.jsonl:3" in p and "missing field" in p for p in first)


def test_host_saturation_in_summary(run_dir: Path) -> None:
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    assert s["host_samples"] == 10
    assert s["saturation"]["saturated"] is True and s["saturation"]["max_cpu"] == 99


def test_check_lists_every_problem(run_dir: Path) -> None:
    (run_dir / "nodes" / "n2" / "spool.db").unlink()
    write_spool(run_dir / "nodes" / "n2" / "spool.db")          # every spool empty: m6 and m7 are lost
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    problems = summary.check(s)
    text = "\n".join(problems)
    assert len(problems) == 4
    assert "2 message copies lost" in text and "1 duplicate" in text
    assert "not trustworthy" in text and "3 malformed records" in text
    assert "incomplete" not in text


def test_check_clean_run_has_no_problems(tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    write_lines(rep / "nodes" / "n1" / "submissions.jsonl", [sub("n1", "a", "n2", 1000)])
    write_lines(rep / "nodes" / "n2" / "deliveries.jsonl", [dlv("n2", "a", "n1", 1000, 0.5)])
    write_lines(rep / "host.jsonl", [{"ts": T0, "node": "testbed", "cpu_percent": 50, "mem_percent": 1}])
    s = summary.summarize(rep, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    assert s["lost"] == 0 and s["duplicates"] == 0 and s["delivered"] == 1
    assert summary.check(s) == []


def test_incomplete_empty_run_directory(tmp_path: Path) -> None:
    rep = tmp_path / "cellx" / "1"
    rep.mkdir(parents=True)
    s = summary.summarize(rep, scen(), complete=False, reason="interrupted")
    assert s["offered"] == 0 and s["delivered"] == 0 and s["lost"] == 0     # nothing accepted: nothing lost
    assert s["delay"]["overall"]["count"] == 0 and s["delay"]["overall"]["mean_model_s"] is None
    assert s["saturation"]["samples"] == 0 and s["saturation"]["saturated"] is False
    assert set(s["missing_files"]) == {"scenario.yaml", "topology.json", "events.jsonl", "host.jsonl", "nodes/"}
    assert summary.check(s) == ["run incomplete (interrupted)"]


def test_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    (rep / "nodes" / "n1" / "deliveries.jsonl").mkdir(parents=True)      # a directory where a file should be
    write_lines(rep / "nodes" / "n1" / "submissions.jsonl", [[1, 2, 3]], raw=["\n", "\x00\xff garbage\n"])
    s = summary.summarize(rep, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    assert s["schema"]["problems"] == 3
    assert any("cannot read" in p for p in s["schema"]["first"])
    assert any("expected a JSON object" in p for p in s["schema"]["first"])


def test_problem_samples_are_capped(tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    write_lines(rep / "nodes" / "n1" / "deliveries.jsonl", [], raw=["bad\n"] * 50)
    s = summary.summarize(rep, scen(), complete=True)
    assert s["schema"]["problems"] == 50 and len(s["schema"]["first"]) == summary.MAX_PROBLEM_SAMPLES


def test_write_summary_is_atomic_and_matches(run_dir: Path) -> None:
    drain = {"empty": True, "in_flight": 0, "remaining": {}, "seconds": 1.5, "bound": 30.0}
    result = summary.write_summary(run_dir, scen(), complete=True, drain=drain)
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(result))
    assert on_disk["drain"] == drain
    assert not list(run_dir.glob(".summary.*"))
    # rewriting replaces, never appends
    summary.write_summary(run_dir, scen(), complete=False, reason="interrupted")
    assert json.loads((run_dir / "summary.json").read_text())["complete"] is False


def test_mixed_modes_and_fragment_size_fallback(tmp_path: Path) -> None:
    s = ring_scenario([{"size": {"dist": "fixed", "bytes": 100}}], n=3,
                      extra={"nodes": {"all": {"mode": "fragmenting", "fragment_size": 500},
                                       "n2": {"mode": "non-fragmenting"}}})
    out = summary.summarize(tmp_path, s, complete=True)
    assert out["mode"] == "mixed" and out["fragment_size"] == 500


def test_driver_counters_and_workload_window(run_dir: Path) -> None:
    # the workload ended 200 wall s after T0 (duration 360 wall s): window [T0 - 160, T0 + 200]
    write_lines(run_dir / "events.jsonl", [{"ts": T0 + 200, "node": "testbed", "event": "workload_end",
                                            "target": "all", "planned": 12, "submitted": 11, "accepted": 7,
                                            "refused": 3, "unreachable": 1}])
    write_lines(run_dir / "nodes" / "n3" / "deliveries.jsonl", [dlv("n3", "late", "n1", 9000, 1.0, at=500.0)])
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    assert s["driver"] == {"planned": 12, "submitted": 11, "accepted": 7, "refused": 3, "unreachable": 1}
    t = s["throughput"]
    assert t["messages_2plus"] == 5                          # the late one counts over the whole run
    assert t["messages_2plus_during_workload"] == 4          # but not inside the workload window
    assert t["per_model_hour_during_workload"] == pytest.approx(4.0)
    # the thesis' bytes/s: m2 5000 + m3 50000 to each of two recipients + m4 200000, not the late 9000
    assert t["bytes_2plus_during_workload"] == 305_000
    assert t["model_bytes_per_s_2plus"] == pytest.approx(305_000 / 3600, abs=1e-3)
    # a loaded warm-up: the window opens 1800 model s (180 wall s) after the generators start, i.e. at
    # T0 + 20, after m1..m4 (delivered by T0 + 10) and before "late" (T0 + 501, outside the workload)
    loaded = scen()
    loaded.workload.measure_from = 1800
    later = summary.summarize(run_dir, loaded, complete=True, drain={"empty": True, "in_flight": 0})
    assert later["throughput"]["bytes_2plus_during_workload"] == 0
    assert later["throughput"]["measured_model_s"] == 1800
    assert s["unexpected_deliveries"] == 1                   # "late" was never submitted in this directory


def test_no_workload_end_event_no_window(run_dir: Path) -> None:
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": True, "in_flight": 0})
    assert s["driver"] is None and "messages_2plus_during_workload" not in s["throughput"]


@pytest.mark.parametrize("kind,record", [
    ("delivery", dlv("n1", "m", "n2", 10, 1.0)),
    ("delivery", {**dlv("n1", "m", "n2", 10, 1.0), "size": True}),        # bool is not an int here
    ("delivery", {**dlv("n1", "m", "n2", 10, 1.0), "hops": "2"}),
    ("delivery", {k: v for k, v in dlv("n1", "m", "n2", 10, 1.0).items() if k != "hops"}),
    ("submission", sub("n1", "m", ["n2", "n3"], 5)),
    ("submission", {**sub("n1", "m", "n2", 5), "accepted": 1}),           # int is not a bool
    ("submission", {**sub("n1", "m", "n2", 5), "dst": 3}),
    ("host", {"ts": 1, "node": "testbed", "cpu_percent": 1.5, "mem_percent": 3}),
    ("host", {"ts": True, "node": "testbed", "cpu_percent": 1.5, "mem_percent": 3}),
    ("report", [1, 2]),
    ("event", {"ts": 1.0, "node": "testbed", "event": "kill", "target": ["a"]}),
])
def test_fast_schema_check_agrees_with_schema_module(kind: str, record: object) -> None:
    from node import schema
    assert summary._conforms(kind, record) == (schema.validate(kind, record) == [])


def test_check_names_copies_held_at_the_end(run_dir: Path) -> None:
    write_spool(run_dir / "nodes" / "n4" / "spool.db", [piece("m7", "n4", state="part")])   # m7 reached n4
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": False, "in_flight": 2, "remaining": {"n2": 2}})
    problems = summary.check(s)
    assert s["lost"] == 0 and s["late"] == 2
    assert any("2 message copies still held in spools" in p and "n2" in p and "n4" in p for p in problems)
    assert not any("lost" in p for p in problems)
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": False, "in_flight": 0,
                                                                 "remaining": {"n3": "daemon killed"}})
    assert any("2 message copies still held in spools" in p for p in summary.check(s))   # not the drain's guess


@pytest.mark.parametrize("drain_s,stalled", [(400.0, True), (100.0, False)])
def test_stalled_when_silent_for_stall_after_with_copies_held(run_dir: Path, drain_s: float, stalled: bool) -> None:
    """Deliveries end at T0+10 wall s; the workload ends at T0+5; stall_after is 3600 model s = 360 wall s.
    m6 is held at n2 (late), so the run is stalled once the drain ran long enough without a delivery."""
    write_lines(run_dir / "events.jsonl", [{"ts": T0 + 5, "node": "testbed", "event": "workload_end", "target": "all"}])
    s = summary.summarize(run_dir, scen(), complete=True, drain={"empty": False, "in_flight": 1, "seconds": drain_s})
    assert s["stalled"] is stalled and s["stall"]["stalled"] is stalled
    assert s["stall"]["held"] == s["late"] == 1 and s["lost"] == 1
    assert s["stall"]["stall_after_model_s"] == 3600.0
    assert any("STALLED" in p for p in summary.check(s)) is stalled


def test_no_workload_end_no_stall_verdict(run_dir: Path) -> None:
    s = summary.summarize(run_dir, scen(), complete=False)
    assert s["stalled"] is False and s["stall"] is None
