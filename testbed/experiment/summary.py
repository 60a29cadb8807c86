"""summary.json: the headline figures of one repetition, read back from its run directory.

Only the files are read (docs/run-directory.md), so a summary can be recomputed
for any run directory, also an incomplete one: a missing file counts as empty
and a malformed line is reported under `schema`, never a crash.

Accounting (per message copy = message id x recipient node):
- offered   = submission attempts (the nodes' submissions.jsonl plus the
              driver's workload.jsonl for attempts that never reached a node)
- accepted / refused (by reason; the reason up to its first ": " so details
  such as sizes do not split a group); both count submission lines, the
  non-delivery reports the nodes made included
- delivered = distinct (msg_id, dst) deliveries
The loss figures come from the independent checker (testbed/accounting,
`testbed check`), which also reads the spools the teardown left:
- copies    = accepted copies of user messages (non-delivery report messages
              are accounted apart, under `accounting.reports`)
- duplicates = delivery lines beyond the first of each copy
- ndr / ndr_by_reason = copies reported undeliverable ("ndr_made") and not delivered
- lost      = accepted copies neither delivered, reported undeliverable, nor
              held in any spool at teardown; no longer estimated from the drain
- late      = accepted copies neither delivered nor reported but still held in
              a spool at teardown; `late_where` counts them per node and state
              (a copy held at two nodes counts at both)
- undelivered = late + lost
- stalled / stall = nothing delivered for workload.stall_after (model s) up to the end of the run while
              copies were held (testbed/accounting/stall.py): a store-and-forward deadlock; its copies
              are late (held), not lost
- in_flight_at_end = what the drain saw still held (the nodes' Stats, which
              undercount: a copy can be held at several nodes); informational
- accounting = the checker's verdict: every class, the first pairs of each,
              where the late ones are held, the lost copies held only in part
              (`partly_held`), the driver's accepted set against the nodes'
              records (`client`), `ok` (no loss, no duplicate, no lost report,
              every spool read, the accepted sets agree, no failed record
              write, late within the scenario's `max_late`)
- records_failed = per node, the record lines its daemon could not write (the
              nodes' Control Stats, which the testbed recorded in events.jsonl);
              null when the testbed did not ask; any above 0 fails the checker
- each subsystem's keys (testbed/subsystems/<name>.py says which and what they
              hold; null for a run that did not use it), and the driver's counters it adds
Throughput is the thesis' (Brachman 1989 section 6.2.1: "based on end-to-end
delivery of complete messages", Figures 6.3-6.7 plot messages of 2+
fragments): delivered copies of 2 or more fragments per model hour of
workload, and per wall second; when events.jsonl has the cell's
"workload_end" event, also only those delivered within the workload window
(the drain's late deliveries excluded), which is the thesis' measure. Delays (deliver_ts - submit_ts) are reported by
the thesis Table 6.1 size ranges (1, 2-30, 31-100 fragments, plus >100).
On several machines (a machines.json in the run directory) the delays and the
delivery times are first put on the controller's clock (node/clockmodel.py),
and `clock_uncertain` / `clock` say how far that correction can be trusted;
`saturation` is judged per machine (host.jsonl's `machine`): any saturated
machine flags the repetition. A one-machine run has neither key.
"""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from node import clockmodel
from testbed.accounting import Verdict, check_run, stall
from testbed.accounting.check import node_directories
from testbed.accounting.records import MAX_PROBLEM_SAMPLES, RecordReader, conforms, reason_group
from testbed.accounting.text import where_text
from testbed.accounting.verdict import late_where
from testbed.experiment import hostmon
from testbed.scenario.spec import Scenario
from testbed.subsystems import SUBSYSTEMS, driver_counters

log = logging.getLogger(__name__)

_conforms = conforms      # the name the schema tests know the fast record check by (it moved to testbed/accounting)

