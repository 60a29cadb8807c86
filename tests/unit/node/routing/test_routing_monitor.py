"""The link monitor: estimator arithmetic without sockets, then real UDP probes on 127.0.0.1."""
from __future__ import annotations

import asyncio
import logging
import math
import socket
import statistics
import threading
import struct
import time

import pytest

from node.routing.config import CostConfig, MonitorConfig, ProbeLinkConfig, RoutingConfig
from node.errors import ConfigError
from node.routing.monitor import (REFUSALS, REQUEST, RESPONSE, SEQ_START, LinkEstimator, LinkMonitor, Probe, _tag,
                                  authentic, changed_enough, decode_probe, link_cost, parse_addr, round_trip,
                                  window_stats)

THESIS = [1, 1, 2, 1, 1, 0, 1, 10, 1, 2]


def est_for(interval: float = 1.0, **kw) -> LinkEstimator:
    return LinkEstimator(MonitorConfig(**kw), interval)


# --- estimator ------------------------------------------------------------------------------------------

def test_latency_is_half_the_round_trip() -> None:
    est = est_for()
    assert not est.measured
    seq = est.probe(100.0)
    assert est.on_answer(seq, 100.0, 100.040)
    assert est.measured and est.answered == 1 and est.sent == 1
    assert est.latency_ms == pytest.approx(20.0)


def test_jitter_follows_rfc3550() -> None:
    est = est_for(z=100.0)
    for x in (10.0, 12.0, 11.0, 15.0):
        est.add_sample(x)
    j = 0.0
    for d in (2.0, 1.0, 4.0):
        j += (d - j) / 16
    assert est.jitter_ms == pytest.approx(j) == pytest.approx(0.41845703125)


def test_z_test_on_the_thesis_example() -> None:
    assert statistics.fmean(THESIS) == 2.0
    mean, sd = window_stats(THESIS, 3.0)          # |10 - 2| / 2.72 = 2.94: kept at z = 3
    assert mean == pytest.approx(2.0)
    mean, sd = window_stats(THESIS, 2.0)          # ... and dropped at z = 2
    assert mean == pytest.approx(10 / 9)
    assert round(mean, 1) == 1.1
    assert sd == pytest.approx(statistics.pstdev([x for x in THESIS if x != 10]))
    assert window_stats([5.0, 5.0, 5.0], 0.5) == (5.0, 0.0)    # sd 0: nothing is an outlier


def test_estimator_drops_the_outlier_from_its_window() -> None:
    est = est_for(window=10, z=2.0, alpha=1.0)    # alpha 1: latency is the last window mean
    for x in THESIS:
        est.add_sample(float(x))
    assert est.latency_ms == pytest.approx(10 / 9)


def test_latency_is_an_ema_of_window_means() -> None:
    est = est_for(window=2, z=100.0, alpha=0.5)
    est.add_sample(10.0)                          # window mean 10: the first value
    assert est.latency_ms == 10.0
    est.add_sample(20.0)                          # window mean 15
    assert est.latency_ms == pytest.approx(12.5)
    est.add_sample(30.0)                          # window (20, 30): mean 25
    assert est.latency_ms == pytest.approx(18.75)
    assert est.sd_ms == pytest.approx(5.0)


def test_a_gap_counts_every_missing_probe() -> None:
    est = est_for()
    seqs = [est.probe(0.0) for _ in range(5)]
    assert est.on_answer(seqs[0], 0.0, 0.01)
    assert est.on_answer(seqs[4], 0.0, 0.01)       # 2, 3 and 4 overtaken: lost
    assert est.settled == 5 and est.loss == pytest.approx(3 / 5)
    assert not est.on_answer(seqs[2], 0.0, 0.02)   # late: already counted lost
    assert not est.on_answer(seqs[4], 0.0, 0.02)   # duplicate
    assert est.answered == 2 and est.loss == pytest.approx(3 / 5)


def test_timeout_settles_and_late_answer_is_not_double_counted() -> None:
    est = est_for(interval=1.0)                     # timeout 0: max(3 intervals, 1 s) = 3 s
    assert est.timeout == 3.0
    assert est_for(interval=0.1).timeout == 1.0
    assert est_for(interval=0.1, timeout=0.2).timeout == 0.2
    seq = est.probe(10.0)
    assert est.expire(12.9) == 0 and est.settled == 0 and est.loss == 0.0
    assert est.expire(13.1) == 1 and est.loss == 1.0
    assert not est.on_answer(seq, 10.0, 13.2)
    assert est.answered == 0 and est.settled == 1 and not est.measured


