"""`testbed run` end to end: the quickstart scenario's quick variant (needs root).

Prints

    quickstart quick wall time: measured X s / bound Y s = ratio R

The bound is the time the run cannot avoid: warm-up plus workload duration of
every repetition, at the scenario's time_scale, as if building the network,
starting the daemons, draining, collecting and tearing down cost nothing. The
ratio therefore says how much the experiment machinery adds on top of the
emulated time (ratio 2 = as much again). The drain is reported separately: it
ends when every spool is empty, so it depends on the load, not on the machinery.
Host CPU mean and peak come from each repetition's host.jsonl (via summary.json).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.experiment import runner  # noqa: E402
from testbed.scenario import loader  # noqa: E402

SCENARIO = REPO / "scenarios" / "quickstart.yaml"


def unavoidable_seconds(scenario_path: Path, quick: bool) -> tuple[float, int]:
    """Sum over every rep of (warm-up + duration) in wall seconds, and the number of reps."""
    _, plans = runner.plan(str(scenario_path), Path("/nonexistent"), None, quick, [])
    total = sum((p.scenario.workload.warmup + p.scenario.duration) * p.scenario.time_scale for p in plans)
    return total, len(plans)


def rep_summaries(out: Path) -> list[dict]:
    doc = json.loads((out / runner.EXPERIMENT_FILE).read_text())
    found = []
    for cell in doc["cells"]:
        for rep in cell["reps"]:
            path = out / rep["dir"] / "summary.json"
            found.append(json.loads(path.read_text()) if path.is_file() else {"missing": str(path)})
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(SCENARIO))
    ap.add_argument("--full", action="store_true", help="run the full scenario instead of its quick variant")
    ap.add_argument("--keep", default=None, help="keep the run directory here instead of a temporary one")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_experiment: skipped (needs root to build network namespaces)")
        return 0
    quick = not args.full
    bound, n_reps = unavoidable_seconds(Path(args.scenario), quick)
    tmp = None
    if args.keep:
        out = Path(args.keep)
    else:
        tmp = tempfile.mkdtemp(prefix="wanbed-bench-exp-")
        out = Path(tmp) / "run"
    label = f"{loader.load(args.scenario, quick=quick).name} {'quick' if quick else 'full'}"
    print(f"load before: {Path('/proc/loadavg').read_text().split()[:3]}")
    cmd = [sys.executable, "-m", "testbed", "run", args.scenario, "--out", str(out)] + (["--quick"] if quick else [])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    try:
        if proc.returncode != 0:
            print(proc.stdout[-3000:])
            print(f"{label}: testbed run exited {proc.returncode}")
            return 1
        sums = rep_summaries(out)
        drain = sum(float((s.get("drain") or {}).get("seconds") or 0.0) for s in sums)
        means = [s["saturation"]["mean_cpu"] for s in sums if (s.get("saturation") or {}).get("mean_cpu") is not None]
        peaks = [s["saturation"]["max_cpu"] for s in sums if (s.get("saturation") or {}).get("max_cpu") is not None]
        saturated = sum(1 for s in sums if (s.get("saturation") or {}).get("saturated"))
        lost = sum(int(s.get("lost") or 0) for s in sums)
        dups = sum(int(s.get("duplicates") or 0) for s in sums)
        delivered = sum(int(s.get("delivered") or 0) for s in sums)
        print(f"{label} wall time: measured {wall:.1f} s / bound {bound:.1f} s = ratio {wall / bound:.2f} "
              f"({n_reps} reps; bound = warm-up + duration per rep)")
        print(f"{label} drain time: measured {drain:.1f} s (sum over reps; ends when every spool is empty)")
        print(f"{label} set-up + collect + teardown: measured {wall - bound - drain:.1f} s "
              f"({(wall - bound - drain) / n_reps:.1f} s per rep)")
        if means:
            print(f"{label} host CPU: mean {sum(means) / len(means):.1f}% (mean of rep means), peak {max(peaks):.1f}%, "
                  f"saturated reps {saturated}/{len(sums)}")
        print(f"{label} messages: delivered {delivered}, lost {lost}, duplicates {dups}")
        return 0 if lost == 0 and dups == 0 else 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
