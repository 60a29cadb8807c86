"""Scenario keys for hosts without a node daemon and for MTA neighbours: accepted forms and one-line errors."""
import pytest

from testbed.scenario import ScenarioError, dump_resolved, load_text
from testbed.topology import overlay

BASE = """\
name: routers
topology: {generator: linear, nodes: [n1, r, n2, n3]}
nodes:
"""


def load(nodes: str, extra: str = "", sets: tuple[str, ...] = ()):
    return load_text(BASE + nodes + extra, "routers.yaml", overrides=sets)


def error(nodes: str, extra: str = "", sets: tuple[str, ...] = ()) -> str:
    with pytest.raises(ScenarioError) as e:
        load(nodes, extra, sets)
    return str(e.value)


def test_daemon_false_and_round_trip() -> None:
    s = load("  all: {mode: fragmenting}\n  r: {daemon: false}\n  n1: {mta_neighbours: n3}\n")
    assert overlay.daemon_hosts(s.nodes, ["n1", "r", "n2", "n3"]) == ["n1", "n2", "n3"]
    assert s.nodes.per_node["n1"]["mta_neighbours"] == ["n3"]          # one name becomes a list
    assert load_text(dump_resolved(s), "again.yaml") == s


def test_set_override_makes_a_router() -> None:
    s = load("  all: {}\n", sets=("nodes.r.daemon=false",))
    assert not overlay.runs_daemon(s.nodes, "r")


@pytest.mark.parametrize("nodes, extra, where, what", [
    ("  r: {daemon: no-thanks}\n", "", "nodes.r.daemon", "expected true or false"),
    ("  all: {daemon: false}\n", "", "nodes.all.daemon", "no host runs a node daemon"),
    ("  r: {daemon: false, mode: fragmenting}\n", "", "nodes.r.mode", "r runs no node daemon"),
    ("  all: {mta_neighbours: [n1]}\n", "", "nodes.all.mta_neighbours", "per host"),
    ("  n1: {mta_neighbours: [n9]}\n", "", "nodes.n1.mta_neighbours[0]", "unknown node"),
    ("  n1: {mta_neighbours: [n1]}\n", "", "nodes.n1.mta_neighbours[0]", "its own MTA neighbour"),
    ("  n1: {mta_neighbours: [n2, n2]}\n", "", "nodes.n1.mta_neighbours[1]", "listed twice"),
    ("  r: {daemon: false}\n  n1: {mta_neighbours: [r]}\n", "", "nodes.n1.mta_neighbours[0]",
     "r runs no node daemon"),
    ("  n1: {mta_neighbours: [n2]}\n  n2: {mta_neighbours: [n1]}\n", "", "nodes.n1.mta_neighbours",
     "not connected"),
    ("  r: {daemon: false}\n", "workload: {generators: [{nodes: [n1, r]}]}\n",
     "workload.generators[0].nodes[1]", "r runs no node daemon"),
    ("  r: {daemon: false}\n", "workload: {generators: [{recipients: {choice: fixed, nodes: [r]}}]}\n",
     "workload.generators[0].recipients.nodes[0]", "r runs no node daemon"),
    ("  r: {daemon: false}\n", "workload: {generators: [{recipients: {choice: weighted, weights: {r: 1}}}]}\n",
     "workload.generators[0].recipients.weights.r", "r runs no node daemon"),
    ("  r: {daemon: false}\n", "faults: [{at: 1s, action: kill, target: r}]\n", "faults[0].target",
     "kill acts on a node daemon"),
])
def test_errors_name_the_key(nodes: str, extra: str, where: str, what: str) -> None:
    msg = error(nodes, extra)
    assert msg.startswith("routers.yaml:") and f" {where}: " in msg and what in msg, msg
    assert len(msg.splitlines()) == 1


def test_link_faults_and_partitions_may_name_a_router() -> None:
    s = load("  r: {daemon: false}\n", "faults: [{at: 1s, action: link_down, target: r-n2},"
                                      " {at: 2s, action: partition, target: [[n1, r], [n2]]}]\n")
    assert [f.action for f in s.faults] == ["link_down", "partition"]
