"""check_run: classify every accepted message copy of one repetition from its run directory alone.

Reads (docs/run-directory.md): nodes/<node>/submissions.jsonl, deliveries.jsonl,
reports.jsonl, the driver's workload.jsonl and accepted.jsonl, events.jsonl,
and each node's spool.db as the teardown left it (read-only). The daemons must
be stopped, so that every spool is complete.

The accepted copies are those the nodes' submission lines, their spools'
`origin` rows and the driver's accepted.jsonl name. accepted.jsonl is held
against the submission lines (testbed/accounting/reconcile.py): a copy accepted
per the driver without a submission line, or the other way round, is a
mismatch. So is a node that could not write record lines (the testbed's
`records_failed` event in events.jsonl, from the nodes' Control Stats): its
records are incomplete.

What is final, from node/mta.py and node/reports.py:
- `ndr_made` is a final non-delivery: the engine writes it when it drops the
  copy (lifetime expired in a queue) or aborts it (lifetime expired while held
  or reassembling, reassembly timeout); the pieces are deleted from the spool.
  Such a copy is **reported**, with the reason of its first `ndr_made` line.
- `orphan` is NOT final: the copy was refused by its next hop or has no route;
  the engine keeps its pieces (state `orphan`) and queues them again when the
  routes change. An orphaned copy is therefore delivered, reported, **late**
  (still held, state `orphan`) or lost like any other; `orphaned` only counts
  the copies that had an orphan event.
- A copy is **late** only when the pieces held of it, at one node or at several
  together, cover every byte of the message (spools.py gives each piece's byte
  range): a copy a fragment of which is gone from every spool can never be
  delivered, so it is **lost**, even though pieces of it are still held.
- Non-delivery report messages (kind "ndr", originator "mailer-daemon",
  node/reports.py) are accounted apart: delivered (`ndr_delivered`), expired
  (an `ndr_made` about the report itself, final), late (held), or lost.
- Copies a subsystem stores under message ids of its own (its `copy_prefixes`,
  testbed/subsystems/) are its to account: the checker leaves them out. The
  caller passes the subsystems (testbed.subsystems.SUBSYSTEMS): the registry
  sits above this package, which it uses.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Protocol, Sequence

from node.reports import REPORT_KIND, REPORTER
from testbed.accounting.coverage import held_bytes, whole
from testbed.accounting.layout import EVENTS_FILE
from testbed.accounting.reconcile import NodeSubmission, reconcile
from testbed.accounting.records import RecordReader, reason_group, recipients
from testbed.accounting.spools import SPOOL_FILE, Span, SpoolUnreadable, read_spool
from testbed.accounting.verdict import Pair, Partial, Place, ReportAccount, Verdict

NDR_PREFIX = "ndr."      # node/reports.py names a report "ndr.<msg_id>.<dst>"
RECORDS_FAILED = "records_failed"     # the testbed's event with the nodes' failed record writes


class AccountsApart(Protocol):
    """What the checker needs of a subsystem (testbed/subsystems/base.py)."""
    copy_prefixes: tuple[str, ...]


def check_run(rep_dir: Path, subsystems: Sequence[AccountsApart] = ()) -> Verdict:
    """The verdict for the repetition directory `rep_dir` (see the module docstring); never raises on bad input.
    `subsystems`: whose stored copies to leave out (testbed.subsystems.SUBSYSTEMS for a whole run)."""
    rep_dir = Path(rep_dir)
    apart = tuple(p for sub in subsystems for p in sub.copy_prefixes)
    reader = RecordReader(rep_dir)
    node_dirs = node_directories(rep_dir)
    verdict = Verdict(rep_dir=rep_dir, nodes=[d.name for d in node_dirs])

    users: dict[Pair, None] = {}         # accepted copies of user messages (a dict keeps the first-seen order)
    reports: dict[Pair, None] = {}       # accepted copies of report messages
    node_side: dict[str, NodeSubmission] = {}     # the user messages the nodes' submission lines accepted
    workload = list(reader.records(rep_dir / "workload.jsonl", "submission"))
    for d in node_dirs:
        for rec in reader.records(d / "submissions.jsonl", "submission"):
            if rec["accepted"] and rec["msg_id"]:
                dsts = recipients(rec["dst"])
                if _is_report(rec):
                    reports.update(dict.fromkeys((rec["msg_id"], dst) for dst in dsts))
                    continue
                users.update(dict.fromkeys((rec["msg_id"], dst) for dst in dsts))
                node_side[rec["msg_id"]] = NodeSubmission(rec["src"], tuple(dsts), rec["size"])
    for rec in workload:        # the driver's lines are refusals; one saying accepted counts where it says
        if rec["accepted"] and rec["msg_id"]:
            users.update(dict.fromkeys((rec["msg_id"], dst) for dst in recipients(rec["dst"])))
    run_events = list(reader.records(rep_dir / EVENTS_FILE, "event"))       # the testbed's events.jsonl
    verdict.client = reconcile(rep_dir, reader, node_side, run_events, workload)
    users.update(dict.fromkeys(verdict.client.client_pairs))
    verdict.records_failed = _records_failed(run_events)

    deliveries: Counter[Pair] = Counter()
    for d in node_dirs:
        for rec in reader.records(d / "deliveries.jsonl", "delivery"):
            deliveries[(rec["msg_id"], rec["dst"])] += 1

    ndr_made: dict[Pair, str] = {}
    ndr_delivered: set[Pair] = set()
    orphaned: set[Pair] = set()
    events: Counter[str] = Counter()
    for d in node_dirs:
        for rec in reader.records(d / "reports.jsonl", "report"):
            pair = (rec["msg_id"], rec["dst"])
            events[rec["event"]] += 1
            if rec["event"] == "ndr_made":
                ndr_made.setdefault(pair, rec["reason"])
            elif rec["event"] == "ndr_delivered":
                ndr_delivered.add(pair)
            elif rec["event"] == "orphan":
                orphaned.add(pair)

    held: dict[Pair, list[Place]] = {}
    spans: dict[Pair, list[Span]] = {}
    spool_delivered: set[Pair] = set()
    for d in node_dirs:
        if not (d / SPOOL_FILE).exists() and not _daemon_directory(d):
            continue             # a host without a daemon (its runtime's work files only): no spool to read
        try:
            spool = read_spool(d / SPOOL_FILE, d.name)
        except SpoolUnreadable as exc:
            verdict.spool_problems[d.name] = str(exc)
            continue
        for pair, states in spool.held.items():
            held.setdefault(pair, []).extend(Place(d.name, state, n) for state, n in sorted(states.items()))
        for pair, pieces in spool.spans.items():
            spans.setdefault(pair, []).extend(pieces)
        spool_delivered |= spool.delivered
        for row in spool.accepted:
            if apart and row.msg_id.startswith(apart):
                continue         # a subsystem's copy: the subsystem accounts it
            is_report = row.originator == REPORTER or row.msg_id.startswith(NDR_PREFIX)
            for dst in row.dsts:
                pair = (row.msg_id, dst)
                if is_report:
                    reports.setdefault(pair, None)
                elif pair not in users:
                    users[pair] = None
                    verdict.unrecorded_submissions.append(pair)

    whole_held = {p: places for p, places in held.items() if _whole(spans.get(p, []))}
    partial = {p: Partial(*_extent(spans.get(p, [])), held[p]) for p in held if p not in whole_held}
    _classify_users(verdict, sorted(users), deliveries, spool_delivered, ndr_made, whole_held, partial)
    verdict.unexpected_deliveries = {p: n for p, n in sorted(deliveries.items()) if p not in users}
    verdict.orphaned = sum(1 for p in users if p in orphaned)
    verdict.reports = _account_reports(sorted(reports), ndr_delivered | spool_delivered, ndr_made, whole_held,
                                       partial)
    verdict.report_events = dict(sorted(events.items()))
    verdict.record_problems, verdict.first_problems, verdict.record_lines = \
        reader.problems, list(reader.samples), reader.lines
    return verdict


def node_directories(rep_dir: Path) -> list[Path]:
    """nodes/<node>/ of every node daemon of the run, sorted by name. A host without a daemon (`daemon: false`)
    has a directory too (its runtime's work directory) but no node.yaml and nothing the daemon writes."""
    nodes = Path(rep_dir) / "nodes"
    try:
        return sorted(p for p in nodes.iterdir() if p.is_dir() and any(p.iterdir()))
    except OSError:
        return []


def _daemon_directory(d: Path) -> bool:
    """Whether nodes/<d>/ is a node daemon's: its config or any record it writes is there."""
    return (d / "node.yaml").exists() or any(d.glob("*.jsonl"))


def _whole(spans: list[Span]) -> bool:
    return bool(spans) and whole(((s.off, s.length) for s in spans), max(s.total for s in spans))


def _extent(spans: list[Span]) -> tuple[int, int]:
    """(bytes held, message size) of a copy held in part."""
    total = max((s.total for s in spans), default=0)
    return held_bytes(((s.off, s.length) for s in spans), total), total


def _records_failed(events: list[dict[str, Any]]) -> dict[str, int] | None:
    """node -> record lines its daemon could not write, from the testbed's last `records_failed` event;
    None when the run has none (the testbed did not ask the nodes)."""
    found = [e for e in events if e["event"] == RECORDS_FAILED and isinstance(e.get("counts"), dict)]
    if not found:
        return None
    counts = found[-1]["counts"]
    # a count that is not a whole number is a damaged line: counted as a failure, never as none
    return {str(n): c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else 1
            for n, c in sorted(counts.items())}


def _classify_users(v: Verdict, pairs: list[Pair], deliveries: Counter[Pair], spool_delivered: set[Pair],
                    ndr_made: dict[Pair, str], held: dict[Pair, list[Place]], partial: dict[Pair, Partial]) -> None:
    reasons: Counter[str] = Counter()
    for pair in pairs:
        n = deliveries.get(pair, 0)
        if n >= 1 or pair in spool_delivered:
            if n > 1:
                v.duplicate += 1
                v.duplicate_pairs[pair] = n - 1
            else:
                v.delivered += 1
                if n == 0:
                    v.unrecorded_deliveries.append(pair)
            v.delivered_but_held += pair in held
        elif pair in ndr_made:
            v.reported += 1
            reasons[_reason_key(ndr_made[pair], v.nodes)] += 1
        elif pair in held:
            v.late += 1
            v.late_pairs[pair] = held[pair]
        else:
            v.lost += 1
            v.lost_pairs.append(pair)
            if pair in partial:
                v.partly_held[pair] = partial[pair]
    v.accepted = len(pairs)
    v.reported_by_reason = dict(sorted(reasons.items()))


def _account_reports(pairs: list[Pair], delivered: set[Pair], ndr_made: dict[Pair, str],
                     held: dict[Pair, list[Place]], partial: dict[Pair, Partial]) -> ReportAccount:
    out = ReportAccount(accepted=len(pairs))
    for pair in pairs:
        if pair in delivered:
            out.delivered += 1
        elif pair in ndr_made:
            out.expired += 1
        elif pair in held:
            out.late += 1
            out.late_pairs[pair] = held[pair]
        else:
            out.lost += 1
            out.lost_pairs.append(pair)
            if pair in partial:
                out.partly_held[pair] = partial[pair]
    return out


def _is_report(rec: dict[str, Any]) -> bool:
    return rec.get("kind") == REPORT_KIND or rec.get("originator") == REPORTER


def _reason_key(reason: str, nodes: list[str]) -> str:
    """A report reason grouped across nodes: "lifetime expired at n3" and "... at n7" are one reason."""
    text = reason_group(reason)
    if not nodes:
        return text
    names = "|".join(re.escape(n) for n in sorted(nodes, key=len, reverse=True))
    return re.sub(rf"(?<![\w.-])(?:{names})(?![\w.-])", "<node>", text)
