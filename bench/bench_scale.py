"""The one-machine ceiling: the largest grid and tree whose daemons carry a Brachman workload unsaturated (root).

Each probe is one short `testbed run` of scenarios/brachman-linear.yaml's quick
variant (one cell: fragmenting, RBSAD 400, 8000 bit/s, time_scale 0.1, 20 model s
warm-up + 200 model s workload + at most 100 model s drain) with its topology
replaced by a grid (near-square, rows x cols with cols = rows or rows + 1) or a
complete tree (every depth and fanout the generator allows, sorted by host
count). A probe FITS when the rep completed, its host.jsonl is not saturated
(the experiments' rule, testbed/experiment/hostmon.py: CPU above 90% in more
than 10% of the samples) and the machine's memory in use stayed below the limit
(24 GiB by default). The search doubles the host count from --start until a
probe does not fit (or the generator's limit), then bisects between the last
fit and the first misfit. Prints per topology

    grid largest unsaturated: 64 hosts (8x8); smallest misfit 72 hosts (8x9): saturated
    grid at 64 hosts: CPU above 90% in measured 0.050 of samples / bound 0.100 = ratio 0.50 (mean 41%, peak 93%)
    grid at 64 hosts: memory in use measured 3.10 GiB / bound 24.00 GiB = ratio 0.13
    grid at 64 hosts: set-up 25.3 s, teardown 9.1 s (no bound)

and the same figures for the smallest misfit.

Resumable: every probe appends one JSON line to --results (default
runs/bench-scale/results.jsonl); a probe already there (same topology, size and
workload) is not run again. Wall time: a probe is about 33 s of emulated time
plus set-up and teardown (roughly 0.3 s per host each), so 45 s at 4 hosts and
a few minutes at 300; a search is about 7 doubling and 5 bisection probes per
topology: about 1 to 1.5 hours for both. Run it alone on a quiet machine (the
verdict is the machine's CPU, so anything else running moves it).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "brachman-linear.yaml"
MAX_HOSTS = 500            # testbed/topology/generators.py MAX_NODES
GIB = 1024 ** 3


@dataclass(frozen=True)
class Shape:
    topology: str          # grid or tree
    params: dict           # the generator's params
    hosts: int

    @property
    def label(self) -> str:
        if self.topology == "grid":
            return f"{self.params['rows']}x{self.params['cols']}"
        return f"depth {self.params['depth']} fanout {self.params['fanout']}"


def grid_shapes(limit: int = MAX_HOSTS) -> list[Shape]:
    """Near-square grids (cols = rows or rows + 1; the generator allows at most 30 of each), by host count."""
    out = []
    for rows in range(1, 31):
        for cols in (rows, rows + 1):
            if rows * cols >= 2 and rows * cols <= limit and cols <= 30:
                out.append(Shape("grid", {"rows": rows, "cols": cols}, rows * cols))
    return sorted(out, key=lambda s: s.hosts)


def tree_shapes(limit: int = MAX_HOSTS) -> list[Shape]:
    """Every complete tree the generator allows (depth 1-8, fanout 1-10), one per host count (lowest fanout)."""
    by_count: dict[int, Shape] = {}
    for fanout in range(2, 11):
        for depth in range(1, 9):
            n = sum(fanout ** i for i in range(depth + 1))
            if n <= limit and n not in by_count:
                by_count[n] = Shape("tree", {"depth": depth, "fanout": fanout}, n)
    return [by_count[n] for n in sorted(by_count)]


SHAPES = {"grid": grid_shapes, "tree": tree_shapes}


def mem_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise OSError("no MemTotal in /proc/meminfo")


def probe_key(shape: Shape, workload: str) -> str:
    return f"{shape.topology} {json.dumps(shape.params, sort_keys=True)} {workload}"


def load_results(path: Path) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                doc = json.loads(line)
                done[doc["key"]] = doc
            except (ValueError, KeyError, TypeError):
                continue      # a line cut short by an interrupted probe: that probe runs again
    return done


def run_probe(shape: Shape, workdir: Path, sets: list[str]) -> dict:
    """One short `testbed run`; the phases' times are taken as its progress lines arrive."""
    out = workdir / f"{shape.topology}-{shape.hosts}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "testbed", "run", str(SCENARIO), "--quick", "--out", str(out),
           "--set", "topology.generator=" + shape.topology,
           "--set", "topology.params=" + json.dumps(shape.params), *[a for s in sets for a in ("--set", s)]]
    stamps: dict[str, float] = {}
    tail: list[str] = []
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        now = time.monotonic()
        tail = (tail + [line.rstrip()])[-20:]
        for phase in ("building", "warmup", "teardown"):
            if line.rstrip().endswith(f"] {phase}"):
                stamps.setdefault(phase, now)
    status = proc.wait()
    end = time.monotonic()
    doc: dict = {"topology": shape.topology, "params": shape.params, "hosts": shape.hosts,
                 "exit_status": status, "wall_s": round(end - t0, 2)}
    if "building" in stamps and "warmup" in stamps:
        doc["setup_s"] = round(stamps["warmup"] - stamps["building"], 2)
    if "teardown" in stamps:
        doc["teardown_s"] = round(end - stamps["teardown"], 2)     # to the exit: the loss check included
    rep_dir = _rep_dir(out)
    summary = _json(rep_dir / "summary.json") if rep_dir else None
    if summary is None:
        doc["error"] = "no summary.json: " + " | ".join(tail[-5:])
        return doc
    sat = summary.get("saturation") or {}
    mems = [float(r["mem_percent"]) for r in _jsonl(rep_dir / "host.jsonl") if "mem_percent" in r]
    doc.update(complete=bool(summary.get("complete", True)), saturated=bool(sat.get("saturated")),
               fraction_above=sat.get("fraction_above"), samples=sat.get("samples"),
               cpu_mean=sat.get("mean_cpu"), cpu_peak=sat.get("max_cpu"),
               mem_bytes=int(max(mems) / 100.0 * mem_total_bytes()) if mems else None,
               lost=summary.get("lost"), delivered=summary.get("delivered"))
    shutil.rmtree(out, ignore_errors=True)      # only the figures are kept: a 300-host run directory is large
    return doc


