"""The scenario's `gateway` section: accepted forms, the gateway node's `gateway:` config it makes, time_scale,
and one-line errors."""
import pytest

from testbed.experiment import timescale
from testbed.experiment.runner import check_node_settings
from testbed.scenario import ScenarioError, dump_resolved, load_text
from testbed.subsystems.gateway import SUBSYSTEM, gateway_config

BASE = """\
name: emg
time_scale: 0.5
topology:
  generator: explicit
  nodes: [s1, s2, gw, o1, o2, r1, mobile, far]
  links:
    - {a: s1, b: gw}
    - {a: s2, b: gw}
    - {a: gw, b: o1}
    - {a: gw, b: o2}
    - {a: gw, b: r1}
    - {a: o1, b: mobile}
    - {a: o2, b: mobile}
    - {a: r1, b: mobile}
    - {a: s1, b: far}
nodes:
  r1: {daemon: false}
"""
GOOD = """\
gateway:
  node: gw
  gamma: 1
  threshold: 200
  period: 2s
  settle: 10s
  escalate: 10%
  escalate_after: 60s
  actions: [throttle]
  outgoing: {o1: {rate: 1}, o2: {rate: 3}}
  incoming:
    s1: {neighbour: s1, throughput: 3}
    in1: {user: in1, throughput: 5}
  users:
    alice: {credits: 1000, locked_until: 600s, permit: [o1], deny: [o2], priority: 2, throughput: 2}
    bob: {locked_until: "2026-11-27T10:00:00Z"}
"""


def load(text: str, sets: tuple[str, ...] = ()):
    return load_text(BASE + text, "emg.yaml", overrides=sets)


def error(text: str) -> str:
    with pytest.raises(ScenarioError) as e:
        load(text)
    return str(e.value)


def test_defaults_round_trip_and_sweep_keys() -> None:
    s = load(GOOD)
    gw = s.gateway
    assert (gw.node, gw.gamma, gw.threshold, gw.lower, gw.escalate, gw.actions) == ("gw", 1.0, 200, 150, 0.1,
                                                                                    ["throttle"])
    assert gw.drop_order == ["expired", "priority", "random", "newest"] and gw.move_queued is False
    assert gw.users["alice"].locked_for == 600.0 and gw.users["bob"].locked_at == "2026-11-27T10:00:00Z"
    assert gw.users["bob"].permit is None and gw.incoming["in1"].user == "in1"
    assert load_text(dump_resolved(s), "again.yaml") == s
    # a cell may set a list value and a lower threshold
    swept = load(GOOD, sets=("gateway.actions=[deactivate_lb]", "gateway.move_queued=true", "gateway.lower=120"))
    assert (swept.gateway.actions, swept.gateway.move_queued, swept.gateway.lower) == (["deactivate_lb"], True, 120)
    assert not load("").gateway.enabled
    # a connector's throughput may be left out (unlimited); `oldest` is a drop policy too
    open_ = load("gateway: {node: gw, drop_order: [oldest], incoming: {s1: {neighbour: s1}}}\n").gateway
    assert open_.incoming["s1"].throughput is None and open_.drop_order == ["oldest"]


def test_time_scale_converts_durations_and_rates() -> None:
    wall = timescale.to_wall(load(GOOD)).gateway
    assert (wall.period, wall.settle, wall.escalate_after) == (1.0, 5.0, 30.0)
    assert (wall.outgoing["o1"].rate, wall.incoming["s1"].throughput) == (2.0, 6.0)
    assert (wall.users["alice"].locked_for, wall.users["alice"].throughput) == (300.0, 4.0)
    assert (wall.threshold, wall.lower, wall.escalate, wall.users["alice"].credits) == (200, 150, 0.1, 1000)


