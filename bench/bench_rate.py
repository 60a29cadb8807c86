"""MQ rate control (node/rate/): pacing accuracy and reaction time, with real daemons on loopback.

Network: clients c1, c2, c3 and root r (testbed/localnet.py), 5 kB messages (one piece each), nobody draining
the root (its queue limit is far above what is sent). Two measurements:

pacing      a client kept backlogged (its queue refilled to 90% every 50 ms) while the root's rule is `fixed`
            (every client at R/N), then `decile` (the only backlogged client gets R); the achieved rate is the
            bytes the root acknowledged (the client's sent_bytes) over a window of --window seconds after the
            rate settled. Error = |achieved - assigned| / assigned; bound 2%.
reaction    from an idle network, a step burst fills c1's queue to 85% at once; reaction = time from c1's report
            of its first weight above 0 to the first assigned rate above R/N (both c1's records: one clock).
            Bound T + 2 RTT (the report goes out at once; the root answers at its next round, at most T later).

Prints `name: measured / bound = ratio` lines (ratio <= 1 meets the bound). --rate is R in bit/s, --interval T.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.localnet import LocalNet  # noqa: E402

MSG = 5000
CLIENTS = ["c1", "c2", "c3"]
QUEUE = 500_000
SESSION = {"keepalive": 0.3, "hold_time": 1.5, "backoff_min": 0.05, "backoff_max": 0.5}


def build(work: Path, rate: float, interval: float, policy: str) -> LocalNet:
    common = {"rate_bps": rate, "interval": interval, "clients": CLIENTS}
    per = {"r": {"rate": {"role": "root", "consumer": "app", "queue_limit": 10**10, "policy": policy, **common}}}
    for c in CLIENTS:
        per[c] = {"rate": {"role": "client", "root": "r", "queue_limit": QUEUE, "burst": MSG, **common}}
    net = LocalNet.build(work, CLIENTS + ["r"], [(c, "r") for c in CLIENTS], per_node=per, fragment_size=MSG,
                         session=SESSION, metrics_interval=1.0)
    net.start()
    net.wait_sessions()
    return net


def stats(net: LocalNet, node: str) -> dict:
    with net.client(node) as c:
        return c.stats()["rate"]


def pacing(rate: float, interval: float, policy: str, window: float) -> tuple[float, float]:
    """(achieved, assigned) bit/s of c1 kept backlogged."""
    net = build(Path(tempfile.mkdtemp(prefix="bench-rate-")), rate, interval, policy)
    try:
        target = rate / len(CLIENTS) if policy == "fixed" else rate
        with net.client("c1") as c:
            def top_up() -> None:
                while stats(net, "c1")["queue_bytes"] < 0.9 * QUEUE - MSG:
                    c.send(["app@r"], size=MSG)
            deadline = time.monotonic() + 3 * interval + 1.0       # the rate settles: a round or two
            while time.monotonic() < deadline:
                top_up()
                time.sleep(0.05)
            s0, t0 = stats(net, "c1")["sent_bytes"], time.monotonic()
            assigned = []
            while time.monotonic() - t0 < window:
                top_up()
                assigned.append(stats(net, "c1")["rate_bps"])
                time.sleep(0.05)
            s1, t1 = stats(net, "c1")["sent_bytes"], time.monotonic()
        return (s1 - s0) * 8 / (t1 - t0), statistics.mean(assigned) if policy != "fixed" else target
    finally:
        net.close()


def reaction(rate: float, interval: float, bursts: int) -> tuple[list[float], float]:
    """Reaction times of `bursts` step bursts on c1 (each after the queue drained), and the loopback RTT."""
    net = build(Path(tempfile.mkdtemp(prefix="bench-rate-")), rate, interval, "decile")
    out = []
    try:
        with net.client("c1") as c, net.client("r") as rc:
            t = time.monotonic()
            for _ in range(10):
                rc.stats()
            rtt = (time.monotonic() - t) / 10
            for _ in range(bursts):
                time.sleep(2 * interval)
                begin = time.time()
                for _ in range(int(0.85 * QUEUE / MSG)):
                    c.send(["app@r"], size=MSG)
                deadline = time.time() + 5 * interval + 2
                # the node's own record of the report its weight's first step past 0 made (same clock as below)
                up = next(x["ts"] for x in net.records("c1", "rate") if x["event"] == "report" and x["ts"] >= begin
                          and x["weight"] > 0)
                got = None
                while got is None and time.time() < deadline:
                    got = next((x["ts"] for x in net.records("c1", "rate") if x["event"] == "assigned"
                                and x["ts"] >= up and x["rate_bps"] > rate / len(CLIENTS) * 1.01), None)
                    time.sleep(0.01)
                out.append((got - up) if got is not None else float("inf"))
                while stats(net, "c1")["queue_bytes"] > 0:      # drain before the next burst
                    time.sleep(0.1)
        return out, rtt
    finally:
        net.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=8e6, help="R, bit/s (default 8 Mbit/s = 1 Mbit/s at time_scale 0.125)")
    ap.add_argument("--interval", type=float, default=0.25, help="T, seconds (default 0.25 = 2 s at time_scale 0.125)")
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--bursts", type=int, default=10)
    args = ap.parse_args()
    worst = 0.0
    for policy in ("fixed", "decile"):
        achieved, assigned = pacing(args.rate, args.interval, policy, args.window)
        err = abs(achieved - assigned) / assigned * 100
        worst = max(worst, err)
        print(f"pacing {policy}: achieved {achieved / 1e3:.1f} kbit/s, assigned {assigned / 1e3:.1f} kbit/s")
        print(f"pacing error {policy}: measured {err:.2f} % / bound 2.00 % = ratio {err / 2:.2f}")
    times, rtt = reaction(args.rate, args.interval, args.bursts)
    bound = args.interval + 2 * rtt
    med, top = statistics.median(times), max(times)
    print(f"reaction: {len(times)} bursts, median {med * 1e3:.0f} ms, max {top * 1e3:.0f} ms (T {args.interval * 1e3:.0f} ms, "
          f"RTT {rtt * 1e3:.1f} ms)")
    print(f"reaction time max: measured {top:.3f} s / bound {bound:.3f} s = ratio {top / bound:.2f}")
    return 0 if worst <= 2 and top <= bound else 1


if __name__ == "__main__":
    sys.exit(main())
