"""A thread that appends one record line to a file every `interval` seconds: the shape of the host and link
monitors (hostmon.py, linkmon.py), which differ only in what they read."""
from __future__ import annotations

import threading
from pathlib import Path


class Sampler:
    """start() begins sampling into `path` (appending: start after stop resumes the same file), stop() ends it
    within one interval. A subclass writes its records in `_run`, looping until `self._stop` is set."""
    thread_name = "sampler"

    def __init__(self, path: Path, interval: float) -> None:
        if interval <= 0:
            raise ValueError(f"{type(self).__name__} interval must be positive")
        self.path = Path(path)
        self.interval = interval
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5.0)
            self._thread = None

    def _run(self) -> None:
        raise NotImplementedError
