"""Node daemon benchmarks: durable 1 kB messages per second over one hop on loopback.

Method: n1's spool is pre-loaded with N durable 1 kB messages for n2 (written with
the same spool operation a submission uses) while n2 is down; then n2 starts and
the hop drains. The rate is taken from n2's deliveries.jsonl (first to last
delivery), so it covers: n1 batching frames onto the Link stream, n2 storing
every fragment durably (WAL, synchronous=FULL, group commit) before acking,
reassembly/delivery into the mailbox (another durable commit), and n1 deleting
its acknowledged copies. Submission through the Submit RPC is measured
separately (many concurrent calls). Bound: >= 10,000 messages/s per hop on 2 cores.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.localnet import LocalNet, NetnsLinks  # noqa: E402
from node.piece import Piece  # noqa: E402
from node.spool import Spool  # noqa: E402

N = 30_000
SIZE = 1000
BATCH = {"max_frames": 512, "max_bytes": 1 << 20, "min_bytes": 16384, "target_delay": 0.02, "commit_window": 0.002, "max_commit": 4096, "window_frames": 8192}


def preload(net: LocalNet, n: int, dst: str) -> None:
    preload_spool(net.nodes["n1"].cfg.spool_path, n, dst)


def preload_spool(spool_path: Path, n: int, dst: str) -> None:
    """n messages of SIZE bytes from n1 to dst in the spool at spool_path, written as submissions write them
    (also used by bench_security.py)."""
    spool = Spool(spool_path, 0.0)
    spool.open()
    now = time.time()
    pieces = [Piece(f"b{i:08d}", dst, 0, SIZE, 0, "n1", "", [""], 1, now, now + 3600, "", 1, b"x" * SIZE)
              for i in range(n)]
    for i in range(0, n, 5000):
        chunk = pieces[i:i + 5000]
        origins = [Spool.op_origin(p.msg_id, "", [dst], SIZE, 1, now, now + 3600) for p in chunk]
        insert = Spool.op_insert(chunk)

        def op(c, origins=origins, insert=insert) -> None:   # as a submission writes them: accepted messages
            for o in origins:
                o(c)
            insert(c)
        spool.run_sync(op)
    spool.close()


def hop_rate(mode: str, hops: int = 1, resources: dict | None = None) -> float:
    last = f"n{hops + 1}"
    extra = {"resources": resources} if resources is not None else {}
    with tempfile.TemporaryDirectory(prefix="bench_node_") as tmp:
        with LocalNet.chain(Path(tmp), hops, mode=mode, batch=BATCH, metrics_interval=5.0, **extra) as net:
            preload(net, N, last)
            net.start(*[f"n{i}" for i in range(1, hops + 2)])
            deadline = time.monotonic() + 300
            with net.client(last) as c:
                while c.stats()["delivered"] < N and time.monotonic() < deadline:
                    time.sleep(0.2)
            ts = sorted(d["deliver_ts"] for d in net.records(last, "delivery"))
            assert len(ts) == N, f"only {len(ts)} of {N} delivered"
            return (N - 1) / (ts[-1] - ts[0])


def stream_rate(messages: int = 20, fragments: int = 100, allocation: int = 16) -> float:
    """Fragments per second of long messages on message streams (credits per hop) over a 3-hop chain."""
    res = {"stream_allocation": allocation, "recipient_pool": 100_000, "removal_interval": 0.0, "transit_buffers": 10_000,
           "input_pool": messages * fragments}
    with tempfile.TemporaryDirectory(prefix="bench_node_") as tmp:
        with LocalNet.chain(Path(tmp), 3, batch=BATCH, metrics_interval=5.0, resources=res) as net:
            net.start()
            t0 = time.monotonic()
            with net.client("n1") as c:
                for _ in range(messages):
                    assert c.send(["n4"], size=fragments * SIZE).accepted
            with net.client("n4") as c:
                while c.stats()["delivered"] < messages and time.monotonic() - t0 < 300:
                    time.sleep(0.05)
            got = net.records("n4", "delivery")
            assert len(got) == messages
            return messages * fragments / (max(d["deliver_ts"] for d in got) - min(d["submit_ts"] for d in got))


def submit_rate(n: int = 5000, parallel: int = 64) -> float:
    with tempfile.TemporaryDirectory(prefix="bench_node_") as tmp:
        with LocalNet.chain(Path(tmp), 1, batch=BATCH, metrics_interval=5.0) as net:
            net.start()
            with net.client("n1") as c:
                t0 = time.monotonic()
                with concurrent.futures.ThreadPoolExecutor(parallel) as ex:
                    ok = sum(r.accepted for r in ex.map(lambda _i: c.send(["n2"], size=SIZE), range(n)))
                dt = time.monotonic() - t0
            assert ok == n
            return n / dt


def large_over_shaped_chain(mode: str, size: int = 10_000_000, hops: int = 3, rate_mbit: float = 50.0,
                            frag: int = 1000) -> float:
    """End-to-end delay of one message over `hops` TBF-shaped veth links (namespaces; no netem, so d = 0)."""
    with tempfile.TemporaryDirectory(prefix="bench_node_") as tmp:
        with LocalNet.chain(Path(tmp), hops, mode=mode, fragment_size=frag, netns=NetnsLinks(rate_mbit),
                            metrics_interval=5.0) as net:
            net.start()
            last = f"n{hops + 1}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                ups = []
                for n in net.nodes:
                    with net.client(n) as c:
                        ups += [v["up"] for v in c.stats()["neighbours"].values()]
                if all(ups):
                    break
                time.sleep(0.1)
            with net.client("n1") as c:
                assert c.send([last], size=size).accepted
            with net.client(last) as c:
                while c.stats()["delivered"] < 1 and time.monotonic() < deadline + 120:
                    time.sleep(0.05)
            d = net.records(last, "delivery")[0]
            return d["deliver_ts"] - d["submit_ts"]


WIRE_SCENARIO = """
topology: {{generator: linear, params: {{n: {n}}}}}
shaper: wire
capture: {{links: [n{h}-n{n}], snaplen: 128}}
link_defaults: {{delay: {d}s, rate: {rate}Mbit, queue: 4000}}
{sysctls}
nodes:
  all:
    mode: {mode}
    fragment_size: {f}
    metrics_interval: 5.0
