"""Append-only JSON-lines files of the run directory (node/schema.py documents the fields)."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import IO

log = logging.getLogger("node.records")

FILES = {"submission": "submissions.jsonl", "delivery": "deliveries.jsonl",
         "metrics": "metrics.jsonl", "report": "reports.jsonl",
         "route": "routes.jsonl", "publication": "publications.jsonl",
         "rate": "rates.jsonl", "gateway": "gateway.jsonl", "pool": "pools.jsonl"}


class Records:
    """One open file per record kind; every line gets `ts` and `node` first."""

    def __init__(self, directory: Path, node: str) -> None:
        self.dir = Path(directory)
        self.node = node
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}
        self.failed = 0      # record lines lost to a write error: Control Stats `records_failed` tells the testbed

    def write(self, kind: str, /, ts: float | None = None, **fields: object) -> dict:
        """Append one record. A record file that cannot be written (disk full) costs a log line, never the
        operation it records: the spool, not these files, is what the node's promises rest on."""
        rec = {"ts": time.time() if ts is None else ts, "node": self.node, **fields}
        try:
            f = self._files.get(kind)
            if f is None:
                f = self._files[kind] = open(self.dir / FILES[kind], "a", buffering=1)
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        except OSError as exc:
            self.failed += 1
            if self.failed == 1 or self.failed % 1000 == 0:
                log.error("cannot write %s record to %s (%d failed so far): %s", kind, self.dir, self.failed, exc)
        return rec

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
