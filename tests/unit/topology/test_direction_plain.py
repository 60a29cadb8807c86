"""One plain form of a link direction (Direction.to_dict/from_dict, and the scenario's loss_model spelling)."""
import json

import pytest

from testbed.experiment.faults import Timeline
from testbed.scenario import dump_resolved, load_text
from testbed.topology import generators
from testbed.topology.model import Direction, GilbertElliott

BURSTY = Direction(delay=0.02, jitter=0.001, loss=0.01, gilbert=GilbertElliott(0.05, 0.3, 0.0, 0.9), duplicate=0.002,
                   reorder=True, rate=5e6, queue=50)


@pytest.mark.parametrize("d", [Direction(), BURSTY, Direction(rate=None, gilbert=None)])
def test_dict_round_trip_through_json(d):
    plain = json.loads(json.dumps(d.to_dict()))
    assert Direction.from_dict(plain) == d


def test_dict_form_uses_the_field_names():
    assert BURSTY.to_dict() == {"delay": 0.02, "jitter": 0.001, "loss": 0.01,
                                "gilbert": {"p": 0.05, "r": 0.3, "loss_good": 0.0, "loss_bad": 0.9},
                                "duplicate": 0.002, "reorder": True, "rate": 5e6, "queue": 50, "duplex": "full"}
    assert Direction().to_dict()["gilbert"] is None
    assert Direction.from_dict({"delay": 0.5}) == Direction(delay=0.5)


def test_scenario_form_spells_the_loss_model():
    plain = BURSTY.to_scenario()
    assert list(plain) == ["delay", "jitter", "loss", "loss_model", "duplicate", "reorder", "rate", "queue", "duplex"]
    assert plain["loss_model"] == {"type": "gilbert", "p": 0.05, "r": 0.3, "loss_good": 0.0, "loss_bad": 0.9}
    assert Direction().to_scenario()["loss_model"] == "random"
    assert Direction.fields_from_scenario({"delay": 0.1, "loss_model": plain["loss_model"]}) == \
        {"delay": 0.1, "gilbert": BURSTY.gilbert}
    assert Direction.fields_from_scenario({"loss_model": "random"}) == {"gilbert": None}


def test_scenario_file_round_trip_keeps_the_loss_model():
    s = load_text("link_defaults: {delay: 20ms, loss_model: {type: gilbert, p: 5%, r: 30%, loss_bad: 90%}}\n")
    assert s.link_defaults.gilbert == GilbertElliott(0.05, 0.3, 0.0, 0.9)
    assert load_text(dump_resolved(s)) == s


class RecordingNetwork:
    def __init__(self) -> None:
        self.topology = generators.linear(3)
        self.calls: list[tuple] = []

    def set_link(self, a: str, b: str, direction: str = "both", **params) -> None:
        self.calls.append((a, b, direction, params))


def test_a_scenario_link_set_fault_reaches_the_network_as_direction_fields():
    s = load_text("topology: {generator: linear, params: {n: 3}}\nfaults:\n"
                  "  - {at: 1s, action: link_set, target: n2-n1,\n"
                  "     params: {delay: 30ms, loss_model: {type: gilbert, p: 1%, r: 50%}, direction: a_to_b}}\n")
    net = RecordingNetwork()
    timeline = Timeline(net, daemons=None, events=s.faults)
    timeline.apply(s.faults[0])
    assert timeline.failed == []
    assert net.calls == [("n1", "n2", "b_to_a", {"delay": 0.03, "gilbert": GilbertElliott(0.01, 0.5)})]
