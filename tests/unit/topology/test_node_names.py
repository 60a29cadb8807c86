"""One rule for node names (node/names.py) in the scenario loader and in the network API."""
import pytest

from node.errors import UserError
from node.names import NODE_NAME_MAX, NODE_NAME_RULE
from testbed.network import Network
from testbed.scenario import ScenarioError, load_text
from testbed.topology.model import Node, Topology


@pytest.mark.parametrize("name", ["a" * (NODE_NAME_MAX + 1), "nö", "a.b", "a b", ""])
def test_loader_rejects_what_the_rule_rejects(name):
    with pytest.raises(ScenarioError) as e:
        load_text(f"topology: {{generator: ring, nodes: ['{name}', b, c]}}\n")
    assert str(e.value) == (f"<string>:1 topology.nodes[0]: expected a node name of {NODE_NAME_RULE}, "
                            f'got "{name}"')


def test_loader_accepts_the_longest_name():
    longest = "n" * NODE_NAME_MAX
    assert load_text(f"topology: {{generator: ring, nodes: [{longest}, b, c]}}\n").topology.nodes[0] == longest


@pytest.mark.parametrize("name", ["a" * (NODE_NAME_MAX + 1), "nö", "a.b"])
def test_network_rejects_what_the_rule_rejects(name):
    with pytest.raises(UserError, match=f"node name '{name}' must be {NODE_NAME_RULE}"):
        Network(Topology("t", nodes=[Node(name)]))


def test_network_accepts_the_longest_name():
    assert Network(Topology("t", nodes=[Node("n" * NODE_NAME_MAX)])).topology.node_names() == ["n" * NODE_NAME_MAX]
