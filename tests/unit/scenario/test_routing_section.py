"""The `routing:` section: a policy name or a mapping {policy: ..., monitor, cost, damping, ...},
round-tripped by dump_resolved; the dynamic stack's settings are checked with the file's line."""
import pytest
import yaml

from node.routing.config import CostConfig, DampingConfig, MonitorConfig, ProbeLinkConfig
from testbed.scenario import ScenarioError, dump_resolved, load_text
from testbed.scenario.spec import RoutingSpec, Scenario

RING = "topology: {generator: ring, params: {n: 4}}\n"
POLICIES = "auto, shortest, unidirectional, delay, dynamic"


@pytest.mark.parametrize("policy", ["auto", "shortest", "unidirectional", "delay", "dynamic"])
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
    r = RoutingSpec()
    assert (r.monitor, r.cost, r.damping) == (MonitorConfig(), CostConfig(), DampingConfig())  # the node's defaults
    assert (r.hysteresis, r.refresh, r.max_age) == (0.1, 300.0, 900.0)


def test_every_dynamic_setting():
    s = load_text(RING + """routing:
  policy: dynamic
  monitor: {enabled: true, interval: 500ms, window: 16, z: 3, alpha: 0.25, loss_window: 64, timeout: 2s,
            links: {n2-n1: {interval: 100ms}, n3-n4: {probe: false}}}
  cost: {a: 5, b: 2, c: 500, d: 0, quantum: 0.5, threshold: 20%}
  damping: {enabled: false, penalty: 500, suppress: 3000, reuse: 1000, half_life: 1m, max_suppress: 2m}
  hysteresis: 5%
  refresh: 30s
  max_age: 90s
""")
    r = s.routing
    assert r.policy == "dynamic"
    assert r.monitor == MonitorConfig(enabled=True, interval=0.5, window=16, z=3.0, alpha=0.25, loss_window=64,
                                      timeout=2.0, links={"n1-n2": ProbeLinkConfig(interval=0.1),
                                                          "n3-n4": ProbeLinkConfig(probe=False)})
    assert r.cost == CostConfig(a=5, b=2, c=500, d=0, quantum=0.5, threshold=pytest.approx(0.2))
    assert r.damping == DampingConfig(enabled=False, penalty=500, suppress=3000, reuse=1000, half_life=60,
                                      max_suppress=120)
    assert (r.hysteresis, r.refresh, r.max_age) == (pytest.approx(0.05), 30.0, 90.0)
    assert r != "dynamic"


def test_default_values_written_out_still_equal_the_name():
    s = load_text(f"{RING}routing: {{policy: dynamic, monitor: {{interval: 1s}}, damping: {{reuse: 750}}}}\n")
    assert s.routing == "dynamic" and s.routing.is_plain


@pytest.mark.parametrize("text", [
    f"{RING}routing: unidirectional\n", f"{RING}routing: {{policy: delay}}\n", RING,
])
def test_dump_resolved_round_trip_static(text):
    s = load_text(text)
    dumped = dump_resolved(s)
    assert yaml.safe_load(dumped)["routing"] == {"policy": s.routing.policy}
    assert load_text(dumped) == s
    assert load_text(dumped).routing.policy == s.routing.policy


@pytest.mark.parametrize("text", [
    f"{RING}routing: dynamic\n",
    f"{RING}routing: {{policy: dynamic, monitor: {{links: {{n4-n1: {{probe: false}}}}, enabled: false}}}}\n",
    f"{RING}routing: {{policy: dynamic, cost: {{a: 3}}, damping: {{half_life: 500ms}}, refresh: 10, max_age: 25}}\n",
    f"{RING}routing: {{policy: shortest, monitor: {{interval: 2s}}}}\n",    # kept for a sweep over the policy
])
def test_dump_resolved_round_trip_dynamic(text):
    s = load_text(text)
    plain = yaml.safe_load(dump_resolved(s))["routing"]
    assert set(plain) == {"policy", "monitor", "cost", "damping", "hysteresis", "refresh", "max_age"}
    assert load_text(dump_resolved(s)) == s


def test_link_names_are_the_topologys_own():
    s = load_text(f"{RING}routing: {{policy: dynamic, monitor: {{links: {{n1-n4: {{probe: false}}}}}}}}\n")
    assert list(s.routing.monitor.links) == ["n4-n1"]          # the ring's closing link is named n4-n1
    explicit = ("topology: {generator: explicit, nodes: [a, b], links: [{a: a, b: b}]}\n"
                "routing: {policy: dynamic, monitor: {links: {b-a: {interval: 2}}}}\n")
    assert list(load_text(explicit).routing.monitor.links) == ["a-b"]