def test_loss_window_forgets_old_losses() -> None:
    est = est_for(loss_window=4)
    est.probe(0.0)
    est.expire(10.0)
    assert est.loss == 1.0
    for i in range(3):
        est.on_answer(est.probe(20.0 + i), 20.0 + i, 20.001 + i)
    assert est.loss == pytest.approx(1 / 4)
    est.on_answer(est.probe(30.0), 30.0, 30.001)
    assert est.loss == 0.0


def test_a_window_too_small_for_the_z_test_to_drop_anything_is_refused() -> None:
    # Samuelson: with the population sd no sample of n lies past sqrt(n - 1) sd, so at z = 2 five cannot
    kept, dropped = [0.0] * 4 + [10.0], [0.0] * 5 + [10.0]
    assert window_stats(kept, 2.0)[0] == pytest.approx(2.0) and window_stats(dropped, 2.0)[0] == 0.0
    for z, smallest in ((2.0, 6), (3.0, 11), (1.5, 4)):
        MonitorConfig(window=smallest, z=z).validate({})
        with pytest.raises(ConfigError, match=rf"^routing\.monitor\.window must be at least floor\(z\^2\) \+ 2 = "
                                              rf"{smallest} at z = {z:g} \(got {smallest - 1}\)"):
            MonitorConfig(window=smallest - 1, z=z).validate({})


def test_settle_window_is_two_latency_windows_on_the_slowest_probed_link() -> None:
    assert RoutingConfig(mode="dynamic").settle == 2 * 8 * 1.0
    links = {"n2": ProbeLinkConfig(interval=2.0), "n3": ProbeLinkConfig(interval=9.0, probe=False)}
    assert RoutingConfig(mode="dynamic", monitor=MonitorConfig(window=6, links=links)).settle == 2 * 6 * 2.0
    assert RoutingConfig(mode="static").settle == 0.0       # no monitor: every link one quantum from the start


# --- cost, threshold, datagrams -------------------------------------------------------------------------

def test_cost_formula_and_quantum() -> None:
    est = est_for(window=2, alpha=1.0)
    cost = CostConfig(a=1.0, b=2.0, c=100.0, d=4.0, quantum=1.0)
    assert link_cost(est, cost) == 1.0              # unmeasured: one quantum
    est.add_sample(10.0)
    est.add_sample(14.0)                            # latency 12, jitter 4/16 = 0.25, loss 0
    assert link_cost(est, cost) == 1 + 2 * 12 + 4 * 0.25
    q5 = CostConfig(a=0.0, b=1.0, c=0.0, d=0.0, quantum=5.0)
    for latency, want in ((12.4, 10.0), (12.6, 15.0), (0.2, 5.0)):
        e = est_for(alpha=1.0)
        e.add_sample(latency)
        assert link_cost(e, q5) == want
    dead = est_for(interval=0.1, timeout=0.2)
    dead.probe(0.0)
    dead.expire(1.0)                                # never answered, but known lost: expensive
    assert link_cost(dead, CostConfig()) == 1000.0
    assert link_cost(est_for(alpha=1.0), CostConfig(quantum=0.1)) == 0.1


def test_changed_enough() -> None:
    assert changed_enough(5.0, None, 0.1)
    assert not changed_enough(10.5, 10.0, 0.1)
    assert not changed_enough(11.0, 10.0, 0.1)     # exactly the threshold: not more than it
    assert changed_enough(11.5, 10.0, 0.1)
    assert changed_enough(8.5, 10.0, 0.1)
    assert changed_enough(10.1, 10.0, 0.0)
    assert not changed_enough(10.0, 10.0, 0.0)
    assert changed_enough(1.0, 0.0, 0.5) and not changed_enough(0.0, 0.0, 0.5)


KEY = bytes(range(32))


