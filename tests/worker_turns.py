"""Turns between the xdist workers of one test session: a test marked `alone` runs while no other test does.

Timing-sensitive tests (whole `testbed run`s, rate and delay measurements) have tolerances that assume an
otherwise idle 2-core machine; every other test may run beside another. One file lock per session: `alone`
tests hold it exclusively, all others shared. A second lock, the gate, is held by a test waiting to run
alone, so that the other worker, whose tests come one after another, cannot keep the shared lock forever.

A test marked `testbed_up` runs `testbed up`, whose network is the machine's one running network (the CLI's
`down`, `status`, `link` act on it; a second `up` is refused): such tests take a fourth lock, `up`, one at a time,
whichever worker they run on. The `up` lock is always taken before a turn, never while holding one.

Every turn taken costs the other workers the rest of the test they are running, so the tests that can run alone
as one group (tests/conftest.py) are sent first, to one worker, and take ONE turn at the start of the session:
the other workers' first tests wait for that turn to begin (a third file, `began`) instead of racing it.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
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

    @property
    def up(self) -> Path:
        return self.folder / f"wanbed-pytest-{self.run_uid}.up"

    @property
    def began(self) -> Path:
        """Exists once some worker has taken an alone turn in this session."""
        return self.folder / f"wanbed-pytest-{self.run_uid}.began"

    def remove(self) -> None:
        """Called once by the controller at the end of the session."""
        for p in (self.main, self.gate, self.up, self.began):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


class Turns:
    """One worker's handles on the session's locks (flock: released by the kernel if the worker dies)."""

    # How long a worker's first test waits for the alone group's turn to begin: far more than a worker needs to
    # receive its first tests, far less than the group's run; past it, the test starts and the turn waits for it.
    FIRST_TURN_WAIT_S = 30.0

    def __init__(self, files: TurnFiles) -> None:
        self._files = files
        self._main: IO[str] = open(files.main, "a")
        self._gate: IO[str] = open(files.gate, "a")
        self._up: IO[str] = open(files.up, "a")
        self._holding = False       # the exclusive turn, kept from one alone test to the next
        self._holding_up = False    # the `up` lock, kept from one `testbed up` test to the next
        self.alone_group_first = False   # set once the worker has collected: the session starts with that group
        self._started = False

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
            self._files.began.touch()
        self._started = True
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
        if not self._started:
            self._started = True
            if self.alone_group_first:
                self._wait_for_first_turn()
        fcntl.flock(self._gate, fcntl.LOCK_EX)      # wait behind a test that asked to run alone
        fcntl.flock(self._gate, fcntl.LOCK_UN)
        fcntl.flock(self._main, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def network(self, keep: bool = False) -> Iterator[None]:
        """Run as the only test with a `testbed up` network. `keep`: the worker's next test needs it too (a
        module's network outlives one test)."""
        if not self._holding_up:
            if self._holding:                       # lock order is `up`, then the turn: hand a kept turn back
                fcntl.flock(self._main, fcntl.LOCK_UN)
                self._holding = False
            fcntl.flock(self._up, fcntl.LOCK_EX)
            self._holding_up = True
        try:
            yield
        finally:
            if not keep:
                fcntl.flock(self._up, fcntl.LOCK_UN)
                self._holding_up = False

    def _wait_for_first_turn(self) -> None:
        deadline = time.monotonic() + self.FIRST_TURN_WAIT_S
        while not self._files.began.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self._main.close()
        self._gate.close()
        self._up.close()


def scheduling_order(groups: Sequence[str | None], first: str, late: Sequence[bool] | None = None) -> list[int]:
    """The order to hand tests to xdist (indices into `groups`, each test's xdist group or None): the group `first`
    at the head, then groups with more tests before groups with fewer, as xdist's own reordering would; within a
    group the tests marked `late` after the others (whole modules, so that a module's fixtures are made once: a
    module with a `testbed up` test waits for the `up` lock, and its group's other tests need not wait with it);
    collection order otherwise. Tests without a group come last, and those marked `late` among them are spread
    evenly over them: such tests take the `up` lock one at a time, and side by side at the end of the session
    they made the workers wait for each other (30 s in one run) where other tests could have filled the wait."""
    sizes = Counter(g for g in groups if g is not None)
    late = late or [False] * len(groups)
    grouped = sorted((i for i, g in enumerate(groups) if g is not None),
                     key=lambda i: (groups[i] != first, -sizes[groups[i]], late[i], i))
    plain = [i for i, g in enumerate(groups) if g is None and not late[i]]
    spread = [i for i, g in enumerate(groups) if g is None and late[i]]
    return grouped + _spread(spread, plain)


def _spread(few: list[int], many: list[int]) -> list[int]:
    """`few` placed among `many` at even intervals, the first after one interval: both keep their order."""
    if not few:
        return list(many)
    out: list[int] = []
    at = 0
    for k, i in enumerate(few, start=1):
        upto = k * len(many) // (len(few) + 1)
        out += many[at:upto]
        out.append(i)
        at = upto
    return out + many[at:]
