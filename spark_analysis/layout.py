"""Find the runs under a run directory (docs/run-directory.md): local, file://, hdfs:// or s3a://."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