"""
WARMUP_SIZE = 3_000_000


def _last_link_span(pcap: Path, since: float) -> tuple[float, float]:
    """First and last TCP segment carrying message data on the last link after `since` (segments of 512+
    payload bytes: keepalives and acks are a few dozen bytes)."""
    from spark_analysis.pcap_parser import parse_range, read_format
    data = pcap.read_bytes()
    fmt = read_format(data[:24], str(pcap))
    by_dir: dict[tuple[str, str], list[float]] = {}
    for pkt in parse_range(data, fmt, 24, len(data)):
        if pkt.ts >= since and pkt.payload >= 512:
            by_dir.setdefault((pkt.src, pkt.dst), []).append(pkt.ts)
    times = max(by_dir.values(), key=len)
    return times[0], times[-1]


def large_over_wire_chain(mode: str, size: int = 10_000_000, hops: int = 3, rate_mbit: float = 50.0,
                          delay: float = 0.020, frag: int = 1000, warm: bool = False) -> tuple[float, float]:
    """One message over `hops` links of the wire emulator (rate and delay), real daemons.

    Returns (end-to-end delay, sustained goodput in bytes/s = size / time between the first and the last
    data segment on the last link). warm: the sessions first carry a WARMUP_SIZE message and the hosts run
    with net.ipv4.tcp_slow_start_after_idle=0, so TCP starts the measured message with the congestion
    window the warm-up left (a long-lived MTA session in steady state) instead of restarting slow start.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration" / "wan_node"))
    from wan_node_support import wan_with_daemons  # the tests' builder: scenario -> network + daemons
    sysctls = "sysctls: {net.ipv4.tcp_slow_start_after_idle: 0}" if warm else ""
    text = WIRE_SCENARIO.format(n=hops + 1, h=hops, d=delay, rate=rate_mbit, mode=mode, f=frag, sysctls=sysctls)
    last = f"n{hops + 1}"
    with wan_with_daemons(text) as (net, daemons):
        deadline = time.monotonic() + 180

        def send_and_wait(nbytes: int, count: int) -> None:
            with daemons.client("n1") as c:
                assert c.send([last], size=nbytes).accepted
            with daemons.client(last) as c:
                while c.stats()["delivered"] < count:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the {nbytes} byte message did not arrive within 180 s")
                    time.sleep(0.05)
        if warm:
            send_and_wait(WARMUP_SIZE, 1)
            time.sleep(1.0)          # idle sessions (keepalives only), as between messages in a real MTA
        send_and_wait(size, 2 if warm else 1)
        records = (net.run_dir / "nodes" / last / "deliveries.jsonl").read_text().splitlines()
        d = [r for r in map(json.loads, records) if r["size"] == size][0]
        time.sleep(1.5)              # the emulator flushes its pcap every second
        first, final = _last_link_span(net.run_dir / "pcap" / f"n{hops}-{last}.pcap", d["submit_ts"])
    return d["deliver_ts"] - d["submit_ts"], size / (final - first)


