"""Find the runs under a run directory (docs/run-directory.md): local, file://, hdfs:// or s3a://."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node import jsonlines
from node.errors import UserError

from .storage import HadoopPath, resolve


@dataclass(frozen=True)
class Run:
    path: Path | HadoopPath   # HadoopPath for hdfs://, s3a:// (storage.py)
    cell: str
    rep: str
    params: dict = field(default_factory=dict)
    summary: dict | None = None

    @property
    def mode(self) -> str | None:
        return self.params.get("nodes.all.mode")

    @property
    def fragment_size(self) -> int:
        return int(self.params.get("nodes.all.fragment_size", 1000) or 1000)

    def files(self, name: str) -> list[Path]:
        return sorted((self.path / "nodes").glob(f"*/{name}"))


def _summary(path: Path | HadoopPath) -> dict | None:
    f = path / "summary.json"
    try:
        return json.loads(f.read_text()) if f.is_file() else None
    except (OSError, ValueError):
        return None


def _cells(root: Path | HadoopPath) -> dict[str, dict]:
    """Cell id -> params from root/experiment.json (empty when absent)."""
    cells: dict[str, dict] = {}
    exp = root / "experiment.json"
    if exp.is_file():
        try:
            data = json.loads(exp.read_text())
        except ValueError as e:
            raise UserError(f"{exp} is not valid JSON ({e}).") from None
        for c in data.get("cells", []):
            cells[str(c.get("id"))] = dict(c.get("params") or {})
    return cells


def experiment_doc(runs: list[Run]) -> dict:
    """The experiment.json of the runs' experiment ({} for a lone run or an unreadable file): its
    time_scale and provenance are shown in the report."""
    if not runs:
        return {}
    exp = runs[0].path.parent.parent / "experiment.json"
    try:
        data = json.loads(exp.read_text()) if exp.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def find_runs(directory: str | Path, spark: Any = None, hadoop: bool | None = None) -> list[Run]:
    """All runs in an experiment directory, or the single run when DIR is itself a run.

    Local paths and file:// are listed with pathlib; other schemes (hdfs://, s3a://), or any path
    with hadoop=True, through Hadoop's FileSystem API in the JVM of `spark` (storage.py)."""
    root = resolve(directory, spark, hadoop)
    if not root.is_dir():
        raise UserError(f"run directory {root} does not exist.")
    if (root / "nodes").is_dir():
        cell = root.parent.name or "run"
        return [Run(root, cell, root.name, _cells(root.parent.parent).get(cell, {}), _summary(root))]
    cells = _cells(root)
    runs = []
    for nodes in sorted(root.glob("*/*/nodes")):
        rep_dir = nodes.parent
        cell = rep_dir.parent.name
        runs.append(Run(rep_dir, cell, rep_dir.name, cells.get(cell, {}), _summary(rep_dir)))
    if not runs:
        raise UserError(f"no runs found in {root} (expected <cell>/<rep>/nodes/ or nodes/).")
    return runs


# events.jsonl lines that are bookkeeping, not faults: the workload's end bounds a phase, records_failed counts
NOT_FAULTS = frozenset({"workload_end", "records_failed"})


@dataclass(frozen=True)
class Fault:
    """One line of events.jsonl that changed the run: a fault, a link change, or a fault that failed."""
    ts: float               # wall clock, Unix seconds
    kind: str               # its `event` (kill, restart, pause, resume, link_down, link_set, partition, ...)
    target: str


@dataclass(frozen=True)
class RunTimeline:
    """A run's phases and faults on the wall clock (Unix seconds); a phase bound the run's files do not give is
    None. The workload window is the one summary.json measures: it ends at the `workload_end` event."""
    warmup_start: float | None = None
    workload_start: float | None = None
    workload_end: float | None = None
    drain_end: float | None = None
    faults: tuple[Fault, ...] = ()

    def phases(self) -> list[tuple[str, float, float]]:
        """(name, start, end) of each phase whose bounds are known, in order."""
        spans = [("warm-up", self.warmup_start, self.workload_start),
                 ("workload", self.workload_start, self.workload_end),
                 ("drain", self.workload_end, self.drain_end)]
        return [(name, a, b) for name, a, b in spans if a is not None and b is not None and b > a]