def test_datagram_codec_and_addresses() -> None:
    p = Probe(REQUEST, 2**64 - 1, 12.5, "n1", "n2")
    data = p.encode(KEY)
    assert decode_probe(data) == p and authentic(data, KEY)
    assert data[:2] == b"WB" and data[2] == 3 and data[38:42] == b"n1n2" and len(data) == 38 + 4 + 16
    answer = Probe(RESPONSE, 5, 12.5, "n1", "n2", 1e9 + 0.25, 1e9 + 0.5)
    assert decode_probe(answer.encode(KEY)) == answer                # t2 and t3 go through
    assert not authentic(data, bytes(32)) and not authentic(data[:-1] + bytes([data[-1] ^ 1]), KEY)
    assert not authentic(data[:3] + b"\x02" + data[4:], KEY)        # the type is covered: no request as answer
    stamped = answer.encode(KEY)
    assert not authentic(stamped[:20] + bytes([stamped[20] ^ 1]) + stamped[21:], KEY)   # so are t2 and t3
    assert not authentic(stamped[:28] + bytes([stamped[28] ^ 1]) + stamped[29:], KEY)
    nan = struct.pack("!d", math.nan)
    version2 = struct.pack("!2sBBQdBB", b"WB", 2, REQUEST, 1, 12.5, 2, 2) + b"n1n2"
    for bad in (b"", b"WB", data[:36], b"XX" + data[2:], data[:2] + b"\x01" + data[3:],
                data[:2] + b"\x02" + data[3:], version2 + _tag(KEY, version2),
                data[:3] + b"\x07" + data[4:], data + b"x" * 10, data[:-16],
                data[:20] + nan + data[28:], data[:28] + nan + data[36:],
                data[:36] + b"\x00\x02" + data[38:], data[:36] + b"\x03\x02" + data[38:],
                data[:38] + b"\xff\xfe" + data[40:]):
        assert decode_probe(bad) is None
    assert parse_addr("10.0.0.1:7000") == ("10.0.0.1", 7000)
    assert parse_addr("[::1]:7000") == ("::1", 7000)
    assert parse_addr("host-a:1") == ("host-a", 1)
    assert parse_addr("unix:/tmp/x.sock") is None and parse_addr("nohost") is None


# --- real UDP -------------------------------------------------------------------------------------------

def routing_for(**monitor) -> RoutingConfig:
    return RoutingConfig(mode="dynamic", monitor=MonitorConfig(**monitor))


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_monitors_probe_each_other() -> None:
    async def go() -> None:
        pa, pb = free_udp_port(), free_udp_port()
        costs: dict[str, list] = {"a": [], "b": []}
        routing = routing_for(interval=0.05, timeout=0.5)
        a = LinkMonitor("a", routing, {"b": f"127.0.0.1:{pb}", "u": "unix:/tmp/u.sock"}, [f"127.0.0.1:{pa}"],
                        lambda peer, c: costs["a"].append((peer, c)))
        b = LinkMonitor("b", routing, {"a": f"127.0.0.1:{pa}"}, [f"127.0.0.1:{pb}"],
                        lambda peer, c: costs["b"].append((peer, c)))
        await a.start()
        await b.start()
        for_a, for_b = b.session("a", True), a.session("b", True)      # the session came up at both ends ...
        assert a.take_key("b", for_a) and b.take_key("a", for_b)        # ... and each sent the other a key
        try:
            assert a.port == pa and a.probed == ["b"]
            await asyncio.sleep(0.5)
        finally:
            await a.stop()
            await b.stop()
            await a.stop()                          # idempotent
        for mon, peer in ((a, "b"), (b, "a")):
            snap = mon.snapshot()[peer]
            assert snap["probed"] and snap["probes_answered"] >= 3
            assert snap["probes_sent"] >= snap["probes_answered"]
            assert snap["latency_ms"] < 50 and snap["loss"] == 0.0
        assert costs["a"] and costs["a"][0] == ("b", 1.0) and costs["b"][0] == ("a", 1.0)
        assert a.cost("b") == 1.0
        assert a.snapshot()["u"] == {"latency_ms": 0.0, "sd_ms": 0.0, "jitter_ms": 0.0, "loss": 0.0,
                                     "probes_sent": 0, "probes_answered": 0, "samples_dropped": 0, "cost": 1.0,
                                     "probed": False}
        a.republish("b")                            # forgotten: the next estimate goes out again
        assert a.cost("b") == 1.0
    asyncio.run(go())


