"""Progress of the report on stderr: pipeline step k/N, and Spark tasks done/total of the running stages
while a step is long (a poller thread reading the SparkContext status tracker)."""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class StageProgress:
    steps: int
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    interval: float = 2.0          # seconds between task-count lines during a long step
    enabled: bool = True
    _step: int = 0
    _t0: float = field(default_factory=time.monotonic)

    def step(self, name: str, spark=None) -> "_Step":
        self._step += 1
        return _Step(self, name, spark)

    def _line(self, text: str) -> None:
        if self.enabled:
            print(f"[{time.monotonic() - self._t0:6.1f}s] {text}", file=self.stream, flush=True)


class _Step:
    def __init__(self, owner: StageProgress, name: str, spark) -> None:
        self.owner, self.name, self.spark = owner, name, spark
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> "_Step":
        self.t0 = time.monotonic()
        self.owner._line(f"step {self.owner._step}/{self.owner.steps}: {self.name}")
        if self.spark is not None and self.owner.enabled:
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def _poll(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        last = ""
        while not self.stop.wait(self.owner.interval):
            try:
                infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the context may be stopping; progress is best effort
                return
            infos = [i for i in infos if i is not None]
            if not infos:
                continue
            done = sum(i.numCompletedTasks for i in infos)
            total = sum(i.numTasks for i in infos)
            text = f"  {self.name}: {len(infos)} Spark stage(s) running, tasks {done}/{total}"
            if text != last:
                self.owner._line(text)
                last = text

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        if exc[0] is None:
            self.owner._line(f"  {self.name}: done in {time.monotonic() - self.t0:.1f}s")
