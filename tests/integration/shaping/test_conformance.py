"""Conformance of every available shaping backend (here: wire; netem skips without the qdisc)."""
from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.shaping.base import LinkEnd
from testbed.topology.model import Direction, GilbertElliott

from shaping_rig import A_IP, B_IP, PROBE, LinkRig
from tests.integration.support import binomial_interval

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
pytestmark = [pytest.mark.alone, pytest.mark.timeout(90)]

# Processing slack of the userspace path (Python relay + namespace stack) per one-way trip: generous sanity bound.
SLACK = 0.010  # per trip: CPU scheduling slack on a busy 2-core host; bench_wire.py measures the real p99 error (~0.3 ms)


def test_ping_rtt_is_twice_the_delay(rig_factory) -> None:
    d = 0.010
    rig: LinkRig = rig_factory(Direction(delay=d), Direction(delay=d))
    rtts = rig.ping(10)[1:]     # first ping includes ARP resolution
    assert len(rtts) == 9
    med = statistics.median(rtts) / 1000
    # tolerance: 2 x delay, at most 2 x SLACK later, never earlier
    assert 2 * d <= med <= 2 * d + 2 * SLACK, rtts


def test_jitter_spread_without_reordering(rig_factory) -> None:
    d, j = 0.020, 0.005
    rig: LinkRig = rig_factory(Direction(delay=d, jitter=j))
    rig.ping(1)
    got = rig.probe(400, 0.002)
    assert len(got) == 400
    seqs = [g[0] for g in got]
    assert seqs == sorted(seqs), "reordering with reorder off"
    owd = [g[2] - g[1] for g in got]
    # each frame waits delay +- jitter, possibly more to keep order: never below delay - jitter
    assert min(owd) >= d - j - 0.0005
    # Late frames are the host's scheduling, not the emulator: the bulk (p99) must stay within
    # delay + jitter + SLACK; a single hiccup only has to stay within a gross sanity bound.
    late = sorted(owd)[int(0.99 * len(owd)) - 1]
    assert late <= d + j + SLACK + 0.002, late
    assert max(owd) <= d + j + 5 * SLACK
    assert max(owd) - min(owd) >= j, "jitter produced no visible spread"


def test_jitter_with_reorder_reorders(rig_factory) -> None:
    rig: LinkRig = rig_factory(Direction(delay=0.020, jitter=0.008, reorder=True))
    rig.ping(1)
    seqs = [g[0] for g in rig.probe(300, 0.001)]
    assert seqs != sorted(seqs)


def test_random_loss_in_binomial_interval(rig_factory) -> None:
    p, n = 0.1, 2500
    rig: LinkRig = rig_factory(Direction(loss=p))
    rig.ping(3, interval=0.01)
    lost = n - len(rig.probe(n, 0.0005))
    lo, hi = binomial_interval(n, p)
    assert lo <= lost <= hi, (lost, lo, hi)


