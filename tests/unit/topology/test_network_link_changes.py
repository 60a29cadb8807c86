"""Network.set_link / clear_rate on a network that is not built (a recording shaper; no root needed)."""
import json
from pathlib import Path

import pytest

from node.errors import UserError
from testbed.network import Network
from testbed.topology import addressing, generators
from testbed.topology.model import Direction


class RecordingShaper:
    """Just the part of the Shaper contract that link changes use."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Direction | None, Direction | None]] = []

    def set_params(self, link_id: str, a_to_b: Direction | None, b_to_a: Direction | None) -> None:
        self.calls.append((link_id, a_to_b, b_to_a))


@pytest.fixture
def net(tmp_path: Path) -> Network:
    topo = generators.linear(3, defaults=Direction(delay=0.005, rate=10e6))
    n = Network(topo, addressing.plan(topo), run_dir=tmp_path)
    n.shaper = RecordingShaper()         # type: ignore[assignment]
    return n


def events(net: Network) -> list[dict]:
    assert net.run_dir is not None
    return [json.loads(line) for line in (net.run_dir / "events.jsonl").read_text().splitlines()]


def test_clear_rate_lifts_the_limit_of_the_named_direction_only(net: Network) -> None:
    # named "n2 n1": a_to_b is what n2 sends, the link's own b_to_a
    net.clear_rate("n2", "n1", "a_to_b")
    link = net.topology.link("n1", "n2")
    assert link.b_to_a.rate is None and link.a_to_b.rate == 10e6
    assert link.b_to_a.delay == 0.005                       # the other settings stay
    assert net.shaper.calls == [("n1-n2", None, link.b_to_a)]  # type: ignore[union-attr]
    assert events(net)[-1] | {"ts": 0} == {"ts": 0, "node": "testbed", "event": "link_set", "target": "n1-n2",
                                           "direction": "a_to_b", "rate": None,
                                           "before": {"b_to_a": {"rate": 10e6}}}     # in the link's own terms
    topology_json = json.loads((net.run_dir / "topology.json").read_text())   # type: ignore[operator]
    l12 = [l for l in topology_json["links"] if l["name"] == "n1-n2"][0]
    assert l12["b_to_a"]["rate"] is None and l12["a_to_b"]["rate"] == 10e6


def test_set_link_treats_none_as_unchanged_and_clear_rate_checks_the_direction(net: Network) -> None:
    net.set_link("n2", "n3", delay=0.02, rate=None)
    link = net.topology.link("n2", "n3")
    assert (link.a_to_b.delay, link.a_to_b.rate, link.b_to_a.delay, link.b_to_a.rate) == (0.02, 10e6, 0.02, 10e6)
    with pytest.raises(UserError, match="direction must be one of both, a_to_b, b_to_a"):
        net.clear_rate("n2", "n3", "sideways")
    with pytest.raises(UserError, match="no link between n1 and n3"):
        net.clear_rate("n1", "n3")
