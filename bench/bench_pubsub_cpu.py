"""The node daemons' CPU per delivered publication: a cheap, repeatable measure of the broker's per-publication
Python work, this checkout against another revision, interleaved.

Network (real daemons on loopback, testbed.localnet): n1 - n2 - n3, with leaves a and b behind n3, so every
subscriber is 3 broker hops from the publisher n1 and the copies split at n3. `--subs` subscriptions (half at
a, half at b; durable unless --live) read and acknowledge everything; `--count` publications of `--size` bytes
are published at n1 by a few client threads. The measure: the daemons' CPU seconds (user + system, /proc per
pid) from the first publication until every subscriber has every publication, divided by the deliveries.

Each session runs in a child process whose code root is this checkout or a `git worktree` of `--before` (its
own testbed starts its own daemons), taking turns, `--rounds` of each; the medians are compared against the
bound: half the before's CPU per delivery (`measured / bound = ratio`, <= 1 meets it).

    .venv/bin/python bench/bench_pubsub_cpu.py --before main --rounds 5
    .venv/bin/python bench/bench_pubsub_cpu.py --profile n2      # cProfile of one daemon (this checkout), top lines
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMES = ["n1", "n2", "n3", "a", "b"]
EDGES = [("n1", "n2"), ("n2", "n3"), ("n3", "a"), ("n3", "b")]
FAST = {"session": {"keepalive": 0.3, "hold_time": 3.0, "backoff_min": 0.05, "backoff_max": 0.5}}
CLK = os.sysconf("SC_CLK_TCK")
PUBLISHERS = 4
TOPIC = "bench.cpu"
TOP = 25                    # profile lines printed


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process, 0 when it is gone."""
    return proc_cpu_path(f"/proc/{pid}/stat")


# Its own copy of bench/pubsub_daemons.py's reader: a session runs with another revision's tree first on sys.path
# (--before), where that module may not have it.
def proc_cpu_path(path: str) -> float:
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return 0.0


