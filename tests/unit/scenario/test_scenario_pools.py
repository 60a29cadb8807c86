"""The scenario's `pools` section: what it reads, the nodes' `pools:` configs and users it makes, time_scale,
and one-line errors naming the key path."""
from __future__ import annotations

import re
import stat
from collections import Counter
from pathlib import Path

import pytest

from node import registry
from testbed.experiment import nodeconfig, timescale, workload
from testbed.experiment.faults import Timeline
from testbed.network import Network
from testbed.scenario import ScenarioError, dump_resolved, load_text
from testbed.scenario.spec import Scenario
from testbed.topology import addressing

BASE = """\
name: pools
time_scale: 0.5
topology:
  generator: explicit
  nodes: [r1, r2, r3, c1, c2, h1, h2, dark]
  links:
    - {a: r1, b: r2}
    - {a: r2, b: r3}
    - {a: r3, b: c1}
    - {a: c1, b: c2}
    - {a: c2, b: h1}
    - {a: h1, b: h2}
    - {a: h2, b: dark}
nodes:
  dark: {daemon: false}
"""
GOOD = """\
pools:
  replicas: [r1, r2, r3]
  heartbeat: 0.4s
  crash_timeout: 2s
  algorithm: load_aware
  consumers:
    bs: {nodes: [c1, c2], types: [alarm, counter]}
    core: {nodes: [c2], types: [trap]}
  apps:
    A: {types: [alarm, trap], instances: {a1: h1, a2: h2}}
    B: {types: [counter], algorithm: round_robin, move_share: 25%, instances: {b1: h1}}
"""


def load(text: str, sets: tuple[str, ...] = ()) -> Scenario:
    return load_text(BASE + text, "pools.yaml", overrides=sets)


def test_reads_defaults_round_trips_and_sweeps_the_algorithm() -> None:
    p = load(GOOD).pools
    assert p.enabled and p.replicas == ["r1", "r2", "r3"] and (p.heartbeat, p.crash_timeout) == (0.4, 2.0)
    assert (p.apps["A"].algorithm, p.apps["A"].move_share) == ("load_aware", 0.5)
    assert (p.apps["B"].algorithm, p.apps["B"].move_share) == ("round_robin", 0.25)
    assert p.consumer_types() == {"c1": ["alarm", "counter"], "c2": ["alarm", "counter", "trap"]}
    assert load_text(dump_resolved(load(GOOD)), "again.yaml") == load(GOOD)
    swept = load(GOOD, sets=("pools.algorithm=round_robin",)).pools
    assert swept.apps["A"].algorithm == "round_robin"
    assert not load("").pools.enabled
    wall = timescale.to_wall(load(GOOD)).pools
    assert (wall.heartbeat, wall.crash_timeout) == (0.2, 1.0)


def test_node_configs_carry_the_replicas_raft_addresses_and_a_run_password(tmp_path: Path) -> None:
    s = load(GOOD)
    topo = timescale.wall_topology(s)
    net = Network(topo, addressing.plan(topo))                  # never started: only the address plan is read
    configs = nodeconfig.node_configs(s, net, tmp_path)
    password = (tmp_path / "secrets" / "pools.secret").read_text()
    assert len(password) >= 16 and stat.S_IMODE((tmp_path / "secrets" / "pools.secret").stat().st_mode) == 0o600
    for r in ("r1", "r2", "r3"):
        sec = configs[r]["pools"]
        host, port = configs[r]["data_listen"].rsplit(":", 1)
        assert sec["replicas"][r] == f"{host}:{int(port) + 100}" and host == net.data_address(r)
        assert sec["password"] == password
    assert configs["c2"]["pools"]["consumer"] == {"name": "c2", "types": ["alarm", "counter", "trap"]}
    assert "password" not in configs["c1"]["pools"] and "consumer" not in configs["h1"]["pools"]
    assert configs["h1"]["pools"]["apps"]["B"]["instances"] == {"b1": "h1"}
    assert "pools" not in configs.get("dark", {})
    for cfg in configs.values():
        registry.config_from_dict(cfg)                       # the node's own loader takes every one
    users = nodeconfig.node_users(s, configs)
    assert users["h1"] == ["A", "B"] and users["h2"] == ["A"] and users["c1"] == []


