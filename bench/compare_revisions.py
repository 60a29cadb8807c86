"""The node's key figures for two checkouts, interleaved: did a change that should not move them move them?

For a refactoring (the subsystem seam was the first) the node's hop rate, the quickstart's mean delay and the
broker's rates must stay where they were. Each figure is measured alternately in the BEFORE and the AFTER
checkout (each with its own `.venv`, made by `make setup` there), so a drift of the machine's speed hits both
alike; the medians are compared:

  hop        bench/bench_node.py --hop-only: 1 kB durable messages/s over one loopback hop, both modes
  quickstart testbed run scenarios/quickstart.yaml --quick: mean delivery delay (model s), both modes
  pubsub     bench/bench_pubsub.py --quick --parts ours: live and durable rates, 1 and 10 subscribers

Prints `measured / bound = ratio` lines: after / before, bound 1 +- tolerance (default 10%). This machine's
run-to-run spread is about +-15%, so a pair outside the bound is worth a second look, not a verdict.
Needs root (namespaces); one figure runs at a time, and nothing else should run beside it. Not a `bench_*`
file: `make bench` runs those without arguments, and this one needs the two checkouts.

    python bench/compare_revisions.py BEFORE_DIR AFTER_DIR [--rounds 5] [--figures hop,quickstart,pubsub]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

Figures = dict[str, float]


def _run(checkout: Path, args: list[str], timeout: float) -> str:
    out = subprocess.run([str(checkout / ".venv" / "bin" / "python"), *args], cwd=checkout, capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} in {checkout} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def hop(checkout: Path) -> Figures:
    text = _run(checkout, ["bench/bench_node.py", "--hop-only"], 600)
    return {f"hop msgs/s ({m})": float(v.replace(",", ""))
            for m, v in re.findall(r"node hop 1kB durable msgs/s \(([a-z-]+), loopback\): measured ([\d,]+)/s", text)}


def quickstart(checkout: Path) -> Figures:
    out = Path(tempfile.mkdtemp(prefix="wanbed-bench-rev-"))
    try:
        _run(checkout, ["-m", "testbed", "run", "scenarios/quickstart.yaml", "--quick", "--out", str(out / "r")], 900)
        figures = {}
        for summary in sorted((out / "r").glob("*/*/summary.json")):
            s = json.loads(summary.read_text())
            figures[f"quickstart mean delay model s ({s['mode']})"] = s["delay"]["overall"]["mean_model_s"]
        return figures
    finally:
        shutil.rmtree(out, ignore_errors=True)


def pubsub(checkout: Path) -> Figures:
    text = _run(checkout, ["bench/bench_pubsub.py", "--quick", "--parts", "ours"], 900)
    return {f"pubsub {kind} rate/s, {n} subscriber(s)": float(rate)
            for kind, n, rate in re.findall(r"^ours (non-durable|durable)\s+(\d+) \|[^|]*\| +(\d+)/s", text, re.M)}


FIGURES: dict[str, Callable[[Path], Figures]] = {"hop": hop, "quickstart": quickstart, "pubsub": pubsub}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path, help="checkout before the change (with its .venv)")
    ap.add_argument("after", type=Path, help="checkout after the change (with its .venv)")
    ap.add_argument("--rounds", type=int, default=5, help="before/after pairs per figure (default 5)")
    ap.add_argument("--figures", default="hop,quickstart,pubsub", help="which: hop, quickstart, pubsub")
    ap.add_argument("--tolerance", type=float, default=0.10, help="allowed change of a median (default 0.10)")
    args = ap.parse_args()
    names = [f.strip() for f in args.figures.split(",") if f.strip()]
    bad = [n for n in names if n not in FIGURES] + [str(d) for d in (args.before, args.after)
                                                     if not (d / ".venv" / "bin" / "python").exists()]
    if bad or args.rounds < 1:
        print(f"compare_revisions: unknown figure or checkout without .venv: {', '.join(bad) or '--rounds < 1'}",
              file=sys.stderr)
        return 2
    for name in names:
        got: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        for r in range(args.rounds):
            for side, checkout in (("before", args.before), ("after", args.after)):
                t0 = time.monotonic()
                for key, value in FIGURES[name](checkout).items():
                    got[side].setdefault(key, []).append(value)
                print(f"  {name} round {r + 1}/{args.rounds} {side}: {time.monotonic() - t0:.0f} s", file=sys.stderr,
                      flush=True)
        for key in sorted(got["before"]):
            b, a = got["before"][key], got["after"].get(key, [])
            if not a:
                print(f"{key}: no figure after the change")
                continue
            mb, ma = statistics.median(b), statistics.median(a)
            ratio = ma / mb if mb else float("nan")
            verdict = "within" if abs(ratio - 1) <= args.tolerance else "OUTSIDE"
            print(f"{key}: measured {ma:,.2f} (after) / bound {mb:,.2f} (before) = ratio {ratio:.3f} "
                  f"({verdict} +-{args.tolerance:.0%}; medians of {len(a)}/{len(b)}, after {min(a):,.2f}-"
                  f"{max(a):,.2f}, before {min(b):,.2f}-{max(b):,.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