def test_silent_neighbour_goes_to_full_loss() -> None:
    async def go() -> None:
        published: list[tuple[str, float]] = []
        routing = routing_for(interval=0.02, timeout=0.06, links={"x": ProbeLinkConfig(probe=False)})
        # v6 cannot be reached from an IPv4 socket: every send fails, and each counts as a lost probe
        neighbours = {"b": f"127.0.0.1:{free_udp_port()}", "x": "127.0.0.1:9", "v6": "[::1]:9"}
        mon = LinkMonitor("a", routing, neighbours, ["127.0.0.1:0"], lambda peer, c: published.append((peer, c)))
        await mon.start()
        for peer in neighbours:
            mon.take_key(peer, KEY)
        try:
            await asyncio.sleep(0.3)
        finally:
            await mon.stop()
        snap = mon.snapshot()
        assert snap["b"]["loss"] == 1.0 and snap["b"]["probes_answered"] == 0
        assert snap["b"]["probes_sent"] >= 5
        assert snap["v6"]["loss"] == 1.0 and snap["v6"]["probes_sent"] >= 5
        assert mon.cost("b") == 1000.0 and sorted(published) == [("b", 1000.0), ("v6", 1000.0)]
        assert not snap["x"]["probed"] and mon.cost("x") == 1.0
    asyncio.run(go())


