"""Benchmarks of the `wire` link emulator (needs root): throughput, delay precision, 20-link aggregate.

Prints `measured / bound = ratio` lines; results are recorded in bench/RESULTS.md (## Link shaping).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed import registry  # noqa: E402
from testbed.shaping.base import LinkEnd  # noqa: E402
from testbed.shaping.wire import WireShaper  # noqa: E402
from testbed.topology.model import Direction  # noqa: E402

PROBE = str(ROOT / "tests" / "integration" / "shaping" / "udp_probe.py")


def sh(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check)


class Bed:
    """n links, each between its own pair of namespaces, all through one wire shaper."""

    def __init__(self, n: int, a_to_b: Direction, b_to_a: Direction) -> None:
        self.run_id = registry.new_run_id()
        registry.register(self.run_id, "bench")
        pfx = registry.prefix(self.run_id)
        self.pairs: list[tuple[str, str, str]] = []
        self.shaper = WireShaper(self.run_id, Path(tempfile.mkdtemp(prefix="wirebench")))
        for i in range(n):
            na, nb = f"{pfx}a{i}", f"{pfx}b{i}"
            for ns in (na, nb):
                sh(["ip", "netns", "add", ns])
                sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            self.shaper.add_link(f"l{i}", LinkEnd(na, "eth1"), LinkEnd(nb, "eth1"), a_to_b, b_to_a)
            sh(["ip", "-n", na, "addr", "add", "10.78.0.1/24", "dev", "eth1"])
            sh(["ip", "-n", nb, "addr", "add", "10.78.0.2/24", "dev", "eth1"])
            self.pairs.append((na, nb, "10.78.0.2"))

    def close(self) -> None:
        self.shaper.close()
        for na, nb, _ in self.pairs:
            sh(["ip", "netns", "del", na], check=False)
            sh(["ip", "netns", "del", nb], check=False)
        registry.unregister(self.run_id)


def iperf(pairs: list[tuple[str, str, str]], seconds: int, reverse: bool = False) -> list[float]:
    servers = [subprocess.Popen(["ip", "netns", "exec", nb, "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _, nb, _ in pairs]
    time.sleep(0.5)
    clients = [subprocess.Popen(["ip", "netns", "exec", na, "iperf3", "-c", ip, "-t", str(seconds), "-O", "1", "-J",
                                 *(["-R"] if reverse else [])], stdout=subprocess.PIPE, text=True)
               for na, _, ip in pairs]
    out = []
    for c in clients:
        o, _ = c.communicate(timeout=seconds + 30)
        out.append(json.loads(o)["end"]["sum_received"]["bits_per_second"])
    for s in servers:
        s.wait(timeout=10)
    return out


def line(what: str, measured: float, bound: float, unit: str, scale: float, lower_is_better: bool = False) -> None:
    # Always measured / bound, as every bench prints; the suffix says which side of 1 meets the bound.
    ratio = measured / bound
    meets = "(<= 1 meets the bound)" if lower_is_better else "(>= 1 meets the bound)"
    print(f"{what}: measured {measured / scale:.3f} {unit} / bound {bound / scale:.3f} {unit} = ratio {ratio:.2f} "
          f"{meets}", flush=True)


def bench_throughput() -> None:
    bed = Bed(1, Direction(delay=0.010), Direction(delay=0.010))
    try:
        bps = iperf(bed.pairs, 8)[0]
        line("wire throughput 10ms", bps, 1e9, "Gbit/s", 1e9)
    finally:
        bed.close()


def bench_delay_precision() -> None:
    rate, delay = 100e6, 0.010
    bed = Bed(1, Direction(delay=delay, rate=rate), Direction(delay=delay, rate=rate))
    try:
        na, nb, ip = bed.pairs[0]
        # load: TCP data b->a (iperf3 -R) at the full rate; probes a->b queue only behind ACKs (tiny)
        srv = subprocess.Popen(["ip", "netns", "exec", nb, "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.4)
        cli = subprocess.Popen(["ip", "netns", "exec", na, "iperf3", "-c", ip, "-t", "8", "-O", "1", "-R", "-J"],
                               stdout=subprocess.PIPE, text=True)
        time.sleep(2)
        rx = subprocess.Popen(["ip", "netns", "exec", nb, sys.executable, PROBE, "recv", "5599", "1.0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert rx.stderr is not None
        rx.stderr.readline()
        # the probe sender runs at RT priority too: its own preemption between timestamp and send is not link error
        sh(["ip", "netns", "exec", na, "chrt", "-r", "1", sys.executable, PROBE, "send", ip, "5599", "400", "0.01"])
        out, _ = rx.communicate(timeout=30)
        o, _ = cli.communicate(timeout=40)
        srv.wait(timeout=10)
        owd = [(r - s) - delay for _, s, r in json.loads(out)]
        err = sorted(abs(x) for x in owd)
        p50, p99 = statistics.median(err), err[int(0.99 * (len(err) - 1))]
        print(f"wire delay error 100Mbit/10ms loaded: p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms "
              f"({len(err)} probes)", flush=True)
        line("wire delay error p99", p99, 0.001, "ms", 1e-3, lower_is_better=True)
        bps = json.loads(o)["end"]["sum_received"]["bits_per_second"]
        expected = rate * 1448 / 1514      # goodput of full-size TCP segments (timestamps) on Ethernet frames
        rate_err = abs(bps / expected - 1)
        print(f"wire rate 100Mbit: goodput {bps / 1e6:.2f} Mbit/s, expected {expected / 1e6:.2f} Mbit/s", flush=True)
        line("wire rate error", rate_err * 100, 3.0, "%", 1, lower_is_better=True)
    finally:
        bed.close()


def bench_twenty_links() -> None:
    bed = Bed(20, Direction(delay=0.010), Direction(delay=0.010))
    try:
        per = iperf(bed.pairs, 8)
        total = sum(per)
        print(f"wire 20 links: per link min {min(per) / 1e6:.1f} / max {max(per) / 1e6:.1f} Mbit/s", flush=True)
        # no bound of its own: stated against the single-link bound (one process shares one core)
        line("wire 20 links aggregate", total, 1e9, "Gbit/s", 1e9)
    finally:
        bed.close()


if __name__ == "__main__":
    bench_throughput()
    bench_delay_precision()
    bench_twenty_links()
