"""The `routing:` section: a policy name or a mapping {policy: ...}, round-tripped by dump_resolved."""
import pytest
import yaml

from testbed.scenario import ScenarioError, dump_resolved, load_text
from testbed.scenario.spec import RoutingSpec, Scenario

RING = "topology: {generator: ring, params: {n: 4}}\n"


@pytest.mark.parametrize("policy", ["auto", "shortest", "unidirectional", "delay"])
def test_name_and_mapping_forms_are_the_same_setting(policy):
    by_name = load_text(f"{RING}routing: {policy}\n")
    by_mapping = load_text(f"{RING}routing: {{policy: {policy}}}\n")
    assert by_name.routing == RoutingSpec(policy=policy) and by_name.routing.policy == policy
    assert by_mapping == by_name
    assert by_name.routing == policy and by_name.routing != ("delay" if policy != "delay" else "auto")


def test_defaults():
    assert load_text(RING).routing == RoutingSpec(policy="auto")
    assert load_text(f"{RING}routing: {{}}\n").routing.policy == "auto"
    assert Scenario(name="t").routing.policy == "auto"
    assert Scenario(name="t", routing="delay").routing == RoutingSpec(policy="delay")


@pytest.mark.parametrize("text", [f"{RING}routing: unidirectional\n", f"{RING}routing: {{policy: delay}}\n", RING])
def test_dump_resolved_round_trip(text):
    s = load_text(text)
    dumped = dump_resolved(s)
    assert yaml.safe_load(dumped)["routing"] == {"policy": s.routing.policy}
    assert load_text(dumped) == s
    assert load_text(dumped).routing.policy == s.routing.policy


@pytest.mark.parametrize("routing,message", [
    ("{monitr: true}", "<string>:2 routing.monitr: unknown key 'monitr' (expected one of: policy)"),
    ("{polcy: delay}", "<string>:2 routing.polcy: unknown key 'polcy' (did you mean 'policy'?)"),
    ("{policy: clockwise}", '<string>:2 routing.policy: expected one of auto, shortest, unidirectional, delay, '
                            'got "clockwise"'),
    ("clockwise", '<string>:2 routing: expected one of auto, shortest, unidirectional, delay, got "clockwise"'),
    ("[delay]", "<string>:2 routing: expected one of auto, shortest, unidirectional, delay, got ['delay']"),
    ("", "<string>:2 routing: expected one of auto, shortest, unidirectional, delay, got None"),
])
def test_bad_routing(routing, message):
    with pytest.raises(ScenarioError) as e:
        load_text(f"{RING}routing: {routing}\n")
    assert str(e.value) == message


def test_set_and_sweep_reach_the_policy():
    assert load_text(RING, overrides=["routing.policy=delay"]).routing == "delay"
    assert load_text(f"{RING}routing: shortest\n", overrides=["routing=delay"]).routing.policy == "delay"
    s = load_text(f"{RING}sweep: {{grid: {{routing: [shortest, delay]}}}}\n")
    assert s.sweep.grid == {"routing": ["shortest", "delay"]}
    with pytest.raises(ScenarioError, match=r"sweep.grid.routing.policy\[1\]: with routing.policy=\"east\""):
        load_text(f"{RING}sweep: {{grid: {{routing.policy: [delay, east]}}}}\n")