def session(count: int, size: int, subs: int, durable: bool, profile: str) -> dict:
    """One session in this process, with the code under sys.path[0]: the numbers as a dict."""
    from testbed.localnet import LocalNet

    work = Path(tempfile.mkdtemp(prefix="bench-pubsub-cpu-"))
    net = LocalNet.build(work, NAMES, EDGES, **FAST)
    prof = work / "profile.out"
    real = subprocess.Popen

    def popen(argv, **kw):
        # the profiled daemon runs under cProfile (a bench-only wrapper); its stats are written when it ends on SIGTERM
        if str(net.nodes[profile].cfg_path) in argv:
            i = argv.index("-m")
            argv = [*argv[:i], "-m", "cProfile", "-o", str(prof), *argv[i:]]
        return real(argv, **kw)
    got: dict[int, set[str]] = {i: set() for i in range(subs)}
    done = threading.Event()
    threads, streams, clients = [], [], []
    try:
        if profile:
            subprocess.Popen = popen          # this process starts nothing else meanwhile
        try:
            net.start()
        finally:
            subprocess.Popen = real
        for i in range(subs):
            node = "a" if i % 2 == 0 else "b"
            c = net.client(node)
            clients.append(c)
            s = c.subscribe(TOPIC, name=f"s{i}" if durable else "", durable=durable)
            streams.append(s)

            def read(i: int = i, s=s) -> None:
                for ev in s:
                    kind = ev.WhichOneof("kind")
                    if kind == "delivery":
                        got[i].add(ev.delivery.pub_id)
                        s.ack([ev.delivery.pub_id])
                        if all(len(g) >= count for g in got.values()):
                            done.set()
            t = threading.Thread(target=read, daemon=True)
            t.start()
            threads.append(t)
        # every subscription's interest has reached the publisher's node
        with net.client("n1") as c:
            deadline = time.monotonic() + 30
            while sum(1 for i in c.subscriptions(remote=True) if i.node in ("a", "b")) < subs:
                if time.monotonic() > deadline:
                    raise RuntimeError("interest did not reach n1")
                time.sleep(0.1)
        pids = {name: n.proc.pid for name, n in net.nodes.items()}
        each0, t0 = {name: proc_cpu(p) for name, p in pids.items()}, time.monotonic()
        commits0 = _commits(net)
        per = [count // PUBLISHERS + (1 if k < count % PUBLISHERS else 0) for k in range(PUBLISHERS)]

        def pub(n: int) -> None:
            with net.client("n1") as c:
                for _ in range(n):
                    r = c.publish(TOPIC, size=size)
                    assert r.accepted, r.reason
        pubs = [threading.Thread(target=pub, args=(n,)) for n in per]
        for t in pubs:
            t.start()
        for t in pubs:
            t.join()
        if not done.wait(120):
            raise RuntimeError(f"not every publication arrived: {sorted(len(g) for g in got.values())}")
        each = {name: round(proc_cpu(p) - each0[name], 3) for name, p in pids.items()}
        t1 = time.monotonic()
        commits = {n: tuple(b - a for a, b in zip(commits0[n], c)) for n, c in _commits(net).items()}
        deliveries = sum(len(g) for g in got.values())
        cpu = sum(each.values())
        return {"cpu_s": cpu, "wall_s": t1 - t0, "deliveries": deliveries, "per_node": each, "commits_ops": commits,
                "ms_per_delivery": 1000 * cpu / deliveries}
    finally:
        for s in streams:
            s.close(wait=1.0)
        for c in clients:
            c.close()
        net.close()
        if profile and prof.exists():
            import pstats
            st = pstats.Stats(str(prof))
            st.sort_stats("tottime").print_stats(TOP)
        shutil.rmtree(work, ignore_errors=True)


def _commits(net) -> dict[str, tuple[int, int]]:
    out = {}
    for n in net.nodes:
        with net.client(n) as c:
            st = c.stats()
        out[n] = (st["spool_commits"], st["spool_ops"])
    return out


def child(root: Path, args: argparse.Namespace) -> dict:
    """One session with the code under `root`, in a child process (its own imports, its own daemons)."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--one", "--root", str(root), "--count", str(args.count),
            "--size", str(args.size), "--subs", str(args.subs)] + (["--live"] if args.live else [])
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=root, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"session with {root} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="", help="revision to compare with, interleaved (default: none)")
    ap.add_argument("--rounds", type=int, default=5, help="sessions of each code (medians are compared)")
    ap.add_argument("--count", type=int, default=300, help="publications per session")
    ap.add_argument("--size", type=int, default=1000, help="payload bytes")
    ap.add_argument("--subs", type=int, default=10, help="subscriptions (half at a, half at b)")
    ap.add_argument("--live", action="store_true", help="non-durable subscriptions (default: durable)")
    ap.add_argument("--profile", default="", metavar="NODE", help="one session of this checkout, NODE under cProfile")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count < PUBLISHERS or args.subs < 1 or args.rounds < 1 or args.size < 1:
        ap.error("--count must be at least 4, --subs, --rounds and --size at least 1")
    if args.profile and args.profile not in NAMES:
        ap.error(f"--profile: no node {args.profile!r} (one of {', '.join(NAMES)})")
    try:
        return run(args)
    except (ValueError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench_pubsub_cpu: {exc}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    if args.one or args.profile:
        if args.root:
            sys.path.insert(0, args.root)
        r = session(args.count, args.size, args.subs, not args.live, args.profile)
        print(json.dumps(r), flush=True)
        return 0
    sys.path.insert(0, str(REPO))
    from bench.pubsub_daemons import RevisionTree
    tree = RevisionTree(args.before) if args.before else None
    try:
        before_root = tree.open() if tree else None
        per: dict[str, list[float]] = {"after": [], "before": []}
        for k in range(args.rounds):
            turns = [("after", REPO)] + ([("before", before_root)] if before_root else [])
            if k % 2:
                turns.reverse()            # neither code always goes first
            for label, root in turns:
                r = child(root, args)
                per[label].append(r["ms_per_delivery"])
                print(f"round {k + 1} {label}: {r['ms_per_delivery']:.3f} ms CPU per delivery ({r['cpu_s']:.2f} "
                      f"CPU s, {r['deliveries']} deliveries, {r['wall_s']:.1f} s)", file=sys.stderr, flush=True)
    finally:
        if tree:
            tree.close()
    mode = "non-durable" if args.live else "durable"
    after = statistics.median(per["after"])
    print(f"daemons' CPU per delivered publication, {args.subs} subscribers, {mode}, this checkout: "
          f"{after:.3f} ms (median of {args.rounds})")
    if per["before"]:
        before = statistics.median(per["before"])
        bound = before / 2
        print(f"daemons' CPU per delivered publication, {args.subs} subscribers, {mode}, vs {args.before} "
              f"({before:.3f} ms): measured {after:.3f} ms / bound {bound:.3f} ms = ratio {after / bound:.2f} "
              f"(<= 1 meets the bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
