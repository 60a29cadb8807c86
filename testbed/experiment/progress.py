"""How a running cell reports progress. The cell runner calls these; the console
(rich on a terminal, plain log lines otherwise) implements them."""
from __future__ import annotations

from typing import Protocol


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