@pytest.mark.parametrize("routing,message", [
    ("{monitr: true}", "<string>:2 routing.monitr: unknown key 'monitr' (did you mean 'monitor'?)"),
    ("{polcy: delay}", "<string>:2 routing.polcy: unknown key 'polcy' (did you mean 'policy'?)"),
    ("{policy: clockwise}", f'<string>:2 routing.policy: expected one of {POLICIES}, got "clockwise"'),
    ("clockwise", f'<string>:2 routing: expected one of {POLICIES}, got "clockwise"'),
    ("[delay]", f"<string>:2 routing: expected one of {POLICIES}, got ['delay']"),
    ("", f"<string>:2 routing: expected one of {POLICIES}, got None"),
    ("{rules: []}", "<string>:2 routing.rules: rules are set per node: nodes.<node>.routing.rules "
                    "(or nodes.all.routing.rules)"),
    ("{monitor: 1s}", "<string>:2 routing.monitor: expected a mapping (key: value lines), got \"1s\""),
    ("{monitor: {intervall: 1s}}", "<string>:2 routing.monitor.intervall: unknown key 'intervall' "
                                   "(did you mean 'interval'?)"),
    ("{monitor: {interval: fast}}", '<string>:2 routing.monitor.interval: expected a duration like "25ms", '
                                    'got "fast"'),
    ("{monitor: {interval: 0}}", "<string>:2 routing.monitor.interval: expected a value greater than zero, got 0"),
    ("{monitor: {timeout: -1}}", "<string>:2 routing.monitor.timeout: expected a duration like \"25ms\" "
                                 "(not negative), got -1"),
    ("{monitor: {window: 1}}", "<string>:2 routing.monitor.window: expected a whole number from 2 to 100000, got 1"),
    ("{monitor: {window: 5}}", "<string>:2 routing.monitor.window: expected at least floor(z^2) + 2 = 6 at z = 2, "
                               "got 5: in a smaller window the z-test can never drop a sample"),
    ("{monitor: {loss_window: 0}}", "<string>:2 routing.monitor.loss_window: expected a whole number from 1 to "
                                    "100000, got 0"),
    ("{monitor: {z: 0}}", "<string>:2 routing.monitor.z: expected a number greater than zero, got 0"),
    ("{monitor: {alpha: 1.5}}", "<string>:2 routing.monitor.alpha: expected a weight greater than 0 and at most 1, "
                                "got 1.5"),
    ("{monitor: {enabled: yes please}}", '<string>:2 routing.monitor.enabled: expected true or false, '
                                         'got "yes please"'),
    ("{monitor: {links: {n1-n3: {}}}}", "<string>:2 routing.monitor.links.n1-n3: unknown link \"n1-n3\" "
                                        "(expected a link name like n1-n2, n2-n3, n3-n4, n4-n1)"),
    ("{monitor: {links: {n1-n2: {probes: false}}}}", "<string>:2 routing.monitor.links.n1-n2.probes: unknown key "
                                                     "'probes' (did you mean 'probe'?)"),
    ("{monitor: {links: {n1-n2: {interval: -1s}}}}", '<string>:2 routing.monitor.links.n1-n2.interval: expected a '
                                                     'duration like "25ms" (not negative), got \'-1s\''),
    ("{monitor: {links: {n1-n2: {}, n2-n1: {}}}}", "<string>:2 routing.monitor.links.n2-n1: the link n1-n2 is "
                                                   "given twice (as n1-n2 and n2-n1)"),
    ("{cost: {b: -1}}", "<string>:2 routing.cost.b: expected a number not below zero, got -1"),
    ("{cost: {e: 1}}", "<string>:2 routing.cost.e: unknown key 'e' (expected one of: a, b, c, d, quantum, "
                       "threshold)"),
    ("{cost: {quantum: 0}}", "<string>:2 routing.cost.quantum: expected a number greater than zero, got 0"),
    ("{cost: {threshold: lots}}", '<string>:2 routing.cost.threshold: expected a number, got "lots"'),
    ("{cost: {threshold: x%}}", '<string>:2 routing.cost.threshold: expected a fraction like 0.1 or "10%", '
                                'got "x%"'),
    ("{damping: {reuse: 2500}}", "<string>:2 routing.damping.reuse: reuse (2500) must be below suppress (2000): "
                                 "a suppressed link is used again once its penalty decays below reuse"),
    ("{damping: {suppress: 500}}", "<string>:2 routing.damping.suppress: reuse (750) must be below suppress "
                                   "(500): a suppressed link is used again once its penalty decays below reuse"),
    ("{damping: {penalty: 0}}", "<string>:2 routing.damping.penalty: expected a number greater than zero, got 0"),
    ("{damping: {half_life: 0s}}", '<string>:2 routing.damping.half_life: expected a value greater than zero, '
                                   'got "0s"'),
    ("{damping: {enabled: 1}}", "<string>:2 routing.damping.enabled: expected true or false, got 1"),
    ("{hysteresis: 100%}", '<string>:2 routing.hysteresis: expected a fraction below 1 (100%), got "100%"'),
    ("{hysteresis: -0.1}", "<string>:2 routing.hysteresis: expected a number not below zero, got -0.1"),
    ("{refresh: 0}", "<string>:2 routing.refresh: expected a value greater than zero, got 0"),
    ("{max_age: 5m}", "<string>:2 routing.max_age: max_age (300 s) must be longer than refresh (300 s): a node's "
                      "advert is dropped when not refreshed within max_age"),
    ("{refresh: 1h}", "<string>:2 routing.refresh: max_age (900 s) must be longer than refresh (3600 s): a node's "
                      "advert is dropped when not refreshed within max_age"),
])
def test_bad_routing(routing, message):
    with pytest.raises(ScenarioError) as e:
        load_text(f"{RING}routing: {routing}\n")
    assert str(e.value) == message


