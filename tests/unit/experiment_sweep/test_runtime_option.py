"""`testbed run --runtime` and the runner's one-off node image build, without docker: the argument
plumbing and the call order are checked with stand-ins for the cell runner and the image builder."""
from __future__ import annotations

import argparse
import io
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.commands import experiment as experiment_cmd
from testbed.experiment import runner
from testbed.experiment.progress import NullProgress

SCENARIO = """\
name: rt
seed: 3
duration: 5s
topology: {generator: ring, params: {n: 3}}
nodes:
  all: {mode: fragmenting}
workload:
  generators: [{nodes: all}]
sweep:
  grid: {nodes.all.mode: [fragmenting, non-fragmenting]}
  reps: 1
quick:
  duration: 2s
"""


@dataclass
class Result:
    complete: bool = True
    reason: str = ""
    summary: dict = field(default_factory=dict)


class Recorder:
    """Stands in for both the image builder and the cell runner, logging the order of calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def ensure(self, progress) -> None:
        self.calls.append("image")

    def cell(self, scenario, rep_dir: Path, progress, stop: threading.Event) -> Result:
        self.calls.append(f"cell:{scenario.runtime}")
        (rep_dir / "summary.json").write_text(json.dumps({"lost": 0, "duplicates": 0}))
        (rep_dir / runner.COMPLETE_MARKER).write_text("")
        return Result()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testbed")
    experiment_cmd.register(parser.add_subparsers())
    return parser


@pytest.fixture
def scen(tmp_path: Path) -> Path:
    p = tmp_path / "rt.yaml"
    p.write_text(SCENARIO)
    return p


def test_runtime_flag_becomes_the_last_set_override():
    args = _parser().parse_args(["run", "s.yaml", "--set", "runtime=netns", "--set", "duration=3s",
                                 "--runtime", "docker"])
    # last wins in the loader, so --runtime overrides a conflicting --set
    assert experiment_cmd.scenario_sets(args) == ["runtime=netns", "duration=3s", "runtime=docker"]


def test_no_runtime_flag_leaves_the_sets_alone():
    args = _parser().parse_args(["run", "s.yaml", "--set", "duration=3s"])
    assert experiment_cmd.scenario_sets(args) == ["duration=3s"]


def test_unknown_runtime_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["run", "s.yaml", "--runtime", "lxc"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_docker_runtime_builds_the_image_once_before_the_first_cell(scen, tmp_path):
    rec = Recorder()
    rc = runner.run_experiment(str(scen), tmp_path / "out", None, False, False, ["runtime=docker"], NullProgress(),
                               run_cell=rec.cell, stream=io.StringIO(), ensure_image=rec.ensure)
    assert rc == runner.EXIT_OK
    assert rec.calls == ["image", "cell:docker", "cell:docker"]


def test_netns_runtime_never_touches_the_image(scen, tmp_path):
    rec = Recorder()
    rc = runner.run_experiment(str(scen), tmp_path / "out", None, False, False, [], NullProgress(),
                               run_cell=rec.cell, stream=io.StringIO(), ensure_image=rec.ensure)
    assert rc == runner.EXIT_OK
    assert rec.calls == ["cell:netns", "cell:netns"]


def test_resume_with_everything_complete_skips_the_image_too(scen, tmp_path):
    out = tmp_path / "out"
    first = Recorder()
    runner.run_experiment(str(scen), out, None, False, False, ["runtime=docker"], NullProgress(),
                          run_cell=first.cell, stream=io.StringIO(), ensure_image=first.ensure)
    again = Recorder()
    rc = runner.run_experiment(str(scen), out, None, True, False, ["runtime=docker"], NullProgress(),
                               run_cell=again.cell, stream=io.StringIO(), ensure_image=again.ensure)
    assert rc == runner.EXIT_OK
    assert again.calls == []


def test_bad_runtime_in_set_is_one_user_error(scen, tmp_path):
    from node.errors import UserError
    with pytest.raises(UserError) as exc:
        runner.run_experiment(str(scen), tmp_path / "out", None, False, False, ["runtime=lxc"], NullProgress(),
                              run_cell=Recorder().cell, stream=io.StringIO())
    assert "runtime" in str(exc.value) and "\n" not in str(exc.value)


class Events:
    """A Progress that keeps the event lines."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def repetitions(self, todo: int, total: int) -> None:
        pass

    def phase(self, cell: str, rep: int, name: str) -> None:
        pass

    def tick(self, elapsed: float, total: float, submitted: int, delivered: int) -> None:
        pass

    def event(self, text: str) -> None:
        self.events.append(text)


def test_a_saturated_rep_is_flagged_on_the_console_when_it_ends(scen, tmp_path):
    sat = {"saturated": True, "fraction_above": 0.25, "samples": 40, "threshold": 90.0, "fraction": 0.1,
           "max_cpu": 99.0, "mean_cpu": 70.0}

    def cell(scenario, rep_dir, progress, stop):
        summary = {"complete": True, "lost": 0, "duplicates": 0, "saturation": sat}
        (rep_dir / runner.COMPLETE_MARKER).write_text("")
        return Result(summary=summary)

    progress, stream = Events(), io.StringIO()
    runner.run_experiment(str(scen), tmp_path / "out", None, False, False, [], progress, run_cell=cell,
                          stream=stream)
    flagged = [e for e in progress.events if "SATURATED" in e]
    assert len(flagged) == 2 and "25%" in flagged[0] and "40 samples" in flagged[0]
    assert stream.getvalue().count("not trustworthy") == 2      # and again in the final table's warnings


@pytest.mark.parametrize("setting, words", [
    ("nodes.all.mode=bogus", "mode 'bogus'"),
    ("nodes.all.resources.rbsad=-3", "rbsad"),
    ("nodes.all.routes={}", "set by the testbed"),
])
def test_bad_node_settings_fail_before_any_cell_runs(scen, tmp_path, setting, words):
    from node.errors import UserError
    rec = Recorder()
    with pytest.raises(UserError) as exc:
        runner.run_experiment(str(scen), tmp_path / "out", None, False, False, [setting], NullProgress(),
                              run_cell=rec.cell, stream=io.StringIO())
    assert words in str(exc.value)
    assert rec.calls == [] and not (tmp_path / "out").exists()


def test_every_shipped_scenario_passes_the_node_settings_check():
    scenarios = sorted((Path(__file__).resolve().parents[3] / "scenarios").glob("*.yaml"))
    assert len(scenarios) >= 7
    for path in scenarios:
        for quick in (True, False):
            _, plans = runner.plan(str(path), Path("/nonexistent"), None, quick, [])
            assert plans, path


@pytest.mark.parametrize("stale", [True, False])
def test_ensure_node_image_says_so_only_when_it_builds(monkeypatch, stale):
    # the docker calls are replaced: this checks the decision and the console line, not docker
    from testbed import docker_engine, image
    built: list[str] = []
    monkeypatch.setattr(docker_engine, "require_engine", lambda: None)
    monkeypatch.setattr(image, "content_hash", lambda: "new")
    monkeypatch.setattr(image, "image_label", lambda name, label: "old" if stale else "new")
    monkeypatch.setattr(image, "ensure_image", lambda name=image.IMAGE: built.append(name) or name)
    progress = Events()
    runner.ensure_node_image(progress)
    assert built == ([image.IMAGE] if stale else [])
    assert any("building node image" in e for e in progress.events) == stale
