"""Bad node settings found before anything is built (`testbed run`'s plan, `testbed up`'s live_nodes.check) name
the scenario file, line and key path that set them, as the loader's own errors do."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed import live_nodes
from testbed.experiment import runner
from testbed.scenario import ScenarioError, load

SCENARIO = """\
name: loc
topology: {generator: ring, params: {n: 3}}
nodes:
  all:
    mode: fragmenting
    fragment_size: 1000
  n2:
    session:
      keepalive: 1
sweep:
  grid:
    nodes.all.batch.min_bytes: [1, 0]
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "loc.yaml"
    p.write_text(text)
    return p


def _plan_error(path: Path, sets: list[str] = ()) -> str:
    with pytest.raises(ScenarioError) as e:
        runner.plan(str(path), path.parent / "out", None, False, list(sets))
    assert e.value.exit_code == 2
    return str(e.value)


@pytest.mark.parametrize("old, new, where", [
    ("fragment_size: 1000", "fragment_size: 5",
     ":6 nodes.all.fragment_size: fragment_size 5 must be between 16"),
    ("keepalive: 1", "keepalive: 1000",
     ":9 nodes.n2.session.keepalive: session.hold_time must be longer than session.keepalive."),
    ("  n2:\n", "  n2:\n    routes: {}\n", ":8 nodes.n2.routes: set by the testbed; a scenario cannot give it"),
    ("    mode: fragmenting", "    modee: fragmenting",
     ":5 nodes.all.modee: unknown key modee in node config (did you mean 'mode'?)"),
])
def test_a_bad_setting_in_the_file_is_named_by_its_line_and_key(tmp_path, old, new, where):
    p = _write(tmp_path, SCENARIO.replace("[1, 0]", "[1, 2]").replace(old, new))
    assert _plan_error(p).startswith(f"{p}{where}")
    # `testbed up` makes the same check on the scenario it loaded
    with pytest.raises(ScenarioError) as e:
        live_nodes.check(load(p))
    assert str(e.value).startswith(f"{p}{where}")


def test_a_bad_sweep_value_is_named_by_its_grid_line(tmp_path):
    p = _write(tmp_path, SCENARIO)
    assert _plan_error(p).startswith(f"{p}:12 (sweep.grid: nodes.all.batch.min_bytes=0) "
                                     f"nodes.all.batch.min_bytes: batch needs 1 <= min_bytes")


def test_a_bad_set_value_is_named_as_such(tmp_path):
    p = _write(tmp_path, SCENARIO.replace("[1, 0]", "[1, 2]"))
    assert _plan_error(p, ["nodes.all.mode=bogus"]).startswith("--set nodes.all.mode: mode 'bogus' is not one of")
