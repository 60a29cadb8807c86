"""Append-only JSON-lines files of the run directory (node/schema.py documents the fields)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO

FILES = {"submission": "submissions.jsonl", "delivery": "deliveries.jsonl",
         "metrics": "metrics.jsonl", "report": "reports.jsonl"}


class Records:
    """One open file per record kind; every line gets `ts` and `node` first."""

    def __init__(self, directory: Path, node: str) -> None:
        self.dir = Path(directory)
        self.node = node
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}

    def write(self, kind: str, /, ts: float | None = None, **fields: object) -> dict:
        rec = {"ts": time.time() if ts is None else ts, "node": self.node, **fields}
        f = self._files.get(kind)
        if f is None:
            f = self._files[kind] = open(self.dir / FILES[kind], "a", buffering=1)
        f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        return rec

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
