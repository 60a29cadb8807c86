"""Helpers shared by the node integration tests (importable as a plain module: pytest puts this folder on sys.path)."""
from __future__ import annotations

import time
from typing import Callable

# Fast timers so failures show quickly; the tests' waits are derived from these.
FAST = {"session": {"keepalive": 0.3, "hold_time": 1.5, "backoff_min": 0.05, "backoff_max": 0.5},
        "metrics_interval": 0.5}


def wait_until(pred: Callable[[], object], timeout: float, step: float = 0.1) -> object:
    """Poll pred until it is truthy or timeout seconds passed; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)
