"""The contract every host runtime implements.

A host is somewhere processes run with their own network stack. Both runtimes
expose that stack as a *named* network namespace (`ip netns` name), so link
shaping, addressing, capture and faults work the same on either.
"""
from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Process:
    """A process the testbed started in a host; ended only through its pid."""

    host: str
    name: str
    pid: int
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = field(default=None, repr=False)


class Host(ABC):
    name: str
    netns: str          # named network namespace holding this host's interfaces
    workdir: Path       # the host's own working directory on the machine

    @abstractmethod
    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        """Start a long-running process inside the host; stdout+stderr go to workdir/<name>.log."""

    @abstractmethod
    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess:
        """Run a command to completion inside the host and capture its output."""

    @abstractmethod
    def signal(self, process: Process, sig: int) -> None:
        """Send a signal to one process this host started (kill -9, SIGSTOP, SIGCONT ...)."""


class Runtime(ABC):
    """Creates and destroys hosts for one run (all names carry the prefix and run id)."""

    name: str = ""

    @abstractmethod
    def add_host(self, name: str) -> Host: ...

    @abstractmethod
    def remove_host(self, name: str) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Stop every process and remove every host this runtime created. Idempotent."""
