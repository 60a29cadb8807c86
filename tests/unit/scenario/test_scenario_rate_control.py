"""The scenario's `rate_control` section: accepted forms, the nodes' `rate:` configs it makes, time_scale, and
one-line errors."""
import pytest

from node.registry import config_from_dict as from_dict
from testbed.experiment import timescale
from testbed.scenario import ScenarioError, dump_resolved, load_text
from testbed.subsystems.rate import rate_config

BASE = """\
name: mq
time_scale: 0.5
topology: {generator: linear, nodes: [c1, r1, root, c2]}
nodes:
  r1: {daemon: false}
  c1: {mta_neighbours: [root]}
  c2: {mta_neighbours: [root]}
"""
GOOD = "rate_control: {root: root, clients: [c1, c2], rate: 2Mbit, interval: 4s, consumer: {user: app, every: 2s}}\n"


def load(text: str, sets: tuple[str, ...] = ()):
    return load_text(BASE + text, "mq.yaml", overrides=sets)


def error(text: str) -> str:
    with pytest.raises(ScenarioError) as e:
        load(text)
    return str(e.value)


def test_defaults_round_trip_and_sweep_key() -> None:
    s = load(GOOD)
    rc = s.rate_control
    assert (rc.root, rc.clients, rc.rate, rc.interval, rc.control, rc.policy) == \
        ("root", ["c1", "c2"], 2e6, 4.0, True, "decile")
    assert (rc.client_queue, rc.root_queue, rc.consumer.messages, rc.consumer.every) == (1_000_000, 4_000_000, 25, 2.0)
    assert load_text(dump_resolved(s), "again.yaml") == s
    off = load(GOOD, sets=("rate_control.control=false",))
    assert off.rate_control.rule == "fixed" and s.rate_control.rule == "decile"
    assert not load("").rate_control.enabled


def test_time_scale_converts_times_and_the_rate() -> None:
    wall = timescale.to_wall(load(GOOD))
    rc = wall.rate_control
    assert (rc.interval, rc.rate, rc.consumer.every) == (2.0, 4e6, 1.0)


def test_node_configs_carry_each_role() -> None:
    wall = timescale.to_wall(load(GOOD))
    root, c1 = rate_config(wall, "root"), rate_config(wall, "c1")
    assert root == {"clients": ["c1", "c2"], "rate_bps": 4e6, "interval": 2.0, "policy": "decile", "role": "root",
                    "queue_limit": 4_000_000, "consumer": "app", "retry": 0.25}
    assert c1["role"] == "client" and c1["root"] == "root" and c1["queue_limit"] == 1_000_000
    assert rate_config(wall, "r1") == {}
    # the node's own loader takes them (the testbed validates every config before a daemon starts)
    for name, rate in (("root", root), ("c1", c1)):
        peers = {"c1": "127.0.0.1:1", "c2": "127.0.0.1:2"} if name == "root" else {"root": "127.0.0.1:3"}
        from_dict({"name": name, "data_listen": "127.0.0.1:4", "mgmt_listen": "127.0.0.1:5", "neighbours": peers,
                   "rate": rate})


@pytest.mark.parametrize("text, where, what", [
    ("rate_control: {clients: [c1]}\n", "rate_control", "needs 'root' and 'clients'"),
    ("rate_control: {root: root, clients: []}\n", "rate_control.clients", "at least one client"),
    ("rate_control: {root: root, clients: [c1, c1]}\n", "rate_control.clients", "each client once"),
    ("rate_control: {root: root, clients: [c1, root]}\n", "rate_control.clients", "not the root"),
    ("rate_control: {root: root, clients: [c1, r1]}\n", "rate_control.clients[1]", "not a host with a node daemon"),
    ("rate_control: {root: nowhere, clients: [c1]}\n", "rate_control.root", "not a host with a node daemon"),
    ("rate_control: {root: root, clients: [c1], rate: fast}\n", "rate_control.rate", "rate like"),
    ("rate_control: {root: root, clients: [c1], policy: magic}\n", "rate_control.policy", "magic"),
    ("rate_control: {root: root, clients: [c1], consumer: {messages: 0}}\n", "rate_control.consumer.messages", ""),
    ("rate_control: {root: root, clients: [c1], consumer: {user: 'a b'}}\n", "rate_control.consumer.user", "user name"),
    ("rate_control: {root: root, clients: [c1], colour: red}\n", "rate_control.colour", "unknown key"),
])
def test_bad_rate_control_is_one_error_naming_the_key(text, where, what) -> None:
    msg = error(text)
    assert where in msg and what in msg and "\n" not in msg.strip()


def test_a_client_must_be_an_mta_neighbour_of_the_root() -> None:
    text = BASE.replace("  c2: {mta_neighbours: [root]}\n", "  c2: {mta_neighbours: [c1]}\n") + \
        "rate_control: {root: root, clients: [c1, c2]}\n"
    with pytest.raises(ScenarioError, match=r"rate_control.clients\[1\].*not an MTA neighbour of the root"):
        load_text(text, "mq.yaml")


def test_recipients_user_is_checked_and_kept() -> None:
    gen = ("workload: {generators: [{nodes: [c1], interarrival: {dist: constant, mean: 1s}, "
           "recipients: {choice: fixed, nodes: [root], user: %s}}]}\n")
    assert load(gen % "app").workload.generators[0].recipients.user == "app"
    assert "recipients.user" in error(gen % "'no way'")