def test_tcp_through_rate_limit(rig_factory) -> None:
    rate = 20e6
    rig: LinkRig = rig_factory(Direction(rate=rate, delay=0.005), Direction(rate=rate, delay=0.005))
    srv = subprocess.Popen(["ip", "netns", "exec", rig.ns_b, "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.4)
        r = subprocess.run(["ip", "netns", "exec", rig.ns_a, "iperf3", "-c", B_IP, "-t", "4", "-O", "1", "-J"],
                           capture_output=True, text=True, timeout=30)
        bps = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]
    finally:
        srv.wait(timeout=10)
    # The link counts wire bytes, iperf3 reports payload: expected goodput = rate x 1448/1514 (TCP/IP/Ethernet
    # headers with timestamps). Within 5% of that below, and above the raw rate only by measurement noise (1%).
    expected = rate * 1448 / 1514
    assert 0.95 * expected <= bps <= 1.01 * rate, (bps, expected)


def test_small_queue_drops_under_overload(rig_factory) -> None:
    rig: LinkRig = rig_factory(Direction(rate=1e6, queue=5))
    rig.ping(1)
    got = rig.probe(400, 0.0, size=1000, idle=0.5)
    c_ab, _ = rig.shaper.counters(rig.link_id)
    assert c_ab.dropped_queue > 0
    assert len(got) < 400


def test_link_down_and_up(rig_factory) -> None:
    rig: LinkRig = rig_factory()
    assert len(rig.ping(3, interval=0.05)) == 3
    rig.shaper.set_carrier(rig.link_id, False)
    assert rig.ping(3, interval=0.2, wait=1) == []
    rig.shaper.set_carrier(rig.link_id, True)
    time.sleep(0.2)
    assert len(rig.ping(3, interval=0.05)) == 3


def test_per_direction_asymmetry(rig_factory) -> None:
    rig: LinkRig = rig_factory(Direction(delay=0.005), Direction(delay=0.025))
    rig.ping(1)
    ab = statistics.median(g[2] - g[1] for g in rig.probe(50, 0.005, src="a"))
    ba = statistics.median(g[2] - g[1] for g in rig.probe(50, 0.005, src="b"))
    assert 0.005 <= ab <= 0.005 + SLACK and 0.025 <= ba <= 0.025 + SLACK, (ab, ba)


def test_gilbert_elliott_stationary_loss(rig_factory) -> None:
    g = GilbertElliott(p=0.05, r=0.2, loss_good=0.0, loss_bad=1.0)
    stationary = g.p / (g.p + g.r)          # P(bad) = 0.2; loss = P(bad) * loss_bad
    n = 4000
    rig: LinkRig = rig_factory(Direction(gilbert=g))
    rig.ping(3, interval=0.01)
    got = rig.probe(n, 0.0003)
    rate = 1 - len(got) / n
    # Bursts (mean length 1/r = 5) inflate the Bernoulli variance by (1 + l) / (1 - l), l = 1 - p - r (7x
    # here): 4 sd of that is +-0.067, so a correct chain fails about once in 16 000 runs.
    lam = 1 - g.p - g.r
    sd = math.sqrt(stationary * (1 - stationary) / n * (1 + lam) / (1 - lam))
    assert abs(rate - stationary) <= 4 * sd, (rate, 4 * sd)
    seqs = [s for s, *_ in got]
    runs = sum(1 for a, b in zip(seqs, seqs[1:]) if b - a > 1)
    assert runs < n * stationary / 1.5, "losses are not bursty"


def test_duplication(rig_factory) -> None:
    rig: LinkRig = rig_factory(Direction(duplicate=0.2))
    rig.ping(1)
    n = 1000
    got = rig.probe(n, 0.0005)
    dups = len(got) - len({s for s, *_ in got})
    lo, hi = binomial_interval(n, 0.2)
    assert lo <= dups <= hi, dups
    assert rig.shaper.counters(rig.link_id)[0].duplicated >= dups


def test_set_params_and_attach_from_another_process(rig_factory) -> None:
    rig: LinkRig = rig_factory(Direction(delay=0.005), Direction(delay=0.005))
    before = statistics.median(rig.ping(5)[1:])
    rig.shaper.set_params(rig.link_id, Direction(delay=0.030), None)
    mid = statistics.median(rig.ping(5))
    assert 35 <= mid <= 35 + 2 * SLACK * 1000 and before < 10 + 2 * SLACK * 1000, (before, mid)
    code = ("import json,sys; from testbed.shaping import attach; from testbed.topology.model import Direction;"
            "s=attach(json.loads(sys.argv[1])); s.set_params('ab', None, Direction(delay=0.050)); s.detach()")
    subprocess.run([sys.executable, "-c", code, json.dumps(rig.shaper.state())], check=True, timeout=30,
                   cwd=Path(__file__).resolve().parents[3])
    after = statistics.median(rig.ping(5))
    assert 80 <= after <= 80 + 2 * SLACK * 1000, after


def test_pcap_written_and_readable(rig_factory, tmp_path: Path) -> None:
    pcap = tmp_path / "ab.pcap"
    rig: LinkRig = rig_factory(Direction(delay=0.002), Direction(delay=0.002), pcap=pcap)
    n = 20
    assert len(rig.ping(n, interval=0.02)) == n
    rig.shaper.counters(rig.link_id)        # flushes the capture
    r = subprocess.run(["tcpdump", "-nn", "-r", str(pcap), "icmp"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert sum("echo request" in ln for ln in lines) == n
    assert sum("echo reply" in ln for ln in lines) == n
    t = subprocess.run(["tshark", "-r", str(pcap), "-Y", "icmp"], capture_output=True, text=True, timeout=60)
    assert t.returncode == 0 and len(t.stdout.splitlines()) == 2 * n, t.stderr


def test_emulator_killed_leaves_nothing(rig_factory) -> None:
    rig: LinkRig = rig_factory()
    if rig.shaper.name != "wire":
        pytest.skip("only the wire backend has an emulator process")
    os.kill(rig.shaper.pid, signal.SIGKILL)
    rig.shaper.close()
    for ns in (rig.ns_a, rig.ns_b):
        out = subprocess.run(["ip", "-n", ns, "-o", "link"], capture_output=True, text=True).stdout
        assert "eth1" not in out


def test_bad_input_is_a_user_error(rig_factory) -> None:
    from node.errors import UserError
    rig: LinkRig = rig_factory()
    with pytest.raises(UserError):
        rig.shaper.set_params("nope", Direction(delay=0.01), None)
    with pytest.raises(UserError):
        rig.shaper.add_link("x", LinkEnd(rig.ns_a, "a-very-long-interface-name"), LinkEnd(rig.ns_b, "eth2"),
                            Direction(), Direction())


@pytest.mark.parametrize("duplex,turns", [("full", 1), ("half", 2)])
def test_half_duplex_shares_the_medium(rig_factory, duplex: str, turns: int) -> None:
    """100 kB each way at the same moment over 1 Mbit/s: half duplex serialises both bursts on one medium.

    Each sender offers the link's full rate (one frame per frame time), so with one FIFO on a shared medium
    the two directions take turns frame by frame (a burst dumped at once would simply go first, whole)."""
    rate, n, size = 1e6, 100, 1000
    d = Direction(rate=rate, duplex=duplex)
    rig: LinkRig = rig_factory(d, d)
    if rig.shaper.name != "wire":
        pytest.skip("duplex: half exists only in the wire backend")
    rig.ping(1, src="a")
    rig.ping(1, src="b")                                # ARP resolved both ways before the bursts
    frame = size + 8 + 20 + 14                          # UDP payload + UDP/IP/Ethernet headers on the wire
    frame_time = frame * 8 / rate
    one_way = n * frame_time                            # one burst alone on the medium (0.83 s)
    port = 5601
    recvs = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, PROBE, "recv", str(port), "0.5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for ns in (rig.ns_b, rig.ns_a)]
    try:
        for rx in recvs:
            assert rx.stderr is not None
            rx.stderr.readline()                        # "ready"
        sends = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, PROBE, "send", dst, str(port), str(n),
                                   str(frame_time), str(size)]) for ns, dst in ((rig.ns_a, B_IP), (rig.ns_b, A_IP))]
        for s in sends:
            assert s.wait(timeout=30) == 0
        got = [json.loads(rx.communicate(timeout=60)[0]) for rx in recvs]
    finally:
        for rx in recvs:
            if rx.poll() is None:
                rx.kill()
                rx.wait()
    assert [len(g) for g in got] == [n, n], "a burst lost frames"
    start = min(g[1] for burst in got for g in burst)
    done = [max(g[2] for g in burst) - start for burst in got]
    # Full duplex: each burst has its own transmitter (one_way). Half: both share one FIFO, so each burst
    # completes only when nearly both have been sent (2 x one_way less the other's last frame at most).
    # Tolerance: 15% of the expected time plus one frame time, plus the two senders' start offset.
    skew = abs(min(g[1] for g in got[0]) - min(g[1] for g in got[1]))
    expected = turns * one_way
    for t in done:
        assert expected * 0.85 - frame_time - skew <= t <= expected * 1.15 + frame_time + skew, (duplex, done, skew)
