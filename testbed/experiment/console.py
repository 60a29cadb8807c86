"""The progress display of `testbed run` and `testbed reproduce` (on stderr: stdout keeps the results): one
rich.progress bar on a terminal, plain lines otherwise.

Both implement testbed/experiment/progress.Progress. The bar counts repetitions (k/N) with the elapsed time
and an ETA from the mean wall time of the repetitions done; its text names the cell, the phase and the
messages so far. The plain one prints a line per phase and event and throttles ticks (one line every
TICK_EVERY seconds), so a log file or CI output stays readable.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, TextIO

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
    k: int = 0           # the how-many-th repetition of this run is the current one (1-based; 0: none yet)
    todo: int = 0        # repetitions this run will run (0: not told)
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

    def repetitions(self, todo: int, total: int) -> None:
        self.state.todo = todo
        skipped = f" ({total - todo} complete already)" if todo < total else ""
        self._line(f"{todo} repetition(s) to run{skipped}")

    def phase(self, cell: str, rep: int, name: str) -> None:
        s = self.state
        if (cell, rep) != (s.cell, s.rep):
            s.k += 1
            if s.todo:
                self._line(f"repetition {s.k}/{s.todo}: {cell} rep {rep}")
        s.cell, s.rep, s.phase = cell, rep, name
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
    """One rich.progress bar over the repetitions (k/N, elapsed, ETA); events scroll above it."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, Progress as Bar, SpinnerColumn, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)
        from rich.table import Column

        self.console = Console(file=stream)
        self.state = _State(started=time.monotonic())
        self._lock = threading.Lock()
        # speed over the whole run, not rich's last 30 s: repetitions take minutes, so the ETA is
        # (repetitions left) x (mean wall time of those done)
        # the counts keep their width on a narrow terminal; the description gives way
        self.bar = Bar(SpinnerColumn(), TextColumn("[bold]{task.fields[count]}[/bold]",
                                                   table_column=Column(no_wrap=True, min_width=9)),
                       BarColumn(bar_width=20), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                       TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis")),
                       console=self.console, transient=True,
                       speed_estimate_period=7 * 24 * 3600.0, refresh_per_second=4)
        self.task = self.bar.add_task("starting", total=None, count="")
        self.bar.start()

    def _describe(self) -> str:
        s = self.state
        what = f"{s.cell} rep {s.rep}: {s.phase}" if s.cell else s.phase
        if s.total > 0:
            what += f" {_clock(s.elapsed)}/{_clock(s.total)}"
        if s.submitted or s.delivered:
            what += f", {s.submitted} submitted, {s.delivered} delivered"
        return what

    def _refresh(self) -> None:
        s = self.state
        count = f"rep {s.k}/{s.todo}" if s.todo else (f"rep {s.k}" if s.k else "")
        with self._lock:
            self.bar.update(self.task, description=self._describe(), count=count)

    def repetitions(self, todo: int, total: int) -> None:
        self.state.todo = todo
        with self._lock:
            self.bar.reset(self.task, total=max(todo, 1), completed=0)
        if todo < total:
            self.event(f"{total - todo} of {total} repetitions complete already; {todo} to run")
        self._refresh()

    def phase(self, cell: str, rep: int, name: str) -> None:
        s = self.state
        if (cell, rep) != (s.cell, s.rep):
            if s.k:
                with self._lock:
                    self.bar.advance(self.task)      # the previous repetition is done
            s.k += 1
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
            if self.bar.live.is_started:
                self.bar.stop()


def make_progress(stream: TextIO | None = None) -> Progress:
    """Rich on a terminal, plain log lines otherwise (pipes, files, CI); on stderr unless told otherwise."""
    stream = stream if stream is not None else sys.stderr
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

