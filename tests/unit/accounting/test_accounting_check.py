"""The loss checker (testbed/accounting) on run directories written by the test: records as real files,
spools written by the node's own Spool class, so the checker reads what a daemon leaves behind."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from node.piece import Piece
from node.spool import Spool
from testbed import accounting, cli
from testbed.accounting import Place, check_run
from testbed.accounting.verdict import Partial
from testbed.experiment import runner, summary, sweep
from testbed.scenario.loader import dump_resolved, load_text
from testbed.scenario.checks import ScenarioError

from tests.unit.experiment.experiment_scenarios import ring_scenario
from tests.unit.experiment.spool_support import piece, write_spool
from tests.unit.experiment.test_summary_rundir import T0, dlv, sub, write_lines

pytestmark = pytest.mark.timeout(60)


# ---- writing spools and reports ----------------------------------------------------------

def report(node: str, event: str, msg_id: str, dst: str, reason: str) -> dict:
    return {"ts": T0, "node": node, "event": event, "msg_id": msg_id, "dst": dst, "reason": reason}


def ndr_sub(node: str, msg_id: str, dst: str) -> dict:
    """The submission record a node writes for a non-delivery report it originates (node/reports.py)."""
    return {**sub(node, msg_id, dst, 120), "originator": "mailer-daemon", "kind": "ndr"}


def clean_rep(rep: Path, copies: int = 3) -> Path:
    """Every copy delivered once, every spool empty."""
    write_lines(rep / "nodes" / "n1" / "submissions.jsonl", [sub("n1", f"c{i}", "n2", 100) for i in range(copies)])
    write_lines(rep / "nodes" / "n2" / "deliveries.jsonl", [dlv("n2", f"c{i}", "n1", 100, 1.0) for i in range(copies)])
    for node in ("n1", "n2"):
        write_spool(rep / "nodes" / node / "spool.db")
    return rep


@pytest.fixture
def rep(tmp_path: Path) -> Path:
    """One copy of every class (see the comments); the expected verdict is in test_every_class."""
    rep = tmp_path / "exp" / "mode-non-fragmenting" / "1"
    nodes = rep / "nodes"
    write_lines(nodes / "n1" / "submissions.jsonl", [
        sub("n1", "m1", "n2", 100),                      # delivered
        sub("n1", "m2", "n3", 100),                      # delivered twice: duplicate
        sub("n1", "m3", ["n2", "n4"], 100),              # n2 delivered; n4 held at n2 AND n3: late
        sub("n1", "", "n2", 100, False, "input buffers full: 3 of 50"),     # refused: not a copy
    ])
    write_lines(nodes / "n2" / "submissions.jsonl", [
        sub("n2", "m4", "n4", 100),                      # reported (lifetime expired), report delivered
        sub("n2", "m5", "n1", 100),                      # nowhere: lost
    ])
    write_lines(nodes / "n3" / "submissions.jsonl", [
        sub("n3", "m6", "n1", 100),                      # orphaned at n4, part at n1: late
        ndr_sub("n3", "ndr.m4.n4", "n2"),                # the report about m4: delivered
        ndr_sub("n3", "ndr.m9.n1", "n4"),                # a report nobody has: a lost report
    ])
    write_lines(nodes / "n4" / "submissions.jsonl", [sub("n4", "m7", "n2", 100)])   # delivered per n2's spool only
    write_lines(rep / "workload.jsonl", [sub("n3", "", "n1", 100, False, "node unreachable: daemon killed")])
    write_lines(nodes / "n2" / "deliveries.jsonl", [dlv("n2", "m1", "n1", 100, 1.0), dlv("n2", "m3", "n1", 100, 2.0)])
    write_lines(nodes / "n3" / "deliveries.jsonl", [dlv("n3", "m2", "n1", 100, 1.0), dlv("n3", "m2", "n1", 100, 4.0)],
                raw=["this is not json\n"])
    write_lines(nodes / "n1" / "deliveries.jsonl", [dlv("n1", "m8", "n4", 100, 1.0)])
    write_lines(nodes / "n3" / "reports.jsonl", [
        report("n3", "ndr_made", "m4", "n4", "lifetime expired at n3"),
        report("n3", "orphan", "m6", "n1", "no route from n3 to n1")])
    write_lines(nodes / "n2" / "reports.jsonl", [
        report("n2", "ndr_delivered", "ndr.m4.n4", "n2", "non-delivery report reached the originator")])
    write_spool(nodes / "n1" / "spool.db", [piece("m6", "n1", "part")])
    # m3 is 20 bytes: n3 holds both halves, n2 the first again
    write_spool(nodes / "n2" / "spool.db", [piece("m3", "n4", total=20), piece("m1", "n2", "queued")],
                delivered=[("m7", "n2")])
    write_spool(nodes / "n3" / "spool.db", [piece("m3", "n4", total=20), piece("m3", "n4", off=10, total=20)])
    # n4 accepted m8 (its origin row) but died before writing the submission line
    write_spool(nodes / "n4" / "spool.db", [piece("m6", "n1", "orphan")], origins=[("m8", "user", ["n1"])])
    return rep


# ---- the classes ----------------------------------------------------------------------------

def test_every_class(rep: Path) -> None:
    v = check_run(rep)
    assert v.nodes == ["n1", "n2", "n3", "n4"]
    assert (v.accepted, v.delivered, v.duplicate, v.reported, v.late, v.lost) == (9, 4, 1, 1, 2, 1)
    assert v.lost_pairs == [("m5", "n1")]
    assert v.duplicate_pairs == {("m2", "n3"): 1} and v.extra_deliveries == 1
    assert v.reported_by_reason == {"lifetime expired at <node>": 1}
    assert v.unrecorded_deliveries == [("m7", "n2")]
    assert v.unrecorded_submissions == [("m8", "n1")]
    assert v.delivered_but_held == 1                 # m1: a stale piece at n2 whose ack was lost
    assert v.orphaned == 1 and v.unexpected_deliveries == {}
    assert v.report_events == {"ndr_delivered": 1, "ndr_made": 1, "orphan": 1}
    assert not v.ok() and not v.ok(max_late=100)


def test_a_copy_held_at_two_nodes_is_late_once_with_both_places(rep: Path) -> None:
    v = check_run(rep)
    assert v.late_pairs[("m3", "n4")] == [Place("n2", "queued", 1), Place("n3", "queued", 2)]
    assert v.late_pairs[("m6", "n1")] == [Place("n1", "part", 1), Place("n4", "orphan", 1)]
    assert v.to_dict()["late_where"] == {"n1": {"part": 1}, "n2": {"queued": 1}, "n3": {"queued": 1},
                                         "n4": {"orphan": 1}}


def test_reports_are_accounted_apart(rep: Path) -> None:
    r = check_run(rep).reports
    assert (r.accepted, r.delivered, r.expired, r.late, r.lost) == (2, 1, 0, 0, 1)
    assert r.lost_pairs == [("ndr.m9.n1", "n4")]


def test_a_malformed_line_is_a_problem_with_its_place(rep: Path) -> None:
    v = check_run(rep)
    assert v.record_problems == 1
    assert v.first_problems == ["nodes/n3/deliveries.jsonl:3: not a JSON line"]


def test_missing_and_unreadable_spools_are_problems_of_their_node(rep: Path) -> None:
    (rep / "nodes" / "n3" / "spool.db").unlink()
    (rep / "nodes" / "n4" / "spool.db").write_bytes(b"not a database at all" * 100)
    v = check_run(rep)
    assert v.spool_problems["n3"] == "missing"
    assert v.spool_problems["n4"].startswith("cannot read")
    # n2 still holds the first half of m3: without n3's spool, the second half is nowhere
    assert v.partly_held[("m3", "n4")] == Partial(10, 20, [Place("n2", "queued", 1)])
    assert ("m3", "n4") in v.lost_pairs
    assert ("m8", "n1") not in v.unrecorded_submissions                    # only n4's spool knew it
    assert v.late_pairs[("m6", "n1")] == [Place("n1", "part", 1)]
    text = "\n".join(accounting.verdict_details(v))
    assert "nodes/n3/spool.db missing" in text and "nodes/n4/spool.db cannot read" in text
    assert "m3->n4 10 of 20 bytes at n2 (queued)" in text


def test_an_unreadable_spool_fails_the_repetition(tmp_path: Path) -> None:
    rep = clean_rep(tmp_path / "c" / "1")
    assert check_run(rep).ok()
    (rep / "nodes" / "n2" / "spool.db").write_bytes(b"not a database at all" * 100)
    v = check_run(rep)
    assert (v.lost, v.late) == (0, 0) and not v.ok()
    assert "spool unreadable at n2" in accounting.verdict_line("c/1", v)


def test_a_lost_report_fails_the_repetition(tmp_path: Path) -> None:
    rep = clean_rep(tmp_path / "c" / "1")
    write_lines(rep / "nodes" / "n2" / "submissions.jsonl", [ndr_sub("n2", "ndr.c0.n2", "n1")])
    v = check_run(rep)
    assert (v.lost, v.reports.lost) == (0, 1) and not v.ok()
    assert "1 non-delivery reports lost" in accounting.verdict_line("c/1", v)


def test_a_host_without_a_daemon_has_no_spool_to_miss(tmp_path: Path) -> None:
    rep = clean_rep(tmp_path / "c" / "1")
    (rep / "nodes" / "r1").mkdir()
    (rep / "nodes" / "r1" / "tcpdump.log").write_text("listening\n")     # the runtime's work files only
    v = check_run(rep)
    assert v.spool_problems == {} and v.ok()


def test_a_spool_left_with_its_wal_is_read(tmp_path: Path) -> None:
    rep = clean_rep(tmp_path / "c" / "1", copies=1)
    write_lines(rep / "nodes" / "n1" / "submissions.jsonl", [sub("n1", "w", "n2", 100)])
    spool = write_spool(rep / "nodes" / "n1" / "spool.db", [piece("w", "n2")], keep_open=True)   # a killed daemon
    try:
        assert (rep / "nodes" / "n1" / "spool.db-wal").exists()
        v = check_run(rep)
        assert v.late_pairs == {("w", "n2"): [Place("n1", "queued", 1)]} and v.spool_problems == {}
    finally:
        spool.close()


def test_the_checker_opens_spools_read_only(rep: Path) -> None:
    path = rep / "nodes" / "n2" / "spool.db"
    before = path.read_bytes()
    check_run(rep)
    assert path.read_bytes() == before
    assert not (rep / "nodes" / "n2" / "spool.db-wal").exists()


def test_a_duplicate_of_a_copy_never_accepted_here_fails_too(tmp_path: Path) -> None:
    rep = clean_rep(tmp_path / "c" / "1")
    write_lines(rep / "nodes" / "n2" / "deliveries.jsonl", [dlv("n2", "x", "n1", 100, 1.0)] * 2)
    v = check_run(rep)
    assert v.unexpected_deliveries == {("x", "n2"): 2} and v.extra_deliveries == 1
    assert v.duplicate == 0 and not v.ok()


@pytest.mark.parametrize("max_late, ok", [(None, True), (0, False), (1, False), (2, True)])
def test_ok_bounds_late_copies(tmp_path: Path, max_late: int | None, ok: bool) -> None:
    rep = clean_rep(tmp_path / "c" / "1")
    write_lines(rep / "nodes" / "n1" / "submissions.jsonl", [sub("n1", "a", "n2", 100), sub("n1", "b", "n2", 100)])
    write_spool(rep / "nodes" / "n3" / "spool.db", [piece("a", "n2"), piece("b", "n2", "held")])
    v = check_run(rep)
    assert (v.late, v.lost) == (2, 0)
    assert v.ok(max_late) is ok
    line = accounting.verdict_line("c/1", v, max_late)
    assert line.endswith("— OK") if ok else "2 late > max_late" in line


def test_not_a_run_directory_gives_an_empty_verdict(tmp_path: Path) -> None:
    v = check_run(tmp_path / "nothing")
    assert (v.accepted, v.lost, v.problems) == (0, 0, 0) and v.ok()


def test_verdict_line_of_a_clean_rep(tmp_path: Path) -> None:
    v = check_run(clean_rep(tmp_path / "mode-fragmenting" / "1"))
    assert accounting.verdict_line("mode-fragmenting/1", v) == (
        "mode-fragmenting/1: 3 accepted: 3 delivered, 0 reported, 0 late, 0 lost, 0 duplicates — OK")
    assert accounting.verdict_details(v) == []


# ---- summary.json ---------------------------------------------------------------------------

def test_summary_takes_losses_from_the_checker(rep: Path) -> None:
    scen = ring_scenario([{"size": {"dist": "fixed", "bytes": 100}}], n=4, extra={"max_late": 5})
    # the drain saw one message held: the spools hold two late copies, at four nodes
    s = summary.summarize(rep, scen, complete=True, drain={"empty": False, "in_flight": 1, "remaining": {"n2": 1}})
    assert (s["lost"], s["late"], s["duplicates"], s["copies"], s["undelivered"]) == (1, 2, 1, 9, 3)
    assert s["in_flight_at_end"] == 1
    assert s["late_where"] == {"n1": {"part": 1}, "n2": {"queued": 1}, "n3": {"queued": 1}, "n4": {"orphan": 1}}
    assert s["ndr"] == 1 and s["reports"] == {"ndr_delivered": 1, "ndr_made": 1, "orphan": 1}
    acc = s["accounting"]
    assert acc["ok"] is False and acc["max_late"] == 5 and acc["lost_pairs"] == [["m5", "n1"]]
    assert {"msg_id": "m3", "dst": "n4", "held": [{"node": "n2", "state": "queued", "pieces": 1},
                                                   {"node": "n3", "state": "queued", "pieces": 2}]} in acc["late_pairs"]
    assert s["schema"]["problems"] == 1           # the bad line, counted once though two readers saw it
    text = "\n".join(summary.check(s))
    assert "1 message copies lost" in text and "2 message copies still held in spools at teardown" in text
    assert "1 non-delivery reports lost" in text
    json.dumps(s)                                  # summary.json must be plain JSON


def test_summary_names_unreadable_spools_with_the_losses(rep: Path) -> None:
    (rep / "nodes" / "n1" / "spool.db").unlink()
    s = summary.summarize(rep, ring_scenario([{}], n=4), complete=True)
    assert any("spools missing or unreadable: n1" in p for p in summary.check(s))


# ---- the scenario key ---------------------------------------------------------------------------

def test_max_late_defaults_to_unbounded_and_round_trips() -> None:
    s = load_text("name: x\n")
    assert s.max_late is None
    assert load_text(dump_resolved(s)) == s
    s3 = load_text("name: x\nmax_late: 3\n")
    assert s3.max_late == 3 and load_text(dump_resolved(s3)).max_late == 3
    assert load_text("name: x\n", overrides=["max_late=7"]).max_late == 7
    assert load_text("name: x\nmax_late: 2\n", overrides=["max_late=null"]).max_late is None


@pytest.mark.parametrize("value, match", [("-1", "whole number at least 0, got -1"), ("lots", "whole number"),
                                          ("1.5", "whole number")])
def test_max_late_is_validated(value: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=rf"<string>:2 max_late: expected a {match}"):
        load_text(f"name: x\nmax_late: {value}\n")


def test_max_late_reaches_the_resolved_scenario_the_cli_reads(tmp_path: Path) -> None:
    rep = clean_rep(tmp_path / "c" / "1")
    (rep / "scenario.yaml").write_text(dump_resolved(load_text("name: x\nmax_late: 4\n")))
    assert accounting.scenario_max_late(rep) == 4
    (rep / "scenario.yaml").write_text(": not yaml [")
    assert accounting.scenario_max_late(rep) is None


# ---- testbed check ---------------------------------------------------------------------------

def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(["check", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_ok_exits_0(tmp_path: Path, capsys) -> None:
    code, out, _ = run_cli([str(clean_rep(tmp_path / "e" / "mode-fragmenting" / "1"))], capsys)
    assert code == 0
    assert out.strip() == "mode-fragmenting/1: 3 accepted: 3 delivered, 0 reported, 0 late, 0 lost, 0 duplicates — OK"


def test_cli_lost_exits_1_and_names_pairs_and_places(rep: Path, capsys) -> None:
    code, out, _ = run_cli([str(rep)], capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("mode-non-fragmenting/1: 9 accepted: 4 delivered, 1 reported, 2 late, 1 lost, "
                               "1 duplicates — FAIL")
    assert "  lost: m5->n1" in lines
    assert "  late: m3->n4 at n2 (queued), n3 (queued); m6->n1 at n1 (part), n4 (orphan)" in lines
    assert ("  late copies held at: n1: 1 part; n2: 1 queued; n3: 1 queued; n4: 1 orphan "
            "(2 of the 2 copies at two or more nodes at once)") in lines
    assert "  duplicated: m2->n3 (+1)" in lines


def test_cli_walks_an_experiment_and_totals(tmp_path: Path, rep: Path, capsys) -> None:
    exp = rep.parent.parent
    clean_rep(exp / "mode-fragmenting" / "1")
    clean_rep(exp / "mode-fragmenting" / "2")
    code, out, _ = run_cli([str(exp)], capsys)
    lines = out.splitlines()
    assert code == 1
    heads = [ln.split(":")[0] for ln in lines if not ln.startswith(" ")]
    assert heads == ["mode-fragmenting/1", "mode-fragmenting/2", "mode-non-fragmenting/1", "total"]
    assert lines[-1] == ("total: 3 repetitions: 15 accepted: 10 delivered, 1 reported, 2 late, 1 lost, "
                         "1 duplicates — 2 of 3 OK")
    code, out, _ = run_cli([str(exp / "mode-fragmenting")], capsys)     # a cell directory
    assert code == 0 and out.splitlines()[-1].endswith("2 of 2 OK")


def test_cli_max_late_and_json(tmp_path: Path, capsys) -> None:
    rep = clean_rep(tmp_path / "c" / "1")
    write_lines(rep / "nodes" / "n1" / "submissions.jsonl", [sub("n1", "a", "n2", 100)])
    write_spool(rep / "nodes" / "n3" / "spool.db", [piece("a", "n2")])
    assert run_cli([str(rep)], capsys)[0] == 0
    code, out, _ = run_cli([str(rep), "--max-late", "0"], capsys)
    assert code == 1 and "1 late > max_late 0" in out
    (rep / "scenario.yaml").write_text("max_late: 0\n")           # the run's own bound, when not given
    assert run_cli([str(rep)], capsys)[0] == 1
    assert run_cli([str(rep), "--max-late", "1"], capsys)[0] == 0
    code, out, _ = run_cli([str(rep), "--json", "--max-late", "1"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and doc["total"]["late"] == 1
    assert doc["repetitions"][0]["late_pairs"] == [{"msg_id": "a", "dst": "n2",
                                                     "held": [{"node": "n3", "state": "queued", "pieces": 1}]}]


@pytest.mark.parametrize("make, match", [
    (lambda t: t / "absent", "is not a run directory (no such directory)"),
    (lambda t: (t / "empty").mkdir() or t / "empty", "no repetition"),
])
def test_cli_bad_input_exits_2_with_one_sentence(tmp_path: Path, capsys, make, match) -> None:
    code, out, err = run_cli([str(make(tmp_path))], capsys)
    assert code == 2 and out == ""
    assert err.startswith("testbed: ") and match in err and len(err.strip().splitlines()) == 1


def test_cli_negative_max_late_exits_2(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli([str(clean_rep(tmp_path / "c" / "1")), "--max-late", "-1"], capsys)
    assert code == 2 and "--max-late must be 0 or more" in err


def test_cli_as_a_process_no_traceback(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "testbed", "check", str(tmp_path / "absent")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not a run directory" in r.stderr


# ---- the runner's exit status --------------------------------------------------------------------

def plan_with(summary_doc: dict, tmp_path: Path) -> runner.RepPlan:
    scen = ring_scenario([{}], n=3)
    return runner.RepPlan(cell=sweep.Cell(name="c", overrides={}), rep=1, seed=1, dir=tmp_path / "c" / "1",
                          scenario=scen, status="complete", summary=summary_doc)


@pytest.mark.parametrize("doc, failing", [
    ({"lost": 0, "duplicates": 0, "late": 3, "accounting": {"ok": True}}, False),
    ({"lost": 0, "duplicates": 0, "late": 3, "accounting": {"ok": False, "max_late": 2}}, True),
    ({"lost": 1, "duplicates": 0}, True),           # a summary from before the checker
])
def test_runner_fails_a_rep_the_checker_fails(tmp_path: Path, doc: dict, failing: bool) -> None:
    buf = io.StringIO()
    assert runner.print_table([plan_with({"complete": True, **doc}, tmp_path)], buf) is failing
    assert "late" in buf.getvalue().splitlines()[0]


def test_late_where_orders_nodes_by_number() -> None:
    from testbed.accounting.verdict import late_where
    where = late_where({("a", "n1"): [Place("n10", "queued", 1), Place("n2", "queued", 1)],
                        ("b", "n1"): [Place("n2", "held", 1)]})
    assert list(where) == ["n2", "n10"] and where["n2"] == {"held": 1, "queued": 1}


def test_cli_says_when_the_run_stalled(tmp_path: Path, capsys) -> None:
    rep = clean_rep(tmp_path / "d" / "1")
    write_lines(rep / "nodes" / "n1" / "submissions.jsonl", [sub("n1", "a", "n2", 100)])
    write_spool(rep / "nodes" / "n3" / "spool.db", [piece("a", "n2")])
    stall = {"stalled": True, "since_model_s": 4.0, "silent_model_s": 30.0, "stall_after_model_s": 20.0,
             "held": 1, "held_where": {"n3": {"queued": 1}}}
    (rep / "summary.json").write_text(json.dumps({"stalled": True, "stall": stall}))
    code, out, _ = run_cli([str(rep)], capsys)
    assert code == 0       # held, not lost: the verdict passes, the sentence says why copies are late
    assert "  STALLED: nothing delivered for the last 30.0 model s" in out and "at n3" in out
    code, out, _ = run_cli([str(rep), "--json"], capsys)
    assert json.loads(out)["repetitions"][0]["stall"]["held"] == 1
    (rep / "summary.json").write_text(json.dumps({"stalled": False, "stall": {**stall, "stalled": False}}))
    assert "STALLED" not in run_cli([str(rep)], capsys)[1]
