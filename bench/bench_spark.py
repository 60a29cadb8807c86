"""Benchmarks of the Spark analysis (needs root for the capture): pcap ingestion and report time.

1. A pcap of at least 5 million packets from a REAL iperf3 run through the wire emulator: a 2-host
   Network (linear(2), shaper wire, capture on the link, snaplen 128). Segmentation offload is switched
   off in both hosts and the MSS lowered so every TCP segment and ACK is its own frame (with offload
   on, the emulator sees 64 KB GSO super-frames and a few thousand records per second). The file is
   kept in a cache folder (default /var/cache/wanbed/bench-pcap/, or $WANBED_BENCH_PCAP_DIR) and reused.
2. Ingestion (spark_analysis.pcap_ingest.ingest into Parquet) at local[1] and local[2] against
   `tshark -r FILE -q -z conv,tcp` on the same file: the bound is tshark's packets/s.
3. Report time of the quickstart experiment, Spark start-up included (`python -m spark_analysis report`
   in a fresh interpreter), when a run directory is given (--report-dir) or runs/quickstart exists.

Prints `measured / bound = ratio` lines; results are recorded in bench/RESULTS.md (## spark analysis).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench_spark")

MIN_PACKETS = 5_000_000
CACHE = Path(os.environ.get("WANBED_BENCH_PCAP_DIR", "/var/cache/wanbed/bench-pcap"))
PCAP_NAME = "iperf3-wire.pcap"


@dataclass(frozen=True)
class CaptureConfig:
    """How the benchmark capture is made."""
    min_packets: int = MIN_PACKETS
    delay: float = 0.002        # one-way delay per direction, seconds (a WAN-ish RTT of 4 ms)
    mss: int = 536              # small segments: more packets per second through the emulator
    max_seconds: int = 600      # give up (UserError) when the link cannot carry min_packets in this time
    step_seconds: int = 25      # one iperf3 run (~120k packets/s at MSS 536 here); repeated as needed


def count_records(path: Path) -> int:
    """Records in a pcap, walking only the 16-byte record headers."""
    from spark_analysis.pcap_parser import read_format, split_points, walk_offsets

    with open(path, "rb") as fh:
        data = fh.read()
    fmt = read_format(data[:24], str(path))
    pts = split_points(data, fmt, 64 << 20)
    return sum(len(walk_offsets(data, fmt, a, b)) for a, b in zip(pts[:-1], pts[1:]))


def make_capture(cfg: CaptureConfig, dest: Path) -> int:
    """Run iperf3 through the wire emulator until the link's pcap holds cfg.min_packets; copy it to dest."""
    from node.errors import UserError
    from testbed.network import Network
    from testbed.topology.generators import linear
    from testbed.topology.model import Direction

    if os.geteuid() != 0:
        raise UserError("generating the benchmark pcap needs root (network namespaces); run as root.")
    run_dir = Path(tempfile.mkdtemp(prefix="wanbed-bench-spark-"))
    try:
        with Network(linear(2, defaults=Direction(delay=cfg.delay)), shaper="wire", capture="all",
                     run_dir=run_dir, kind="bench") as net:
            n1, n2 = net.host("n1"), net.host("n2")
            for h in (n1, n2):
                for iface in net.plan.interfaces.get(h.name, []):
                    if iface.link != "mgmt":
                        # one frame per segment: no TSO/GSO super-frames through the emulator
                        h.run(["ethtool", "-K", iface.ifname, "tso", "off", "gso", "off", "gro", "off"],
                              check=True)
            server = net.link_address("n2", "n1")
            srv = n2.start("iperf3-server", ["iperf3", "-s"])
            time.sleep(0.5)
            pcap = next((run_dir / "pcap").glob("*.pcap"))
            t0 = time.monotonic()
            packets = 0
            while packets < cfg.min_packets:
                if time.monotonic() - t0 > cfg.max_seconds:
                    raise UserError(f"the capture reached only {packets} packets in {cfg.max_seconds} s.")
                res = n1.run(["iperf3", "-c", server, "-t", str(cfg.step_seconds), "-M", str(cfg.mss), "-J"],
                             timeout=cfg.step_seconds + 60)
                if res.returncode != 0:
                    raise UserError(f"iperf3 failed in n1: {res.stdout[-300:]} {res.stderr[-300:]}")
                bps = json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"]
                time.sleep(1.2)  # the emulator flushes its pcap every second
                packets = count_records(pcap)
                print(f"  capture: iperf3 {bps / 1e6:.1f} Mbit/s, {packets:,} packets so far "
                      f"({time.monotonic() - t0:.0f} s)", flush=True)
            n2.signal(srv, 15)
        # the network is down: the emulator has flushed and closed the file
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".part")
        shutil.copyfile(pcap, tmp)
        tmp.rename(dest)
        meta = {"packets": count_records(dest), "delay": cfg.delay, "mss": cfg.mss, "snaplen": 128,
                "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        dest.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        return meta["packets"]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def capture_run_tree(pcap: Path, work: Path) -> Path:
    """A one-run directory (docs/run-directory.md) holding the cached capture via a symlink."""
    rep = work / "cell0" / "1"
    (rep / "pcap").mkdir(parents=True, exist_ok=True)
    (rep / "nodes").mkdir(exist_ok=True)
    link = rep / "pcap" / "n1-n2.pcap"
    if not link.exists():
        link.symlink_to(pcap)
    return work


def time_tshark(pcap: Path) -> float:
    t0 = time.monotonic()
    subprocess.run(["tshark", "-n", "-r", str(pcap), "-q", "-z", "conv,tcp"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def time_ingest(tree: Path, master: str, out: Path, chunk_bytes: int) -> tuple[float, int, int]:
    """Seconds for ingest() with a running session (start-up excluded), packets written, parse tasks."""
    from spark_analysis import pcap_ingest
    from spark_analysis.layout import find_runs
    from spark_analysis.session import get_session

    spark = get_session(master, app=f"bench-spark-{master}")
    try:
        caps = pcap_ingest.find_captures(find_runs(tree))
        spark.range(1).count()  # warm the JVM and a Python worker before the clock starts
        t0 = time.monotonic()
        split = pcap_ingest.ranges(spark, caps, chunk_bytes)
        (pcap_ingest.packets_frame(spark, split).write.mode("overwrite")
         .partitionBy("cell", "rep", "link").parquet(pcap_ingest.uri(out)))
        dt = time.monotonic() - t0
        n = pcap_ingest.read_packets(spark, pcap_ingest.uri(out)).count()
        return dt, n, len(split)
    finally:
        spark.stop()


def rate_line(what: str, measured: float, bound: float, bound_name: str) -> None:
    print(f"{what}: measured {measured:,.0f} packets/s / bound {bound:,.0f} packets/s ({bound_name}) "
          f"= ratio {measured / bound:.2f}", flush=True)


def report_time(run_dir: Path, out: Path) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "spark_analysis", "report", str(run_dir), "--out", str(out), "--quiet"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    from node.errors import UserError

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pcap", type=Path, help="use this capture instead of the cached/generated one")
    ap.add_argument("--min-packets", type=int, default=MIN_PACKETS)
    ap.add_argument("--chunk-mb", type=float, default=32.0, help="bytes per parse task (MiB)")
    ap.add_argument("--report-dir", type=Path, help="experiment directory for the report time "
                    "(default runs/quickstart when it exists)")
    ap.add_argument("--skip-ingest", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        print(f"load average before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        if not args.skip_ingest:
            pcap = args.pcap or CACHE / PCAP_NAME
            if not pcap.is_file():
                print(f"generating {pcap} (iperf3 through the wire emulator) ...", flush=True)
                make_capture(CaptureConfig(min_packets=args.min_packets), pcap)
            packets = count_records(pcap)
            print(f"pcap: {pcap} {pcap.stat().st_size / 2**20:,.0f} MiB, {packets:,} packets (snaplen 128)",
                  flush=True)
            if packets < args.min_packets:
                print(f"warning: fewer than {args.min_packets:,} packets; delete {pcap} to regenerate", flush=True)
            t_tshark = time_tshark(pcap)
            tshark_pps = packets / t_tshark
            print(f"tshark -z conv,tcp: {t_tshark:.1f} s = {tshark_pps:,.0f} packets/s", flush=True)
            work = Path(tempfile.mkdtemp(prefix="wanbed-bench-spark-ingest-"))
            try:
                tree = capture_run_tree(pcap.resolve(), work / "runs")
                chunk = int(args.chunk_mb * (1 << 20))
                rates = {}
                for master in ("local[1]", "local[2]"):
                    dt, n, tasks = time_ingest(tree, master, work / f"parquet-{master[6]}", chunk)
                    if n != packets:
                        print(f"error: {master} wrote {n:,} packets, the file has {packets:,}", flush=True)
                        return 1
                    rates[master] = n / dt
                    print(f"  {master}: {dt:.1f} s, {tasks} parse tasks", flush=True)
                    rate_line(f"pcap ingestion {master}", rates[master], tshark_pps, "tshark conv,tcp")
                print(f"scaling local[1] -> local[2]: measured {rates['local[2]']:,.0f} / "
                      f"{rates['local[1]']:,.0f} packets/s = ratio {rates['local[2]'] / rates['local[1]']:.2f} "
                      f"(ideal 2.00)", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        rdir = args.report_dir or ROOT / "runs" / "quickstart"
        if rdir.is_dir():
            out = Path(tempfile.mkdtemp(prefix="wanbed-bench-spark-report-"))
            try:
                dt = report_time(rdir, out)
                print(f"report time {rdir.name} (Spark start-up included): measured {dt:.1f} s", flush=True)
            finally:
                shutil.rmtree(out, ignore_errors=True)
        else:
            print(f"report time: skipped ({rdir} does not exist)", flush=True)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
