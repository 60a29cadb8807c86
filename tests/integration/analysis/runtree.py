"""Write a synthetic run tree with known delays, losses and duplicates; compute the expected figures."""
from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

MODES = {"frag": "fragmenting", "nofrag": "non-fragmenting"}
SIZES = [500, 1000, 5000, 10_000, 15_000, 30_000, 80_000]


def bucket(nfrag: int) -> str:
    if nfrag <= 10:
        return "1" if nfrag == 1 else "2-10"
    if nfrag > 100:
        return "101+"
    lo = (nfrag - 1) // 10 * 10 + 1
    return f"{lo}-{lo + 9}"


def _write(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def make_tree(root: Path, messages: int = 80, lose: dict | None = None, dup: dict | None = None) -> dict:
    """Experiment at root; lose/dup map (cell, rep) -> how many messages to drop / deliver twice.

    Returns expected per-run figures {(cell, rep): {...}} computed directly in Python."""
    lose, dup = lose or {}, dup or {}
    rng = random.Random(7)
    cells = [{"id": c, "params": {"nodes.all.mode": m}, "reps": 2} for c, m in MODES.items()]
    _write(root / "experiment.json", [])
    (root / "experiment.json").write_text(json.dumps({"name": "synthetic", "cells": cells}))
    expected = {}
    for cell, mode in MODES.items():
        for rep in ("1", "2"):
            subs, dels, delays = [], [], {}
            t0 = 1_700_000_000.0
            for i in range(messages):
                size = SIZES[i % len(SIZES)]
                nfrag = math.ceil(size / 1000)
                mid = f"{cell}-{rep}-{i}"
                ts = t0 + i * 0.5
                subs.append({"ts": ts, "node": "a", "msg_id": mid, "src": "a", "dst": "b", "size": size,
                             "accepted": True, "reason": ""})
                if i < lose.get((cell, rep), 0):
                    continue
                delay = round(0.05 * nfrag * (1.5 if mode == "fragmenting" else 1.0) + rng.uniform(0, 0.2), 6)
                rec = {"ts": ts + delay, "node": "b", "msg_id": mid, "src": "a", "dst": "b", "size": size,
                       "fragments": nfrag if mode == "fragmenting" else 1, "mode": mode, "submit_ts": ts,
                       "deliver_ts": ts + delay, "hops": 2}
                dels.append(rec)
                delays[mid] = (nfrag, rec["deliver_ts"] - ts)
                if i < lose.get((cell, rep), 0) + dup.get((cell, rep), 0):
                    dels.append(dict(rec, ts=rec["ts"] + 1, deliver_ts=rec["deliver_ts"] + 1))
            subs.append({"ts": t0, "node": "a", "msg_id": "", "src": "a", "dst": "b", "size": 1,
                         "accepted": False, "reason": "spool full"})
            run = root / cell / rep
            _write(run / "nodes/a/submissions.jsonl", subs)
            _write(run / "nodes/b/deliveries.jsonl", dels)
            _write(run / "nodes/a/metrics.jsonl", [{"ts": t0, "node": "a", "spool_messages": 0, "spool_bytes": 0,
                                                     "neighbours": {}, "delivered": 0}])
            # one run's host had its CPU stolen by the hypervisor (testbed/experiment/hostmon.py)
            (run / "summary.json").write_text(json.dumps(
                {"saturation": {"saturated": True, "cause": "steal"}} if (cell, rep) == ("nofrag", "1") else {}))
            by_bucket: dict[str, list[float]] = {}
            for nfrag, d in delays.values():
                by_bucket.setdefault(bucket(nfrag), []).append(d)
            multi = sum(1 for nfrag, _ in delays.values() if nfrag >= 2)
            duration = max(r["deliver_ts"] for r in dels) - min(r["submit_ts"] for r in dels)
            expected[(cell, rep)] = {
                "mode": mode, "submitted": messages + 1, "accepted": messages, "delivered": len(delays),
                "undelivered": messages - len(delays), "duplicates": len(dels) - len(delays),
                "throughput_multi": multi / duration,
                "delay": {b: statistics.fmean(v) for b, v in by_bucket.items()},
            }
    return expected


# t with 1 df is the Cauchy distribution: its 0.975 quantile is tan(0.475 pi) = 12.7062...
T975_DF1 = math.tan(0.475 * math.pi)


def mean_ci2(a: float, b: float) -> tuple[float, float]:
    """Mean and 95% CI half-width of two values (t with 1 df)."""
    return (a + b) / 2, T975_DF1 * statistics.stdev([a, b]) / math.sqrt(2)


def log_ci2(a: float, b: float) -> tuple[float, float, float]:
    """Geometric mean and 95% bounds of two positive values, t (1 df) on their logarithms."""
    la, lb = math.log(a), math.log(b)
    h = T975_DF1 * statistics.stdev([la, lb]) / math.sqrt(2)
    c = (la + lb) / 2
    return math.exp(c), math.exp(c - h), math.exp(c + h)
