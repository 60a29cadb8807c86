"""What the gateway policies (node/gateway/) cost: messages per second through one gateway, against the plain path.

Real daemons on loopback (testbed/localnet.py), a chain n1 -> n2 -> n3 with n2 the gateway. Both figures are
measured twice on the same path: with n2's `gateway:` section (routing rules, an incoming connector for n1 and
one for the user in1, an outgoing connector for n3, every THROUGHPUT and rate far above what is offered, the
user's credits charged per message, gamma 1 and the policy loop ticking every 0.2 s with a threshold it never
reaches, so it looks at the queues but never acts), and without it (no gateway section, the same rules).
- routed:   1 kB durable messages per second from n1 through n2 to n3: n1's spool is pre-loaded with N
            messages for n3 before the daemons start (as bench_node.py and bench_security.py); the rate is
            taken from n3's deliveries (first to last), so it covers n2's admission (the incoming connector's
            token bucket), the rules, the paced queue and two durable hops.
- accepted: 1 kB submissions per second accepted by n2 from 64 parallel Submit calls of the user in1
            (its THROUGHPUT bucket, its credits charged in the spool transaction of the submission).
Each line prints `measured (gateway) / plain = ratio`; near 1 means the policies cost little.

Anchors (not comparable set-ups, for scale): EMG, "over 1000 message/second" on a Pentium III 850 MHz (its
paper, §1.2). Jasmin publishes no figure; its users report 15-25 msg/s, 80-110 over HTTP, 140 over SMPP and
600 over HTTP in different set-ups. Ours: one plain hop moves about 5,500 durable 1 kB msg/s
(bench/RESULTS.md, security cost: wire emulator, 50 Mbit/s, 20 ms). --small runs a small N (to check the
script; not for the record).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_node import BATCH, SIZE, preload  # noqa: E402
from testbed.localnet import LocalNet  # noqa: E402

FAR = 1_000_000.0        # msg/s: every THROUGHPUT and rate, far above anything offered here
RULES = [{"name": "from-n1", "match": {"src": "n1"}, "round_robin": ["n3"]},
         {"name": "from-in1", "match": {"src_user": "in1"}, "to": "n3"}]
GATEWAY = {
    "enabled": True, "gamma": 1.0, "threshold": 10_000_000, "lower": 1, "period": 0.2,
    "actions": ["deactivate_lb", "throttle", "drop"],
    "outgoing": {"n3": {"rate": FAR}},
    "incoming": {"from-n1": {"neighbour": "n1", "throughput": FAR}, "in1": {"user": "in1", "throughput": FAR}},
    "users": {"in1": {"credits": 1_000_000_000, "throughput": FAR}},
}
EMG_ANCHOR = 1000.0      # msg/s, EMG on a Pentium III 850 MHz
PLAIN_HOP_ANCHOR = 5500.0     # durable 1 kB msg/s over one hop (bench/RESULTS.md, security cost)


def _net(tmp: Path, gateway: bool) -> LocalNet:
    n2: dict[str, Any] = {"routing": {"rules": RULES}}
    if gateway:
        n2["gateway"] = GATEWAY
    return LocalNet.chain(tmp, 2, batch=BATCH, metrics_interval=5.0, per_node={"n2": n2})


def routed_rate(gateway: bool, n: int) -> float:
    """1 kB durable messages per second from n1's pre-loaded spool through n2 to n3."""
    with tempfile.TemporaryDirectory(prefix="bench_gateway_") as tmp:
        with _net(Path(tmp), gateway) as net:
            preload(net, n, "n3")
            net.start()
            deadline = time.monotonic() + 300
            with net.client("n3") as c:
                while c.stats()["delivered"] < n:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"only {c.stats()['delivered']} of {n} delivered in 300 s")
                    time.sleep(0.2)
            ts = sorted(d["deliver_ts"] for d in net.records("n3", "delivery"))
            assert len(ts) == n, f"{len(ts)} deliveries of {n}"
            return (n - 1) / (ts[-1] - ts[0])


def accepted_rate(gateway: bool, n: int, parallel: int = 64) -> float:
    """1 kB submissions per second n2 accepts from the user in1 (parallel Submit calls)."""
    with tempfile.TemporaryDirectory(prefix="bench_gateway_") as tmp:
        with _net(Path(tmp), gateway) as net:
            net.start()
            with net.client("n2") as c:
                t0 = time.monotonic()
                with concurrent.futures.ThreadPoolExecutor(parallel) as ex:
                    results = list(ex.map(lambda _i: c.send(["n3"], size=SIZE, originator="in1"), range(n)))
                dt = time.monotonic() - t0
            refused = [r for r in results if not r.accepted]
            assert not refused, f"{len(refused)} of {n} refused, e.g. {refused[0]}"
            return n / dt


def main() -> int:
    ap = argparse.ArgumentParser(description="Messages through one gateway node against the same path without one.")
    ap.add_argument("--small", action="store_true", help="a small N, to check the bench runs (not a result)")
    small = ap.parse_args().small
    n_routed, n_accepted = (2_000, 1_000) if small else (30_000, 10_000)
    gw, plain = routed_rate(True, n_routed), routed_rate(False, n_routed)
    print(f"gateway routed 1kB durable msgs/s n1->n2(gateway)->n3 (loopback, N={n_routed}): measured {gw:,.0f}/s "
          f"with the gateway / plain {plain:,.0f}/s = ratio {gw / plain:.2f}")
    print(f"  anchors: EMG over {EMG_ANCHOR:,.0f}/s (Pentium III 850 MHz) -> measured / EMG = {gw / EMG_ANCHOR:.1f}; "
          f"our plain hop about {PLAIN_HOP_ANCHOR:,.0f}/s (bench/RESULTS.md) -> "
          f"measured / that = {gw / PLAIN_HOP_ANCHOR:.2f}")
    gw, plain = accepted_rate(True, n_accepted), accepted_rate(False, n_accepted)
    print(f"gateway accepted 1kB submissions/s at n2 (user in1, 64 parallel, N={n_accepted}): measured {gw:,.0f}/s "
          f"with the gateway / plain {plain:,.0f}/s = ratio {gw / plain:.2f}")
    print(f"  anchors: Jasmin users report 15-25, 80-110 (HTTP), 140 (SMPP), 600 (HTTP) msg/s -> "
          f"measured / 600 = {gw / 600:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
