"""The gateway's decisions in nodes/<node>/gateway.jsonl (kind `gateway`, node/schema.py): one line each."""
from __future__ import annotations

from typing import Any


class GatewayRecords:
    def __init__(self, records: Any) -> None:
        self.records = records         # node.records.Records
        self.written = 0

    def decision(self, event: str, action: str, connector: str, gamma: float, queue: int, threshold: float,
                 maxrate: float | None, values: dict | None = None) -> dict:
        self.written += 1
        return self.records.write("gateway", event=event, action=action, connector=connector, gamma=gamma,
                                  queue=queue, threshold=threshold, maxrate=maxrate, values=values or {})