SUMMARY_FILE = "summary.json"
DRIVER_COUNTERS = ("planned", "submitted", "accepted", "refused", "unreachable") + driver_counters()
# Thesis Table 6.1 size ranges in fragments, plus anything larger (empirical/fixed sizes)
BUCKETS: tuple[tuple[str, int, float], ...] = (("1", 0, 1), ("2-30", 2, 30), ("31-100", 31, 100),
                                               (">100", 101, math.inf))


def summarize(rep_dir: Path, scenario: Scenario, *, complete: bool, reason: str = "",
              drain: dict | None = None, verdict: Verdict | None = None) -> dict:
    """The summary of the run directory `rep_dir` (see the module docstring); reads files only.
    `verdict` is the loss checker's answer for rep_dir when the caller already has it (else it is made here)."""
    rep_dir = Path(rep_dir)
    if verdict is None:
        verdict = check_run(rep_dir, SUBSYSTEMS)
    # The checker has counted the problems of the record files it reads: `checked_files` reads them again
    # without counting them into the schema figures; `reader` counts the files only the summary reads.
    checked_files = RecordReader(rep_dir)
    reader = RecordReader(rep_dir)
    node_dirs = node_directories(rep_dir)

    # ---- submissions -----------------------------------------------------------------------
    submissions: list[dict[str, Any]] = []
    for d in node_dirs:
        submissions.extend(checked_files.records(d / "submissions.jsonl", "submission"))
    unreachable = list(checked_files.records(rep_dir / "workload.jsonl", "submission"))
    offered = len(submissions) + len(unreachable)
    accepted_recs = [r for r in submissions if r["accepted"]]
    refused_recs = [r for r in submissions if not r["accepted"]] + [r for r in unreachable if not r["accepted"]]
    accepted_recs += [r for r in unreachable if r["accepted"]]     # not expected; counted where it says
    refused_by_reason = Counter(reason_group(r["reason"]) for r in refused_recs)

    # ---- deliveries ------------------------------------------------------------------------
    # on several machines a delivery's deliver_ts is the recipient machine's clock and its submit_ts the
    # origin's: both are put on the controller's clock before any delay or window is computed
    clock = clockmodel.load(rep_dir)
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for d in node_dirs:
        for rec in checked_files.records(d / "deliveries.jsonl", "delivery"):
            if clock is not None:
                rec = {**rec, "deliver_ts": clock.correct(rec["node"], float(rec["deliver_ts"])),
                       "submit_ts": clock.correct(rec["src"], float(rec["submit_ts"]))}
            key = (rec["msg_id"], rec["dst"])
            if key not in first or rec["deliver_ts"] < first[key]["deliver_ts"]:
                first[key] = rec
    delivered = len(first)

    # ---- what the drain saw (informational: the losses are the checker's) ----------------------
    in_flight: int | None = None
    if drain is not None:
        held = drain.get("in_flight")
        in_flight = int(held) if isinstance(held, (int, float)) and not isinstance(held, bool) and held > 0 else 0

    # ---- delays, throughput ----------------------------------------------------------------
    scale = float(scenario.time_scale) if scenario.time_scale > 0 else 1.0
    fragment = _fragment_size(scenario)
    delays: dict[str, list[float]] = {name: [] for name, _, _ in BUCKETS}
    large: list[dict[str, Any]] = []      # deliveries of messages of 2+ fragments: every throughput counts these
    for rec in first.values():
        frags = max(1, math.ceil(rec["size"] / fragment))
        if frags >= 2:
            large.append(rec)
        wall = float(rec["deliver_ts"]) - float(rec["submit_ts"])
        delays[_bucket(frags)].append(wall)
    multi = len(large)
    all_delays = [x for v in delays.values() for x in v]
    wall_duration = scenario.duration * scale
    throughput = {
        "messages_2plus": multi,
        "per_model_hour": round(multi / (scenario.duration / 3600.0), 3) if scenario.duration > 0 else None,
        "per_wall_second": round(multi / wall_duration, 6) if wall_duration > 0 else None,
        "window": "all deliveries over the workload duration",
    }

    # ---- host, events ----------------------------------------------------------------------
    host_records = list(reader.records(rep_dir / "host.jsonl", "host"))
    event_records = list(checked_files.records(rep_dir / "events.jsonl", "event"))      # the checker read it
    events = Counter(r["event"] for r in event_records)
    # the cell records "workload_end" with the driver's counters; it also bounds the workload window
    ends = [r for r in event_records if r["event"] == "workload_end"]
    driver = {k: ends[-1][k] for k in DRIVER_COUNTERS if k in ends[-1]} if ends else None
    if ends and wall_duration > 0:
        window_end = float(ends[-1]["ts"])
        window_start = window_end - wall_duration
        during = sum(1 for rec in large if window_start <= float(rec["deliver_ts"]) <= window_end)
        throughput["messages_2plus_during_workload"] = during
        throughput["per_model_hour_during_workload"] = round(during / (scenario.duration / 3600.0), 3)
        # the thesis' measure (Figs 6.3-6.10): bytes of messages of 2+ fragments delivered per model second
        # within the measurement window, which opens workload.measure_from after the generators start (a
        # loaded warm-up); a message still on its way at the window's end does not count
        measured = scenario.duration - scenario.workload.measure_from
        measure_start = window_end - measured * scale
        large_bytes = sum(int(rec["size"]) for rec in large
                          if measure_start <= float(rec["deliver_ts"]) <= window_end)
        throughput["bytes_2plus_during_workload"] = large_bytes
        throughput["measured_model_s"] = measured
        throughput["model_bytes_per_s_2plus"] = round(large_bytes / measured, 3)

    accounts: dict[str, Any] = {}
    for sub in SUBSYSTEMS:
        accounts.update(sub.account(rep_dir, reader, scenario, submissions))
    stall_info = _stall(first.values(), ends, host_records, drain, wall_duration, scale, scenario, verdict)

    missing = [name for name in ("scenario.yaml", "topology.json", "events.jsonl", "host.jsonl")
               if not (rep_dir / name).exists()]
    if not node_dirs:
        missing.append("nodes/")
    cell, rep, experiment = _where(rep_dir)
    return {
        "experiment": experiment, "cell": cell, "rep": rep, "scenario": scenario.name,
        "mode": _mode(scenario), "seed": scenario.seed, "time_scale": scenario.time_scale,
        "duration_model_s": scenario.duration, "duration_wall_s": wall_duration,
        "fragment_size": fragment,
        "complete": bool(complete), "reason": reason,
        "offered": offered,
        "accepted": len(accepted_recs),
        "refused": len(refused_recs),
        "refused_by_reason": dict(sorted(refused_by_reason.items())),
        "unreachable": len(unreachable),
        "copies": verdict.accepted,
        "delivered": delivered,
        "duplicates": verdict.extra_deliveries,
        "ndr": verdict.reported,
        "ndr_by_reason": dict(verdict.reported_by_reason),
        "reports": dict(verdict.report_events),
        "undelivered": verdict.late + verdict.lost,
        "in_flight_at_end": in_flight,
        "lost": verdict.lost,
        "late": verdict.late,
        "late_where": late_where(verdict.late_pairs),
        "stalled": stall_info["stalled"] if stall_info else False,
        "stall": stall_info,
        "unexpected_deliveries": len(verdict.unexpected_deliveries),
        "records_failed": verdict.records_failed,
        "accounting": verdict.to_dict(max_late=scenario.max_late),
        "drain": drain,
        "throughput": throughput,
        "delay": {**{name: _stats(v, scale) for name, v in delays.items()}, "overall": _stats(all_delays, scale)},
        "saturation": hostmon.saturation_per_machine(host_records),
        **({"clock_uncertain": clock.uncertain, "clock": clock.to_dict()} if clock is not None else {}),
        "host_samples": len(host_records),
        "events": dict(sorted(events.items())),
        "driver": driver,
        **accounts,
        "schema": {"problems": verdict.record_problems + reader.problems,
                   "first": (verdict.first_problems + reader.samples)[:MAX_PROBLEM_SAMPLES],
                   "lines": verdict.record_lines + reader.lines},
        "missing_files": missing,
    }


