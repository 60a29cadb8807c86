"""The scenario's `placement` section: every bad input is one error naming its key path, and a valid placement
is checked in full and then refused in one sentence (multi-machine runs need the agent, not built yet)."""
import pytest

from testbed import cli
from testbed.scenario import ScenarioError, dump_resolved, load_text
from testbed.scenario.sections.placement import NOT_BUILT

BASE = "name: pl\ntopology: {generator: linear, params: {n: 4}}\n"
MACHINES = """\
placement:
  machines:
    - {name: m1, engine: unix:///var/run/docker.sock, cores: 2}
    - {name: m2, engine: tcp://10.0.0.2:2376, cores: 4}
"""


def error(text: str) -> str:
    with pytest.raises(ScenarioError) as e:
        load_text(BASE + text, "pl.yaml")
    message = str(e.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize("strategy", ["", "  strategy: auto\n", "  strategy: {n1: m1, n2: m1, n3: m2, n4: m2}\n"])
def test_a_valid_placement_is_refused_in_one_sentence(strategy: str) -> None:
    assert error(MACHINES + strategy) == f"pl.yaml:3 placement: {NOT_BUILT}"


@pytest.mark.parametrize("command", [["validate"], ["run", "--out", "OUT"]])
def test_validate_and_run_exit_2_with_one_line_and_build_nothing(tmp_path, capsys, command: list[str]) -> None:
    path = tmp_path / "pl.yaml"
    path.write_text(BASE + MACHINES)
    out = tmp_path / "out"
    assert cli.main([command[0], str(path), *[str(out) if a == "OUT" else a for a in command[1:]]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "multi-machine runs are not built yet" in err
    assert not out.exists()


def test_without_the_section_nothing_changes() -> None:
    s = load_text(BASE, "pl.yaml")
    assert not s.placement.enabled
    assert load_text(dump_resolved(s), "again.yaml") == s


@pytest.mark.parametrize("text, expected", [
    ("placement: {strategy: auto}\n", "pl.yaml:3 placement.machines: missing"),
    ("placement: {machines: []}\n", "placement.machines: expected at least two machines, got 0"),
    ("placement: {machines: [{name: m1, engine: unix:///a.sock, cores: 1}]}\n",
     "placement.machines: expected at least two machines, got 1"),
    ("placement: {machine: []}\n", "placement.machine: unknown key 'machine' (did you mean 'machines'?)"),
    (MACHINES.replace("cores: 4", "cores: 0"), "pl.yaml:6 placement.machines[1].cores: expected a whole number "
                                                "from 1 to 4096, got 0"),
    (MACHINES.replace(", cores: 4", ""), "placement.machines[1].cores: missing"),
    (MACHINES.replace("name: m1", "name: 'm 1'"), "placement.machines[0].name: \"m 1\" is not a valid machine name"),
    (MACHINES.replace("tcp://10.0.0.2:2376", "10.0.0.2:2376"),
     "placement.machines[1].engine: expected a Docker engine address"),
    (MACHINES.replace("name: m2", "name: m1"), "placement.machines[1].name: machine m1 is named twice"),
    (MACHINES.replace("tcp://10.0.0.2:2376", "unix:///var/run/docker.sock"),
     "placement.machines[1].engine: machines[0] has the same engine"),
    (MACHINES + "  strategy: metis\n", "placement.strategy: expected auto or a mapping {host: machine}, got \"metis\""),
    (MACHINES + "  strategy: {n1: m1, n2: m9, n3: m2, n4: m2}\n",
     "placement.strategy.n2: unknown machine \"m9\" (machines: m1, m2)"),
    (MACHINES + "  strategy: {n1: m1, n2: m1, n3: m2, n4: m2, n9: m2}\n",
     "placement.strategy.n9: unknown host \"n9\" (hosts: n1, n2, n3, n4)"),
    (MACHINES + "  strategy: {n1: m1, n2: m1, n3: m2}\n",
     "pl.yaml:7 placement.strategy: 1 host(s) left unplaced: n4 (an explicit placement names every host"),
    (MACHINES + "  strategy: {}\n", "placement.strategy: an explicit placement names every host"),
])
def test_every_bad_input_is_one_error_naming_its_key(text: str, expected: str) -> None:
    message = error(text)
    assert expected in message and NOT_BUILT not in message, message
