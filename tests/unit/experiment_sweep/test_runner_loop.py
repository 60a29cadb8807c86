"""The sweep runner's loop with an injected cell runner: directories, experiment.json, seeds,
resume, interruption, failures. The real cell runner is exercised by tests/e2e/."""
from __future__ import annotations

import io
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from node.errors import UserError
from testbed.experiment import runner, sweep
from testbed.experiment.progress import NullProgress

SCENARIO = """\
name: loop
seed: 11
duration: 10s
topology: {generator: ring, params: {n: 3}}
nodes:
  all: {mode: fragmenting}
workload:
  generators: [{nodes: all}]
sweep:
  grid: {nodes.all.mode: [fragmenting, non-fragmenting], nodes.all.resources.rbsad: [0, 400]}
  reps: 2
quick:
  duration: 5s
  sweep: {grid: {nodes.all.mode: [fragmenting, non-fragmenting]}, reps: 1}
"""


@dataclass
class FakeResult:
    complete: bool
    reason: str = ""
    summary: dict = field(default_factory=dict)


class FakeCell:
    """Records its calls; writes what the real cell writes that the runner relies on."""

    def __init__(self, lost: int = 0, fail_on: int | None = None, stop_on: int | None = None,
                 user_error_on: int | None = None) -> None:
        self.calls: list[tuple] = []
        self.lost, self.fail_on, self.stop_on, self.user_error_on = lost, fail_on, stop_on, user_error_on

    def __call__(self, scenario, rep_dir: Path, progress, stop: threading.Event):
        self.calls.append((scenario, rep_dir))
        n = len(self.calls)
        assert rep_dir.is_dir() and not any(rep_dir.iterdir()), "a rep must start in an empty directory"
        (rep_dir / "marker").write_text(str(n))
        if n == self.fail_on:
            raise RuntimeError("boom")
        if n == self.user_error_on:
            raise UserError("node n2 never came up.")
        if n == self.stop_on:
            stop.set()      # what the Ctrl-C handler does
            return FakeResult(False, "interrupted", {"complete": False})
        summary = {"offered": 10, "accepted": 10, "delivered": 10 - self.lost, "lost": self.lost, "duplicates": 0,
                   "complete": True, "mode": scenario.nodes.all.get("mode"), "seed": scenario.seed}
        (rep_dir / "summary.json").write_text(json.dumps(summary))
        (rep_dir / runner.COMPLETE_MARKER).write_text("")
        return FakeResult(True, "", summary)


@pytest.fixture
def scen(tmp_path: Path) -> Path:
    p = tmp_path / "loop.yaml"
    p.write_text(SCENARIO)
    return p


def run(scen: Path, out: Path, cell: FakeCell, **kw) -> int:
    args = dict(reps=None, resume=False, quick=False, sets=[])
    args.update(kw)
    return runner.run_experiment(str(scen), out, args["reps"], args["resume"], args["quick"], args["sets"],
                                 NullProgress(), run_cell=cell, stream=io.StringIO())


def doc(out: Path) -> dict:
    return json.loads((out / "experiment.json").read_text())


def test_every_cell_and_rep_gets_its_dir_seed_and_overrides(scen, tmp_path):
    out, cell = tmp_path / "runs" / "loop", FakeCell()
    assert run(scen, out, cell) == 0
    assert len(cell.calls) == 8          # 2 modes x 2 rbsad x 2 reps
    d = doc(out)
    assert d["scenario"] == "loop" and d["status"] == "complete" and d["reps"] == 2
    assert [c["id"] for c in d["cells"]] == ["mode-fragmenting_rbsad-0", "mode-fragmenting_rbsad-400",
                                             "mode-non-fragmenting_rbsad-0", "mode-non-fragmenting_rbsad-400"]
    seeds = set()
    for c in d["cells"]:
        assert c["params"]["nodes.all.mode"] == c["overrides"]["nodes.all.mode"]
        for r in c["reps"]:
            assert r["status"] == "complete"
            assert r["seed"] == sweep.derive_seed(11, c["id"], r["rep"])
            assert (out / r["dir"] / "summary.json").is_file()
            seeds.add(r["seed"])
    assert len(seeds) == 8
    for scenario, rep_dir in cell.calls:
        cell_id, rep = rep_dir.parent.name, int(rep_dir.name)
        assert scenario.seed == sweep.derive_seed(11, cell_id, rep)
        overrides = next(c["overrides"] for c in d["cells"] if c["id"] == cell_id)
        assert scenario.nodes.all["mode"] == overrides["nodes.all.mode"]
        assert scenario.nodes.all["resources"]["rbsad"] == overrides["nodes.all.resources.rbsad"]
    assert "rep mode-fragmenting_rbsad-0/1 started" in (out / runner.RUNNER_LOG).read_text()


