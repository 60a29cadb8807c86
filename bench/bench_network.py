"""Network set-up and teardown time: a 20-host ring and a 100-host 10x10 grid (needs root).

Uses the real address planner and shaper when they are installed (shaper "auto"),
otherwise the test suite's hand-made plan and plain veth links, and says which.
Bounds (issue 4): 20 hosts up in <= 5 s, 100 hosts up in <= 30 s.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration" / "network"))

from network_support import VethShaper, free_mgmt_subnet, grid, hand_plan, ring  # noqa: E402
from testbed.network import Network  # noqa: E402

BOUNDS = {"ring20": (20, 5.0), "grid10x10": (100, 30.0)}


def build(kind: str, real: bool) -> Network:
    topo = ring(20) if kind == "ring20" else grid(10, 10)
    mgmt = free_mgmt_subnet()
    pools = ("10.200.0.0/16", "10.202.0.0/16", mgmt)
    if real:
        return Network(topo, None, shaper="auto", pools=pools, kind="bench")
    return Network(topo, hand_plan(topo, mgmt), shaper=VethShaper(), pools=pools, kind="bench")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_network: needs root (network namespaces); skipped")
        return 0
    real = (hasattr(importlib.import_module("testbed.shaping"), "make_shaper")
            and importlib.util.find_spec("testbed.topology.addressing") is not None)
    print(f"network set-up: {'real planner + shaper auto' if real else 'hand plan + veth links (shaper not installed)'}")
    for kind, (hosts, bound) in BOUNDS.items():
        ups, downs = [], []
        shaper = ""
        for _ in range(args.reps):
            net = build(kind, real)
            t0 = time.monotonic()
            net.start()
            ups.append(time.monotonic() - t0)
            shaper = net.shaper_name
            t0 = time.monotonic()
            net.stop()
            downs.append(time.monotonic() - t0)
        up, down = max(ups), max(downs)
        print(f"network up {kind} ({hosts} hosts, {shaper}): measured {up:.2f} s / bound {bound:.2f} s = "
              f"ratio {up / bound:.2f} (worst of {args.reps}; best {min(ups):.2f} s)")
        print(f"network down {kind} ({hosts} hosts, {shaper}): measured {down:.2f} s (worst of {args.reps}; "
              f"best {min(downs):.2f} s; no bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
