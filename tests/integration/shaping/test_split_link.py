"""A link split across two wire-emulator processes joined by their UDP tunnel (both on this machine, over loopback).

Namespaces a and b are placed on machines m1 and m2, so the link between them
is split; c and d both on m1, so the link between them is an ordinary link of
m1's emulator: the same delay measured both ways is the comparison.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from node.errors import UserError
from shaping_rig import A_IP, B_IP, LinkRig, _run
from testbed import registry
from testbed.shaping import attach
from testbed.shaping.base import LinkEnd
from testbed.shaping.split import SplitWireShaper
from testbed.topology.model import Direction
from tests.integration.support import binomial_interval

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

MACHINES = {"m1": "127.0.0.1", "m2": "127.0.0.1"}
# A link across machines needs at least the tunnel's delay (tens of microseconds over loopback): 2 ms leaves room
# for a loaded machine's measurement.


@dataclass
class Split:
    shaper: SplitWireShaper
    rig: LinkRig                # the split link a-b
    local: LinkRig | None       # the same link inside m1's emulator, c-d (when asked for)


@pytest.fixture
def split(tmp_path: Path) -> Iterator[Callable[..., Split]]:
    run_id = registry.new_run_id()
    registry.register(run_id, "test")
    pfx = registry.prefix(run_id)
    made: list[SplitWireShaper] = []
    names = {"a": pfx + "a", "b": pfx + "b", "c": pfx + "c", "d": pfx + "d"}

    def make(a_to_b: Direction, b_to_a: Direction, local: bool = False) -> Split:
        shaper = SplitWireShaper(run_id, tmp_path / "shaping", MACHINES,
                                 {names["a"]: "m1", names["b"]: "m2", names["c"]: "m1", names["d"]: "m1"})
        made.append(shaper)
        pairs = [("ab", "a", "b")] + ([("cd", "c", "d")] if local else [])
        rigs = []
        for link_id, x, y in pairs:
            for ns in (names[x], names[y]):
                _run(["ip", "netns", "add", ns])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            shaper.add_link(link_id, LinkEnd(names[x], "eth1"), LinkEnd(names[y], "eth1"), a_to_b, b_to_a)
            for ns, ip in ((names[x], A_IP), (names[y], B_IP)):
                _run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth1"])
            rigs.append(LinkRig(shaper, run_id, names[x], names[y], tmp_path, link_id=link_id))
        return Split(shaper, rigs[0], rigs[1] if local else None)

    try:
        yield make
    finally:
        for shaper in made:
            pids = [h.pid for h in shaper.halves.values()]
            shaper.close()
            assert len(set(pids)) == 2
            for pid in pids:
                assert not registry.pid_alive(pid), "emulator half left behind"
        for ns in names.values():
            _run(["ip", "netns", "del", ns], check=False)
        time.sleep(0.05)
        assert pfx not in _run(["ip", "netns", "list"]).stdout, "namespace left behind"
        assert pfx not in _run(["ip", "-o", "link"]).stdout, "interface left behind"
        registry.unregister(run_id)


@pytest.mark.alone
def test_ping_and_tcp_across_the_split(split) -> None:
    rate = 20e6
    s = split(Direction(delay=0.002, rate=rate), Direction(delay=0.002, rate=rate))
    assert len(s.rig.ping(3, interval=0.05)) == 3
    assert len(s.rig.ping(3, interval=0.05, src="b")) == 3
    srv = subprocess.Popen(["ip", "netns", "exec", s.rig.ns_b, "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    r = None
    try:
        time.sleep(0.3)
        r = subprocess.run(["ip", "netns", "exec", s.rig.ns_a, "iperf3", "-c", B_IP, "-t", "2", "-O", "1", "-J"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        if srv.poll() is None and (r is None or r.returncode != 0):
            srv.kill()
        srv.wait(timeout=10)
    end = json.loads(r.stdout)["end"]
    # the rate is applied at the sending half: goodput as on one emulator (test_conformance's bound)
    expected = rate * 1448 / 1514
    assert 0.95 * expected <= end["sum_received"]["bits_per_second"] <= 1.01 * rate, end["sum_received"]
    time.sleep(0.2)                                     # the connection's last frames (2 ms delay) are through
    ab, ba = s.shaper.counters("ab")
    # counted once, at the receiving half; every datagram the sending halves sent arrived
    t = s.shaper.tunnel_counters("ab")
    assert ab.packets > 1000 and ba.packets > 100 and t == {"sent": ab.packets + ba.packets, "lost": 0}, (t, ab, ba)
    assert s.shaper.counters_all() == {"ab": (ab, ba)}   # the links sampler's batched read: the same sums


@pytest.mark.alone
def test_delay_across_the_split_matches_one_emulator(split) -> None:
    d = 0.010
    s = split(Direction(delay=d), Direction(delay=d), local=True)
    assert s.local is not None
    for rig in (s.rig, s.local):
        rig.ping(2, interval=0.05)        # ARP
    split_owd = statistics.median(g[2] - g[1] for g in s.rig.probe(150, 0.005, idle=0.3))
    local_owd = statistics.median(g[2] - g[1] for g in s.local.probe(150, 0.005, idle=0.3))
    est = s.shaper.tunnel("m1", "m2")
    tol = max(0.001, 2 * max(e.jitter for e in est.values()))
    print(f"split {split_owd * 1e3:.3f} ms, one emulator {local_owd * 1e3:.3f} ms, tolerance {tol * 1e3:.3f} ms")
    assert abs(split_owd - d) <= tol, (split_owd, tol, est)
    assert abs(split_owd - local_owd) <= tol, (split_owd, local_owd, tol, est)


def test_loss_is_applied_once(split) -> None:
    p, n = 0.2, 2000
    s = split(Direction(delay=0.002, loss=p), Direction(delay=0.002))
    s.rig.ping(2, interval=0.05, src="b")
    got = s.rig.probe(n, 0.0005, idle=0.3)
    lost = n - len(got)
    lo, hi = binomial_interval(n, p)
    assert lo <= lost <= hi, (lost, lo, hi)         # both halves impairing would lose 36%
    ab, _ = s.shaper.counters("ab")
    assert ab.dropped_loss >= lost - 5 and s.shaper.tunnel_counters("ab")["lost"] == 0


def test_carrier_down_at_one_half_cuts_both_directions(split) -> None:
    s = split(Direction(delay=0.002), Direction(delay=0.002))
    assert len(s.rig.ping(2, interval=0.05)) == 2
    s.shaper.halves["m1"].set_carrier("ab", False)         # one half only: it tells the other
    time.sleep(0.05)
    assert "NO-CARRIER" in _run(["ip", "-n", s.rig.ns_b, "link", "show", "eth1"]).stdout
    assert s.rig.ping(2, interval=0.2, wait=0.5) == []
    assert s.rig.ping(2, interval=0.2, wait=0.5, src="b") == []
    again = attach(json.loads(json.dumps(s.shaper.state())))     # as a later `testbed` process would
    again.set_carrier("ab", True)
    again.detach()
    time.sleep(0.1)
    assert len(s.rig.ping(2, interval=0.05, src="b")) == 2


def test_delay_below_the_tunnel_delay_is_refused(split) -> None:
    s = split(Direction(delay=0.002), Direction(delay=0.002))
    with pytest.raises(UserError, match=r"link ab: the b->a delay of 0\.000 ms is below .* machine m1"):
        s.shaper.set_params("ab", None, Direction(delay=0.0))
    with pytest.raises(UserError, match=r"link ac: the a->b delay .* below"):
        s.shaper.add_link("ac", LinkEnd(s.rig.ns_a, "eth2"), LinkEnd(s.rig.ns_b, "eth2"), Direction(), Direction())
    assert "eth2" not in _run(["ip", "-n", s.rig.ns_a, "-o", "link"]).stdout    # refused before making anything
    assert len(s.rig.ping(2, interval=0.05)) == 2                              # the link kept its delay
