"""Turns between the xdist workers of one test session: a test marked `alone` runs while no other test does.

Timing-sensitive tests (whole `testbed run`s, rate and delay measurements) have tolerances that assume an
otherwise idle 2-core machine; every other test may run beside another. One file lock per session: `alone`
tests hold it exclusively, all others shared. A second lock, the gate, is held by a test waiting to run
alone, so that the other worker, whose tests come one after another, cannot keep the shared lock forever.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class TurnFiles:
    """The lock files of one session, named after its run id (the same in every worker of the session)."""
    run_uid: str
    folder: Path = Path(tempfile.gettempdir())

    @property
    def main(self) -> Path:
        return self.folder / f"wanbed-pytest-{self.run_uid}.lock"

    @property
    def gate(self) -> Path:
        return self.folder / f"wanbed-pytest-{self.run_uid}.gate"

    def remove(self) -> None:
        """Called once by the controller at the end of the session."""
        for p in (self.main, self.gate):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


class Turns:
    """One worker's handles on the session's locks (flock: released by the kernel if the worker dies)."""

    def __init__(self, files: TurnFiles) -> None:
        self._main: IO[str] = open(files.main, "a")
        self._gate: IO[str] = open(files.gate, "a")
        self._holding = False       # the exclusive turn, kept from one alone test to the next

    @contextlib.contextmanager
    def alone(self, keep: bool = False) -> Iterator[None]:
        """Run while no other test does. `keep`: the worker's next test runs alone too, so the turn is kept
        for it rather than handed back (the other workers would start tests it must then wait out again)."""
        if not self._holding:
            fcntl.flock(self._gate, fcntl.LOCK_EX)      # no test starts beside us from now on
            try:
                fcntl.flock(self._main, fcntl.LOCK_EX)  # and the one running now has finished
            finally:
                fcntl.flock(self._gate, fcntl.LOCK_UN)
            self._holding = True
        try:
            yield
        finally:
            if not keep:
                fcntl.flock(self._main, fcntl.LOCK_UN)
                self._holding = False

    @contextlib.contextmanager
    def beside_others(self) -> Iterator[None]:
        if self._holding:                           # a kept turn not taken up after all
            fcntl.flock(self._main, fcntl.LOCK_UN)
            self._holding = False
        fcntl.flock(self._gate, fcntl.LOCK_EX)      # wait behind a test that asked to run alone
        fcntl.flock(self._gate, fcntl.LOCK_UN)
        fcntl.flock(self._main, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)

    def close(self) -> None:
        self._main.close()
        self._gate.close()
