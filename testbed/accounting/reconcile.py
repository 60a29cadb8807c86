"""The client's side of the accepted set: the workload driver's accepted.jsonl held against the nodes' records.

A node's submissions.jsonl alone cannot show a copy whose submission line failed to be written (and whose
spool `origin` row was pruned since): the copy would be invisible, neither delivered nor lost. The driver
writes every acceptance it sees to accepted.jsonl as the reply arrives (testbed/experiment/driver.py), and:

  client_only  copies accepted per the driver with no submission line at any node: a record the node lost
  node_only    copies a node's submission line says it accepted that the driver never saw accepted, and no
               call of the driver that failed after it was sent (`maybe_accepted` in workload.jsonl, same
               node, recipients and size) explains
  unanswered   node-side acceptances such a failed call explains: the node took the message, the driver never
               heard (it was killed or paused before its reply); not a mismatch
  problem      accepted.jsonl itself is missing or short: fewer acceptances in it than the driver counted
               (events.jsonl `workload_end`)

Only a directory the driver ran in is reconciled (its accepted.jsonl, or a `workload_end` event that counted
acceptances); a `testbed up` directory, whose mail comes from `testbed send`, is not.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.accounting.layout import ACCEPTED_FILE
from testbed.accounting.records import RecordReader, recipients

Pair = tuple[str, str]
Attempt = tuple[str, tuple[str, ...], int]      # (submitting node, recipient nodes, size)


@dataclass(frozen=True)
class NodeSubmission:
    """What a node's submission line says it accepted."""
    node: str
    dsts: tuple[str, ...]
    size: int


@dataclass
class Reconciliation:
    present: bool = False                    # the driver's accepted.jsonl was read
    accepted: int = 0                        # copies (msg_id x recipient) in it
    reconciled: int = 0                      # of those, with a submission line at a node
    client_pairs: list[Pair] = field(default_factory=list)
    client_only: list[Pair] = field(default_factory=list)
    node_only: list[Pair] = field(default_factory=list)
    unanswered: list[Pair] = field(default_factory=list)
    problem: str = ""

    @property
    def mismatches(self) -> int:
        return len(self.client_only) + len(self.node_only) + bool(self.problem)


def reconcile(rep_dir: Path, reader: RecordReader, node_side: dict[str, NodeSubmission],
              events: list[dict[str, Any]], workload: list[dict[str, Any]]) -> Reconciliation:
    """`node_side`: msg_id -> the accepted user messages of the nodes' submission lines; `events`: the
    events.jsonl records (the driver's `workload_end` counters); `workload`: workload.jsonl's records."""
    out = Reconciliation()
    path = Path(rep_dir) / ACCEPTED_FILE
    counted = _driver_accepted(events)
    if not path.is_file():
        if counted:
            out.problem = f"{ACCEPTED_FILE} is missing, though the driver counted {counted} acceptances"
        return out
    out.present = True
    client: dict[Pair, None] = {}
    messages = 0
    for rec in reader.records(path, "accepted"):
        messages += 1
        for dst in recipients(rec["dst"]):
            client.setdefault((rec["msg_id"], dst), None)
    if counted and messages < counted:
        out.problem = f"{ACCEPTED_FILE} lists {messages} acceptances, the driver counted {counted}"
    out.client_pairs = list(client)
    out.accepted = len(client)
    node_pairs = {(m, d) for m, sub in node_side.items() for d in sub.dsts}
    out.client_only = [p for p in client if p not in node_pairs]
    out.reconciled = out.accepted - len(out.client_only)
    maybe = _maybe_accepted(workload)
    for msg_id, sub in node_side.items():
        pairs = [(msg_id, d) for d in sub.dsts if (msg_id, d) not in client]
        if not pairs:
            continue
        key = (sub.node, tuple(sorted(set(sub.dsts))), sub.size)
        if len(pairs) == len(sub.dsts) and maybe[key] > 0:
            maybe[key] -= 1          # one unanswered call explains one whole message
            out.unanswered.extend(pairs)
        else:
            out.node_only.extend(pairs)
    return out


def _driver_accepted(events: list[dict[str, Any]]) -> int:
    """The acceptances the driver counted (its last `workload_end` event); 0 when it recorded none."""
    ends = [e for e in events if e.get("event") == "workload_end"]
    n = ends[-1].get("accepted") if ends else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _maybe_accepted(workload: list[dict[str, Any]]) -> Counter[Attempt]:
    """The driver's calls that failed after they were sent (workload.jsonl, `maybe_accepted`), by what they
    asked for."""
    out: Counter[Attempt] = Counter()
    for rec in workload:
        if rec.get("maybe_accepted") is True:
            out[(rec["node"], tuple(sorted(set(recipients(rec["dst"])))), rec["size"])] += 1
    return out
