"""The gateway's pure logic (node/gateway/): its config section, MAXRATE(gamma), the policy state machine
(hysteresis, escalation, reset), the drop orders, user acceptance, the buckets, the router's deactivation.
With an engine and a real spool: tests/unit/node/gateway/test_gateway_engine.py."""
from __future__ import annotations

import random

import pytest
import yaml

from node.config import ConfigError, dump
from node.gateway.config import GatewayConfig
from node.gateway.connectors import Incoming, MessagePacedQueue
from node.gateway.policy import Candidate, Policy, accept_request, choose_drops, maxrate
from node.gateway.subsystem import GatewaySubsystem
from node.piece import Piece
from node.registry import config_from_dict
from node.routing.rules import RuleSet, parse_rules
from node.transfer_queue import TransferQueue

NEIGHBOURS = {"s1": "127.0.0.1:3", "o1": "127.0.0.1:4", "o2": "127.0.0.1:5"}


def node_cfg(gateway: dict | None):
    data = {"name": "gw", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2", "neighbours": NEIGHBOURS}
    if gateway is not None:
        data["gateway"] = gateway
    return config_from_dict(data)


def gw(**kw) -> GatewayConfig:
    return node_cfg({"enabled": True, **kw}).gateway


# -- config ----------------------------------------------------------------------------------------
def test_the_subsystem_is_on_only_with_an_enabled_section():
    assert not GatewaySubsystem(node_cfg(None)).enabled()
    assert not GatewaySubsystem(node_cfg({"enabled": False, "gamma": 2.0})).enabled()    # off: not judged
    cfg = node_cfg({"enabled": True, "gamma": 1, "outgoing": {"o1": {"rate": 1}},
                    "incoming": {"s1": {"neighbour": "s1", "throughput": 3}, "in1": {"user": "in1"}},
                    "users": {"alice": {"credits": 5, "locked_until": "2030-01-01T00:00:00", "permit": ["o1"]}}})
    assert GatewaySubsystem(cfg).enabled()
    assert cfg.gateway.users["alice"].locked_ts == pytest.approx(1893456000.0)
    again = config_from_dict(yaml.safe_load(dump(cfg)))          # the file the testbed writes reads back
    assert again.gateway == cfg.gateway


@pytest.mark.parametrize("section,words", [
    ({"gamma": 1.5}, "gateway.gamma must be between -1 and 1"),
    ({"gamma": float("nan")}, "gateway.gamma"),
    ({"lower": 200, "threshold": 200}, "gateway.lower (200) must be below gateway.threshold (200)"),
    ({"outgoing": {"x9": {"rate": 1}}}, "gateway.outgoing.x9: 'x9' is not a neighbour"),
    ({"outgoing": {"o1": {"rate": -1}}}, "gateway.outgoing.o1.rate must be a number"),
    ({"incoming": {"a": {"neighbour": "zz"}}}, "gateway.incoming.a.neighbour: 'zz' is not a neighbour"),
    ({"incoming": {"a": {"neighbour": "s1", "throughput": -3}}}, "gateway.incoming.a.throughput"),
    ({"incoming": {"a": {}}}, "gateway.incoming.a: give exactly one of neighbour or user"),
    ({"users": {"bob": {"credits": -1}}}, "gateway.users.bob.credits"),
    ({"users": {"bad name": {}}}, "gateway.users: 'bad name' is not a valid user name"),
    ({"users": {"bob": {"locked_until": "next tuesday"}}}, "gateway.users.bob.locked_until must be a time"),
    ({"users": {"bob": {"deny": ["nowhere"]}}}, "gateway.users.bob.deny: 'nowhere' is not a neighbour"),
    ({"actions": ["throttle", "panic"]}, "gateway.actions: unknown action 'panic'"),
    ({"drop_order": ["oldest", "loudest"]}, "gateway.drop_order: unknown drop policy 'loudest'"),
    ({"period": 0}, "gateway.period must be a positive number"),
])
def test_bad_values_are_one_clear_error(section, words):
    with pytest.raises(ConfigError) as e:
        node_cfg({"enabled": True, **section})
    assert words in str(e.value)


# -- MAXRATE(gamma) --------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma,expected", [(-1.0, 6.0), (0.0, 6.0), (0.25, 5.75), (0.5, 5.5), (0.75, 2.75),
                                            (1.0, 0.0)])
def test_maxrate_is_original_at_0_phi_out_at_half_zero_at_1(gamma, expected):
    assert maxrate(gamma, original=6.0, phi_out=5.5) == pytest.approx(expected)


