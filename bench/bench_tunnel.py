"""Benchmark of a link split across two wire-emulator halves (needs root): one-way delay error against one emulator.

The same 100 Mbit/s + 10 ms link, loaded by TCP in the other direction (iperf3 -R)
as in bench_wire.py's delay precision, is measured twice: inside one emulator,
and split across two emulator processes joined by their UDP tunnel over
loopback (machines m1 and m2 of one machine). Bound for the split link's p50 and
p99 error: 2 x the in-machine error + the tunnel's measured jitter.

Prints `measured / bound = ratio` lines; results go to bench/RESULTS.md (## Link shaping).
Run it alone on a quiet machine: `sudo .venv/bin/python bench/bench_tunnel.py [--probes N]`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_wire import PROBE, Bed, line, sh  # noqa: E402
from testbed import registry  # noqa: E402
from testbed.shaping.base import LinkEnd  # noqa: E402
from testbed.shaping.split import SplitWireShaper  # noqa: E402
from testbed.topology.model import Direction  # noqa: E402

RATE, DELAY = 100e6, 0.010


class SplitBed:
    """One link between two namespaces placed on two emulator halves (both on this machine)."""

    def __init__(self, a_to_b: Direction, b_to_a: Direction) -> None:
        self.run_id = registry.new_run_id()
        registry.register(self.run_id, "bench")
        pfx = registry.prefix(self.run_id)
        self.na, self.nb = pfx + "a", pfx + "b"
        self.shaper = SplitWireShaper(self.run_id, Path(tempfile.mkdtemp(prefix="tunnelbench")),
                                      {"m1": "127.0.0.1", "m2": "127.0.0.1"}, {self.na: "m1", self.nb: "m2"})
        for ns in (self.na, self.nb):
            sh(["ip", "netns", "add", ns])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        self.shaper.add_link("l0", LinkEnd(self.na, "eth1"), LinkEnd(self.nb, "eth1"), a_to_b, b_to_a)
        sh(["ip", "-n", self.na, "addr", "add", "10.78.0.1/24", "dev", "eth1"])
        sh(["ip", "-n", self.nb, "addr", "add", "10.78.0.2/24", "dev", "eth1"])
        self.pairs = [(self.na, self.nb, "10.78.0.2")]

    def close(self) -> None:
        self.shaper.close()
        for ns in (self.na, self.nb):
            sh(["ip", "netns", "del", ns], check=False)
        registry.unregister(self.run_id)


def delay_errors(pair: tuple[str, str, str], probes: int) -> list[float]:
    """|one-way delay - DELAY| of UDP probes a->b while TCP fills b->a at the link rate (sorted, seconds)."""
    na, nb, ip = pair
    srv = subprocess.Popen(["ip", "netns", "exec", nb, "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
    time.sleep(0.4)
    seconds = max(4, int(probes * 0.01) + 4)
    cli = subprocess.Popen(["ip", "netns", "exec", na, "iperf3", "-c", ip, "-t", str(seconds), "-O", "1", "-R"],
                           stdout=subprocess.DEVNULL)
    time.sleep(2)
    rx = subprocess.Popen(["ip", "netns", "exec", nb, sys.executable, PROBE, "recv", "5599", "1.0"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert rx.stderr is not None
    rx.stderr.readline()
    # the probe sender at RT priority: its own preemption between timestamp and send is not link error
    sh(["ip", "netns", "exec", na, "chrt", "-r", "1", sys.executable, PROBE, "send", ip, "5599", str(probes), "0.01"])
    out, _ = rx.communicate(timeout=60)
    cli.wait(timeout=seconds + 30)
    srv.wait(timeout=10)
    return sorted(abs((r - s) - DELAY) for _, s, r in json.loads(out))


def p50_p99(err: list[float]) -> tuple[float, float]:
    return statistics.median(err), err[int(0.99 * (len(err) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=400, help="UDP probes per measurement (10 ms apart)")
    args = ap.parse_args()
    d = Direction(delay=DELAY, rate=RATE)
    bed = Bed(1, d, d)
    try:
        local = p50_p99(delay_errors(bed.pairs[0], args.probes))
    finally:
        bed.close()
    split = SplitBed(d, d)
    try:
        est = split.shaper.tunnel("m1", "m2")
        jitter = max(e.jitter for e in est.values())
        remote = p50_p99(delay_errors(split.pairs[0], args.probes))
    finally:
        split.close()
    print(f"tunnel over loopback: one-way delay {est['m1'].delay * 1e3:.3f} / {est['m2'].delay * 1e3:.3f} ms "
          f"(m1->m2 / m2->m1), jitter {jitter * 1e3:.3f} ms", flush=True)
    print(f"delay error 100Mbit/10ms loaded: one emulator p50 {local[0] * 1e3:.3f} ms, p99 {local[1] * 1e3:.3f} ms; "
          f"split p50 {remote[0] * 1e3:.3f} ms, p99 {remote[1] * 1e3:.3f} ms ({args.probes} probes each)", flush=True)
    for name, i in (("p50", 0), ("p99", 1)):
        line(f"split link delay error {name}", remote[i], 2 * local[i] + jitter, "ms", 1e-3, lower_is_better=True)


if __name__ == "__main__":
    main()
