"""EMG users at the gateway: LOCKEDUNTIL, CREDITS (durable, charged with the submission), THROUGHPUT.

The credits a user spent are a row of `gw_credit` in the node's spool, charged by the op the admission layer
hands the origin transaction (node/policy.py Admitted): after a crash a submission is either accepted and
charged or neither. In memory the count is raised at admission and lowered again if that transaction does not
happen; a copy that later expires or is dropped refunds nothing (the message was accepted).
"""
from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

from node.gateway.config import GatewayConfig, UserConfig
from node.gateway.connectors import Incoming
from node.policy import Admitted
from node.spool import Op

SCHEMA = "CREATE TABLE IF NOT EXISTS gw_credit(user TEXT PRIMARY KEY, used INTEGER NOT NULL) WITHOUT ROWID"

NO_CREDITS = "no credits left"
THROTTLED = "throttled"
LOCKED = "locked"
NOT_PERMITTED = "not permitted"


def op_load() -> Op:
    """Create the table if needed; returns user -> credits used."""
    def op(c: sqlite3.Connection) -> dict[str, int]:
        c.execute(SCHEMA)
        return {u: int(n) for u, n in c.execute("SELECT user, used FROM gw_credit")}
    return op


def op_charge(user: str) -> Op:
    def op(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO gw_credit VALUES (?, 1) ON CONFLICT(user) DO UPDATE SET used = used + 1", (user,))
    return op


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


class Users:
    def __init__(self, cfg: GatewayConfig, now: float) -> None:
        self.cfg = cfg
        self.used: dict[str, int] = {}
        self.locked = {u: c.locked_ts for u, c in cfg.users.items() if c.locked_ts}     # LOCKEDUNTIL, epoch s
        # a user's own THROUGHPUT, as an incoming connector of its own
        self.rates = {u: Incoming(u, c.throughput, now) for u, c in cfg.users.items() if c.throughput is not None}

    def get(self, user: str) -> UserConfig | None:
        return self.cfg.users.get(user)

    def load(self, used: dict[str, int]) -> None:
        self.used = dict(used)

    def credits_left(self, user: str) -> int | None:
        u = self.cfg.users.get(user)
        if u is None or u.credits is None:
            return None
        return max(0, u.credits - self.used.get(user, 0))

    def refusal(self, user: str, now: float) -> tuple[str, str] | None:
        """(counter, reason) when `user` may not submit now for who it is: locked, or out of credits."""
        u = self.cfg.users.get(user)
        if u is None:
            return None
        until = self.locked.get(user, 0.0)
        if now < until:
            return LOCKED, f"locked until {iso(until)}"
        left = self.credits_left(user)
        if left is not None and left < 1:
            return "no_credits", NO_CREDITS
        return None

    def charge(self, user: str) -> Admitted | None:
        """Spend one credit of `user` (None: its credits are unlimited, nothing to charge)."""
        if self.credits_left(user) is None:
            return None
        self.used[user] = self.used.get(user, 0) + 1

        def undo() -> None:
            self.used[user] = max(0, self.used.get(user, 0) - 1)
        return Admitted(op_charge(user), undo)
