"""A node restarted with a full spool: resident memory after recovery, and the goodput of draining.

Method, one loopback hop n1 -> n2, fragmenting with F = 64 KiB (the bound is about payload bytes; with 1 kB
fragments the per-piece objects of the in-memory queue would dominate, see the last line):
  1. baseline: n1 runs with n2 down; `--gigabytes` of 16 MB messages are submitted to n1 (they sit in its
     queue, their bytes in memory, as for any fresh submission); n2 starts and the hop drains.
  2. restart: n2 stops; the same amount is submitted again; n1 is stopped (SIGTERM) and started: recovery
     queues every stored piece without its bytes. n1's VmRSS is read once it serves (recovery is done by then);
     n2 starts and the hop drains, every batch's payloads read from n1's spool just before sending.
Goodput of a drain: the bytes of all messages but the first / (last delivery - first delivery), from n2's
deliveries.jsonl; both are repeated `--runs` times (medians: the machine is shared). limits.max_link_queue is raised above the amount (its default, 256 MiB, would refuse the
rest: that cap is what keeps a running node's queue bounded). Bounds (memory must not grow with the spool): RSS after recovery <= 300 MB with 2 GB queued; the drain after a restart
at least 90% of the baseline's goodput. Do not run the default 2 GB beside other work (disk: ~3x the size).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.localnet import LocalNet  # noqa: E402

MB = 1 << 20
MESSAGE = 16 * MB
FRAGMENT = 65536
RSS_BOUND = 300 * MB
GOODPUT_BOUND = 0.9
SESSION = {"keepalive": 0.5, "hold_time": 3.0, "backoff_min": 0.05, "backoff_max": 0.5}


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def submit(net: LocalNet, count: int) -> list[str]:
    ids = []
    with net.client("n1") as c:
        for _ in range(count):
            r = c.send(["n2"], size=MESSAGE)
            assert r.accepted, r.reason
            ids.append(r.msg_id)
    return ids


def drain(net: LocalNet, ids: list[str], timeout: float, peak: list[int]) -> float:
    """Start n2, wait for `ids`, return the goodput in bytes/s; `peak` gets n1's highest RSS meanwhile."""
    pid = net.nodes["n1"].proc.pid
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss(pid))
            time.sleep(0.05)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        net.start("n2", wait=False)
        want = set(ids)
        deadline = time.monotonic() + timeout
        while True:
            got = [d for d in net.records("n2", "delivery") if d["msg_id"] in want]
            if len(got) == len(want):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(got)} of {len(want)} messages delivered in {timeout:.0f} s")
            time.sleep(0.2)
    finally:
        stop.set()
        t.join()
    ts = sorted(d["deliver_ts"] for d in got)
    return (len(ts) - 1) * MESSAGE / (ts[-1] - ts[0])


def forget(net: LocalNet, ids: list[str]) -> None:
    """Empty n2's mailbox between drains (its spool would otherwise hold every run)."""
    with net.client("n2") as c:
        c.delete_mail(ids, no_user=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gigabytes", type=float, default=2.0, help="bytes queued at n1, in GiB (default 2)")
    ap.add_argument("--runs", type=int, default=3, help="baseline + restart pairs; goodputs are medians (default 3)")
    args = ap.parse_args()
    count = max(2, round(args.gigabytes * 1024 * MB / MESSAGE))
    queued = count * MESSAGE
    timeout = 120 + queued / (5 * MB)          # generous: 5 MB/s would already be far too slow
    label = f"{queued / (1024 * MB):.2f} GB"
    bases, agains, afters, held, peaks0, peaks1, recoveries = [], [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench_restart_") as tmp:
        # limits.max_link_queue above the amount: the whole of it must queue for the missing n2
        limits = {"max_frame_bytes": FRAGMENT, "max_link_queue": 2 * queued}
        with LocalNet.chain(Path(tmp), 1, fragment_size=FRAGMENT, limits=limits, session=SESSION,
                            metrics_interval=5.0) as net:
            net.start("n1")
            fresh = rss(net.nodes["n1"].proc.pid)
            for _ in range(args.runs):
                ids = submit(net, count)
                held.append(rss(net.nodes["n1"].proc.pid))
                peak = [0]
                bases.append(drain(net, ids, timeout, peak))
                peaks0.append(peak[0])
                forget(net, ids)
                net.stop("n2")
                ids = submit(net, count)
                assert net.stop("n1") == 0
                t0 = time.monotonic()
                net.start("n1")                 # serving means recovered (the daemon recovers first)
                recoveries.append(time.monotonic() - t0)
                with net.client("n1") as c:
                    st = c.stats()["neighbours"]["n2"]
                    assert st["queue_bytes"] == queued, st
                    pieces = st["queue_fragments"]
                afters.append(rss(net.nodes["n1"].proc.pid))
                peak = [0]
                agains.append(drain(net, ids, timeout, peak))
                peaks1.append(peak[0])
                forget(net, ids)
                net.stop("n2")
    after, base, again = max(afters), statistics.median(bases), statistics.median(agains)
    runs = f"over {args.runs} run{'s' if args.runs > 1 else ''}"
    print(f"restart memory: n1 RSS after recovery with {label} queued ({pieces} pieces of {FRAGMENT // 1024} KiB): "
          f"measured {after / MB:.0f} MB (highest {runs}) / bound {RSS_BOUND / MB:.0f} MB = ratio "
          f"{after / RSS_BOUND:.2f} (fresh node {fresh / MB:.0f} MB; {(after - fresh) / max(1, pieces):.0f} bytes per "
          f"queued piece; recovery and start {max(recoveries):.1f} s; peak while draining {max(peaks1) / MB:.0f} MB)")
    print(f"restart goodput: loopback drain of {label} after a restart measured {again / MB:.1f} MB/s / bound "
          f"{GOODPUT_BOUND * base / MB:.1f} MB/s (0.9 x {base / MB:.1f} MB/s without restart; medians {runs}: "
          + ", ".join(f"{a / MB:.1f}/{b / MB:.1f}" for a, b in zip(agains, bases))
          + f") = ratio {again / (GOODPUT_BOUND * base):.2f} (without restart: RSS {max(held) / MB:.0f} MB with the "
          f"submissions queued, peak {max(peaks0) / MB:.0f} MB while draining)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
