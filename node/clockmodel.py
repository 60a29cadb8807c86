"""The clocks of a run over several machines: machines.json read back, and times put on the controller's clock.

Shared by the testbed (summary.json, `testbed check`, the writer testbed/experiment/machines.py) and the
Spark report (spark_analysis/clocks.py), like node/schema.py: both read the run directory, neither imports
the other for it. The node daemon does not use it. testbed/clockoffset.py estimates the models it holds.

A record's `ts` (and a delivery's `deliver_ts`, a receipt's `ts`) comes from the
clock of the machine that wrote it; a delivery's `submit_ts` and a receipt's
`publish_ts` from the origin's machine. machines.json (written by
testbed/experiment/machines.py) holds each machine's offset and drift against
the controller's clock; the node -> machine mapping comes from topology.json
(a `machine` per host, or a `placement` map) or from host.jsonl, whose records
carry their `machine` and the daemons they sampled (`procs`).

A run without machines.json ran on one machine: `load` returns None and nothing
is corrected, so a one-machine run reads exactly as before. A run whose
uncertainty exceeds 10% of the smallest configured one-way delay is flagged
(`clock_uncertain`): its corrected times are reported, but marked as not to be
trusted. A machines.json that cannot be read flags the run too and corrects
nothing (its latencies carry unknown offsets).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node import jsonlines

MACHINES_FILE = "machines.json"
FLAG_SHARE = 0.10       # of the smallest configured one-way delay: the largest acceptable uncertainty


@dataclass(frozen=True)
class ClockModel:
    """The offset as a line through two estimates: offset(t) = offset + drift * (t - at)."""

    offset: float
    drift: float          # s per s
    at: float
    uncertainty: float    # the larger of the two estimates' (a line between them is no less certain)

    def offset_at(self, t: float) -> float:
        return self.offset + self.drift * (t - self.at)

    def to_controller(self, ts: float) -> float:
        """A machine's timestamp on the controller's clock. The offset is read at `ts` itself: the error of
        that is drift x offset, nanoseconds for any clock worth correcting."""
        return ts - self.offset_at(ts)


@dataclass(frozen=True)
class Clocks:
    """Each machine's clock model and which machine each node ran on."""

    models: dict[str, ClockModel]
    machine_of: dict[str, str]                   # node -> machine
    limit: float | None                          # the largest acceptable uncertainty, s (None: no delay configured)
    problem: str = ""                            # why machines.json could not be used ("" when it could)
    unplaced: list[str] = field(default_factory=list)    # nodes in the records with no known machine

    @property
    def uncertainty(self) -> float:
        return max((m.uncertainty for m in self.models.values()), default=0.0)

    @property
    def uncertain(self) -> bool:
        if self.problem:
            return True
        return self.limit is not None and self.uncertainty > self.limit

    def correct(self, node: str, ts: float) -> float:
        """`ts` written on `node`'s machine, on the controller's clock (unchanged for an unknown machine)."""
        model = self.models.get(self.machine_of.get(node, ""))
        return ts if model is None else model.to_controller(ts)

    def to_dict(self) -> dict[str, Any]:
        """summary.json's `clock`."""
        return {"machines": {name: {"offset_s": round(m.offset, 6), "drift": m.drift,
                                    "uncertainty_s": round(m.uncertainty, 6)}
                             for name, m in sorted(self.models.items())},
                "uncertainty_s": round(self.uncertainty, 6),
                "limit_s": None if self.limit is None else round(self.limit, 6),
                "share": FLAG_SHARE, "clock_uncertain": self.uncertain, "problem": self.problem,
                "unplaced": sorted(self.unplaced)}


def load(rep_dir: Any) -> Clocks | None:
    """The run's clocks; None when it has no machines.json (one machine: nothing to correct). `rep_dir` is a
    path or any path-like with `/`, exists() and read_text() (the Spark analysis' HDFS paths)."""
    rep_dir = Path(rep_dir) if isinstance(rep_dir, str) else rep_dir
    path = rep_dir / MACHINES_FILE
    if not path.exists():
        return None
    limit = smallest_delay(rep_dir)
    limit = None if limit is None else FLAG_SHARE * limit
    try:
        models = parse(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        return Clocks({}, {}, limit, problem=f"{MACHINES_FILE} cannot be used ({exc}); times are not corrected")
    return Clocks(models, machine_of(rep_dir), limit)


def parse(doc: Any) -> dict[str, ClockModel]:
    """machine -> ClockModel from machines.json's content; ValueError (one sentence) when it is malformed."""
    if isinstance(doc, dict) and doc.get("problem"):
        raise ValueError(str(doc["problem"]).rstrip("."))
    machines = doc.get("machines") if isinstance(doc, dict) else None
    if not isinstance(machines, dict):
        raise ValueError("no `machines` object")
    out: dict[str, ClockModel] = {}
    for name, m in machines.items():
        values = [m.get(k) for k in ("offset", "drift", "at", "uncertainty")] if isinstance(m, dict) else []
        if len(values) != 4 or not all(_number(v) for v in values) or values[3] < 0:
            raise ValueError(f"machine {name!r} needs numbers offset, drift, at and uncertainty (0 or more)")
        out[str(name)] = ClockModel(offset=float(values[0]), drift=float(values[1]), at=float(values[2]),
                                    uncertainty=float(values[3]))
    return out


def machine_of(rep_dir: Any) -> dict[str, str]:
    """node -> machine: topology.json's placement first, then the host.jsonl records' `machine` and `procs`."""
    out: dict[str, str] = {}
    for rec in jsonlines.objects(rep_dir / "host.jsonl"):
        machine, procs = rec.get("machine"), rec.get("procs")
        if isinstance(machine, str) and isinstance(procs, dict):
            out.update(dict.fromkeys((str(n) for n in procs), machine))
    topo = _topology(rep_dir)
    placement = topo.get("placement")
    if isinstance(placement, dict):
        out.update({str(h): m for h, m in placement.items() if isinstance(m, str)})
    for host in topo.get("hosts", []) if isinstance(topo.get("hosts"), list) else []:
        if isinstance(host, dict) and isinstance(host.get("name"), str) and isinstance(host.get("machine"), str):
            out[host["name"]] = host["machine"]
    return out


def smallest_delay(rep_dir: Any) -> float | None:
    """The smallest configured one-way delay of topology.json's links, s; None when no link has one."""
    delays = []
    for lk in _topology(rep_dir).get("links", []) or []:
        for d in ("a_to_b", "b_to_a"):
            shape = lk.get(d) if isinstance(lk, dict) else None
            if isinstance(shape, dict) and _number(shape.get("delay")) and shape["delay"] >= 0:
                delays.append(float(shape["delay"]))
    return min(delays) if delays else None


def problem_text(clock: Any) -> str | None:
    """The console sentence for summary.json's `clock` when the run is flagged; None when it is not."""
    if not isinstance(clock, dict) or not clock.get("clock_uncertain"):
        return None
    if clock.get("problem"):
        return f"clock uncertain: {clock['problem']}"
    unc, limit = clock.get("uncertainty_s"), clock.get("limit_s")
    return (f"clock uncertain: the machines' clock offsets are known to +-{1000 * float(unc):.3f} ms, more than "
            f"{100 * float(clock.get('share', FLAG_SHARE)):.0f}% of the smallest configured one-way delay "
            f"({1000 * float(limit):.3f} ms allowed): cross-machine delays are not trustworthy")


def _topology(rep_dir: Any) -> dict[str, Any]:
    try:
        doc = json.loads((rep_dir / "topology.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