def test_quick_and_reps_flags(scen, tmp_path):
    out, cell = tmp_path / "q", FakeCell()
    assert run(scen, out, cell, quick=True, reps=3) == 0
    assert [c["id"] for c in doc(out)["cells"]] == ["mode-fragmenting", "mode-non-fragmenting"]
    assert len(cell.calls) == 6
    assert all(s.duration == 5.0 for s, _ in cell.calls)


def test_set_on_a_swept_key_pins_that_cell(scen, tmp_path):
    out, cell = tmp_path / "one", FakeCell()
    assert run(scen, out, cell, sets=["nodes.all.resources.rbsad=400", "nodes.all.mode=non-fragmenting"], reps=1) == 0
    assert [c["id"] for c in doc(out)["cells"]] == ["mode-non-fragmenting_rbsad-400"]
    assert len(cell.calls) == 1 and cell.calls[0][0].nodes.all["resources"]["rbsad"] == 400


def test_resume_skips_complete_reps_and_reruns_an_incomplete_one(scen, tmp_path):
    out = tmp_path / "r"
    assert run(scen, out, FakeCell(), quick=True, reps=2) == 0
    walls = {(c["id"], r["rep"]): r["wall_s"] for c in doc(out)["cells"] for r in c["reps"]}
    victim = out / "mode-non-fragmenting" / "1"
    (victim / runner.COMPLETE_MARKER).unlink()
    (victim / "stale.jsonl").write_text("old records\n")
    again = FakeCell()
    assert run(scen, out, again, quick=True, reps=2, resume=True) == 0
    assert [rd for _, rd in again.calls] == [victim]
    assert not (victim / "stale.jsonl").exists() and (victim / runner.COMPLETE_MARKER).exists()
    statuses = {(c["id"], r["rep"]): r["status"] for c in doc(out)["cells"] for r in c["reps"]}
    assert statuses[("mode-non-fragmenting", 1)] == "complete"
    assert statuses[("mode-fragmenting", 1)] == "skipped"
    skipped = {(c["id"], r["rep"]): r.get("wall_s") for c in doc(out)["cells"] for r in c["reps"]}
    assert skipped[("mode-fragmenting", 1)] == walls[("mode-fragmenting", 1)]     # kept from the first run
    assert doc(out)["status"] == "complete"
    assert "rep mode-fragmenting/1 skipped: already complete" in (out / runner.RUNNER_LOG).read_text()


def test_resume_reruns_a_complete_rep_whose_seed_changed(scen, tmp_path):
    out = tmp_path / "r"
    assert run(scen, out, FakeCell(), quick=True, reps=1) == 0
    victim = out / "mode-fragmenting" / "1"
    summary = json.loads((victim / "summary.json").read_text()) if (victim / "summary.json").exists() else {}
    (victim / "summary.json").write_text(json.dumps({**summary, "seed": 12345}))     # ran with another seed
    again = FakeCell()
    assert run(scen, out, again, quick=True, reps=1, resume=True) == 0
    assert [rd for _, rd in again.calls] == [victim]
    assert "ran with seed 12345" in (out / runner.RUNNER_LOG).read_text()


def test_rerun_without_resume_keeps_the_previous_run_aside(scen, tmp_path):
    out = tmp_path / "again"
    assert run(scen, out, FakeCell(), quick=True, reps=1) == 0
    assert run(scen, out, FakeCell(), quick=True, reps=1) == 0
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("again.old-")]
    assert len(aside) == 1 and (aside[0] / "experiment.json").is_file()


