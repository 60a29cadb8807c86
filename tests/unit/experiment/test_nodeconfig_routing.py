"""Node configs with the `dynamic` routing policy: a routing section per node, the shortest-path table kept as
the start-up fallback, per-link probe settings at both ends, and per-node rules (static policies too)."""
import pytest

from experiment_scenarios import node_configs_of as configs
from node import registry
from node.errors import UserError
from testbed.experiment import timescale
from testbed.scenario import load_text
from testbed.topology import generators, routing

RING = "topology: {generator: ring, params: {n: 5}}\nseed: 3\n"


def test_dynamic_gets_mode_nodes_and_the_shortest_table() -> None:
    out = configs(f"{RING}routing: dynamic\n")
    names = ["n1", "n2", "n3", "n4", "n5"]
    table = routing.next_hops(generators.ring(5), "shortest", 3)
    for name, cfg in out.items():
        assert cfg["routing"] == {"mode": "dynamic", "nodes": names}      # nothing else: every setting default
        assert cfg["routes"] == {d: h for d, h in table[name].items() if d != name}
        registry.config_from_dict(cfg)                                       # what the daemon will read
    assert configs(f"{RING}routing: shortest\n")["n1"]["routes"] == out["n1"]["routes"]


@pytest.mark.parametrize("policy", ["auto", "shortest", "unidirectional", "delay"])
def test_static_policies_add_no_routing_section(policy) -> None:
    text = f"{RING}routing: {{policy: {policy}, monitor: {{interval: 2s}}}}\n"   # kept for a sweep, unused
    assert all("routing" not in cfg for cfg in configs(text).values())


def test_only_the_settings_that_differ_from_the_nodes_defaults() -> None:
    out = configs(f"""{RING}routing:
  policy: dynamic
  monitor: {{interval: 500ms, window: 8, enabled: true}}
  cost: {{c: 200}}
  damping: {{enabled: false}}
  refresh: 60s
  max_age: 300
""")
    assert out["n3"]["routing"] == {"mode": "dynamic", "nodes": ["n1", "n2", "n3", "n4", "n5"], "refresh": 60.0,
                                    "max_age": 300.0, "monitor": {"enabled": True, "interval": 0.5},
                                    "cost": {"c": 200.0}, "damping": {"enabled": False}}


def test_time_scale_converts_the_routing_times() -> None:
    out = configs(f"{RING}time_scale: 0.1\nrouting: {{policy: dynamic, monitor: {{interval: 5s, timeout: 20s, "
                  f"links: {{n1-n2: {{interval: 10s}}}}}}, damping: {{half_life: 30s}}, refresh: 100, max_age: 400}}\n")
    r = out["n1"]["routing"]
    assert r["monitor"] == {"interval": pytest.approx(0.5), "timeout": pytest.approx(2.0),
                            "links": {"n2": {"interval": pytest.approx(1.0)}}}
    assert r["damping"]["half_life"] == pytest.approx(3.0) and r["damping"]["max_suppress"] == pytest.approx(6.0)
    assert (r["refresh"], r["max_age"]) == (pytest.approx(10.0), pytest.approx(40.0))


def test_probe_settings_by_link_name_reach_both_ends() -> None:
    out = configs(f"{RING}routing: {{policy: dynamic, monitor: {{interval: 2s, links: "
                  f"{{n2-n1: {{interval: 200ms}}, n5-n1: {{probe: false}}}}}}}}\n")
    assert out["n1"]["routing"]["monitor"] == {"interval": 2.0, "links": {"n2": {"interval": 0.2},
                                                                            "n5": {"probe": False}}}
    assert out["n2"]["routing"]["monitor"] == {"interval": 2.0, "links": {"n1": {"interval": 0.2}}}
    assert out["n5"]["routing"]["monitor"] == {"interval": 2.0, "links": {"n1": {"probe": False}}}
    assert out["n3"]["routing"]["monitor"] == {"interval": 2.0}
    for cfg in out.values():
        registry.config_from_dict(cfg)


def test_daemonless_hosts_are_left_out_of_the_node_list() -> None:
    out = configs(f"{RING}routing: dynamic\nnodes: {{n3: {{daemon: false}}}}\n")
    assert list(out) == ["n1", "n2", "n4", "n5"]
    assert out["n2"]["routing"]["nodes"] == ["n1", "n2", "n4", "n5"]
    assert set(out["n2"]["neighbours"]) == {"n1", "n4"}          # across the plain router


def test_per_node_rules_with_dynamic_keep_the_testbeds_section() -> None:
    rules = [{"match": {"dst": "n3"}, "to": "n2"}]
    out = configs(f"{RING}routing: {{policy: dynamic, monitor: {{interval: 2s, links: {{n1-n2: {{probe: false}}}}}}}}\n"
                  f"nodes: {{n1: {{routing: {{rules: {rules}, monitor: {{window: 16}}}}}}}}\n")
    assert out["n1"]["routing"] == {"mode": "dynamic", "nodes": ["n1", "n2", "n3", "n4", "n5"], "rules": rules,
                                    "monitor": {"interval": 2.0, "window": 16, "links": {"n2": {"probe": False}}}}
    assert "rules" not in out["n2"]["routing"]
    registry.config_from_dict(out["n1"])


@pytest.mark.parametrize("policy", ["shortest", "delay"])
def test_per_node_rules_with_a_static_policy(policy) -> None:
    rules = [{"match": {"keyword": "urgent"}, "failover": ["n5", "n2"]}]
    out = configs(f"{RING}routing: {policy}\nnodes: {{all: {{mode: fragmenting}}, n1: {{routing: {{rules: {rules}}}}}}}\n")
    assert out["n1"]["routing"] == {"rules": rules}                  # the testbed adds nothing of its own
    assert all("routing" not in out[n] for n in ("n2", "n3", "n4", "n5"))
    assert set(out["n1"]["routes"]) == {"n2", "n3", "n4", "n5"}
    assert registry.config_from_dict(out["n1"]).routing.mode == "static"


def test_a_rule_naming_a_non_neighbour_is_one_error_naming_the_node() -> None:
    with pytest.raises(UserError, match=r"^node settings for n1 are invalid: routing.rules: rule 1 \(slow\): to "
                                        r"member 'n3' is not a neighbour"):
        configs(f"{RING}nodes: {{n1: {{routing: {{rules: [{{name: slow, to: n3}}]}}}}}}\n")


def test_a_bad_per_node_routing_setting_is_one_error_naming_the_node() -> None:
    with pytest.raises(UserError, match=r"^node settings for n2 are invalid: routing.hysteresis must be in"):
        configs(f"{RING}routing: dynamic\nnodes: {{n2: {{routing: {{hysteresis: 1.5}}}}}}\n")


def test_time_scale_converts_routing_times_in_node_settings() -> None:
    model = load_text(f"{RING}time_scale: 0.5\nnodes: {{all: {{routing: {{refresh: 100, hysteresis: 0.2, "
                      f"monitor: {{interval: 4, window: 10, links: {{n2: {{interval: 2}}}}}}, "
                      f"damping: {{half_life: 10, penalty: 500}}}}}}}}\n")
    r = timescale.to_wall(model).nodes.all["routing"]
    assert (r["refresh"], r["hysteresis"]) == (50.0, 0.2)
    assert r["monitor"] == {"interval": 2.0, "window": 10, "links": {"n2": {"interval": 1.0}}}
    assert r["damping"] == {"half_life": 5.0, "penalty": 500}
    assert model.nodes.all["routing"]["refresh"] == 100           # the input is not changed
