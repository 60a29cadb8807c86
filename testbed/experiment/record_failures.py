"""The record lines the nodes could not write, as their Control Stats tell them (`records_failed`).

A daemon counts its failed record writes in memory (node/records.py), so the count starts again from 0 when
the daemon is restarted: the repetition's count for a node is the sum over its daemon's runs, of each the
largest count seen. The cell shows every Stats answer it gets (progress polls, the drain) and asks once
more just before the teardown stops the daemons; failures after a daemon's last answer before it was
killed cannot be seen. The result goes to events.jsonl as the testbed's `records_failed` event, which the
loss checker reads.
"""
from __future__ import annotations

import threading
from typing import Any


class RecordFailures:
    """node -> failed record writes, summed over the node's daemon runs."""

    def __init__(self) -> None:
        self._seen: dict[str, list[tuple[object, int]]] = {}    # node -> [(daemon run, largest count)]
        self._lock = threading.Lock()

    def saw(self, node: str, run: object, stats: dict[str, Any]) -> None:
        """A Stats answer of `node`'s daemon run `run` (any object that is the same for one run of the daemon,
        e.g. its process handle)."""
        n = stats.get("records_failed")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return        # a node from before the count, or a damaged answer: nothing to learn
        with self._lock:
            runs = self._seen.setdefault(node, [])
            for i, (r, best) in enumerate(runs):
                if r is run:
                    runs[i] = (r, max(best, n))
                    return
            runs.append((run, n))

    def counts(self) -> dict[str, int]:
        """node -> failed writes, for every node that answered at least once."""
        with self._lock:
            return {node: sum(n for _r, n in runs) for node, runs in sorted(self._seen.items())}
