"""How a running cell reports progress. The cell runner calls these; the console
(rich on a terminal, plain log lines otherwise) implements them, and ProgressLog
tees them into the experiment folder's progress.jsonl."""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Progress(Protocol):
    def repetitions(self, todo: int, total: int) -> None:
        """Before the first repetition: how many will run (`todo`) of the experiment's `total` (the rest were
        complete already, --resume)."""

    def phase(self, cell: str, rep: int, name: str) -> None:
        """A new phase of one repetition: building, starting, warmup, workload, drain, collect, teardown."""

    def tick(self, elapsed: float, total: float, submitted: int, delivered: int) -> None:
        """Periodic update during warm-up/workload/drain (wall seconds elapsed of total)."""

    def event(self, text: str) -> None:
        """Something worth a line of its own (a fault applied, a node restarted, a warning)."""


class NullProgress:
    """Reports nothing (library use, tests)."""

    def repetitions(self, todo: int, total: int) -> None:
        pass

    def phase(self, cell: str, rep: int, name: str) -> None:
        pass

    def tick(self, elapsed: float, total: float, submitted: int, delivered: int) -> None:
        pass

    def event(self, text: str) -> None:
        pass


class ProgressLog:
    """Passes every call on to `inner` (the console) and appends it to `path` as a JSON line (progress.jsonl in
    the experiment folder), so that a dashboard, live or replaying, shows phases and ticks too. A file that
    cannot be written costs the lines, never the run."""

    def __init__(self, inner: Progress, path: Path) -> None:
        self.inner = inner
        self.path = Path(path)
        self._lock = threading.Lock()       # the runner's thread and a cell's fault timeline both report
        self._broken = False

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)    # close() and whatever else the console offers

    def _write(self, record: dict[str, Any]) -> None:
        if self._broken:
            return
        line = json.dumps({"ts": time.time(), "node": "testbed", **record}, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                with open(self.path, "a") as f:
                    f.write(line)
            except OSError as exc:
                self._broken = True
                log.warning("progress.jsonl not written: %s", exc)

    def repetitions(self, todo: int, total: int) -> None:
        self._write({"event": "repetitions", "todo": todo, "total": total})
        self.inner.repetitions(todo, total)

    def phase(self, cell: str, rep: int, name: str) -> None:
        self._write({"event": "phase", "cell": cell, "rep": rep, "phase": name})
        self.inner.phase(cell, rep, name)

    def tick(self, elapsed: float, total: float, submitted: int, delivered: int) -> None:
        self._write({"event": "tick", "elapsed": round(elapsed, 3), "total": round(total, 3),
                     "submitted": submitted, "delivered": delivered})
        self.inner.tick(elapsed, total, submitted, delivered)

    def event(self, text: str) -> None:
        self._write({"event": "message", "text": text})
        self.inner.event(text)