# -- the state machine -------------------------------------------------------------------------------
def run(policy: Policy, t: float, q: int, phi: float = 5.5, orig: float = 6.0) -> list[tuple[str, str]]:
    return [(d.event, d.action) for d in policy.tick(t, {"o1": q}, phi, orig)]


def test_lb_first_then_throttle_after_settle_then_restore_below_lower():
    p = Policy(gw(gamma=1.0, settle=5.0), ["o1"])
    assert run(p, 0, 200) == []                                      # at the threshold: no event
    assert run(p, 1, 201) == [("queue_high", "deactivate_lb")]
    assert run(p, 5.9, 230) == []                                    # not yet settled
    assert run(p, 6, 230) == [("not_solved", "throttle")] and p.maxrate == 0.0
    assert run(p, 7, 160) == []                                      # between lower and threshold: hold
    assert run(p, 8, 149) == [("queue_low", "activate_lb"), ("queue_low", "restore")] and p.maxrate is None
    assert run(p, 9, 180) == []                                      # hysteresis: no new event below 200


def test_without_deactivation_the_first_action_is_the_throttle_and_solved_lb_never_throttles():
    p = Policy(gw(gamma=1.0, actions=["throttle"]), ["o1"])
    assert run(p, 0, 201) == [("queue_high", "throttle")]
    p = Policy(gw(gamma=1.0, settle=5.0), ["o1"])
    run(p, 0, 201)
    assert run(p, 10, 199) == []                                     # below the threshold after settle: solved
    assert run(p, 11, 100) == [("queue_low", "activate_lb")]


def test_threshold_escalates_while_throttled_recomputes_above_it_and_resets_when_normal():
    p = Policy(gw(gamma=0.5, actions=["throttle"], escalate=0.1, escalate_after=60.0), ["o1"])
    assert run(p, 0, 201, phi=4.0) == [("queue_high", "throttle")] and p.maxrate == 4.0
    assert run(p, 59, 215) == []
    assert run(p, 60, 215, phi=3.0) == [("escalate", "none")] and p.states["o1"].threshold == pytest.approx(220)
    assert run(p, 61, 221, phi=3.0) == [("not_solved", "throttle")] and p.maxrate == 3.0   # above the raised one
    assert run(p, 120, 221) == [("escalate", "none")] and p.states["o1"].threshold == pytest.approx(242)
    assert run(p, 121, 100) == [("queue_low", "restore"), ("reset", "none")]
    assert p.states["o1"].threshold == 200


def test_negative_gamma_drops_its_share_of_the_excess_each_tick():
    p = Policy(gw(gamma=-0.5, actions=["drop"]), ["o1"])
    d = p.tick(0, {"o1": 240}, 1.0, 6.0)
    assert [(x.event, x.action, x.values["count"]) for x in d] == [("queue_high", "drop", 20)]
    assert [x.values["count"] for x in p.tick(1, {"o1": 211}, 1.0, 6.0)] == [6]


def test_gamma_zero_takes_no_second_action():
    p = Policy(gw(gamma=0.0, settle=1.0), ["o1"])
    run(p, 0, 300)
    assert run(p, 2, 300) == [("not_solved", "none")]
    assert run(p, 3, 400) == [] and p.maxrate is None


# -- drop orders ---------------------------------------------------------------------------------------
CANDS = [Candidate("a", "m", submit_ts=10, expires_ts=1000, priority=2, position=0),
         Candidate("b", "m", submit_ts=20, expires_ts=105, priority=1, position=1),    # 5 s left, 2nd in line
         Candidate("c", "m", submit_ts=30, expires_ts=1000, priority=1, position=2),
         Candidate("d", "m", submit_ts=40, expires_ts=1000, priority=2, position=3)]


@pytest.mark.parametrize("order,n,expected", [
    (["expired"], 4, ["b"]),                       # at 0.1 msg/s b needs 20 s, has 5
    (["priority"], 4, ["c", "b"]),                 # the lower priority, newest first
    (["newest"], 2, ["d", "c"]),
    (["oldest"], 2, ["a", "b"]),
    (["expired", "priority", "newest"], 3, ["b", "c", "d"]),
])
def test_each_drop_order(order, n, expected):
    got = choose_drops(CANDS, order, n, now=100.0, phi=0.1, rng=random.Random(1))
    assert [c.msg_id for c in got] == expected


def test_random_drop_takes_n_distinct_copies():
    got = choose_drops(CANDS, ["random"], 3, now=100.0, phi=0.1, rng=random.Random(7))
    assert len({c.msg_id for c in got}) == 3