class _Client(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.got.put_nowait(data)


def test_only_well_formed_authentic_requests_for_this_node_are_answered(caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        mon = LinkMonitor("me", routing_for(), {"cl": "127.0.0.1:9"}, ["127.0.0.1:0"], lambda peer, c: None)
        await mon.start()
        assert mon.session("stranger", True) is None             # keys go to neighbours only
        key = mon.session("cl", True)
        assert key is not None and len(key) == 32
        loop = asyncio.get_running_loop()
        transport, client = await loop.create_datagram_endpoint(_Client, remote_addr=("127.0.0.1", mon.port))
        try:
            good = Probe(REQUEST, 7, 1.5, "cl", "me")
            for bad in (b"XX" + good.encode(key)[2:], b"\x00", Probe(REQUEST, 7, 1.5, "cl", "other").encode(key),
                        Probe(RESPONSE, 7, 1.5, "me", "nobody").encode(key), b"XX" + good.encode(key)[2:],
                        good.encode(bytes(32)), Probe(REQUEST, 7, 1.5, "x", "me").encode(key)):
                transport.sendto(bad)
            sent_at = time.time()
            transport.sendto(good.encode(key))
            answer = await asyncio.wait_for(client.got.get(), 1.0)
            got = decode_probe(answer)
            assert got is not None and authentic(answer, key)
            assert (got.kind, got.seq, got.stamp, got.prober, got.addressee) == (RESPONSE, 7, 1.5, "cl", "me")
            assert sent_at <= got.received <= got.replied <= time.time()     # t2, t3: on the wall clock
            await asyncio.sleep(0.05)
            assert client.got.empty()               # nothing came back for the bad ones
            assert mon.refusals() == {"malformed": 3, "name": 2, "key": 1, "mac": 1, "seq": 0}
            new_key = mon.session("cl", True)       # the next session: the old key is stale
            assert new_key != key
            transport.sendto(good.encode(key))
            await asyncio.sleep(0.05)
            mon.session("cl", False)                # no session: no key at all
            transport.sendto(good.encode(new_key))
            await asyncio.sleep(0.05)
            assert client.got.empty() and mon.refused["mac"] == 2 and mon.refused["key"] == 2
        finally:
            transport.close()
            await mon.stop()
    with caplog.at_level(logging.WARNING, logger="node.routing.monitor"):
        asyncio.run(go())
    malformed = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(malformed) == 1 and "node me" in malformed[0].getMessage()   # once per minute, not per datagram


class _Neighbour:
    """The far end of a link, played by the test on a real UDP socket: it sees the monitor's requests."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(1.0)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"

    async def request(self) -> tuple[bytes, tuple]:
        return await asyncio.to_thread(self.sock.recvfrom, 200)


def test_only_authentic_answers_to_outstanding_probes_count() -> None:
    """A wrong tag, a replay, a stale key after the session came up again, no key: refused, counted, and the
    estimate does not move; the right answer under the current key counts once."""
    async def go() -> None:
        nb = _Neighbour()
        mon = LinkMonitor("a", routing_for(interval=0.02, timeout=30.0), {"b": nb.addr}, ["127.0.0.1:0"],
                          lambda peer, c: None)
        await mon.start()
        est = mon.estimator("b")
        try:
            await asyncio.sleep(0.1)
            assert est.sent == 0                             # no key, no probe
            mon.session("b", True)
            key = bytes(range(32))
            assert not mon.take_key("b", b"short") and mon.take_key("b", key)
            data, src = await nb.request()
            req = decode_probe(data)
            assert req is not None and req.kind == REQUEST and (req.prober, req.addressee) == ("a", "b")
            assert authentic(data, key) and src[1] == mon.port
            answer = Probe(RESPONSE, req.seq, req.stamp, "a", "b")
            nb.sock.sendto(answer.encode(bytes(32)), src)      # wrong key
            nb.sock.sendto(Probe(RESPONSE, req.seq, req.stamp - 1.0, "a", "b").encode(key), src)   # lying stamp
            await asyncio.sleep(0.05)
            assert est.answered == 0
            nb.sock.sendto(answer.encode(key), src)
            nb.sock.sendto(answer.encode(key), src)             # the same answer again
            await asyncio.sleep(0.05)
            assert est.answered == 1 and mon.refused["mac"] == 1 and mon.refused["seq"] == 2
            latency = est.latency_ms
            mon.session("b", True)                              # a new session: a's key for b is gone ...
            sent = est.sent
            await asyncio.sleep(0.1)
            assert est.sent == sent                             # ... so a stops probing until b sends one
            stale = Probe(RESPONSE, max(est._pending, default=req.seq), 0.0, "a", "b")
            nb.sock.sendto(stale.encode(key), src)
            await asyncio.sleep(0.05)
            assert mon.refused["key"] == 1
            mon.take_key("b", bytes(32))                        # b's key of the new session
            while True:
                data, _ = await nb.request()
                if authentic(data, bytes(32)):
                    break
            req = decode_probe(data)
            nb.sock.sendto(Probe(RESPONSE, req.seq, req.stamp, "a", "b").encode(key), src)   # the old key
            await asyncio.sleep(0.05)
            assert est.answered == 1 and est.latency_ms == latency and mon.refused["mac"] == 2
            assert set(mon.refusals()) == set(REFUSALS)
        finally:
            await mon.stop()
            nb.sock.close()
    asyncio.run(go())


def test_sequence_numbers_start_at_random() -> None:
    starts = {est_for().probe(0.0) for _ in range(8)}
    assert len(starts) == 8 and all(1 <= s <= SEQ_START for s in starts)


def test_an_answer_must_echo_the_probe_send_time() -> None:
    est = est_for()
    seq = est.probe(100.0)
    assert not est.on_answer(seq, 99.0, 100.040)            # not the stamp the probe carried
    assert est.on_answer(seq, 100.0, 100.040) and est.latency_ms == pytest.approx(20.0)


def test_probe_sockets_are_bound_to_each_data_address_only() -> None:
    async def go() -> None:
        port = free_udp_port()
        mon = LinkMonitor("a", routing_for(), {}, [f"127.0.0.1:{port}", f"127.0.0.2:{port}", f"127.0.0.1:{port}",
                                                   "unix:/tmp/x.sock"], lambda peer, c: None)
        await mon.start()
        try:
            assert mon.addresses == [("127.0.0.1", port), ("127.0.0.2", port)]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
                other.bind(("127.0.0.3", port))               # no wildcard socket holds the port
        finally:
            await mon.stop()
        held = LinkMonitor("a", routing_for(), {}, [f"127.0.0.1:{port}", "192.0.2.1:1"], lambda peer, c: None)
        with pytest.raises(ConfigError, match=r"cannot listen for link probes on udp 192\.0\.2\.1:1"):
            await held.start()
        assert held.addresses == [] and held.port is None     # the socket bound before was closed again
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as again:
            again.bind(("127.0.0.1", port))
    asyncio.run(go())


def test_forget_losses_starts_the_loss_count_afresh_and_keeps_latency() -> None:
    from node.routing.config import MonitorConfig
    from node.routing.monitor import LinkEstimator
    est = LinkEstimator(MonitorConfig(), interval=1.0)
    lost = est.probe(0.0)
    answered = est.probe(1.0)
    assert est.on_answer(answered, 1.0, 1.02)          # the gap settles the first as lost
    assert est.loss == 0.5 and est.latency_ms == pytest.approx(10.0)
    est.forget_losses()
    assert est.loss == 0.0 and est.settled == 0 and est.latency_ms == pytest.approx(10.0)
    assert not est.on_answer(lost, 0.0, 1.5)            # an answer to a forgotten probe changes nothing


# --- kernel stamps and the addressee's turnaround ---------------------------------------------------------

def test_round_trip_takes_out_the_turnaround_and_drops_impossible_stamps() -> None:
    # t1 sent, t2 received there, t3 answered there, t4 received back: 36 ms, 30 of them turnaround
    assert round_trip(100.0, 100.002, 100.032, 100.036) == pytest.approx(0.006)
    assert round_trip(100.0, 7.0, 7.0, 100.010) == pytest.approx(0.010)     # the clocks need not agree
    assert round_trip(100.0, 100.002, 100.032, 100.036, bound=0.040) == pytest.approx(0.006)
    # our wall clock stepped forward 5 s between t1 and t4: clamped to the monotonic round trip
    assert round_trip(100.0, 100.002, 100.032, 105.036, bound=0.040) == pytest.approx(0.010)
    assert round_trip(100.0, 100.032, 100.002, 100.036) is None       # t3 < t2
    assert round_trip(100.0, 100.002, 100.050, 100.036) is None       # a turnaround longer than the round trip
    assert round_trip(100.0, 100.002, 100.032, 99.9) is None           # our clock stepped back: negative
    assert round_trip(100.0, 100.0, 100.0, 99.9) is None
    assert round_trip(100.0, 5.0, 5.01, 100.01) == pytest.approx(0.0, abs=1e-9)   # the whole round trip was turnaround
    est = est_for()
    seq = est.probe(50.0, 1000.0)                  # monotonic 50 for the timeout, t1 = 1000 on the wall clock
    assert not est.on_answer(seq, 50.0, 1000.036)  # it carried t1, not the monotonic time
    assert est.on_answer(seq, 1000.0, 1000.036, 7.002, 7.032, now=50.040)
    assert est.latency_ms == pytest.approx(3.0) and est.dropped == 0
    bad = est.probe(60.0, 1010.0)
    assert est.on_answer(bad, 1010.0, 1010.036, 7.032, 7.002, now=60.040)  # answered, but no sample
    assert est.answered == 2 and est.dropped == 1 and est.loss == 0.0 and est.latency_ms == pytest.approx(3.0)


STALL = 0.030      # seconds the answering daemon's event loop is blocked at a time


def test_a_stalled_answering_loop_does_not_lengthen_the_round_trip() -> None:
    """b answers from an event loop that is blocked STALL at a time with one turn between stalls, in which its
    stall comes before its reads: a request waits there one to two STALLs before b reads it. The samples must
    still be the loopback round trip's (tens of microseconds): kernel receive stamps, b's turnaround taken out.
    From loop times alone every sample is STALL / 2 or more (half of a round trip of at least one STALL)."""
    typical_ms = STALL * 1000 / 6                   # a third of the least error of loop times
    routing = routing_for(interval=0.04, timeout=1.0)
    pa, pb = free_udp_port(), free_udp_port()
    a = LinkMonitor("a", routing, {"b": f"127.0.0.1:{pb}"}, [f"127.0.0.1:{pa}"], lambda peer, c: None)
    b = LinkMonitor("b", routing, {"a": f"127.0.0.1:{pa}"}, [f"127.0.0.1:{pb}"], lambda peer, c: None)
    b_loop = asyncio.new_event_loop()
    b_thread = threading.Thread(target=b_loop.run_forever, name="b's loop")
    b_thread.start()
    stalls: list[int] = [0]
    stop = threading.Event()

    async def stall() -> None:            # b's loop busy but for one turn after each STALL
        while not stop.is_set():
            time.sleep(STALL)
            stalls[0] += 1
            await asyncio.sleep(0)

    async def b_up() -> bytes | None:
        await b.start()
        key = b.session("a", True)        # b answers a's probes under this key (and does not probe a itself)
        asyncio.get_running_loop().create_task(stall())
        return key

    def on_b(coro) -> object:
        return asyncio.run_coroutine_threadsafe(coro, b_loop).result(5.0)

    async def go() -> None:
        await a.start()
        try:
            a.session("b", True)
            assert a.take_key("b", on_b(b_up()))
            await asyncio.sleep(0.6)
        finally:
            await a.stop()
    try:
        asyncio.run(go())
    finally:
        stop.set()
        on_b(asyncio.sleep(STALL))        # lets the stall task see `stop`
        on_b(b.stop())
        b_loop.call_soon_threadsafe(b_loop.stop)
        b_thread.join(5.0)
        b_loop.close()
    est = a.estimator("b")
    samples = list(est._samples)
    assert est.answered >= 5 and stalls[0] >= 0.6 / STALL / 2
    shown = f"latency samples {samples} ms with b's loop stalled {STALL * 1000:g} ms"
    # the median: on a loaded host one sample may still lose the CPU between a time stamp and its send
    assert statistics.median(samples) < typical_ms and max(samples) < STALL * 1000 / 2, shown
