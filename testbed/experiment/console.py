"""The progress display of `testbed run`: a rich live panel on a terminal, plain lines otherwise.

Both implement testbed/experiment/progress.Progress. The plain one prints a
line per phase and event and throttles ticks (one line every TICK_EVERY
seconds), so a log file or CI output stays readable.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, TextIO

from testbed.experiment.progress import Progress

TICK_EVERY = 10.0      # seconds between plain tick lines


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


@dataclass
class _State:
    cell: str = ""
    rep: int = 0
    phase: str = "starting"
    elapsed: float = 0.0
    total: float = 0.0
    submitted: int = 0
    delivered: int = 0
    started: float = 0.0


class PlainProgress:
    """One line per phase and event; a tick line at most every TICK_EVERY seconds."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.state = _State(started=time.monotonic())
        self._last_tick = 0.0
        self._lock = threading.Lock()    # ticks may come from the cell's worker threads

    def _line(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        with self._lock:
            print(f"{stamp} {text}", file=self.stream, flush=True)

    def phase(self, cell: str, rep: int, name: str) -> None:
        self.state.cell, self.state.rep, self.state.phase = cell, rep, name
        self._last_tick = 0.0
        self._line(f"[{cell} rep {rep}] {name}")

    def tick(self, elapsed: float, total: float, submitted: int, delivered: int) -> None:
        s = self.state
        s.elapsed, s.total, s.submitted, s.delivered = elapsed, total, submitted, delivered
        now = time.monotonic()
        if now - self._last_tick < TICK_EVERY:
            return
        self._last_tick = now
        self._line(f"[{s.cell} rep {s.rep}] {s.phase} {_clock(elapsed)}/{_clock(total)} "
                   f"submitted {submitted} delivered {delivered}")

    def event(self, text: str) -> None:
        s = self.state
        where = f"[{s.cell} rep {s.rep}] " if s.cell else ""
        self._line(f"{where}{text}")

    def close(self) -> None:
        pass


class RichProgress:
    """A live panel: cell, rep, phase, elapsed/remaining, submitted/delivered; events scroll above it."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=stream)
        self.state = _State(started=time.monotonic())
        self._lock = threading.Lock()
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
        self.live.start()

    def _render(self) -> Any:
        from rich.table import Table

        s = self.state
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold")
        t.add_column()
        t.add_row("cell", f"{s.cell or '-'}  rep {s.rep}")
        t.add_row("phase", s.phase)
        remaining = max(0.0, s.total - s.elapsed)
        bar = ""
        if s.total > 0:
            width = 30
            done = min(width, int(width * s.elapsed / s.total))
            bar = "█" * done + "░" * (width - done) + "  "
        t.add_row("time", f"{bar}{_clock(s.elapsed)} elapsed, {_clock(remaining)} remaining")
        t.add_row("messages", f"{s.submitted} submitted, {s.delivered} delivered")
        t.add_row("total", _clock(time.monotonic() - s.started))
        return t

    def _refresh(self) -> None:
        with self._lock:
            self.live.update(self._render())

    def phase(self, cell: str, rep: int, name: str) -> None:
        s = self.state
        if (cell, rep) != (s.cell, s.rep):
            self.console.print(f"[bold]{cell}[/bold] rep {rep}")
        s.cell, s.rep, s.phase = cell, rep, name
        s.elapsed = s.total = 0.0
        self._refresh()

    def tick(self, elapsed: float, total: float, submitted: int, delivered: int) -> None:
        s = self.state
        s.elapsed, s.total, s.submitted, s.delivered = elapsed, total, submitted, delivered
        self._refresh()

    def event(self, text: str) -> None:
        with self._lock:
            self.console.print(f"  {time.strftime('%H:%M:%S')} {text}", markup=False, highlight=False)

    def close(self) -> None:
        with self._lock:
            if self.live.is_started:
                self.live.stop()


def make_progress(stream: TextIO | None = None) -> Progress:
    """Rich on a terminal, plain log lines otherwise (pipes, files, CI)."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        try:
            return RichProgress(stream)
        except Exception:     # a terminal rich cannot drive: plain lines still tell the story
            pass
    return PlainProgress(stream)


@contextmanager
def progress_on(stream: TextIO | None = None) -> Iterator[Progress]:
    """make_progress for the length of a command, closed (a rich display stopped) however it ends."""
    progress = make_progress(stream)
    try:
        yield progress
    finally:
        close = getattr(progress, "close", None)
        if callable(close):
            close()


@contextmanager
def waiting(text: str, stream: TextIO | None = None) -> Iterator[None]:
    """Say what a command waits for while it waits (`up` building the network, starting the daemons): a rich
    spinner on a terminal, else one plain line; on stderr, so stdout keeps only the command's result."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        print(f"{time.strftime('%H:%M:%S')} {text} ...", file=stream, flush=True)
        yield
        return
    from rich.console import Console
    t0 = time.monotonic()
    console = Console(file=stream)
    with console.status(f"{text} ..."):
        yield
    console.print(f"{text}: done in {time.monotonic() - t0:.1f} s", markup=False, highlight=False)

