"""`testbed validate` (the plan of a run, no root, nothing built), `testbed report` as a verb and the report
command `testbed run` ends with."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed import cli
from testbed.commands import experiment as experiment_cmd
from testbed.experiment import runner, timescale
from testbed.scenario import loader

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")


def tb(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_validate_prints_the_plan(capsys) -> None:
    code, out, err = tb(capsys, "validate", QUICKSTART, "--reps", "2", "--json")
    assert code == 0, err
    plan = json.loads(out)
    _, plans = runner.plan(QUICKSTART, Path("runs/quickstart"), 2, False, [])
    assert [(c["cell"], [r["seed"] for r in c["reps"]]) for c in plan["cells"]] == [
        (name, [p.seed for p in plans if p.cell.name == name]) for name in dict.fromkeys(p.cell.name for p in plans)]
    assert plan["repetitions"] == len(plans) == 4
    wall = timescale.to_wall(loader.load(QUICKSTART))
    per_rep = wall.duration + wall.workload.drain + experiment_cmd.SETUP_S
    assert plan["estimate_s"] == pytest.approx(4 * per_rep, abs=0.2)
    code, out, err = tb(capsys, "validate", QUICKSTART, "--quick")
    assert code == 0 and out.startswith(f"{QUICKSTART}: valid (scenario quickstart, quick)"), err
    assert "2 cell(s), 2 repetition(s)" in out and "estimated wall time" in out


@pytest.mark.parametrize("args, says", [
    (["--set", "nodes.all.mode=sideways"], "mode"),                  # a node setting, checked as `run` does
    (["--set", "duration=soon"], "duration"),
    (["--reps", "0"], "--reps must be at least 1"),
])
def test_validate_refuses_in_one_line(capsys, args: list[str], says: str) -> None:
    code, out, err = tb(capsys, "validate", QUICKSTART, *args)
    assert code == 2 and out == "" and err.startswith("testbed: ") and says in err and len(err.splitlines()) == 1


def test_report_is_a_verb(capsys, tmp_path: Path) -> None:
    code, out, err = tb(capsys, "report", str(tmp_path / "missing"))
    assert code == 2 and err == f"testbed: run directory {tmp_path / 'missing'} does not exist.\n"
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    text = capsys.readouterr().out
    assert "RUN_DIR" in text and "examples:" in text and "testbed report runs/" in text


def test_run_ends_with_the_report_command(capsys, monkeypatch, tmp_path: Path) -> None:
    """The run itself is another test's (tests/e2e/test_testbed_run.py): here only what `run` prints after it."""
    made: list[str] = []
    monkeypatch.setattr(runner, "run_experiment", lambda *a, **kw: 0)
    monkeypatch.setattr(experiment_cmd, "make_report", lambda d, out, *a, **kw: made.append(d))
    code, out, err = tb(capsys, "run", QUICKSTART, "--out", str(tmp_path / "my run"))
    assert code == 0 and out.strip().endswith(f"make the report: testbed report '{tmp_path / 'my run'}'"), err
    assert made == []
    code, out, err = tb(capsys, "run", QUICKSTART, "--out", str(tmp_path / "r2"), "--report")
    assert code == 0 and made == [str(tmp_path / "r2")] and "make the report" not in out
