"""Why a node will not store a piece it was offered: the admission policy's and the engine's one verdict type."""
from __future__ import annotations

from typing import NamedTuple


class Refusal(NamedTuple):
    """`retry_after` > 0: not now, the sender keeps the piece and offers it again after that many seconds;
    0: never, the sender keeps it as an orphan and reports it."""
    reason: str
    retry_after: float = 0.0

    @property
    def for_now(self) -> bool:
        return self.retry_after > 0
