"""Helpers shared by the node integration tests (importable as a plain module: pytest puts this folder on sys.path)."""
from __future__ import annotations

from tests.integration.support import wait_until

__all__ = ["FAST", "wait_until"]

# Fast timers so failures show quickly; the tests' waits are derived from these.
FAST = {"session": {"keepalive": 0.3, "hold_time": 1.5, "backoff_min": 0.05, "backoff_max": 0.5},
        "metrics_interval": 0.5}
