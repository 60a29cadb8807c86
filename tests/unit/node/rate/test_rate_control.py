"""MQ rate control's logic (node/rate/): deciles, the allocation rules, the token bucket's pacing, the admission
layer's bounds. The daemons are tested in tests/integration/node/test_node_rate.py."""
from __future__ import annotations

import math

import pytest

from node.config import ConfigError
from node.registry import config_from_dict as from_dict
from node.policy import PassThrough, make_policy as own_policy
from node.rate.admission import OVERFLOW, ROOT_FULL, RatePolicy
from node.rate.allocation import Report, allocate
from node.rate.bucket import TokenBucket
from node.rate.pacer import PacedQueue
from node.rate.subsystem import RateSubsystem
from node.rate.weights import decile
from node.piece import Piece
from node.states import PieceState as S


# -- deciles (the study's §4.2: X*10% <= U < (X+1)*10% -> w = X) ----------------------------------------------
@pytest.mark.parametrize("used,weight", [(0, 0), (99_999, 0), (100_000, 1), (199_999, 1), (500_000, 5),
                                         (899_999, 8), (900_000, 9), (999_999, 9), (1_000_000, 9),
                                         (2_000_000, 9), (-5, 0)])
def test_decile_boundaries(used, weight):
    assert decile(used, 1_000_000) == weight


def test_decile_of_a_zero_capacity_queue_is_full():
    assert decile(0, 0) == 9


# -- allocation --------------------------------------------------------------------------------------
def reports(*weights: int, backlog: tuple[int, ...] = ()) -> dict[str, Report]:
    backlog = backlog or tuple(w * 100_000 for w in weights)
    return {f"c{i + 1}": Report(weight=w, queue_bytes=b) for i, (w, b) in enumerate(zip(weights, backlog))}


def test_decile_rule_is_proportional_to_weights():
    r = allocate("decile", 1e6, reports(0, 6, 2))
    assert r == {"c1": 0.0, "c2": 750_000.0, "c3": 250_000.0}


def test_all_weights_zero_falls_back_to_equal_shares():
    r = allocate("decile", 1e6, reports(0, 0, 0))
    assert r == pytest.approx({c: 1e6 / 3 for c in ("c1", "c2", "c3")})


@pytest.mark.parametrize("rule", ["decile", "decile_plus_one", "backlog", "fixed"])
@pytest.mark.parametrize("weights", [(0, 0, 0), (9, 0, 0), (3, 5, 9), (1, 1, 1)])
def test_every_rule_allocates_exactly_r(rule, weights):
    r = allocate(rule, 1e6, reports(*weights))
    assert math.isclose(sum(r.values()), 1e6, rel_tol=1e-12)
    assert all(v >= 0 for v in r.values())


def test_decile_plus_one_gives_a_nonempty_queue_a_share():
    r = allocate("decile_plus_one", 1e6, reports(0, 9, 0, backlog=(5000, 950_000, 0)))
    assert r["c1"] == pytest.approx(1e6 * 1 / 11)
    assert r["c3"] == 0.0


def test_backlog_rule_and_fixed_rule():
    assert allocate("backlog", 900.0, reports(1, 1, 1, backlog=(100, 200, 600))) == \
        pytest.approx({"c1": 100.0, "c2": 200.0, "c3": 600.0})
    assert allocate("fixed", 900.0, reports(9, 0, 0)) == {"c1": 300.0, "c2": 300.0, "c3": 300.0}


# -- the token bucket ------------------------------------------------------------------------------------
def test_bucket_paces_to_its_rate_whatever_the_piece_size():
    """Drive a bucket with a fake clock: sending whenever it allows, the bytes sent over 100 s are
    rate x time within one depth plus one piece."""
    for piece in (100, 5000, 12_000):
        b = TokenBucket(rate=10_000.0, depth=10_000.0, tokens=10_000.0, stamp=0.0)
        t, sent = 0.0, 0
        while t < 100.0:
            if b.ready(t):
                b.spend(piece)
                sent += piece
            else:
                t += b.wait(t)
        assert abs(sent - 10_000.0 * 100.0) <= 10_000 + piece, piece


def test_bucket_rate_change_and_zero_rate():
    b = TokenBucket(rate=1000.0, depth=1000.0, tokens=0.0, stamp=0.0)
    b.spend(500)
    assert b.wait(0.0) == pytest.approx(0.5, abs=1e-5)
    b.set_rate(0.0, 0.25)           # 250 bytes accrued at the old rate; none from now on
    assert math.isinf(b.wait(10.0))
    b.set_rate(2000.0, 10.0)
    assert b.wait(10.0) == pytest.approx(250 / 2000, abs=1e-5)


# -- the paced queue and the admission layer ----------------------------------------------------------------
def cfg(role: str, **rate) -> object:
    base = {"name": "c1", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
            "neighbours": {"r": "127.0.0.1:3"}}
    if role == "root":
        base.update(name="r", neighbours={"c1": "127.0.0.1:3", "c2": "127.0.0.1:4"})
        rate = {"role": "root", "clients": ["c1", "c2"], "consumer": "app", **rate}
    else:
        rate = {"role": "client", "root": "r", "clients": ["c1", "c2"], **rate}
    return from_dict({**base, "rate": rate})