def write_summary(rep_dir: Path, scenario: Scenario, *, complete: bool, reason: str = "",
                  drain: dict | None = None, verdict: Verdict | None = None) -> dict:
    """summarize() written to rep_dir/summary.json atomically (a reader never sees half a file)."""
    rep_dir = Path(rep_dir)
    result = summarize(rep_dir, scenario, complete=complete, reason=reason, drain=drain, verdict=verdict)
    rep_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".summary.", suffix=".tmp", dir=rep_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
        os.replace(tmp, rep_dir / SUMMARY_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return result


def check(summary: dict) -> list[str]:
    """Problems a researcher must see: incomplete run, losses, an unfinished drain, copies still held,
    duplicates, lost non-delivery reports, saturation, bad records. One sentence each."""
    problems: list[str] = []
    if not summary.get("complete", False):
        why = summary.get("reason") or "no reason recorded"
        problems.append(f"run incomplete ({why})")
    acc = summary.get("accounting") if isinstance(summary.get("accounting"), dict) else {}
    lost = summary.get("lost")
    if isinstance(lost, int) and lost > 0:
        spools = acc.get("spool_problems") or {}
        unread = f"; spools missing or unreadable: {', '.join(sorted(spools))}" if spools else ""
        problems.append(f"{lost} message copies lost (accepted, never delivered, reported undeliverable, "
                        f"nor held in any spool at teardown{unread})")
    drain = summary.get("drain")
    held = summary.get("in_flight_at_end")
    late = summary.get("late")
    # the drain's count comes from the nodes' Stats, which undercount; once the spools show late copies,
    # the checker's line below says it exactly, so the drain's is shown only when they disagree
    if isinstance(drain, dict) and not drain.get("empty", True) and not (isinstance(late, int) and late > 0):
        what = f"{held} messages were still held in spools" if isinstance(held, int) and held > 0 else \
            "some nodes could not be drained"
        problems.append(f"{what} when the drain bound ended (late, not counted in the losses)")
    if summary.get("stalled") and isinstance(summary.get("stall"), dict):
        problems.append(stall.text(summary["stall"]))
    if isinstance(late, int) and late > 0:
        where = where_text(summary.get("late_where") or {})
        bound = acc.get("max_late")
        over = f", more than max_late {bound}" if isinstance(bound, int) and late > bound else ""
        problems.append(f"{late} message copies still held in spools at teardown (late{over}): {where}")
    dups = summary.get("duplicates")
    if isinstance(dups, int) and dups > 0:
        problems.append(f"{dups} duplicate deliveries")
    reports = acc.get("reports") if isinstance(acc.get("reports"), dict) else {}
    if isinstance(reports.get("lost"), int) and reports["lost"] > 0:
        problems.append(f"{reports['lost']} non-delivery reports lost (accepted, never delivered nor held)")
    problems.extend(_client_problems(acc.get("client"), summary.get("records_failed")))
    sat = summary.get("saturation")
    if isinstance(sat, dict) and sat.get("saturated"):
        problems.append(f"{hostmon.saturation_text(sat)}: the emulation results are not trustworthy")
    uncertain = clockmodel.problem_text(summary.get("clock"))
    if uncertain:
        problems.append(uncertain)
    for sub in SUBSYSTEMS:
        problems.extend(sub.problems(summary))
    sch = summary.get("schema")
    if isinstance(sch, dict) and sch.get("problems"):
        first = (sch.get("first") or ["?"])[0]
        problems.append(f"{sch['problems']} malformed records (first: {first})")
    return problems


# ---- helpers -------------------------------------------------------------------------------

def _client_problems(client: Any, failed: Any) -> list[str]:
    """Sentences about the driver's accepted set against the nodes' records, and failed record writes."""
    out: list[str] = []
    if isinstance(client, dict):
        if client.get("problem"):
            out.append(f"the driver's accepted set is incomplete: {client['problem']}")
        if isinstance(client.get("client_only"), int) and client["client_only"] > 0:
            out.append(f"{client['client_only']} copies the driver saw accepted have no submission line at their "
                       f"node")
        if isinstance(client.get("node_only"), int) and client["node_only"] > 0:
            out.append(f"{client['node_only']} copies a node recorded as accepted were never accepted per the driver")
    if isinstance(failed, dict):
        bad = {n: k for n, k in failed.items() if k}
        if bad:
            out.append(f"{sum(bad.values())} record lines the nodes could not write ("
                       + ", ".join(f"{n}: {k}" for n, k in bad.items()) + "): their records are incomplete")
    return out


def _stall(deliveries: Any, ends: list[dict[str, Any]], host_records: list[dict[str, Any]],
           drain: dict | None, wall_duration: float, scale: float, scenario: Scenario,
           verdict: Verdict) -> dict[str, Any] | None:
    """testbed/accounting/stall.py on this run: the workload starts `wall_duration` before its
    "workload_end" event and the run ends with the drain (else the host monitor's last sample);
    None without a workload_end event (nothing to measure from)."""
    if not ends:
        return None
    workload_end = float(ends[-1]["ts"])
    seconds = drain.get("seconds") if isinstance(drain, dict) else None
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        end = workload_end + float(seconds)
    else:
        end = max([workload_end, *(float(r["ts"]) for r in host_records)])
    return stall.stall((float(r["deliver_ts"]) for r in deliveries), workload_end - wall_duration, end,
                       scenario.workload.stall_after * scale, verdict.late, late_where(verdict.late_pairs), scale)



def _bucket(fragments: int) -> str:
    for name, low, high in BUCKETS:
        if low <= fragments <= high:
            return name
    return BUCKETS[-1][0]


def _stats(wall: list[float], scale: float) -> dict[str, Any]:
    if not wall:
        return {"count": 0, "mean_model_s": None, "p50_model_s": None, "p99_model_s": None,
                "mean_wall_s": None, "p50_wall_s": None, "p99_wall_s": None}
    ordered = sorted(wall)
    mean = sum(ordered) / len(ordered)
    p50, p99 = _percentile(ordered, 50), _percentile(ordered, 99)
    return {"count": len(ordered),
            "mean_model_s": round(mean / scale, 6), "p50_model_s": round(p50 / scale, 6),
            "p99_model_s": round(p99 / scale, 6),
            "mean_wall_s": round(mean, 6), "p50_wall_s": round(p50, 6), "p99_wall_s": round(p99, 6)}


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (always one of the observed values)."""
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _fragment_size(scenario: Scenario) -> int:
    """Bytes per fragment for the size buckets: the generators' thesis fragment size (the unit of
    Table 6.1), else the nodes' fragment_size, else the thesis' 1000 bytes (Table 6.2)."""
    for g in scenario.workload.generators:
        if g.size.dist == "thesis" and g.size.fragment_size > 0:
            return int(g.size.fragment_size)
    value = scenario.nodes.all.get("fragment_size")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 1000


def _mode(scenario: Scenario) -> str:
    modes = {str(scenario.nodes.all.get("mode", "fragmenting"))}
    for settings in scenario.nodes.per_node.values():
        if "mode" in settings:
            modes.add(str(settings["mode"]))
    return modes.pop() if len(modes) == 1 else "mixed"


def _where(rep_dir: Path) -> tuple[str, int | str, str]:
    rep: int | str
    try:
        rep = int(rep_dir.name)
    except ValueError:
        rep = rep_dir.name
    return rep_dir.parent.name, rep, rep_dir.parent.parent.name
