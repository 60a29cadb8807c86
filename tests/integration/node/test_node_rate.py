"""MQ rate control with real daemons on loopback (node/rate/): clients c1, c2, c3 forward to root r.

One network for the module. R = 2 Mbit/s (250 kB/s, R/N = 83 kB/s), T = 0.5 s, client queues of 200 kB
(40 messages of 5 kB), one piece per message. Nobody consumes the root's mailbox here: its limit is far
above what the tests send. Tolerances derive from T and the measured round-trip time.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from nodenet_support import FAST, wait_until
from tests.integration.support import kill_with_pieces_in_flight

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
pytestmark = [pytest.mark.alone, pytest.mark.timeout(180)]
CLIENTS = ["c1", "c2", "c3"]
R = 2_000_000.0
T = 0.5
FAIR = R / len(CLIENTS)
QUEUE = 200_000
MSG = 5000
HOLD = FAST["session"]["hold_time"]
SCHEDULING = T / 5      # event-loop latency on a loaded 2-core host, on top of T + 2 RTT


@pytest.fixture(scope="module")
def net():
    from testbed.localnet import LocalNet
    common = {"rate_bps": R, "interval": T, "clients": CLIENTS}
    per = {"r": {"rate": {"role": "root", "consumer": "app", "queue_limit": 50_000_000, **common}}}
    for c in CLIENTS:
        per[c] = {"rate": {"role": "client", "root": "r", "queue_limit": QUEUE, "burst": MSG, **common}}
    n = LocalNet.build(Path(tempfile.mkdtemp(prefix="wanbed-rate-")), CLIENTS + ["r"],
                       [(c, "r") for c in CLIENTS], per_node=per, fragment_size=MSG, **FAST)
    try:
        n.start()
        n.wait_sessions()
        yield n
    finally:
        n.close()


def burst(net, node: str, count: int) -> tuple[list[str], list[float]]:
    """Submit `count` messages to app@r as fast as the node takes them: (accepted ids, their accept times)."""
    ids, times = [], []
    with net.client(node) as c:
        for _ in range(count):
            r = c.send(["app@r"], size=MSG)
            if r.accepted:
                ids.append(r.msg_id)
                times.append(time.time())
    return ids, times


def rtt(net) -> float:
    """An upper bound on the loopback round trip: the slowest of a few Stats calls."""
    worst = 0.0
    with net.client("r") as c:
        for _ in range(5):
            t = time.monotonic()
            c.stats()
            worst = max(worst, time.monotonic() - t)
    return worst


def in_mailbox(net, ids: list[str]) -> bool:
    with net.client("r") as c:
        have = {m.msg_id for m in c.mailbox("app")}
    return set(ids) <= have


def test_a_burst_gets_more_than_its_fair_share_within_t_plus_two_rtt(net):
    wait_until(lambda: any(x["event"] == "assign" for x in net.records("r", "rate")), 4 * T, 0.05,
               what="the root's first round")
    # a step burst: 35 messages at once fill c1's queue to ~85% (weight 8); its weight passes 0 at the 4th
    begin = time.time()
    ids, times = burst(net, "c1", 35)
    assert len(ids) == 35
    # c1's own record of the report its first weight above 0 made (the same clock as the assignment's record)
    weight_up = next(x["ts"] for x in net.records("c1", "rate") if x["event"] == "report" and x["ts"] >= begin
                     and x["weight"] > 0)
    assert weight_up <= times[3] + 0.05        # 4 x 5 kB = 20 kB = 10% of 200 kB
    bound = T + 2 * rtt(net) + SCHEDULING

    def raised():
        got = [x for x in net.records("c1", "rate") if x["event"] == "assigned" and x["ts"] >= weight_up
               and x["rate_bps"] > FAIR * 1.01]
        return got[0] if got else None
    first = wait_until(raised, 4 * T + HOLD, 0.02, what="c1 to get more than R/N")
    assert first["ts"] - weight_up <= bound, f"reacted after {first['ts'] - weight_up:.3f} s (bound {bound:.3f} s)"
    wait_until(lambda: in_mailbox(net, ids), 30.0, 0.2, what="the burst to reach the root")

    # every round the root made allocates exactly R
    rounds: dict[tuple[float, int], float] = {}
    for x in net.records("r", "rate"):
        if x["event"] == "assign":
            rounds[(x["round"], 0)] = rounds.get((x["round"], 0), 0.0) + x["rate_bps"]
    assert len(rounds) >= 3
    assert all(abs(total - R) <= 1e-6 * R for total in rounds.values()), rounds


def test_a_full_client_queue_refuses_with_overflow_and_loses_nothing(net):
    ids, _ = burst(net, "c2", 60)                # 300 kB offered to a 200 kB queue
    assert 40 <= len(ids) < 60                   # it took what fitted (plus what left meanwhile)
    refused = [x for x in net.records("c2", "submission") if not x["accepted"]]
    assert refused and all(x["reason"].startswith("overflow:") for x in refused)
    with net.client("c2") as c:
        assert c.stats()["rate"]["overflowed"] == len(refused)
    wait_until(lambda: in_mailbox(net, ids), 30.0, 0.2, what="every accepted message at the root")


def test_root_kill_resumes_control_without_loss(net):
    before = max(x["ts"] for x in net.records("r", "rate") if x["event"] == "assign")
    # c3 fills its queue and is given more than R/N ...
    start = time.time()
    ids, _ = burst(net, "c3", 30)
    wait_until(lambda: any(x["event"] == "assigned" and x["ts"] > start and x["rate_bps"] > FAIR
                           for x in net.records("c3", "rate")), 4 * T + HOLD, 0.02, what="c3 to get more than R/N")
    # ... then the root is killed -9 while c3 provably has pieces in flight to it
    resent = kill_with_pieces_in_flight(net, "r", "c3", lambda: ids.extend(burst(net, "c3", 10)[0]), HOLD)
    assert resent > 0
    more, _ = burst(net, "c3", 10)               # accepted while the root is down: c3 keeps them
    ids += more
    # the root stays silent: c3 keeps its last rate, then falls back to R/N after max(hold time, 2 T)
    last = [x for x in net.records("c3", "rate") if x["event"] in ("assigned", "fallback")][-1]
    assert last["rate_bps"] != FAIR
    silence = max(HOLD, 2 * T)
    fell = wait_until(lambda: next((x for x in net.records("c3", "rate") if x["event"] == "fallback"
                                    and x["ts"] > last["ts"]), None), silence + 2 * T + HOLD, 0.05,
                      what="c3 to fall back to R/N")
    assert fell["ts"] - last["ts"] >= silence and fell["rate_bps"] == pytest.approx(FAIR)
    with net.client("c3") as c:
        assert c.stats()["rate"]["rate_bps"] == pytest.approx(FAIR)
    net.start("r")
    restarted = time.time()
    # the restarted root runs its rounds again and c3 hears from it; c3 reports its filled queue
    wait_until(lambda: any(x["event"] == "assign" and x["ts"] > restarted for x in net.records("r", "rate")),
               4 * T + HOLD, 0.05, what="the restarted root's rounds")
    wait_until(lambda: any(x["event"] == "assigned" and x["ts"] > restarted for x in net.records("c3", "rate")),
               4 * T + 2 * HOLD, 0.05, what="c3 to be given a rate by the restarted root")
    assert before < restarted
    wait_until(lambda: in_mailbox(net, ids), 30.0, 0.2, what="everything c3 accepted at the restarted root")
