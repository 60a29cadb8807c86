"""The application that drains the root queue of MQ rate control (the scenario's `rate_control.consumer`).

Every `every` (wall) seconds, on a fixed grid so it does not drift, it takes the oldest `messages` items of the
consumer user's mailbox at the root and deletes them: the paper's R = 1 Mbit/s as a block of 25 messages of
5 kB removed every second. It runs from before the warm-up until teardown (the drain included: the clients'
queues empty only while the root is drained), skips rounds while the root's daemon is down, and writes
consumer.json in the repetition directory at the end (docs/run-directory.md).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Callable

from node.client import Access, NodeClient
from node.errors import UserError
from testbed.scenario.spec import RateControlSpec

log = logging.getLogger(__name__)


class RootConsumer:
    def __init__(self, spec: RateControlSpec, address: str, rep_dir: Path, reachable: Callable[[str], bool],
                 token: Access = Access()) -> None:
        self.spec = spec
        self.address = address
        self.token = token
        self.path = rep_dir / "consumer.json"
        self._reachable = reachable
        self.rounds = 0
        self.removed = 0
        self.removed_bytes = 0
        self.skipped = 0          # rounds the root was down or did not answer
        self.late = 0             # rounds that started more than one period late (an overloaded host)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{spec.root}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        every, user, n = self.spec.consumer.every, self.spec.consumer.user, self.spec.consumer.messages
        client = NodeClient.to(self.address, self.token, timeout=max(5.0, 2 * every))
        t0 = time.monotonic()
        try:
            while not self._stop.wait(max(0.0, t0 + (self.rounds + 1) * every - time.monotonic())):
                self.rounds += 1
                if time.monotonic() - (t0 + self.rounds * every) > every:
                    self.late += 1
                if not self._reachable(self.spec.root):
                    self.skipped += 1
                    continue
                try:
                    items = client.mailbox(user, limit=n)
                    if items:
                        client.delete_mail([i.msg_id for i in items], user=user)
                        self.removed += len(items)
                        self.removed_bytes += sum(i.size for i in items)
                except UserError as exc:
                    self.skipped += 1
                    if len(self.errors) < 10:
                        self.errors.append(str(exc))
        finally:
            client.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)
        self.path.write_text(json.dumps({
            "root": self.spec.root, "user": self.spec.consumer.user, "messages_per_round": self.spec.consumer.messages,
            "every": self.spec.consumer.every, "rounds": self.rounds, "removed": self.removed,
            "removed_bytes": self.removed_bytes, "skipped": self.skipped, "late": self.late,
            "errors": self.errors}, indent=1) + "\n")