def test_error_names_the_line_of_a_nested_key():
    text = RING + "routing:\n  policy: dynamic\n  damping:\n    penalty: 100\n    half_life: soon\n"
    with pytest.raises(ScenarioError, match=r'^<string>:6 routing.damping.half_life: expected a duration'):
        load_text(text)


@pytest.mark.parametrize("nodes,message", [
    ("{n2: {daemon: false}}", "n2 runs no node daemon"),
    ("{n1: {mta_neighbours: [n3, n4]}}", "nodes.<host>.mta_neighbours does not pair them"),
])
def test_probe_links_join_mta_neighbours(nodes, message):
    text = f"{RING}routing: {{policy: dynamic, monitor: {{links: {{n1-n2: {{probe: false}}}}}}}}\nnodes: {nodes}\n"
    with pytest.raises(ScenarioError) as e:
        load_text(text)
    assert str(e.value).startswith("<string>:2 routing.monitor.links.n1-n2: n1 and n2 are not MTA neighbours (")
    assert message in str(e.value)


def test_set_and_sweep_reach_the_policy():
    assert load_text(RING, overrides=["routing.policy=delay"]).routing == "delay"
    assert load_text(f"{RING}routing: shortest\n", overrides=["routing=delay"]).routing.policy == "delay"
    s = load_text(f"{RING}sweep: {{grid: {{routing: [shortest, delay]}}}}\n")
    assert s.sweep.grid == {"routing": ["shortest", "delay"]}
    with pytest.raises(ScenarioError, match=r"sweep.grid.routing.policy\[1\]: with routing.policy=\"east\""):
        load_text(f"{RING}sweep: {{grid: {{routing.policy: [delay, east]}}}}\n")


def test_set_and_sweep_reach_nested_settings_even_of_the_short_form():
    s = load_text(f"{RING}routing: dynamic\n", overrides=["routing.monitor.interval=250ms",
                                                          "routing.damping.enabled=false"])
    assert s.routing.policy == "dynamic" and s.routing.monitor.interval == 0.25 and not s.routing.damping.enabled
    s = load_text(f"{RING}routing: dynamic\nsweep: {{grid: {{routing.monitor.interval: [1s, 100ms], "
                  f"routing.monitor.links.n1-n2.probe: [true, false]}}}}\n")
    assert s.sweep.grid == {"routing.monitor.interval": ["1s", "100ms"],
                            "routing.monitor.links.n1-n2.probe": [True, False]}
    with pytest.raises(ScenarioError, match=r"sweep.grid.routing.cost.quantum\[1\]: with routing.cost.quantum=0: "
                                            r"routing.cost.quantum: expected a number greater than zero"):
        load_text(f"{RING}routing: dynamic\nsweep: {{grid: {{routing.cost.quantum: [1, 0]}}}}\n")
    with pytest.raises(ScenarioError, match=r"^--set routing.monitor.window: .*whole number from 2"):
        load_text(f"{RING}routing: dynamic\n", overrides=["routing.monitor.window=1"])
