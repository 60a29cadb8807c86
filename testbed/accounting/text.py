"""The checker's verdict as console text: one headline per repetition, then what needs a look."""
from __future__ import annotations

from testbed.accounting.verdict import Pair, Partial, Place, Verdict, late_where

SHOWN = 5      # pair ids named per class


def pair_text(pair: Pair) -> str:
    return f"{pair[0]}->{pair[1]}"


def places_text(places: list[Place]) -> str:
    return ", ".join(f"{p.node} ({p.state})" for p in places)


def verdict_line(label: str, v: Verdict, max_late: int | None = None) -> str:
    """e.g. `mode-fragmenting/1: 341 accepted: 341 delivered, 0 reported, 0 late, 0 lost, 0 duplicates — OK`."""
    line = (f"{label}: {v.accepted} accepted: {v.delivered} delivered, {v.reported} reported, {v.late} late, "
            f"{v.lost} lost, {v.duplicate} duplicates")
    if v.ok(max_late):
        return f"{line} — OK"
    why = []
    if v.lost:
        why.append(f"{v.lost} lost")
    dup = v.duplicate + sum(1 for n in v.unexpected_deliveries.values() if n > 1)
    if dup:
        why.append(f"{dup} delivered more than once")
    if max_late is not None and v.late > max_late:
        why.append(f"{v.late} late > max_late {max_late}")
    if v.reports.lost:
        why.append(f"{v.reports.lost} non-delivery reports lost")
    if v.spool_problems:
        why.append(f"spool unreadable at {', '.join(sorted(v.spool_problems))}")
    if v.client.mismatches:
        why.append("the driver's accepted set and the nodes' records disagree")
    if v.failed_writes:
        why.append(f"{v.failed_writes} record lines the nodes could not write")
    return f"{line} — FAIL ({', '.join(why)})"


def verdict_details(v: Verdict, shown: int = SHOWN) -> list[str]:
    """Lines naming the first lost, duplicated and late copies (with where they are held) and any evidence
    problems; empty for a clean repetition."""
    out: list[str] = []
    if v.lost_pairs:
        out.append(f"lost: {_first(v.lost_pairs, shown, pair_text)}")
    if v.partly_held:
        out.append(f"{len(v.partly_held)} of the lost copies are held only in part (a piece is gone from every "
                   f"spool): {_first(list(v.partly_held.items()), shown, _partial_text, '; ')}")
    if v.duplicate_pairs:
        out.append(f"duplicated: {_first(list(v.duplicate_pairs.items()), shown, lambda i: f'{pair_text(i[0])} (+{i[1]})')}")
    twice = {p: n for p, n in v.unexpected_deliveries.items() if n > 1}
    if twice:
        out.append(f"duplicated, never accepted here: {_first(list(twice.items()), shown, lambda i: f'{pair_text(i[0])} (+{i[1] - 1})')}")
    if v.late_pairs:
        # copies held at several nodes first: they are what a per-node count of held messages misses
        late = sorted(v.late_pairs.items(), key=lambda i: -len({p.node for p in i[1]}))
        out.append(f"late: {_first(late, shown, lambda i: f'{pair_text(i[0])} at {places_text(i[1])}', '; ')}")
        several = sum(1 for _p, places in late if len({p.node for p in places}) > 1)
        out.append(f"late copies held at: {where_text(late_where(v.late_pairs))}"
                   + (f" ({several} of the {len(late)} copies at two or more nodes at once)" if several else ""))
    if v.reported_by_reason:
        out.append("reported: " + "; ".join(f"{reason}: {n}" for reason, n in v.reported_by_reason.items()))
    r = v.reports
    if r.accepted:
        out.append(f"non-delivery reports: {r.accepted} accepted: {r.delivered} delivered, {r.expired} expired, "
                   f"{r.late} late, {r.lost} lost")
        if r.lost_pairs:
            out.append(f"lost reports: {_first(r.lost_pairs, shown, pair_text)}")
    out.extend(client_lines(v, shown))
    if v.unrecorded_submissions:
        out.append(f"{len(v.unrecorded_submissions)} copies accepted per a spool's origin table only (no submission "
                   f"line): {_first(v.unrecorded_submissions, shown, pair_text)}")
    if v.unrecorded_deliveries:
        out.append(f"{len(v.unrecorded_deliveries)} copies delivered per the recipient's spool only (no delivery "
                   f"line): {_first(v.unrecorded_deliveries, shown, pair_text)}")
    once = len(v.unexpected_deliveries) - len(twice)
    if once:
        out.append(f"{once} deliveries of copies never accepted in this directory")
    if v.spool_problems:
        out.append("spools: " + "; ".join(f"nodes/{n}/spool.db {why}" for n, why in sorted(v.spool_problems.items())))
    if v.record_problems:
        out.append(f"{v.record_problems} malformed record lines (first: {'; '.join(v.first_problems[:3])})")
    return out


def client_lines(v: Verdict, shown: int = SHOWN) -> list[str]:
    """The driver's accepted set against the nodes' records, and the nodes' failed record writes: one line
    per kind of disagreement."""
    c, out = v.client, []
    if c.problem:
        out.append(f"driver's record: {c.problem}")
    if c.client_only:
        out.append(f"{len(c.client_only)} copies accepted per the driver's accepted.jsonl have no submission line "
                   f"at their node: {_first(c.client_only, shown, pair_text)}")
    if c.node_only:
        out.append(f"{len(c.node_only)} copies accepted per a node's submission line were never accepted per the "
                   f"driver: {_first(c.node_only, shown, pair_text)}")
    if c.unanswered:
        out.append(f"{len(c.unanswered)} copies accepted by a node whose reply the driver never got (its call "
                   f"failed after it was sent): {_first(c.unanswered, shown, pair_text)}")
    if v.failed_writes:
        failed = [(n, k) for n, k in (v.records_failed or {}).items() if k]
        out.append(f"record lines the nodes could not write: "
                   f"{_first(failed, shown, lambda i: f'{i[0]}: {i[1]}')} (their records are incomplete)")
    return out


def _partial_text(item: tuple[Pair, Partial]) -> str:
    pair, part = item
    return f"{pair_text(pair)} {part.held_bytes} of {part.total} bytes at {places_text(part.places)}"


def where_text(where: dict[str, dict[str, int]]) -> str:
    """{"n3": {"queued": 4, "orphan": 1}} as `n3: 4 queued, 1 orphan`."""
    return "; ".join(f"{node}: " + ", ".join(f"{n} {state}" for state, n in states.items())
                     for node, states in where.items())


def _first(items: list, shown: int, fmt, sep: str = ", ") -> str:
    text = sep.join(fmt(i) for i in items[:shown])
    return text + (f" (and {len(items) - shown} more)" if len(items) > shown else "")
