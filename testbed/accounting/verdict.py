"""The checker's answer for one repetition: every accepted message copy in exactly one class.

A copy (a "pair") is (msg_id, recipient node). The classes, in the order they are decided:
  duplicate  delivered more than once (more than one delivery line)
  delivered  delivered once (one delivery line, or none but the recipient's spool
             recorded the delivery: `unrecorded_deliveries`)
  reported   a final non-delivery report was made for it (`ndr_made`)
  late       still held whole at teardown: the pieces held, at one node or at several together,
             cover every byte of the message (node, state, pieces; maybe at several nodes)
  lost       none of these (`partly_held`: the lost copies of which some pieces are still held)
Non-delivery report messages are accounted apart, in `reports`.

A repetition passes (`ok`) when no copy and no report is lost, none is delivered twice, every spool was
read, the driver's accepted set and the nodes' records agree (`client`), no node failed to write a record
(`records_failed`), and at most `max_late` copies are late.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.accounting.reconcile import Reconciliation

Pair = tuple[str, str]       # (msg_id, recipient node)
DETAIL_LIMIT = 20            # pairs listed per class in to_dict (summary.json stays small)


@dataclass(frozen=True)
class Place:
    """Where a copy is held: a node, the spool state of its pieces there, and how many pieces."""
    node: str
    state: str
    pieces: int


@dataclass(frozen=True)
class Partial:
    """A copy held only in part: how many of its bytes the spools still hold, of how many, and where."""
    held_bytes: int
    total: int
    places: list[Place]


@dataclass
class ReportAccount:
    """Non-delivery report messages (kind "ndr", from mailer-daemon), one per (report id, originator node)."""
    accepted: int = 0
    delivered: int = 0            # an `ndr_delivered` event (or the originator's spool says delivered)
    expired: int = 0              # the report itself could not be delivered (`ndr_made` about it): final
    late: int = 0
    lost: int = 0
    late_pairs: dict[Pair, list[Place]] = field(default_factory=dict)
    lost_pairs: list[Pair] = field(default_factory=list)
    partly_held: dict[Pair, Partial] = field(default_factory=dict)


@dataclass
class Verdict:
    rep_dir: Path
    nodes: list[str] = field(default_factory=list)
    accepted: int = 0
    delivered: int = 0
    duplicate: int = 0
    reported: int = 0
    late: int = 0
    lost: int = 0
    lost_pairs: list[Pair] = field(default_factory=list)
    duplicate_pairs: dict[Pair, int] = field(default_factory=dict)       # copy -> extra delivery lines
    late_pairs: dict[Pair, list[Place]] = field(default_factory=dict)
    partly_held: dict[Pair, Partial] = field(default_factory=dict)      # lost copies with some pieces held
    reported_by_reason: dict[str, int] = field(default_factory=dict)
    # evidence only a spool kept (a daemon killed between its spool commit and its record line)
    unrecorded_submissions: list[Pair] = field(default_factory=list)    # accepted per `origin`, no submission line
    unrecorded_deliveries: list[Pair] = field(default_factory=list)     # delivered per `done`, no delivery line
    delivered_but_held: int = 0        # delivered copies of which a stale piece is still held (ack lost)
    unexpected_deliveries: dict[Pair, int] = field(default_factory=dict)  # delivered, never accepted here
    orphaned: int = 0                  # user copies that had an `orphan` event (not final; see check.py)
    reports: ReportAccount = field(default_factory=ReportAccount)
    report_events: dict[str, int] = field(default_factory=dict)         # reports.jsonl lines per event
    record_problems: int = 0
    first_problems: list[str] = field(default_factory=list)
    record_lines: int = 0
    spool_problems: dict[str, str] = field(default_factory=dict)       # node -> what is wrong with its spool
    client: Reconciliation = field(default_factory=Reconciliation)      # the driver's accepted set vs the nodes'
    records_failed: dict[str, int] | None = None    # node -> record lines it could not write (None: not asked)

    @property
    def extra_deliveries(self) -> int:
        """Delivery lines beyond the first of each copy (summary.json's `duplicates`)."""
        return sum(self.duplicate_pairs.values()) + sum(n - 1 for n in self.unexpected_deliveries.values())

    @property
    def problems(self) -> int:
        return self.record_problems + len(self.spool_problems)

    @property
    def failed_writes(self) -> int:
        """Record lines the nodes could not write."""
        return sum((self.records_failed or {}).values())

    def ok(self, max_late: int | None = None) -> bool:
        """False on any lost or duplicated copy, a lost report, an unreadable spool, a mismatch between the
        driver's accepted set and the nodes' records, a failed record write, or when more copies are late than
        `max_late` (None: any)."""
        if self.lost or self.duplicate or any(n > 1 for n in self.unexpected_deliveries.values()):
            return False
        if self.reports.lost or self.spool_problems or self.client.mismatches or self.failed_writes:
            return False
        return max_late is None or self.late <= max_late

    def to_dict(self, max_late: int | None = None, limit: int | None = DETAIL_LIMIT) -> dict[str, Any]:
        """Plain data for summary.json and `testbed check --json`; pair lists cut to `limit` entries (None: all)."""
        return {
            "ok": self.ok(max_late), "max_late": max_late,
            "accepted": self.accepted, "delivered": self.delivered, "duplicate": self.duplicate,
            "extra_deliveries": self.extra_deliveries, "reported": self.reported, "late": self.late,
            "lost": self.lost,
            "reported_by_reason": dict(sorted(self.reported_by_reason.items())),
            "lost_pairs": [list(p) for p in self.lost_pairs[:limit]],
            "duplicate_pairs": [[m, d, n] for (m, d), n in list(self.duplicate_pairs.items())[:limit]],
            "late_pairs": [held_dict(p, places) for p, places in list(self.late_pairs.items())[:limit]],
            "late_where": late_where(self.late_pairs),
            "partly_held": [partial_dict(p, part) for p, part in list(self.partly_held.items())[:limit]],
            "unrecorded_submissions": len(self.unrecorded_submissions),
            "unrecorded_deliveries": len(self.unrecorded_deliveries),
            "delivered_but_held": self.delivered_but_held,
            "unexpected_deliveries": len(self.unexpected_deliveries),
            "orphaned": self.orphaned,
            "reports": {"accepted": self.reports.accepted, "delivered": self.reports.delivered,
                        "expired": self.reports.expired, "late": self.reports.late, "lost": self.reports.lost,
                        "lost_pairs": [list(p) for p in self.reports.lost_pairs[:limit]],
                        "late_pairs": [held_dict(p, pl) for p, pl in list(self.reports.late_pairs.items())[:limit]],
                        "partly_held": [partial_dict(p, part)
                                        for p, part in list(self.reports.partly_held.items())[:limit]]},
            "client": client_dict(self.client, limit),
            "records_failed": self.records_failed,
            "report_events": dict(sorted(self.report_events.items())),
            "problems": self.problems,
            "first_problems": [f"nodes/{n}/spool.db: {why}" for n, why in sorted(self.spool_problems.items())]
                              + self.first_problems,
            "spool_problems": dict(sorted(self.spool_problems.items())),
        }


def held_dict(pair: Pair, places: list[Place]) -> dict[str, Any]:
    return {"msg_id": pair[0], "dst": pair[1],
            "held": [{"node": p.node, "state": p.state, "pieces": p.pieces} for p in places]}


def partial_dict(pair: Pair, part: Partial) -> dict[str, Any]:
    return {**held_dict(pair, part.places), "held_bytes": part.held_bytes, "size": part.total}


def client_dict(c: Reconciliation, limit: int | None) -> dict[str, Any]:
    """The driver's accepted set against the nodes' records (summary.json `accounting.client`)."""
    return {"present": c.present, "accepted": c.accepted, "reconciled": c.reconciled,
            "client_only": len(c.client_only), "node_only": len(c.node_only), "unanswered": len(c.unanswered),
            "problem": c.problem,
            "client_only_pairs": [list(p) for p in c.client_only[:limit]],
            "node_only_pairs": [list(p) for p in c.node_only[:limit]]}


def late_where(late_pairs: dict[Pair, list[Place]]) -> dict[str, dict[str, int]]:
    """Late copies per holding node and state (a copy held at two nodes counts at both)."""
    out: dict[str, dict[str, int]] = {}
    for places in late_pairs.values():
        for p in places:
            by_state = out.setdefault(p.node, {})
            by_state[p.state] = by_state.get(p.state, 0) + 1
    return {node: dict(sorted(states.items())) for node, states in sorted(out.items(), key=lambda i: node_order(i[0]))}


def node_order(name: str) -> tuple:
    """n2 before n10: names compared by their text and number parts."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)
