import textwrap
from pathlib import Path

import pytest

from node.errors import UserError
from testbed.scenario import ScenarioError, dump_resolved, load, load_text
from testbed.scenario.spec import Scenario

GOOD = """\
name: demo
seed: 3
duration: 2m
topology:
  generator: ring
  params: {n: 5}
link_defaults:
  delay: 25ms
  rate: 10Mbit
  loss: 1%
links:
  - {a: n1, b: n2, delay: 40ms, b_to_a: {loss_model: {type: gilbert, p: 1%, r: 30%}}}
capture: [n1-n2]
nodes:
  all: {rbsad: 10}
  n3: {buffers: 5}
workload:
  generators:
    - nodes: [n1, n2]
      interarrival: {dist: piecewise, mean: 50, schedule: [{from: 10, to: 20, mean: 1s}]}
      recipients: {choice: weighted, weights: {n3: 1}}
faults:
  - {at: 30s, action: link_set, target: n1-n2, params: {delay: 100ms}}
  - {at: 40s, action: partition, target: [[n1], [n2, n3]]}
  - {at: 50s, action: heal}
  - {at: 60s, action: kill, target: n4}
sweep:
  grid: {link_defaults.delay: [10ms, 50ms], nodes.all.rbsad: [1, 2]}
  reps: 2
quick: {duration: 10s, sweep.reps: 1}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_good_file_values(tmp_path):
    s = load(write(tmp_path, GOOD))
    assert isinstance(s, Scenario)
    assert (s.name, s.seed, s.duration, s.time_scale) == ("demo", 3, 120.0, 1.0)
    assert s.link_defaults.delay == 0.025 and s.link_defaults.rate == 10e6 and s.link_defaults.loss == 0.01
    ov = s.links[0]
    assert ov.a_to_b.delay == 0.04 and ov.b_to_a.delay == 0.04 and ov.a_to_b.rate == 10e6
    assert ov.a_to_b.gilbert is None and ov.b_to_a.gilbert.p == 0.01 and ov.b_to_a.gilbert.r == 0.3
    assert s.nodes.settings_for("n3") == {"rbsad": 10, "buffers": 5}
    assert s.faults[0].params == {"delay": 0.1, "direction": "both"}
    assert s.faults[1].target == [["n1"], ["n2", "n3"]]
    assert s.sweep.reps == 2 and s.sweep.grid["nodes.all.rbsad"] == [1, 2]
    assert s.capture.links == ["n1-n2"]


def test_quick_and_set(tmp_path):
    p = write(tmp_path, GOOD)
    s = load(p, quick=True, overrides=["seed=9", "link_defaults.jitter=2ms"])
    assert (s.duration, s.sweep.reps, s.seed, s.link_defaults.jitter) == (10.0, 1, 9, 0.002)
    # --set wins over quick
    assert load(p, quick=True, overrides=["duration=5s"]).duration == 5.0


def test_defaults_minimal():
    s = load_text("name: x\n")
    assert s.topology.generator == "linear" and s.runtime == "netns" and s.shaper == "auto"
    assert s.duration == 60.0 and s.capture.links == "none" and s.workload.drain == 60.0


@pytest.mark.parametrize("text", [GOOD, "name: x\n", """\
name: expl
topology:
  generator: explicit
  nodes: [a, b, c]
  links:
    - {a: a, b: b, a_to_b: {delay: 5ms}, b_to_a: {delay: 7ms, rate: 1Mbit}}
    - {a: b, b: c, jitter: 1ms, reorder: true, duplicate: 0.5%, queue: 50}
workload:
  warmup: 5s
  generators: [{size: {dist: fixed, bytes: 4KiB}, recipients: {choice: fixed, nodes: [c]}, stop: 30s}]
