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
from typing import Any

from node.errors import UserError


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


def normalise_sysctls(settings: dict[str, Any]) -> dict[str, str]:
    """Per-host sysctls as {"net/ipv4/name": "value"}; only net.* keys, which each network namespace has
    its own copy of (anything else would change the whole machine, not the emulated host)."""
    out: dict[str, str] = {}
    for key, value in settings.items():
        path = str(key).strip().replace(".", "/")
        if not path.startswith("net/") or ".." in str(key) or not all(c.isalnum() or c in "_/-" for c in path):
            raise UserError(f"sysctl {key!r}: only network-namespace sysctls (net.*, e.g. "
                            f"net.ipv4.tcp_slow_start_after_idle) can be set per host.")
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip() \
                or any(c in str(value) for c in "\n;&|`$"):
            raise UserError(f"sysctl {key}: expected a number or a short string value, got {value!r}.")
        out[path] = str(value).strip()
    return out


class Runtime(ABC):
    """Creates and destroys hosts for one run (all names carry the prefix and run id)."""

    name: str = ""
    # Extra per-namespace sysctls (scenario `sysctls:`, "net/ipv4/..." form), set on every host it makes;
    # each runtime starts with none, and Network assigns them before the first host is added.
    sysctls: dict[str, str]

    @abstractmethod
    def add_host(self, name: str) -> Host: ...

    @abstractmethod
    def remove_host(self, name: str) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Stop every process and remove every host this runtime created. Idempotent."""