@pytest.mark.parametrize("text, words", [
    ("  replicas: [r1, r2]\n", "pools.yaml:17 pools.replicas: expected 3 or 5 different controller replica hosts"),
    ("  replicas: [r1, r2, nope]\n", "pools.replicas[2]: unknown node \"nope\""),
    ("  replicas: [r1, r2, dark]\n", "pools.replicas[2]: \"dark\" is a host without a node daemon"),
    ("  apps: {A: {types: [alarm], instances: {a1: ghost}}}\n", "pools.apps.A.instances.a1: unknown node \"ghost\""),
    ("  apps: {A: {types: [alarm], instances: {a1: dark}}}\n", "pools.apps.A.instances.a1: \"dark\" is a host without"),
    ("  apps: {A: {types: [alarm], move_share: 0, instances: {a1: h1}}}\n",
     "pools.apps.A.move_share: expected a share in (0, 1], got 0"),
    ("  apps: {A: {types: [alarm], move_share: 1.5, instances: {a1: h1}}}\n", "expected a share in (0, 1], got 1.5"),
    ("  apps: {A: {types: [alarm], instances: {a1: h1}}, B: {types: [alarm], instances: {a1: h2}}}\n",
     "pools.apps.B.instances.a1: two instances named \"a1\""),
    ("  apps: {A: {types: [smoke], instances: {a1: h1}}}\n",
     "pools.apps.A.types[0]: no consumer produces event type \"smoke\""),
    ("  apps: {A: {types: [alarm], instances: {c1: h1}}}\n", "instance \"c1\" has the name of a consumer"),
    ("  consumers: {bs: {nodes: [c9], types: [alarm]}}\n", "pools.consumers.bs.nodes[0]: unknown node \"c9\""),
    ("  apps: {A: {types: [alarm], instances: {a1: h1}}}\n  algorithm: fastest\n", "pools.algorithm: expected one of"),
    ("  apps: {A: {types: [alarm], instances: {a1: h1}, spare: 1}}\n", "pools.yaml:19 pools.apps.A.spare: unknown key"),
])
def test_bad_sections_are_one_sentence_naming_the_key(text: str, words: str) -> None:
    base = {"replicas": "  replicas: [r1, r2, r3]\n", "consumers": "  consumers: {bs: {nodes: [c1], types: [alarm]}}\n",
            "apps": "  apps: {A: {types: [alarm], instances: {a1: h1}}}\n"}
    for key in base:
        if text.startswith(f"  {key}:"):
            base[key] = text
            text = ""
    body = "pools:\n" + "".join(base.values()) + text
    with pytest.raises(ScenarioError) as e:
        load(body)
    assert words in str(e.value) and "\n" not in str(e.value)


FAULTS = """\
faults:
  - {at: 5s, action: pool_join, target: A.a2}
  - {at: 9s, action: pool_leave, target: A.a2}
  - {at: 10s, action: pool_kill, target: A.a1}
  - {at: 11s, action: kill, target: pools.leader}
  - {at: 12s, action: restart, target: pools.leader}
  - {at: 13s, action: partition, target: [[pools.leader], [pools.followers]]}
"""


def test_pool_faults_and_symbolic_targets_are_read_and_checked() -> None:
    s = load(GOOD + FAULTS)
    assert [(f.action, f.target) for f in s.faults][:3] == [("pool_join", "A.a2"), ("pool_leave", "A.a2"),
                                                            ("pool_kill", "A.a1")]
    assert s.faults[5].target == [["pools.leader"], ["pools.followers"]]
    assert load_text(dump_resolved(s), "again.yaml") == s
    for text, words in (
            ("  - {at: 1s, action: pool_join, target: A.a7}\n", 'unknown application instance "A.a7"'),
            ("  - {at: 1s, action: pool_leave, target: A.a1}\n  - {at: 2s, action: pool_kill, target: A.a1}\n",
             "faults[1].target: A.a1 has left or was killed already"),
            ("  - {at: 1s, action: pool_leave, target: A.a2}\n  - {at: 2s, action: pool_join, target: A.a2}\n",
             "faults[0].at: A.a2 joins only at 2 s"),
            ("  - {at: 1s, action: restart, target: pools.leader}\n", "none comes before 1 s")):
        with pytest.raises(ScenarioError, match=re.escape(words)):
            load(GOOD + "faults:\n" + text)
    with pytest.raises(ScenarioError, match='unknown node "pools.leader"'):      # no pools, no leader
        load("faults:\n  - {at: 1s, action: kill, target: pools.leader}\n")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.calls: list[tuple] = []

    def record_event(self, event: str, target, **fields) -> None:
        self.events.append((event, target, fields))

    def partition(self, a, b) -> None:
        self.calls.append(("partition", a, b))

    def kill(self, node: str) -> dict:
        self.calls.append(("kill", node))
        return {"pid": 7}

    restart = pause = resume = kill