def _json_file(path: Path | HadoopPath) -> dict:
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _seconds(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def _target(v: Any) -> str:
    """A target as text: a link or host, or host sets (a partition's) as "a b | c"."""
    if isinstance(v, list):
        return " | ".join(" ".join(map(str, x)) if isinstance(x, list) else str(x) for x in v)
    return str(v)


def run_timeline(run: Run) -> RunTimeline:
    """The run's phases and faults from events.jsonl (faults; `workload_end` ends the workload), summary.json
    (the workload's wall duration, the drain's seconds) and scenario.yaml (time_scale and the warm-up in model
    seconds). Unreadable or missing files leave the bounds they give None; a bad events line is skipped (the
    report's schema check names it)."""
    import yaml

    path = run.path / "events.jsonl"
    events = [rec for rec in (jsonlines.objects(path) if path.is_file() else [])
              if _seconds(rec.get("ts")) is not None and isinstance(rec.get("event"), str)]
    faults = tuple(Fault(float(e["ts"]), e["event"] if e["event"] != "fault_failed" else
                         f"fault_failed ({e.get('action', '?')})", _target(e.get("target", "")))
                   for e in events if e["event"] not in NOT_FAULTS)
    ends = [float(e["ts"]) for e in events if e["event"] == "workload_end"]
    if not ends:
        return RunTimeline(faults=faults)
    end = ends[-1]
    summary = run.summary if run.summary is not None else _json_file(run.path / "summary.json")
    try:
        scen_path = run.path / "scenario.yaml"
        scenario = yaml.safe_load(scen_path.read_text()) if scen_path.is_file() else {}
    except (OSError, yaml.YAMLError):
        scenario = {}
    scenario = scenario if isinstance(scenario, dict) else {}
    scale = _seconds(summary.get("time_scale")) or _seconds(scenario.get("time_scale"))
    wall = _seconds(summary.get("duration_wall_s"))
    if wall is None and scale is not None and _seconds(scenario.get("duration")) is not None:
        wall = float(scenario["duration"]) * scale
    start = end - wall if wall is not None else None
    workload = scenario.get("workload") if isinstance(scenario.get("workload"), dict) else {}
    warmup = _seconds(workload.get("warmup"))
    warm = start - warmup * scale if start is not None and warmup and scale is not None else None
    drain = summary.get("drain") if isinstance(summary.get("drain"), dict) else {}
    seconds = _seconds(drain.get("seconds"))
    return RunTimeline(warm, start, end, end + seconds if seconds is not None else None, faults)


def run_timelines(runs: list[Run]) -> dict[tuple[str, str], RunTimeline]:
    """(cell, rep) -> the run's timeline, for the report's time plots."""
    return {(run.cell, run.rep): run_timeline(run) for run in runs}


def run_topology(runs: list[Run]) -> tuple[dict, set[str] | None, str]:
    """The first run's topology.json ({} when none has one), the hosts that ran a node daemon (None: not
    known) and which run it is ("cell/rep"). A host without a daemon has no node.yaml and no records."""
    for run in runs:
        topo = _json_file(run.path / "topology.json")
        if not topo:
            continue
        daemons = None
        nodes = run.path / "nodes"
        if nodes.is_dir():
            found = {str(h.get("name")) for h in topo.get("hosts", []) if isinstance(h, dict)
                     and ((nodes / str(h.get("name")) / "node.yaml").exists()
                          or any((nodes / str(h.get("name"))).glob("*.jsonl")))}
            daemons = found or None     # no node directory at all: a copied tree without them, not known
        return topo, daemons, f"{run.cell}/{run.rep}"
    return {}, None, ""
