"""EMG gateway policies with real daemons on loopback (node/gateway/): s1 -> gw -> o1, gw the gateway.

One network for the module. gw takes at most THROUGHPUT msg/s from its incoming connector s1 and IN1 msg/s from
its local user `in1`, and sends at most O1_RATE msg/s to o1; its users `locked` (locked for an hour) and `poor`
(no credits) are refused with the reason, `two` has two credits. The policy starts with gamma 0 (no action) and
a threshold out of reach; the last test sets gamma 1 and a low threshold.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from node.errors import UserError
from node.rpc import gateway_pb2, gateway_pb2_grpc
from nodenet_support import FAST, wait_until

pytestmark = pytest.mark.timeout(120)
THROUGHPUT = 4.0          # msg/s s1 may hand gw
BURST = 16                # messages s1 offers at once: about BURST / THROUGHPUT s to pass gw
IN1 = 40.0                # msg/s the user in1 may submit at gw
O1_RATE = 10.0            # msg/s gw sends to o1
PERIOD = 0.1              # s, the policy manager's tick
THRESHOLD, LOWER = 20, 10


@pytest.fixture(scope="module")
def net():
    from testbed.localnet import LocalNet
    gateway = {"enabled": True, "gamma": 0.0, "actions": ["throttle"], "period": PERIOD, "threshold": 100_000,
               "lower": 99_999, "outgoing": {"o1": {"rate": O1_RATE}},
               "incoming": {"s1": {"neighbour": "s1", "throughput": THROUGHPUT}, "in1": {"user": "in1", "throughput": IN1}},
               "users": {"locked": {"locked_until": time.time() + 3600}, "poor": {"credits": 0},
                         "two": {"credits": 2}}}
    work = Path(tempfile.mkdtemp(prefix="wanbed-gateway-"))
    n = LocalNet.build(work, ["s1", "gw", "o1"], [("s1", "gw"), ("gw", "o1")], per_node={"gw": {"gateway": gateway}},
                       **FAST)
    try:
        n.start()
        n.wait_sessions()
        yield n
    finally:
        n.close()
        shutil.rmtree(work, ignore_errors=True)


def test_locked_and_creditless_users_are_refused_with_the_reason(net):
    with net.client("gw") as c:
        locked = c.send(["bob@o1"], size=100, originator="locked")
        poor = c.send(["bob@o1"], size=100, originator="poor")
        two = [c.send(["bob@o1"], size=100, originator="two") for _ in range(3)]
        g = c.gateway()
    assert not locked.accepted and locked.reason.startswith("locked until ")
    assert not poor.accepted and poor.reason == "no credits left"
    assert [r.accepted for r in two] == [True, True, False] and two[2].reason == "no credits left"
    refused = {r["originator"]: r["reason"] for r in net.records("gw", "submission") if not r["accepted"]}
    assert refused["locked"] == locked.reason and refused["poor"] == "no credits left"
    assert g["users"]["two"]["credits"] == 0 and g["refused"]["locked"] == 1 and g["refused"]["no_credits"] == 2


def test_set_gateway_refuses_bad_values_and_keeps_the_old_policy(net, capsys, monkeypatch):
    with net.client("gw") as c:
        assert c.gateway(gamma=0.25)["gamma"] == 0.25
        for bad in ({"gamma": math.nan}, {"gamma": math.inf}, {"gamma": 1.5}, {"lower": 100_000}, {"threshold": 0}):
            with pytest.raises(UserError, match="gamma must be|lower|threshold must be"):
                c.gateway(**bad)
        g = c.gateway()
        ok, why = c.gateway_request("alice", 1.0, 0.2, 99.0)      # MAXRATE(0.25) = half of the 44 msg/s idle
        no, why_not = c.gateway_request("alice", 1.0, 0.9, 99.0)
    assert (g["gamma"], g["threshold"]) == (0.25, 100_000)
    assert ok and "inside the guarantee area" in why
    assert not no and "outside the guarantee area" in why_not
    assert [(x["event"], x["action"]) for x in net.records("gw", "gateway")][-3:] == \
        [("set", "none"), ("request", "accept"), ("request", "refuse")]
    with net.client("s1") as c, pytest.raises(UserError, match="has no gateway"):
        c.gateway()
    addr = net.nodes["gw"].mgmt
    from testbed.cli import main          # found by name, as the CLI tests find theirs (not any running network)
    monkeypatch.setenv("WANBED_NODES", ",".join(f"{name}={node.mgmt}" for name, node in net.nodes.items()))
    monkeypatch.delenv("WANBED_NODE_ADDRESS", raising=False)
    assert main(["gateway", "gw", "--gamma", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gamma"] == 1.0
    assert main(["gateway", "gw", "--request", "alice", "--throughput", "10",
                 "--guarantee", "0.5", "--percent", "90"]) == 0
    assert capsys.readouterr().out.startswith("gw: refuse alice: outside the guarantee area")   # MAXRATE(1) = 0
    assert main(["gateway", "gw", "--gamma", "nan"]) == 2
    assert main(["gateway", "s1"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "has no gateway" in err[1]
    assert main(["gateway", "gw", "--gamma", "0"]) == 0
    assert "gw: gamma 0," in capsys.readouterr().out
    with grpc.insecure_channel(addr) as ch:          # the raw call: INVALID_ARGUMENT, not a traceback
        with pytest.raises(grpc.RpcError) as e:
            gateway_pb2_grpc.GatewayStub(ch).SetGateway(gateway_pb2.SetGatewayRequest(gamma=math.nan), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_neighbour_over_its_throughput_is_deferred_not_lost(net):
    with net.client("s1") as c:
        ids = [c.send(["carol@o1"], size=100).msg_id for _ in range(BURST)]
    assert all(ids)
    began = time.monotonic()

    def arrived() -> bool:
        with net.client("o1") as c:
            return {m.msg_id for m in c.mailbox("carol")} >= set(ids)
    # BURST messages at THROUGHPUT msg/s after one second's worth at once, plus the senders' back-off (x2)
    wait_until(arrived, 2 * BURST / THROUGHPUT + 5, 0.2, what="every deferred message at o1")
    took = time.monotonic() - began
    assert took >= (BURST - THROUGHPUT - 1) / THROUGHPUT * 0.9       # paced, not let through at once
    with net.client("gw") as c:
        g = c.gateway()
    assert g["incoming"]["s1"]["deferred"] > 0 and g["incoming"]["s1"]["accepted"] >= BURST
    metrics = json.loads(json.dumps(net.records("gw", "metrics")[-1]))
    assert "gateway" in metrics


def test_gamma_1_holds_the_queue_in_a_band_around_the_threshold(net):
    """in1 submits faster than o1 takes: the queue passes the threshold, MAXRATE(1) = 0 refuses in1 `throttled`
    until it drains below the lower one, then its THROUGHPUT is back. Within a tick the queue moves at most by
    (IN1 - O1_RATE) x PERIOD up or O1_RATE x PERIOD down; twice that (and the scheduler) is the tolerance."""
    with net.client("gw") as c:
        c.gateway(gamma=1.0, threshold=THRESHOLD, lower=LOWER)
        samples, refused = [], 0
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            r = c.send(["dave@o1"], size=10, originator="in1")
            refused += not r.accepted and r.reason == "throttled"
            samples.append(c.gateway()["outgoing"]["o1"]["queue"])
            time.sleep(0.01)
        c.gateway(gamma=0.0, threshold=100_000, lower=99_999)
    first = next(i for i, q in enumerate(samples) if q > THRESHOLD)
    held = samples[first:]
    slack = 2 * PERIOD
    assert max(held) <= THRESHOLD + (IN1 - O1_RATE) * slack + 3
    assert min(held) >= LOWER - O1_RATE * slack - 3
    lines = [(x["event"], x["action"]) for x in net.records("gw", "gateway")]
    assert ("queue_high", "throttle") in lines and ("queue_low", "restore") in lines and refused > 0