def test_the_gateway_node_gets_the_contract_section_in_wall_units() -> None:
    wall = timescale.to_wall(load(GOOD))
    cfg = gateway_config(wall, "gw", start=1_000_000.0)
    assert cfg == {
        "enabled": True, "gamma": 1.0, "threshold": 200, "lower": 150, "period": 1.0, "settle": 5.0,
        "escalate": 0.1, "escalate_after": 30.0, "actions": ["throttle"], "move_queued": False,
        "drop_order": ["expired", "priority", "random", "newest"],
        "outgoing": {"o1": {"rate": 2.0}, "o2": {"rate": 6.0}},
        "incoming": {"s1": {"neighbour": "s1", "throughput": 6.0}, "in1": {"user": "in1", "throughput": 10.0}},
        "users": {"alice": {"credits": 1000, "locked_until": 1_000_300.0, "permit": ["o1"], "deny": ["o2"],
                            "priority": 2, "throughput": 4.0},
                  "bob": {"credits": None, "locked_until": 1795773600.0, "deny": [], "priority": 1}}}
    assert gateway_config(wall, "o1", start=0.0) == {}
    assert SUBSYSTEM.node_config(wall, "s1") == {}
    assert set(SUBSYSTEM.node_config(wall, "gw")) == {"gateway"}
    assert SUBSYSTEM.users({"gateway": cfg}) == {"alice", "bob", "in1"}
    assert SUBSYSTEM.users({}) == set()


@pytest.mark.parametrize("text, where, what", [
    ("gateway: {gamma: 1}\n", "emg.yaml:", "needs 'node'"),
    ("gateway: {node: gw, gamma: 1.5}\n", "gateway.gamma", "from -1 to 1"),
    ("gateway: {node: gw, gamma: -2}\n", "gateway.gamma", "from -1 to 1"),
    ("gateway: {node: gw, threshold: 100, lower: 100}\n", "gateway.lower", "must be below the threshold"),
    ("gateway: {node: gw, threshold: 100, lower: 150}\n", "gateway.lower", "must be below the threshold"),
    ("gateway: {node: gw, actions: [deactivate_lb, slow_down]}\n", "gateway.actions[1]", "unknown action"),
    ("gateway: {node: gw, drop_order: [latest]}\n", "gateway.drop_order[0]", "unknown drop policy"),
    ("gateway: {node: gw, outgoing: {o1: {rate: -1}}}\n", "gateway.outgoing.o1.rate", "not below zero"),
    ("gateway: {node: gw, incoming: {s1: {neighbour: s1, throughput: -3}}}\n", "gateway.incoming.s1.throughput",
     "not below zero"),
    ("gateway: {node: gw, incoming: {s1: {throughput: 3}}}\n", "gateway.incoming.s1", "exactly one of"),
    ("gateway: {node: gw, users: {alice: {credits: -5}}}\n", "gateway.users.alice.credits", "at least 0"),
    ("gateway: {node: gw, users: {alice: {throughput: -1}}}\n", "gateway.users.alice.throughput", "not below zero"),
    ("gateway: {node: gw, users: {alice: {locked_until: soon}}}\n", "gateway.users.alice.locked_until",
     "expected a time"),
    ("gateway: {node: gw, users: {alice: {locked_until: 2026-11-27}}}\n", "gateway.users.alice.locked_until",
     "time of day"),
    ("gateway: {node: gw, users: {'al ice': {credits: 5}}}\n", "gateway.users.al ice", "not a valid user name"),
    ("gateway: {node: gw, incoming: {in1: {user: 'a/b', throughput: 1}}}\n", "gateway.incoming.in1.user",
     "not a valid user name"),
    ("gateway: {node: gw, outgoing: {far: {rate: 1}}}\n", "gateway.outgoing.far",
     "not an MTA neighbour of the gateway gw"),
    ("gateway: {node: gw, outgoing: {r1: {rate: 1}}}\n", "gateway.outgoing.r1", "runs no node daemon"),
    ("gateway: {node: gw, users: {alice: {deny: [s9]}}}\n", "gateway.users.alice.deny[0]", "not an MTA neighbour"),
    ("gateway: {node: r1}\n", "gateway.node", "not a host with a node daemon"),
    ("gateway: {node: gw, colour: red}\n", "gateway.colour", "unknown key"),
])
def test_bad_gateway_is_one_error_naming_the_key(text, where, what) -> None:
    msg = error(text)
    assert where in msg and what in msg and "\n" not in msg.strip()


def test_a_round_robin_naming_a_connector_twice_is_refused_before_the_run() -> None:
    rules = ("  gw: {routing: {rules: [{match: {src: s1}, round_robin: [o1, o1]}]}}\n")
    s = load_text(BASE + rules + GOOD, "emg.yaml")
    with pytest.raises(ScenarioError) as e:
        check_node_settings(s)
    msg = str(e.value)
    assert msg.startswith("emg.yaml:") and "nodes.gw.routing.rules" in msg and "names o1 twice" in msg
