"""Scenario files that would make the loader (which runs as root) build without bound: YAML aliases and sweep
grids whose product is huge. Each is one `file:line` error and exit status 2 before anything is built."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.experiment import console, runner  # noqa: F401  (imported now: the timings count the loading only)
from testbed.scenario import ScenarioError, load_text
from testbed.scenario.sections.sweep import MAX_GRID_POINTS

# "Billion laughs": every level is ten aliases of the one before. Five levels are 10^5 values for the old loader,
# which expanded each alias (about two seconds); the classic nine levels would be 10^9.
LEVELS = 5
LAUGHS = "\n".join(["name: lol", "l0: &l0 [ha, ha, ha, ha, ha, ha, ha, ha, ha, ha]"]
                   + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, LEVELS + 1)]) + "\n"

TEN = "[" + ", ".join(str(v) for v in range(1, 11)) + "]"
HUGE_GRID = f"""\
name: huge
topology: {{generator: linear, params: {{n: 3}}}}
sweep:
  grid:
    seed: {TEN}
    workload.warmup: {TEN}
    workload.drain: {TEN}
    workload.stall_after: {TEN}
    duration: {TEN}
"""


def _cli_run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float, Path]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    out = tmp_path / "out"
    t0 = time.monotonic()
    status = main(["run", str(scenario), "--out", str(out)])
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert not out.exists()                      # nothing was built
    return status, err, elapsed, scenario


def test_billion_laughs_is_one_error_at_the_first_anchor_within_a_second(tmp_path, capsys):
    status, err, elapsed, scenario = _cli_run(tmp_path, LAUGHS, capsys)
    assert status == 2
    assert err.splitlines() == [f"testbed: {scenario}:2: YAML anchors and aliases (&name, *name) are not allowed "
                                f"in scenario and reproduction files; write the value out."]
    assert elapsed < 1.0


@pytest.mark.parametrize("text, line", [
    ("name: x\nbase: &b {delay: 5ms}\nlink_defaults:\n  <<: *b\n", 2),      # a merge key needs an anchor
    ("name: x\nworkload:\n  generators:\n    - &g {nodes: all}\n    - *g\n", 4),
])
def test_anchors_aliases_and_merges_are_refused(text, line):
    with pytest.raises(ScenarioError, match=rf"^<string>:{line}: YAML anchors and aliases"):
        load_text(text)


def test_an_alias_in_a_set_value_is_refused():
    with pytest.raises(ScenarioError, match=r"^--set workload.generators: YAML anchors and aliases"):
        load_text("name: x\n", overrides=["workload.generators=[&g {nodes: all}, *g]"])


def test_a_sweep_grid_over_the_cap_is_one_error_within_a_second(tmp_path, capsys):
    status, err, elapsed, scenario = _cli_run(tmp_path, HUGE_GRID, capsys)
    assert status == 2
    assert err.splitlines() == [f"testbed: {scenario}:4 sweep.grid: 100000 grid points (10 x 10 x 10 x 10 x 10 "
                                f"values); at most {MAX_GRID_POINTS} (split the sweep into several scenarios)"]
    assert elapsed < 1.0


def test_a_sweep_grid_at_the_cap_loads():
    at_cap = HUGE_GRID.replace(f"    duration: {TEN}\n", "")
    assert len(load_text(at_cap).sweep.grid) == 4          # 10^4 points: allowed
