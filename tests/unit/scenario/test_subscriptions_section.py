"""The scenario's `subscriptions:` section and publishing generators: accepted forms, round trip, one-line errors."""
from __future__ import annotations

import pytest

from testbed.experiment import workload
from testbed.experiment.workload import PlannedPublication, PlannedSubmission
from testbed.scenario import ScenarioError, dump_resolved, load_text

BASE = """\
name: ps
seed: 3
duration: 100s
topology: {generator: linear, nodes: [n1, r, n2, n3]}
nodes:
  r: {daemon: false}
"""


def load(extra: str):
    return load_text(BASE + extra, "ps.yaml")


def error(extra: str) -> str:
    with pytest.raises(ScenarioError) as e:
        load(extra)
    return str(e.value)


GOOD = """\
subscriptions:
  - {node: n2, pattern: "a.>", durable: true, name: arch}
  - {node: n3, pattern: "a.*"}
workload:
  generators:
    - nodes: [n1]
      publish: {topics: ["a.{node}", "a.b"]}
      interarrival: {dist: constant, mean: 1s}
      size: {dist: fixed, bytes: 500}
    - nodes: [n1]
      interarrival: {dist: constant, mean: 10s}
      recipients: {choice: fixed, nodes: [n3]}
"""


def test_subscriptions_and_publishing_generators_load_and_round_trip() -> None:
    s = load(GOOD)
    assert [(x.node, x.pattern, x.name, x.durable) for x in s.subscriptions] == [
        ("n2", "a.>", "arch", True), ("n3", "a.*", "s1", False)]
    assert s.workload.generators[0].publish.topics == ["a.{node}", "a.b"]
    assert s.workload.generators[1].publish is None
    assert load_text(dump_resolved(s), "again.yaml") == s


def test_the_plan_publishes_on_the_topics_and_keeps_mail_apart() -> None:
    s = load(GOOD)
    plan = workload.schedule(s, ["n1", "n2", "n3"])
    pubs = [p for p in plan if isinstance(p, PlannedPublication)]
    mail = [p for p in plan if isinstance(p, PlannedSubmission)]
    assert len(pubs) == 99 and len(mail) == 9          # constant gaps from the first one: 1 s and 10 s
    assert {p.topic for p in pubs} == {"a.n1", "a.b"} and all(p.size == 500 for p in pubs)
    assert workload.schedule(s, ["n1", "n2", "n3"]) == plan          # determined by the seed
    # the topics have a stream of their own: another topic list leaves the times alone
    other = load(GOOD.replace('"a.{node}", "a.b"', '"a.x"'))
    assert [p.at for p in workload.schedule(other, ["n1", "n2", "n3"]) if isinstance(p, PlannedPublication)] == \
        [p.at for p in pubs]


@pytest.mark.parametrize("extra, where, what", [
    ("subscriptions: [{node: n9, pattern: a}]\n", "subscriptions[0].node", "unknown node"),
    ("subscriptions: [{node: r, pattern: a}]\n", "subscriptions[0].node", "r runs no node daemon"),
    ("subscriptions: [{node: n2}]\n", "subscriptions[0].pattern", "needs 'node' and 'pattern'"),
    ("subscriptions: [{node: n2, pattern: 'a.>.b'}]\n", "subscriptions[0].pattern", "last token"),
    ("subscriptions: [{node: n2, pattern: a, durable: true}]\n", "subscriptions[0].name", "needs a name"),
    ("subscriptions: [{node: n2, pattern: a, name: 'x y'}]\n", "subscriptions[0].name", "not a valid"),
    ("subscriptions: [{node: n2, pattern: a, name: x}, {node: n2, pattern: b, name: x}]\n",
     "subscriptions[1].name", "two subscriptions named"),
    ("subscriptions: [{node: n2, pattern: a, colour: red}]\n", "subscriptions[0].colour", ""),
    ("workload: {generators: [{publish: {topics: []}}]}\n", "workload.generators[0].publish.topics", "one or more"),
    ("workload: {generators: [{publish: {topics: ['a.*']}}]}\n", "workload.generators[0].publish.topics[0]",
     "wildcard"),
    ("workload: {generators: [{publish: {topics: [a]}, recipients: {choice: uniform}}]}\n",
     "workload.generators[0].recipients", "topics, not recipients"),
])
def test_errors_name_the_key(extra: str, where: str, what: str) -> None:
    msg = error(extra)
    assert msg.startswith("ps.yaml:") and f" {where}: " in msg and what in msg, msg
    assert len(msg.splitlines()) == 1
