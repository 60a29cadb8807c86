"""The scenario's `placement` section: every bad input is one error naming its key path, and a valid placement
is read in full (machines, their tunnel addresses, the strategy) and survives a resolved dump."""
import pytest

from testbed.scenario import ScenarioError, dump_resolved, load_text

BASE = "name: pl\ntopology: {generator: linear, params: {n: 4}}\n"
MACHINES = """\
placement:
  machines:
    - {name: m1, engine: unix:///var/run/docker.sock, cores: 2, address: 10.0.0.1}
    - {name: m2, engine: tcp://10.0.0.2:2376, cores: 4}
"""
DOCKER = "runtime: docker\n"       # after the section: the line numbers below stay those of BASE + text


def error(text: str, tail: str = DOCKER) -> str:
    with pytest.raises(ScenarioError) as e:
        load_text(BASE + text + tail, "pl.yaml")
    message = str(e.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize("strategy", ["", "  strategy: auto\n", "  strategy: {n1: m1, n2: m1, n3: m2, n4: m2}\n"])
def test_a_valid_placement_is_read_with_its_addresses(strategy: str) -> None:
    s = load_text(BASE + MACHINES + strategy + DOCKER, "pl.yaml")
    assert s.placement.enabled and s.placement.cores() == {"m1": 2, "m2": 4}
    # a tcp:// engine's host is the machine's address unless one is given
    assert s.placement.addresses() == {"m1": "10.0.0.1", "m2": "10.0.0.2"}
    assert s.placement.strategy == ("explicit" if "n1" in strategy else "auto")
    assert load_text(dump_resolved(s), "again.yaml") == s


def test_a_placed_network_may_capture_its_links() -> None:
    # the agents write the captures and the controller collects them (a split link's two halves merged)
    s = load_text(BASE + MACHINES + DOCKER + "capture: [n2-n3]\n", "pl.yaml")
    assert s.placement.enabled and s.capture.links == ["n2-n3"]


def test_without_the_section_nothing_changes() -> None:
    s = load_text(BASE, "pl.yaml")
    assert not s.placement.enabled
    assert load_text(dump_resolved(s), "again.yaml") == s


@pytest.mark.parametrize("tail, expected", [
    ("", "pl.yaml:3 placement: a network over several machines needs runtime: docker"),
    (DOCKER + "shaper: netem\n", "placement: a network over several machines needs the wire shaper"),
])
def test_what_a_placed_network_cannot_do_is_refused(tail: str, expected: str) -> None:
    assert expected in error(MACHINES, tail)


@pytest.mark.parametrize("text, expected", [
    ("placement: {strategy: auto}\n", "pl.yaml:3 placement.machines: missing"),
    ("placement: {machines: []}\n", "placement.machines: expected at least two machines, got 0"),
    ("placement: {machines: [{name: m1, engine: unix:///a.sock, cores: 1, address: 10.0.0.1}]}\n",
     "placement.machines: expected at least two machines, got 1"),
    (MACHINES.replace(", address: 10.0.0.1", ""), "pl.yaml:5 placement.machines[0].address: missing: a machine "
                                                  "whose engine is a unix:// socket needs the address"),
    (MACHINES.replace("10.0.0.1", "m1.lan"), "placement.machines[0].address: expected an IP address such as "
                                             "10.0.0.2, got \"m1.lan\""),
    ("placement: {machine: []}\n", "placement.machine: unknown key 'machine' (did you mean 'machines'?)"),
    (MACHINES.replace("cores: 4", "cores: 0"), "pl.yaml:6 placement.machines[1].cores: expected a whole number "
                                                "from 1 to 4096, got 0"),
    (MACHINES.replace(", cores: 4", ""), "placement.machines[1].cores: missing"),
    (MACHINES.replace("name: m1", "name: 'm 1'"), "placement.machines[0].name: \"m 1\" is not a valid machine name"),
    (MACHINES.replace("tcp://10.0.0.2:2376", "10.0.0.2:2376"),
     "placement.machines[1].engine: expected a Docker engine address"),
    (MACHINES.replace("name: m2", "name: m1"), "placement.machines[1].name: machine m1 is named twice"),
    (MACHINES.replace("tcp://10.0.0.2:2376, cores: 4", "unix:///var/run/docker.sock, cores: 4, address: 10.0.0.2"),
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
    assert expected in message, message