""", """\
name: st
topology: {generator: star, params: {n: 3, lan: true}}
capture: {links: all, snaplen: 0}
runtime: docker
shaper: wire
"""])
def test_dump_resolved_round_trip(text):
    s = load_text(text, overrides=["time_scale=0.5"])
    text2 = dump_resolved(s)
    s2 = load_text(text2)
    assert s2 == s
    assert dump_resolved(s2) == text2


BAD = [
    # (yaml, line, key path, expected wording)
    ("name: x\ntopology:\n  generator: ring\n  dealy: 3\n", 4, "topology.dealy", "unknown key 'dealy'"),
    ("name: x\nlinks:\n  - {a: n1, b: n2}\n  - {a: n2, b: n3, dealy: 5ms}\n", 4, "links[1].dealy",
     "unknown key 'dealy' (did you mean 'delay'?)"),
    ("name: x\nlink_defaults:\n  delay: fast\n", 3, "link_defaults.delay", 'expected a duration like "25ms", got "fast"'),
    ("name: x\nlink_defaults:\n  rate: quick\n", 3, "link_defaults.rate", 'expected a rate like "10Mbit"'),
    ("name: x\nlink_defaults:\n  loss: 1.5\n", 3, "link_defaults.loss", "outside 0..1"),
    ("name: x\ntopology: {generator: ring, params: {n: 4}}\nlinks:\n  - {a: n1, b: n9}\n", 4, "links[0].b",
     'unknown node "n9"'),
    ("name: x\ntopology: {generator: ring, params: {n: 4}}\nlinks:\n  - {a: n1, b: n3}\n", 4, "links[0]",
     "no link between n1 and n3"),
    ("name: x\ntopology:\n  generator: hypercube\n", 3, "topology.generator", "expected one of star, cluster"),
    ("name: x\ntopology:\n  generator: ring\n  params:\n    n: 2\n", 5, "topology.params.n",
     "expected a whole number from 3 to 500, got 2"),
    ("name: x\ntopology:\n  generator: grid\n  params: {rows: 3, depth: 2}\n", 4, "topology.params.depth",
     "unknown key 'depth'"),
    ("name: x\ntopology:\n  generator: ring\n  params: {n: [1, 2]}\n", 4, "topology.params.n", "expected a whole number"),
    ("name: x\ntopology:\n  - ring\n", 2, "topology", "expected a mapping"),
    ("name: x\ntopology: {generator: linear, params: {n: 3}}\ncapture: [n1-n2, n1-n3]\n", 3, "capture[1]",
     'unknown link "n1-n3"'),
    ("name: x\ntopology: {generator: linear, params: {n: 3}}\nfaults:\n  - {at: 1s, action: kill, target: n7}\n", 4,
     "faults[0].target", 'unknown node "n7"'),
    ("name: x\nfaults:\n  - at: 1s\n    action: explode\n", 4, "faults[0].action", "expected one of link_down"),
    ("name: x\nfaults:\n  - {at: 1s, action: link_down, target: n1-n4}\n", 3, "faults[0].target", 'unknown link "n1-n4"'),
    ("name: x\nsweep:\n  grid:\n    link_defaults.dleay: [1ms]\n", 4, "sweep.grid.link_defaults.dleay[0]",
     "unknown key 'dleay'"),
    ("name: x\nsweep:\n  grid:\n    duration: [1s, soon]\n", 4, "sweep.grid.duration[1]", "expected a duration"),
    ("name: x\nduration: -5s\n", 2, "duration", "not negative"),
    ("name: x\nduration: 0\n", 2, "duration", "greater than zero"),
    ("name: x\ntime_scale: 0\n", 2, "time_scale", "expected a number greater than zero, got 0"),
    ("name: x\nruntime: vm\n", 2, "runtime", "expected one of netns, docker"),
    ("name: x\nshaper: magic\n", 2, "shaper", "expected one of auto, netem, wire"),
    ("name: x\nnodes:\n  all: {a: 1}\n  n7: {b: 2}\n", 4, "nodes.n7", "unknown node 'n7'"),
    ("name: x\nworkload:\n  generators:\n    - nodes: [n1, zz]\n", 4, "workload.generators[0].nodes[1]",
     'unknown node "zz"'),
    ("name: x\nworkload:\n  generators:\n    - recipients: {choice: fixed}\n", 4,
     "workload.generators[0].recipients.nodes", "choice fixed needs"),
    ("name: x\nlink_defaults:\n  loss_model: {type: gilbert, p: 2, r: 1%}\n", 3, "link_defaults.loss_model.p", "outside 0..1"),
    ("name: x\ntopology:\n  generator: explicit\n  nodes: [a, b]\n  links:\n    - {a: a, b: c}\n", 6,
     "topology.links[0].b", 'unknown node "c"'),
    ("name: x\nquick:\n  durashun: 1s\n", 3, "quick.durashun", "unknown scenario key"),
    ("name: x\nseed: 1.5\n", 2, "seed", "expected a whole number"),
    ("name: x\nduration: 100s\nworkload:\n  measure_from: 100s\n", 4, "workload.measure_from",
     "leaves no throughput window"),
    ("name: x\nsysctls: {kernel.pid_max: 9}\n", 2, "sysctls", "only network-namespace sysctls"),
    ("name: x\nsysctls: {net.ipv4.tcp_ecn: [1]}\n", 2, "sysctls", "expected a number or a short string"),
    ("name: x\nsysctls: {net.ipv4.tcp_ecn: '1; reboot'}\n", 2, "sysctls", "expected a number or a short string"),
]


@pytest.mark.parametrize("text,line,path,wording", BAD, ids=[b[2] for b in BAD])
def test_bad_scenarios(tmp_path, text, line, path, wording):
    p = write(tmp_path, text)
    with pytest.raises(ScenarioError) as e:
        load(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line} {path}: "), msg
    assert wording in msg, msg
    assert isinstance(e.value, UserError)


def test_yaml_syntax_error(tmp_path):
    p = write(tmp_path, "name: x\ntopology:\n  generator: [ring\n  params: {}\n")
    with pytest.raises(ScenarioError) as e:
        load(p)
    assert str(e.value).startswith(f"{p}:") and "not valid YAML" in str(e.value)
    assert str(e.value).count("\n") == 0
    p = write(tmp_path, "name: x\nname: y\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml:2 name: key given twice"):
        load(p)


def test_top_level_not_mapping(tmp_path):
    with pytest.raises(ScenarioError, match=r"bad.yaml:1 \(top level\): expected a mapping"):
        load(write(tmp_path, "- a\n- b\n"))


@pytest.mark.parametrize("item,wording", [
    ("duration=fast", '--set duration: expected a duration like "25ms", got "fast"'),
    ("topology.params.n=1", "--set topology.params.n: expected a whole number from 2 to 500, got 1"),
    ("link_defaults.dealy=1ms", "--set link_defaults.dealy: unknown key 'dealy' (did you mean 'delay'?)"),
    ("durationfast", "--set durationfast: expected KEY=VALUE"),
    ("links.5.delay=1ms", "--set links.5.delay: "),
    ("seed=[1", "--set seed: the value"),
])
def test_bad_set(item, wording):
    with pytest.raises(ScenarioError) as e:
        load_text("name: x\ntopology: {generator: linear, params: {n: 3}}\n", overrides=[item])
    assert str(e.value).startswith(wording), str(e.value)


def test_quick_error_names_quick_line(tmp_path):
    p = write(tmp_path, "name: x\nquick:\n  duration: never\n")
    load(p)   # not applied: fine
    with pytest.raises(ScenarioError) as e:
        load(p, quick=True)
    assert str(e.value).startswith(f"{p}:3 (quick: duration) duration: expected a duration")


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load(tmp_path / "nope.yaml")


def test_params_defaults_filled_and_ring_names():
    s = load_text("name: x\ntopology: {generator: grid, params: {rows: 2}}\n")
    assert s.topology.params == {"rows": 2, "cols": 3}
    s = load_text("name: x\ntopology: {generator: ring, nodes: [a, b, c, d]}\n")
    assert s.topology.params == {"n": 4}
    with pytest.raises(ScenarioError, match=r"<string>:2 topology.params.n: n=5 disagrees"):
        load_text("name: x\ntopology: {generator: ring, nodes: [a, b, c, d], params: {n: 5}}\n")


def test_pathological_yaml():
    with pytest.raises(ScenarioError, match="anchors and aliases"):
        load_text("a: &x [*x]\n")
    with pytest.raises(ScenarioError, match="nested too deeply"):
        load_text("a: " + "[" * 50 + "]" * 50 + "\n")
    with pytest.raises(ScenarioError, match="expected a duration"):
        load_text("name: x\nduration: 1e400s\n")
    with pytest.raises(ScenarioError, match="<string>:2 link_defaults.queue: expected a whole number"):
        load_text("name: x\nlink_defaults: {queue: true}\n")


@pytest.mark.parametrize("fault,path,wording", [
    ("{at: 1s, action: kill}", "faults[0].target", "missing: kill needs a target (a node name)"),
    ("{at: 1s, action: link_up}", "faults[0].target", "a link name like n1-n2"),
    ("{at: 1s, action: kill, target: n1, params: {x: 1}}", "faults[0].params", "kill takes no params"),
    ("{at: 1s, action: link_set, target: n1-n2}", "faults[0].params", "link_set needs the link parameters"),
    ("{at: 1s, action: link_set, target: n2-n1, params: {loss: 200%}}", "faults[0].params.loss", "outside 0..1"),
    ("{at: 1s, action: partition, target: [[n1], [n1, n2]]}", "faults[0].target", "both sides"),
    ("{at: soon, action: heal}", "faults[0].at", "expected a duration"),
    ("{action: heal}", "faults[0].at", "missing"),
])
def test_bad_faults(fault, path, wording):
    with pytest.raises(ScenarioError) as e:
        load_text(f"name: x\ntopology: {{generator: linear, params: {{n: 3}}}}\nfaults:\n  - {fault}\n")
    assert str(e.value).startswith(f"<string>:4 {path}: "), str(e.value)
    assert wording in str(e.value)


def test_link_set_params_and_reversed_names():
    s = load_text("name: x\ntopology: {generator: linear, params: {n: 3}}\nfaults:\n"
                  "  - {at: 1s, action: link_set, target: n2-n1, params: {rate: 1Mbit, direction: a_to_b}}\n"
                  "capture: n3-n2\n")
    # names are stored canonically (as the topology's link), directions swapped to match
    assert s.faults[0].params == {"rate": 1e6, "direction": "b_to_a"} and s.faults[0].target == "n1-n2"
    assert s.capture.links == ["n2-n3"]
    assert load_text(dump_resolved(s)) == s


def test_routing_policy_key():
    s = load_text("topology: {generator: ring, params: {n: 4}}\nrouting: unidirectional\n")
    assert s.routing == "unidirectional"
    assert load_text("topology: {generator: ring}\n").routing == "auto"
    assert load_text(dump_resolved(s)).routing == "unidirectional"
    with pytest.raises(ScenarioError, match="routing"):
        load_text("routing: clockwise\n")


def test_sysctls_flat_nested_and_set(tmp_path):
    p = write(tmp_path, "name: x\nsysctls:\n  net.ipv4.tcp_ecn: 1\n  net: {core: {somaxconn: 512}}\n")
    s = load(p, overrides=["sysctls.net.ipv4.tcp_slow_start_after_idle=0"])
    assert s.sysctls == {"net.ipv4.tcp_ecn": 1, "net.core.somaxconn": 512, "net.ipv4.tcp_slow_start_after_idle": 0}


def test_dump_resolved_keeps_sysctls():
    s = load_text("name: x\nsysctls: {net.ipv4.tcp_ecn: 1}\n")
    s2 = load_text(dump_resolved(s))
    assert s2.sysctls == {"net.ipv4.tcp_ecn": 1}
    assert s2 == s


def test_every_scenario_key_is_a_section_written_back_in_file_order():
    from testbed.scenario.loader import to_plain
    from testbed.scenario.sections import SCENARIO_KEYS, SECTIONS

    assert [sec.key for sec in SECTIONS] == list(SCENARIO_KEYS)
    assert list(to_plain(load_text("name: x\n"))) == list(SCENARIO_KEYS)
    with pytest.raises(ScenarioError, match=r"<string>:1 colour: unknown key 'colour' \(expected one of: name, seed, "
                                            r"duration, time_scale, topology, link_defaults, links, runtime, placement, "
                                            r"routing, shaper, capture, sysctls, hosts, nodes, security, subscriptions, "
                                            r"rate_control, "
                                            r"gateway, pools, workload, faults, max_late, sweep, quick\)"):
        load_text("colour: red\n")