def wire_chain_lines(size: int = 10_000_000, hops: int = 3, rate_mbit: float = 50.0, d: float = 0.020) -> None:
    """Delay against the pipelining bound, and goodput as a fraction of the link rate: end to end
    (size / delay, which also charges TCP slow start, submission and the pipeline fill) and sustained
    (size / the time the last link carried the message)."""
    rate = rate_mbit * 1e6 / 8
    for warm in (False, True):
        for mode, frag in (("fragmenting", 1000), ("fragmenting", 16000), ("non-fragmenting", 1000)):
            delay, sustained = large_over_wire_chain(mode, size, hops, rate_mbit, d, frag, warm)
            if mode == "fragmenting":
                bound = size / rate + (hops - 1) * frag / rate + hops * d
            else:
                bound = hops * size / rate + hops * d
            label = (f"{mode}, F={frag}" if mode == "fragmenting" else mode) + (", warm" if warm else ", cold")
            print(f"node 10MB over 3x(50 Mbit/s, 20 ms) wire ({label}): delay measured {delay:.3f} s / bound "
                  f"{bound:.3f} s = ratio {delay / bound:.2f} (bound <= 1.2); sustained goodput measured "
                  f"{sustained / rate:.3f} of link rate / bound 0.9 = ratio {sustained / rate / 0.9:.2f}; "
                  f"end-to-end {size / delay / rate:.3f} of link rate"
                  + ("" if mode == "fragmenting" else f" ({hops} store-and-forward hops: at most {1 / hops:.2f})"))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads: event loop, spool writer, gRPC core)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def large_over_loopback_chain(mode: str = "fragmenting", size: int = 10_000_000, hops: int = 3,
                              frag: int = 1000, cpu: dict | None = None) -> float:
    """Submit-to-delivery time of one message over `hops` unshaped loopback hops: the node's CPU cost alone.

    With F = 1000 a 10 MB message is 10,000 fragments crossing every hop; the link is not the limit, so this
    measures the per-fragment path (split, spool, batching, decode, store + ack, forward, delete, reassembly).
    `cpu`, when given, receives each daemon's CPU seconds for the transfer (less sensitive to other load).
    """
    with tempfile.TemporaryDirectory(prefix="bench_node_") as tmp:
        with LocalNet.chain(Path(tmp), hops, mode=mode, fragment_size=frag, batch=BATCH, metrics_interval=5.0) as net:
            net.start()
            last = f"n{hops + 1}"
            pids = {n: node.proc.pid for n, node in net.nodes.items()}
            before = {n: _cpu_seconds(p) for n, p in pids.items()}
            with net.client("n1") as c:
                assert c.send([last], size=size).accepted
            deadline = time.monotonic() + 180
            with net.client(last) as c:
                while c.stats()["delivered"] < 1:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the message did not arrive within 180 s")
                    time.sleep(0.02)
            time.sleep(0.3)        # let the last acks and deletes finish: they are part of the cost
            if cpu is not None:
                cpu.update({n: _cpu_seconds(p) - before[n] for n, p in pids.items()})
            d = net.records(last, "delivery")[0]
            return d["deliver_ts"] - d["submit_ts"]