def test_resume_refuses_another_experiments_folder(scen, tmp_path):
    out = tmp_path / "other"
    out.mkdir()
    (out / "experiment.json").write_text(json.dumps({"scenario": "something-else"}))
    with pytest.raises(UserError, match="holds experiment 'something-else'"):
        run(scen, out, FakeCell(), resume=True)


def test_a_foreign_non_empty_out_is_refused(scen, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(UserError, match="not empty"):
        run(scen, out, FakeCell())
    assert (out / "thesis.tex").read_text() == "precious"


def test_interrupt_marks_incomplete_and_exits_130(scen, tmp_path):
    out, cell = tmp_path / "int", FakeCell(stop_on=2)
    assert run(scen, out, cell, quick=True, reps=2) == runner.EXIT_INTERRUPTED
    assert len(cell.calls) == 2          # nothing starts after the stop
    d = doc(out)
    assert d["status"] == "incomplete"
    reps = [r for c in d["cells"] for r in c["reps"]]
    assert [r["status"] for r in reps] == ["complete", "interrupted", "pending", "pending"]
    assert not (out / reps[1]["dir"] / runner.COMPLETE_MARKER).exists()
    # and the interrupted rep is redone on --resume
    again = FakeCell()
    assert run(scen, out, again, quick=True, reps=2, resume=True) == 0
    assert len(again.calls) == 3


def test_a_crashing_rep_is_recorded_and_the_sweep_goes_on(scen, tmp_path):
    out, cell = tmp_path / "crash", FakeCell(fail_on=1)
    assert run(scen, out, cell, quick=True, reps=1) == runner.EXIT_PROBLEMS
    reps = [r for c in doc(out)["cells"] for r in c["reps"]]
    assert [r["status"] for r in reps] == ["failed", "complete"]
    assert "RuntimeError: boom" in reps[0]["reason"]
    assert doc(out)["status"] == "incomplete"


def test_a_user_error_stops_the_sweep_with_the_reason(scen, tmp_path):
    out, cell = tmp_path / "ue", FakeCell(user_error_on=1)
    with pytest.raises(UserError, match="never came up"):
        run(scen, out, cell, quick=True, reps=1)
    assert len(cell.calls) == 1
    d = doc(out)
    assert d["status"] == "failed" and d["cells"][0]["reps"][0]["status"] == "failed"


def test_losses_make_the_exit_status_non_zero(scen, tmp_path):
    assert run(scen, tmp_path / "lost", FakeCell(lost=1), quick=True, reps=1) == runner.EXIT_PROBLEMS


@pytest.mark.parametrize("sets, reps, match", [
    (["duration=fast"], None, "duration"),
    (["nosuchkey=1"], None, "unknown key 'nosuchkey'"),
    (["duration"], None, "expected KEY=VALUE"),
    ([], 0, "--reps must be at least 1"),
    (["sweep.grid={duration: [10, fast]}"], None, "sweep.grid.duration"),
])
def test_bad_input_is_a_user_error_before_anything_runs(scen, tmp_path, sets, reps, match):
    cell = FakeCell()
    with pytest.raises(UserError, match=match):
        run(scen, tmp_path / "bad", cell, sets=sets, reps=reps)
    assert cell.calls == [] and not (tmp_path / "bad").exists()


def test_missing_scenario_file(tmp_path):
    with pytest.raises(UserError, match="no such scenario file"):
        runner.run_experiment(str(tmp_path / "nope.yaml"), tmp_path / "o", None, False, False, [], NullProgress(),
                              run_cell=FakeCell())


def test_final_table_lists_every_rep(scen, tmp_path):
    buf = io.StringIO()
    runner.run_experiment(str(scen), tmp_path / "t", 1, False, True, [], NullProgress(), run_cell=FakeCell(),
                          stream=buf)
    text = buf.getvalue()
    assert "mode-fragmenting" in text and "mode-non-fragmenting" in text and "delivered" in text
