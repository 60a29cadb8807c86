"""Helpers shared by the node integration tests (importable as a plain module: pytest puts this folder on sys.path)."""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.integration.support import wait_until

__all__ = ["FAST", "chain", "wait_until"]

# Fast timers so failures show quickly; the tests' waits are derived from these.
FAST = {"session": {"keepalive": 0.3, "hold_time": 1.5, "backoff_min": 0.05, "backoff_max": 0.5},
        "metrics_interval": 0.5}


def chain(prefix: str, names: list[str]) -> Iterator[Any]:
    """A running LocalNet whose nodes form a chain in the order of `names`, with FAST timers, closed after the
    last use: the body of a module-scoped fixture (`yield from chain(...)`)."""
    from testbed.localnet import LocalNet

    work = Path(tempfile.mkdtemp(prefix=prefix))
    n = LocalNet.build(work, names, list(zip(names, names[1:])), **FAST)
    try:
        n.start()
        yield n
    finally:
        n.close()