def loopback_large_lines(reps: int = 3) -> None:
    for mode, frag in (("fragmenting", 1000), ("fragmenting", 16000), ("non-fragmenting", 1000)):
        runs = []
        for _ in range(reps):
            cpu: dict = {}
            runs.append((large_over_loopback_chain(mode, frag=frag, cpu=cpu), sum(cpu.values()), cpu))
        runs.sort(key=lambda r: r[0])
        t, total, cpu = runs[len(runs) // 2]
        label = f"{mode}, F={frag}" if mode == "fragmenting" else mode
        per = ", ".join(f"{n} {s:.2f}" for n, s in sorted(cpu.items()))
        line = (f"node 10MB over 3 unshaped loopback hops ({label}): median {t:.3f} s over {reps} runs "
                f"(min {runs[0][0]:.3f}, max {runs[-1][0]:.3f}); CPU {total:.2f} s in all daemons ({per})")
        if mode == "fragmenting":
            frags = 10_000_000 // frag
            line += f", {total / (frags * 3) * 1e6:.0f} us CPU per fragment per hop"
        print(line + " (no bound; the node's own cost)")


def main() -> int:
    if "--wire-only" in sys.argv[1:]:
        wire_chain_lines()
        return 0
    if "--loopback-large" in sys.argv[1:]:
        loopback_large_lines()
        return 0
    if "--hop-only" in sys.argv[1:]:
        for mode in ("fragmenting", "non-fragmenting"):
            r = hop_rate(mode)
            print(f"node hop 1kB durable msgs/s ({mode}, loopback): measured {r:,.0f}/s / bound 10,000/s = ratio {r / 10000:.2f}")
        return 0
    print(f"batch settings: {json.dumps(BATCH)}")
    for mode in ("fragmenting", "non-fragmenting"):
        r = hop_rate(mode)
        print(f"node hop 1kB durable msgs/s ({mode}, loopback): measured {r:,.0f}/s / bound 10,000/s = ratio {r / 10000:.2f}")
    r = hop_rate("fragmenting", hops=2)
    print(f"node 2-hop chain 1kB durable msgs/s (fragmenting, transit through n2, 3 processes on 2 cores): "
          f"measured {r:,.0f}/s / bound 10,000/s = ratio {r / 10000:.2f}")
    # the same hops with resource management on (buffer classes, recipient pool big enough for the
    # whole preload, no removal process); single-fragment messages, so no streams
    managed = {"recipient_pool": 4 * N, "removal_interval": 0.0, "transit_buffers": 10_000}
    for mode in ("fragmenting", "non-fragmenting"):
        r = hop_rate(mode, resources=managed)
        print(f"node hop 1kB durable msgs/s ({mode}, loopback, resources on): measured {r:,.0f}/s / "
              f"bound 10,000/s = ratio {r / 10000:.2f}")
    r = hop_rate("fragmenting", hops=2, resources=managed)
    print(f"node 2-hop chain 1kB durable msgs/s (fragmenting, resources on): measured {r:,.0f}/s / "
          f"bound 10,000/s = ratio {r / 10000:.2f}")
    r = stream_rate()
    print(f"node 3-hop stream 100x1kB message, allocation 16, resources on: measured {r:,.0f} fragments/s "
          f"(no bound; informational)")
    r = submit_rate()
    print(f"node submit RPC 1kB durable msgs/s (64 concurrent calls): measured {r:,.0f}/s (no bound; informational)")
    if os.geteuid() != 0:
        print("node 10MB over 3x50 Mbit/s: skipped (needs root for namespaces and tc)")
        return 0
    size, hops, rate = 10_000_000, 3, 50e6 / 8
    for mode in ("fragmenting", "non-fragmenting"):
        delay = large_over_shaped_chain(mode, size, hops)
        bound = size / rate + (hops - 1) * 1000 / rate if mode == "fragmenting" else hops * size / rate
        goodput = size / delay / rate
        print(f"node 10MB over 3x50 Mbit/s TBF, d=0 ({mode}): delay measured {delay:.3f} s / bound {bound:.3f} s "
              f"= ratio {delay / bound:.2f} (bound <= 1.2)")
        if mode == "fragmenting":
            print(f"node 10MB over 3x50 Mbit/s TBF goodput ({mode}): measured {goodput:.3f} of link rate / "
                  f"bound 0.9 = ratio {goodput / 0.9:.2f}")
    big_f = 16000   # per-fragment CPU is the limit at F=1000 on 2 cores; show the same path with bigger fragments
    delay = large_over_shaped_chain("fragmenting", size, hops, frag=big_f)
    bound = size / rate + (hops - 1) * big_f / rate
    print(f"node 10MB over 3x50 Mbit/s TBF, d=0 (fragmenting, F={big_f}): delay measured {delay:.3f} s / bound "
          f"{bound:.3f} s = ratio {delay / bound:.2f}; goodput {size / delay / rate:.3f} of link rate")
    loopback_large_lines()
    wire_chain_lines()
    return 0


if __name__ == "__main__":
    sys.exit(main())