def layered(cfg, wake) -> tuple[RatePolicy, RateSubsystem]:
    """The node's policy as the engine builds it: the node's own, with rate control's layer over it."""
    sub = RateSubsystem(cfg)
    return sub.wrap_policy(own_policy(cfg, wake)), sub


def make_policy(cfg, wake) -> RatePolicy:
    return layered(cfg, wake)[0]


def piece(msg: str, dst: str = "r", size: int = 5000, users: list[str] | None = None) -> Piece:
    return Piece(msg, dst, 0, size, 0, "c1", "", users or ["app"], 1, 0.0, 0.0, "", 1, b"x" * size, S.QUEUED, size=size)


def test_client_queue_refuses_above_its_limit_and_frees_on_ack():
    pol = make_policy(cfg("client", queue_limit=12_000), lambda _p: None)
    assert isinstance(pol, RatePolicy) and isinstance(pol.inner, PassThrough)
    weights: list[int] = []
    pol.on_weight = weights.append
    a, b, c = piece("a"), piece("b"), piece("c")
    assert pol.admit_submission([a], 1, False) is None
    assert pol.admit_submission([b], 1, False) is None
    why = pol.admit_submission([c], 1, False)
    assert why is not None and why.startswith(OVERFLOW + ":")
    assert pol.overflowed == 1 and pol.queued == 10_000 and pol.weight == 8
    pol.forwarded(a)
    pol.forwarded(a)                 # counted off once, however many paths report it
    pol.dropped(a)
    assert pol.queued == 5000 and pol.sent_bytes == 5000
    assert pol.admit_submission([c], 1, False) is None
    assert weights == [4, 8, 4, 8]


def test_root_says_not_now_above_its_queue_and_takes_again_after_the_consumer():
    pol = make_policy(cfg("root", queue_limit=10_000, retry=0.5), lambda _p: None)
    assert isinstance(pol, RatePolicy)
    pol.delivered("m1", ["app"], 6000)
    assert pol.admit("c1", piece("x", dst="r")) is None
    pol.delivered("m2", ["app"], 6000)
    pol.delivered("m2", ["app"], 6000)          # one message counted once
    verdict = pol.admit("c1", piece("x", dst="r"))
    assert verdict is not None and verdict[0].startswith(ROOT_FULL) and verdict[1] == 0.5
    assert pol.admit("c1", piece("y", dst="r", users=["bob"])) is None      # not the consumer's: not its queue
    pol.release_mail("m1")
    assert pol.root_bytes == 6000 and pol.admit("c1", piece("x", dst="r")) is None


def test_paced_queue_pops_no_faster_than_the_bucket():
    now = [0.0]
    pol, sub = layered(cfg("client", burst=5000, rate_bps=80_000), lambda _p: None)   # R/N = 40 kbit/s = 5 kB/s
    woken: list[int] = []
    wake = lambda: woken.append(1)       # noqa: E731
    q = sub.wrap_queue("r", pol.make_queue("r", wake), wake)     # the engine's order: policy, then layers
    assert isinstance(q, PacedQueue)
    q._clock = lambda: now[0]
    pol.bucket.stamp = 0.0
    for i in range(40):
        q.push(piece(f"m{i}"))
    popped = []
    while now[0] < 10.0:              # poll every 10 ms for 10 s, popping whatever the pacer allows
        p = q.pop()
        if p is not None:
            popped.append(now[0])
        else:
            now[0] += 0.01
    # 5 kB/s of 5 kB pieces: one a second, plus the depth (one piece) and at most one piece of slack
    assert 10 <= len(popped) <= 12
    assert all(b - a >= 0.99 for a, b in zip(popped[2:], popped[3:]))      # steady state: one per second
    assert q.bytes == (40 - len(popped)) * 5000          # the inner queue's attributes show through
    q.set_rate(0.0)
    now[0] = 100.0
    while q.pop() is not None:        # what accrued before the rate went to 0 (at most the depth)
        pass
    assert not q.has_ready() and len(q) > 0


@pytest.mark.parametrize("rate,why", [
    ({"role": "client", "root": "x", "clients": ["c1"]}, "rate.root"),
    ({"role": "client", "root": "r", "clients": ["c2"]}, "must include this client"),
    ({"role": "client", "root": "r", "clients": []}, "rate.clients"),
    ({"role": "client", "root": "r", "clients": ["c1"], "policy": "magic"}, "rate.policy"),
    ({"role": "client", "root": "r", "clients": ["c1"], "interval": 0}, "positive"),
    ({"role": "boss"}, "rate.role"),
])
def test_bad_rate_config_is_one_clear_error(rate, why):
    with pytest.raises(ConfigError, match=why):
        from_dict({"name": "c1", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                   "neighbours": {"r": "127.0.0.1:3"}, "rate": rate})


def test_root_queue_sample_is_a_time_average():
    pol = make_policy(cfg("root", queue_limit=10_000), lambda _p: None)
    t = [100.0]
    pol._clock = lambda: t[0]
    pol.root_mean()                      # start a sample period at t = 100
    pol.delivered("m1", ["app"], 4000)   # 4000 bytes for 1 s ...
    t[0] = 101.0
    pol.release_mail("m1")               # ... then 0 for 1 s
    t[0] = 102.0
    assert pol.root_mean() == pytest.approx(2000.0)
    t[0] = 103.0
    assert pol.root_mean() == pytest.approx(0.0) and pol.root_bytes == 0