class LeaderClients:
    """The pools' clients as the timeline sees them: the leader moves from r1 to r2 once r1 is killed."""

    def __init__(self) -> None:
        self.leader = "r1"
        self.faults: list[tuple] = []

    def resolve(self, target: str):
        if target == "pools.leader":
            return [self.leader]
        return [r for r in ("r1", "r2", "r3") if r != self.leader] if target == "pools.followers" else None

    def fault(self, action: str, target):
        if not action.startswith("pool_"):
            return None
        self.faults.append((action, target))
        return {"host": "h2", "app": "A", "instance": "a2"}


def test_the_timeline_resolves_the_leader_when_a_fault_fires() -> None:
    s = load(GOOD + FAULTS)
    net, clients = Recorder(), LeaderClients()
    timeline = Timeline(net, net, s.faults, clients=[clients])
    timeline.apply(s.faults[0])
    timeline.apply(s.faults[3])                       # kill pools.leader: r1
    clients.leader = "r2"
    timeline.apply(s.faults[4])                       # restart pools.leader: the node the kill took, r1
    timeline.apply(s.faults[5])                       # the new leader r2 against r1, r3
    assert timeline.failed == [] and clients.faults == [("pool_join", "A.a2")]
    assert net.calls == [("kill", "r1"), ("kill", "r1"), ("partition", ["r2"], ["r1", "r3"])]
    assert net.events[0] == ("pool_join", "A.a2", {"host": "h2", "app": "A", "instance": "a2"})
    assert net.events[1] == ("kill", "r1", {"pid": 7, "resolved_from": "pools.leader"})
    assert net.events[3][0] == "resolved" and net.events[3][2]["sides"] == [["r2"], ["r1", "r3"]]
    alone = Timeline(net, net, s.faults)              # a run without the pools' clients: one failed fault
    alone.apply(s.faults[3])
    assert "stands for no node now" in alone.failed[0][1]


def test_publish_sources_are_the_consumers_own_and_zipf_skewed() -> None:
    gen = """\
duration: 2000s
workload:
  generators:
    - nodes: [c1, c2]
      interarrival: {dist: exponential, mean: 1s}
      publish: {topics: ["ev.alarm.{source}"], sources: {count: 50, skew: 1.2}}
"""
    s = load(gen)
    plan = workload.schedule(s, ["c1", "c2"])
    by_node = {n: Counter(p.topic for p in plan if p.node == n) for n in ("c1", "c2")}
    assert all(t.startswith(f"ev.alarm.{n}-") for n, c in by_node.items() for t in c)
    c1 = by_node["c1"]
    # Zipf 1.2 over 50: source 1 takes 1/H(50, 1.2) ~ 33% of ~2000 draws, source 2 ~ 14%; 4 standard errors
    share = c1["ev.alarm.c1-1"] / sum(c1.values())
    assert abs(share - 0.334) < 4 * (0.334 * 0.666 / sum(c1.values())) ** 0.5
    assert c1["ev.alarm.c1-1"] > 2 * c1["ev.alarm.c1-2"] > 0
    assert load_text(dump_resolved(s), "again.yaml") == s
    # the draw has its own random stream: the times stay those of the same generator without sources
    plain = load(gen.replace('"ev.alarm.{source}"], sources: {count: 50, skew: 1.2}', '"ev.alarm.x"]'))
    assert [p.at for p in workload.schedule(plain, ["c1", "c2"])] == [p.at for p in plan]
    for text, words in (('["ev.alarm.{source}"]}', '"{source}" needs publish.sources'),
                        ('["ev.alarm.x"], sources: {count: 5}}', 'no topic has "{source}"'),
                        ('["ev.{source}"], sources: {count: 0}}', "sources.count: expected")):
        with pytest.raises(ScenarioError, match=re.escape(words)):
            load(gen.replace('["ev.alarm.{source}"], sources: {count: 50, skew: 1.2}}', text))