def _rep_dir(out: Path) -> Path | None:
    doc = _json(out / "experiment.json")
    try:
        return out / doc["cells"][0]["reps"][0]["dir"]
    except (TypeError, KeyError, IndexError):
        return None


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _jsonl(path: Path) -> list[dict]:
    out = []
    try:
        for line in path.read_text().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
    except OSError:
        pass
    return out


def verdict(doc: dict, mem_limit: float) -> str:
    """'' when the probe fits, else why not."""
    if doc.get("error"):
        return f"failed ({doc['error'][:200]})"
    if not doc.get("complete"):
        return "incomplete rep"
    if doc.get("lost"):
        return f"lost {doc['lost']} messages (a failed run, not a ceiling: look at it)"
    if doc.get("saturated"):
        return "saturated"
    if doc.get("mem_bytes") is not None and doc["mem_bytes"] >= mem_limit:
        return "memory limit"
    return ""


class Search:
    def __init__(self, args: argparse.Namespace) -> None:
        self.results = Path(args.results)
        self.results.parent.mkdir(parents=True, exist_ok=True)
        self.done = load_results(self.results)
        self.workdir = self.results.parent / "probes"
        self.sets = list(args.set)
        self.workload = f"{SCENARIO.name} --quick {' '.join(sorted(self.sets))}".strip()
        self.mem_limit = args.mem_limit_gib * GIB

    def probe(self, shape: Shape) -> dict:
        key = probe_key(shape, self.workload)
        if key in self.done:
            doc = self.done[key]
            print(f"  {shape.topology} {shape.hosts} hosts ({shape.label}): recorded earlier", flush=True)
        else:
            print(f"  {shape.topology} {shape.hosts} hosts ({shape.label}): probing ...", flush=True)
            doc = run_probe(shape, self.workdir, self.sets) | {"key": key, "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
            with open(self.results, "a") as f:
                f.write(json.dumps(doc) + "\n")
            self.done[key] = doc
        why = verdict(doc, self.mem_limit)
        print(f"    {'fits' if not why else why}; CPU mean {doc.get('cpu_mean')}%, peak {doc.get('cpu_peak')}%, "
              f"wall {doc.get('wall_s')} s", flush=True)
        return doc

    def largest(self, shapes: list[Shape], start: int) -> tuple[int | None, int | None]:
        """Indices into `shapes` of the largest fit and the smallest misfit (doubling, then bisection)."""
        i = next((k for k, s in enumerate(shapes) if s.hosts >= start), 0)
        good: int | None = None
        bad: int | None = None
        while True:
            if verdict(self.probe(shapes[i]), self.mem_limit):
                bad = i
                break
            good = i
            if i == len(shapes) - 1:
                return good, None
            target = 2 * shapes[i].hosts
            i = next((k for k, s in enumerate(shapes) if s.hosts >= target), len(shapes) - 1)
        low = good if good is not None else -1
        while bad - low > 1:
            mid = (low + bad) // 2
            if verdict(self.probe(shapes[mid]), self.mem_limit):
                bad = mid
            else:
                low = good = mid
        return good, bad


def report(topology: str, shapes: list[Shape], good: int | None, bad: int | None, search: Search,
           searched: bool = True) -> None:
    def doc_of(i: int) -> dict:
        return search.done[probe_key(shapes[i], search.workload)]

    if bad is not None:
        misfit = f"; smallest misfit {shapes[bad].hosts} hosts ({shapes[bad].label}): {verdict(doc_of(bad), search.mem_limit)}"
    elif searched:
        misfit = f"; the search's limit ({shapes[-1].hosts} hosts) reached"
    else:
        misfit = " (only the smallest probe ran: a lower bound, not the ceiling)"
    if good is None:
        print(f"{topology} largest unsaturated: none (the smallest probe did not fit){misfit}")
    else:
        print(f"{topology} largest unsaturated: {shapes[good].hosts} hosts ({shapes[good].label}){misfit}")
    for i in (good, bad):
        if i is not None:
            _figures(f"{topology} at {shapes[i].hosts} hosts{'' if i == good else ' (misfit)'}", doc_of(i), search)


def _figures(label: str, d: dict, search: Search) -> None:
    frac = d.get("fraction_above")
    if frac is not None:
        print(f"{label}: CPU above 90% in measured {frac:.3f} of samples / bound 0.100 = ratio {frac / 0.1:.2f} "
              f"(mean {d.get('cpu_mean')}%, peak {d.get('cpu_peak')}%, {d.get('samples')} samples)")
    if d.get("mem_bytes") is not None:
        print(f"{label}: memory in use measured {d['mem_bytes'] / GIB:.2f} GiB / bound "
              f"{search.mem_limit / GIB:.2f} GiB = ratio {d['mem_bytes'] / search.mem_limit:.2f}")
    print(f"{label}: set-up {d.get('setup_s')} s, teardown {d.get('teardown_s')} s "
          f"(teardown to the run's exit, the loss check included; no bound)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topologies", default="grid,tree", help="comma-separated: grid, tree (default both)")
    ap.add_argument("--start", type=int, default=4, help="host count of the first probe (default 4)")
    ap.add_argument("--max-hosts", type=int, default=MAX_HOSTS, help=f"stop doubling here (default {MAX_HOSTS})")
    ap.add_argument("--mem-limit-gib", type=float, default=24.0, help="memory in use must stay below (default 24)")
    ap.add_argument("--results", default=str(REPO / "runs" / "bench-scale" / "results.jsonl"),
                    help="the resumable results file (appended to; probes already in it are not run again)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra scenario override for every probe (part of a probe's identity)")
    ap.add_argument("--smallest", action="store_true", help="run only the smallest probe of each topology")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_scale: skipped (needs root to build network namespaces)")
        return 0
    topologies = [t.strip() for t in args.topologies.split(",") if t.strip()]
    unknown = [t for t in topologies if t not in SHAPES]
    if unknown or not topologies:
        print(f"bench_scale: unknown topology {', '.join(unknown) or '(none)'}; expected grid, tree")
        return 2
    if not 2 <= args.start <= args.max_hosts <= MAX_HOSTS:
        print(f"bench_scale: need 2 <= --start <= --max-hosts <= {MAX_HOSTS}")
        return 2
    search = Search(args)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load before: {load}; workload: {search.workload}")
    if float(load[0]) > 1.0:
        print(f"bench_scale: warning: load average {load[0]} before the first probe; the verdicts count the other "
              f"processes' CPU too")
    for topology in topologies:
        shapes = SHAPES[topology](args.max_hosts)
        if args.smallest:
            shape = next(s for s in shapes if s.hosts >= args.start)
            why = verdict(search.probe(shape), search.mem_limit)
            i = shapes.index(shape)
            report(topology, shapes, None if why else i, i if why else None, search, searched=False)
            continue
        good, bad = search.largest(shapes, args.start)
        report(topology, shapes, good, bad, search)
    return 0


if __name__ == "__main__":
    sys.exit(main())