# -- user acceptance ----------------------------------------------------------------------------------
def test_user_acceptance_inside_the_area_and_by_distance_and_percentage():
    ok, why = accept_request(gamma=0.5, r=2.0, d=0.4, p=0.99, admitted=3.0, original=6.0, phi_out=5.5)
    assert ok and "inside the guarantee area" in why
    ok, why = accept_request(gamma=0.5, r=2.0, d=0.6, p=0.99, admitted=3.0, original=6.0, phi_out=5.5)
    assert not ok and "beyond" in why                              # d above gamma, 99% of the time: refused
    ok, _ = accept_request(gamma=0.5, r=2.0, d=0.6, p=0.5, admitted=3.0, original=6.0, phi_out=5.5)
    assert ok                                                      # the same, only half of the time: accepted
    ok, _ = accept_request(gamma=1.0, r=0.1, d=0.1, p=0.99, admitted=0.0, original=6.0, phi_out=5.5)
    assert not ok                                                  # MAXRATE(1) = 0: nothing fits


# -- buckets and the paced queue --------------------------------------------------------------------
def test_incoming_retry_after_is_the_time_to_the_next_token_and_capped_at_the_tick():
    x = Incoming("s1", 2.0, now=0.0)
    taken = 0
    while x.ready(0.0):
        x.take()
        taken += 1
    assert taken == 2                                             # one second's worth at once
    assert x.retry_after(0.0, cap=1.0) == pytest.approx(0.5, abs=1e-3)    # then one whole token per 1/rate
    assert x.retry_after(0.25, cap=1.0) == pytest.approx(0.25, abs=1e-3)
    x.set_throughput(0.0, 0.0)
    assert x.retry_after(0.0, cap=1.0) == 1.0                     # rate 0: the tick, never 0 ("never")


def test_a_raised_throughput_admits_its_first_message_at_once():
    x = Incoming("s1", 3.0, now=0.0)
    x.set_throughput(0.0, 0.0)                                    # throttled to MAXRATE(1) = 0
    while x.ready(0.0):
        x.take()
    assert not x.ready(10.0)                                      # nothing accrues at 0 msg/s
    x.set_throughput(3.0, 10.0)                                   # restored: the same instant, not 1/rate later
    assert x.ready(10.0)
    x.take()
    assert not x.ready(10.0) and x.retry_after(10.0, cap=1.0) == pytest.approx(1 / 3, abs=1e-3)
    x.set_throughput(1.0, 10.0)                                   # lowered: no token given
    assert not x.ready(10.0)


def test_paced_queue_counts_a_message_once_at_offset_0():
    t = [0.0]
    q = MessagePacedQueue(TransferQueue(lambda: None, fifo_per_destination=False, is_stream=None,
                                        key=lambda p: 1), rate=2.0, wake=lambda: None, clock=lambda: t[0])
    for m in range(6):
        for off in (0, 10):
            q.push(Piece(f"m{m}", "x", off, 20, 0, "gw", "u", ["v"], 1, 0.0, 0.0, "", 2, b"0123456789"))
    sent = []
    while t[0] < 2.005:
        p = q.pop()
        if p is not None:
            sent.append((p.msg_id, p.off))
        t[0] += 0.01
    assert [m for m, off in sent if off == 0] == ["m0", "m1", "m2", "m3", "m4"]   # 1 + 2 msg/s x 2 s
    assert sent[:4] == [("m0", 0), ("m0", 10), ("m1", 0), ("m1", 10)]    # the rest of a message needs no token
    assert q.sent == 5


# -- load-balancing deactivation at the rules ------------------------------------------------------------
def copy(msg: str) -> Piece:
    return Piece(msg, "mobile", 0, 10, 0, "s1", "u", ["v"], 1, 0.0, 0.0, "", 1, b"x" * 10)


def test_deactivation_affects_new_picks_only_and_never_orphans():
    rules = RuleSet(parse_rules([{"match": {"dst": "mobile"}, "round_robin": ["o1", "o2"]}], NEIGHBOURS))
    up = lambda h: True    # noqa: E731
    first = {m: rules.pick(copy(m), up)[0] for m in ("a", "b", "c", "d")}
    assert sorted(first.values()) == ["o1", "o1", "o2", "o2"]
    for m in first:                                       # remembered choices stand
        assert rules.pick(copy(m), up, avoid={"o1"})[0] == first[m]
    assert {rules.pick(copy(f"n{i}"), up, avoid={"o1"})[0] for i in range(6)} == {"o2"}
    only_o1 = lambda h: h == "o1"    # noqa: E731
    assert rules.pick(copy("z"), only_o1, avoid={"o1"})[0] == "o1"          # the only usable one: still used
    assert rules.forget("o1") == 2 + 1
    assert rules.pick(copy("a" if first["a"] == "o1" else "b"), up, avoid={"o1"})[0] == "o2"
