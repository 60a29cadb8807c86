"""The pools account of one repetition (summary.json `pools`; `testbed check`), from the run directory alone.

Reads (docs/run-directory.md): nodes/<node>/node.yaml (the applications and the event types they want),
nodes/<node>/publications.jsonl (an event: a publication on `ev.<type>.<source>` at a consumer node; its
per-application copies have `derived_from` and the key `<event id>:<seq>:<map version>`), nodes/<node>/pools.jsonl
(`map`, `applied`, `fence_sent`, `fence_done`, `elected`, `refused`), subscribers/<node>/pool.<app>.<instance>/ (the application
instances' receipts.jsonl and instance.json, testbed/experiment/pool_apps.py), events.jsonl (the faults), and the
spools the teardown left (read-only), for copies still on their way.

  events_published     events accepted at consumer nodes whose type some application wants
  events_expected      (application, event) pairs: each event once to each application wanting its type
  events_received      pairs that reached an instance of the application (first arrivals over all instances)
  events_duplicated    receipt lines beyond the first of a pair (over all instances): must be 0
  torn_tail            receipts files of killed instances whose torn last line was skipped: expected of a
                       SIGKILL (the line's event was not acknowledged, so it came again), not a problem
  events_late          pairs not received but held at teardown (queued for an instance, a copy on its way)
  events_lost          pairs not received and held nowhere: must be 0
  affinity_violations  events that went to another instance than the one the consumer's fences name for
                       their sequence number (the events of one source go with their consumer: one instance
                       while the assignment stands), or that an instance received from a subscription not
                       its own or its dead predecessor's: must be 0
  rebalance_s          per map change that moved connections: seconds from the leader's `map` line (the
                       change committed: a join registered, a leave announced, a crash detected) to the last
                       `applied` of that map (or a newer one) at the consumers it moved; p50/p99
  moved                connections moved, over all map changes (disruption)
  balance_max_over_mean  at the end, per application the most connections of an active instance over the mean
                       (the largest over the applications)
  fence_pause_s        per handover (a fence with an old instance): seconds from the consumer's `fence_sent` to
                       its `fence_done` (the new instance released the events it held: the predecessor's Acked or
                       a successor's drain came), from the consumer's pools.jsonl; p50/p99/max
  crash_detect_s       per `pool_kill`: seconds to the leader's next `instance_crash` map
  failover_s           per kill of `pools.leader`: seconds to the new term's assignment `applied` at every consumer
"""
from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from testbed.accounting import pubsub
from testbed.accounting.check import node_directories
from testbed.accounting.records import RecordReader

POOL_SUBSCRIPTION = "pool."
MAX_SAMPLES = 20


def _pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)], 6)


def app_types(rep_dir: Path) -> dict[str, set[str]]:
    """application -> the event types it wants, from the nodes' configs (every node with a role has them)."""
    for d in node_directories(rep_dir):
        try:
            cfg = yaml.safe_load((d / "node.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        apps = (cfg.get("pools") or {}).get("apps") if isinstance(cfg, dict) else None
        if isinstance(apps, dict) and apps:
            return {str(a): {str(t) for t in (v or {}).get("types", [])} for a, v in apps.items()}
    return {}


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def instance_dirs(rep_dir: Path) -> list[Path]:
    return [d for d in pubsub.subscriber_dirs(rep_dir) if d.name.startswith(POOL_SUBSCRIPTION)]


def account(rep_dir: Path, reader: RecordReader | None = None) -> dict[str, Any] | None:
    """The pools account (see the module docstring); None for a run without pools."""
    rep_dir = Path(rep_dir)
    reader = reader or RecordReader(rep_dir)
    types = app_types(rep_dir)
    if not types:
        return None
    events: dict[str, tuple[str, str, str]] = {}               # event pub_id -> (consumer, type, source)
    derived: dict[tuple[str, str], list[str]] = defaultdict(list)   # (app, event id) -> its copies' pub_ids
    pool_lines: dict[str, list[dict[str, Any]]] = {}
    for d in node_directories(rep_dir):
        for p in reader.records(d / "publications.jsonl", "publication"):
            topic = str(p["topic"])
            if p.get("derived_from"):
                parts = topic.split(".")
                if len(parts) == 5 and parts[0] == "pool":
                    derived[(parts[1], str(p["derived_from"]))].append(str(p["pub_id"]))
            elif topic.startswith("ev."):
                _, etype, source = (topic.split(".", 2) + ["", ""])[:3]
                events[str(p["pub_id"])] = (d.name, etype, source)
        pool_lines[d.name] = list(reader.records(d / "pools.jsonl", "pool"))

    receipts: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    instances: dict[str, dict[str, Any]] = {}
    torn_before = reader.torn_tails
    for d in instance_dirs(rep_dir):
        info = _json(d / "instance.json")
        if info:
            instances[f"{info.get('app')}/{info.get('instance')}"] = info
        for rec in reader.records(d / "receipts.jsonl", "receipt"):
            if rec.get("event_id") and rec.get("app"):
                receipts[(str(rec["app"]), str(rec["event_id"]))].append(rec)
    torn_tail = reader.torn_tails - torn_before

    in_transit, queued = pubsub.held(rep_dir)
    queued_ids = {pid for ids in queued.values() for pid in ids}
    published = expected = received = late = lost = 0
    lost_pairs: list[list[str]] = []
    for pub_id, (_consumer, etype, _source) in events.items():
        wanting = [a for a, ts in types.items() if etype in ts]
        published += bool(wanting)
        for app in wanting:
            expected += 1
            if receipts.get((app, pub_id)):
                received += 1
            elif any(c in queued_ids or c in in_transit for c in derived.get((app, pub_id), ())):
                late += 1
            else:
                lost += 1
                if len(lost_pairs) < MAX_SAMPLES:
                    lost_pairs.append([app, pub_id])
    duplicated = sum(len(lines) - 1 for lines in receipts.values() if len(lines) > 1)
    violations, unchecked = _affinity(receipts, pool_lines)
    maps = _maps(pool_lines)
    rebalance, unfinished = _rebalance(maps, pool_lines)
    pauses = _pauses(pool_lines)
    faults = _faults(rep_dir, reader)
    return {
        "rebalance_s": rebalance, "rebalance_p50_s": _pct(rebalance, 50), "rebalance_p99_s": _pct(rebalance, 99),
        "rebalance_unfinished": unfinished, "changes": len(maps),
        "moved": sum(len(m.get("moves") or []) for m in maps),
        "balance_max_over_mean": _balance(pool_lines, instances),
        "fence_pause_s": pauses, "fence_pause_p50_s": _pct(pauses, 50), "fence_pause_p99_s": _pct(pauses, 99),
        "fence_pause_max_s": max(pauses) if pauses else None, "fences": len(pauses),
        "crash_detect_s": _after(faults, "pool_kill", maps, "instance_crash"),
        "failover_s": _failover(faults, pool_lines),
        "events_published": published, "events_expected": expected, "events_received": received,
        "events_late": late, "events_lost": lost, "events_duplicated": duplicated, "torn_tail": torn_tail,
        "affinity_violations": violations, "affinity_unchecked": unchecked, "lost_pairs": lost_pairs,
        "refused": sum(1 for lines in pool_lines.values() for r in lines if r["event"] == "refused"),
        # of those, assignments of a deposed leader (a stale term) that arrived late: what a leader partition shows
        "refused_stale": sum(1 for lines in pool_lines.values() for r in lines if r["event"] == "refused"
                             and str(r.get("reason", "")).startswith("stale term")),
        "elections": sum(1 for lines in pool_lines.values() for r in lines if r["event"] == "elected"),
        "instances": {k: {f: v.get(f) for f in ("node", "state", "received", "duplicates", "refused", "takeovers",
                                                  "fence_pauses_s")}
                      for k, v in sorted(instances.items())},
        "ok": lost == 0 and duplicated == 0 and violations == 0,
    }


def _pauses(pool_lines: dict[str, list[dict[str, Any]]]) -> list[float]:
    """The handovers' pauses, in the order the consumers recorded them (first connections have no predecessor
    to wait for: left out)."""
    out = [(float(r["ts"]), round(float(r["pause_s"]), 6)) for lines in pool_lines.values() for r in lines
           if r["event"] == "fence_done" and r.get("old") and isinstance(r.get("pause_s"), (int, float))]
    return [p for _ts, p in sorted(out)]


def _affinity(receipts: dict[tuple[str, str], list[dict[str, Any]]],
              pool_lines: dict[str, list[dict[str, Any]]]) -> tuple[int, int]:
    """(violations, receipts not checked: no fence of theirs on record)."""
    # (consumer, app) -> [(after seq, term, version, new)]: cuts at one seq (before any event) in map order
    cuts: dict[tuple[str, str], list[tuple[int, int, int, str]]] = defaultdict(list)
    for lines in pool_lines.values():
        for r in lines:
            if r["event"] == "fence_sent" and isinstance(r.get("seq"), int):
                cuts[(str(r.get("consumer")), str(r.get("app")))].append(
                    (int(r["seq"]), int(r.get("term", 0)), int(r.get("version", 0)), str(r.get("new"))))
    for v in cuts.values():
        v.sort()
    violations = unchecked = 0
    for (app, _event), lines in receipts.items():
        for rec in lines:
            parts = str(rec.get("topic", "")).split(".")
            pair = cuts.get((str(rec.get("consumer")), app))
            if len(parts) != 5 or not pair or not isinstance(rec.get("seq"), int):
                unchecked += 1
                continue
            target = [new for after, _term, _version, new in pair if rec["seq"] > after]
            routed_to = parts[2]
            # the subscription it came from is the routed instance's (its own, or its dead predecessor's)
            if not target or target[-1] != routed_to or rec.get("subscription") != f"pool.{app}.{routed_to}":
                violations += 1
    return violations, unchecked


def _maps(pool_lines: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The leaders' map changes that moved connections, once each ((term, version)), in time order."""
    seen: dict[tuple[int, int], dict[str, Any]] = {}
    for lines in pool_lines.values():
        for r in lines:
            if r["event"] == "map" and r.get("moves"):
                key = (int(r.get("term", 0)), int(r.get("version", 0)))
                if key not in seen or r["ts"] < seen[key]["ts"]:
                    seen[key] = r
    return sorted(seen.values(), key=lambda r: r["ts"])


def _rebalance(maps: list[dict[str, Any]], pool_lines: dict[str, list[dict[str, Any]]]) -> tuple[list[float], int]:
    applied: dict[str, list[dict[str, Any]]] = defaultdict(list)       # consumer -> its applied lines
    for lines in pool_lines.values():
        for r in lines:
            if r["event"] == "applied":
                applied[str(r.get("consumer"))].append(r)
    out: list[float] = []
    unfinished = 0
    for m in maps:
        key = (int(m.get("term", 0)), int(m.get("version", 0)))
        ends = []
        # a consumer that left (its connections moved to nobody) applies nothing: the others it moved count
        moved = {str(x.get("consumer")) for x in m["moves"] if x.get("new") is not None}
        if not moved:
            continue
        for consumer in sorted(moved):
            at = [a["ts"] for a in applied.get(consumer, [])
                  if (int(a.get("term", 0)), int(a.get("version", 0))) >= key and a["ts"] >= m["ts"]]
            if not at:
                break
            ends.append(min(at))
        else:
            out.append(round(max(ends) - m["ts"], 6))
            continue
        unfinished += 1
    return out, unfinished


def _balance(pool_lines: dict[str, list[dict[str, Any]]], instances: dict[str, dict[str, Any]]) -> float | None:
    last: dict[str, dict[str, Any]] = {}                  # consumer -> its last applied line
    for lines in pool_lines.values():
        for r in lines:
            if r["event"] == "applied":
                c = str(r.get("consumer"))
                if c not in last or r["ts"] >= last[c]["ts"]:
                    last[c] = r
    active: dict[str, set[str]] = defaultdict(set)
    for info in instances.values():
        if info.get("state") == "active" and not info.get("killed"):
            active[str(info.get("app"))].add(str(info.get("instance")))
    worst: float | None = None
    for app, names in active.items():
        counts = Counter({n: 0 for n in names})
        for r in last.values():
            inst = (r.get("connections") or {}).get(app)
            if inst in names:
                counts[inst] += 1
        mean = sum(counts.values()) / len(counts)
        if mean > 0:
            ratio = round(max(counts.values()) / mean, 6)
            worst = ratio if worst is None else max(worst, ratio)
    return worst


def _faults(rep_dir: Path, reader: RecordReader) -> list[dict[str, Any]]:
    return list(reader.records(Path(rep_dir) / "events.jsonl", "event"))


def _after(faults: list[dict[str, Any]], action: str, maps: list[dict[str, Any]], op: str) -> list[float]:
    out = []
    for f in faults:
        if f["event"] == action:
            later = [m["ts"] for m in maps if m.get("op") == op and m["ts"] >= f["ts"]]
            if later:
                out.append(round(min(later) - f["ts"], 6))
    return out


def _failover(faults: list[dict[str, Any]], pool_lines: dict[str, list[dict[str, Any]]]) -> list[float]:
    """Per kill of the leader: seconds until an assignment of a newer term is applied at every consumer."""
    applied: dict[str, list[dict[str, Any]]] = defaultdict(list)
    elected = sorted((r["ts"], int(r.get("term", 0))) for lines in pool_lines.values() for r in lines
                     if r["event"] == "elected")
    for lines in pool_lines.values():
        for r in lines:
            if r["event"] == "applied":
                applied[str(r.get("consumer"))].append(r)
    out = []
    for f in faults:
        if f["event"] != "kill" or f.get("resolved_from") != "pools.leader":
            continue
        terms = [t for ts, t in elected if ts >= f["ts"]]
        if not terms or not applied:
            continue
        ends = []
        for lines in applied.values():
            at = [a["ts"] for a in lines if int(a.get("term", 0)) >= terms[0] and a["ts"] >= f["ts"]]
            if not at:
                break
            ends.append(min(at))
        else:
            out.append(round(max(ends) - f["ts"], 6))
    return out


def line(acc: dict[str, Any]) -> str:
    """The account in one line (the console, testbed check)."""
    p50, p99 = acc.get("rebalance_p50_s"), acc.get("rebalance_p99_s")
    times = f"re-balance p50 {p50:.3f} s, p99 {p99:.3f} s" if p50 is not None and p99 is not None else "no re-balance"
    torn = acc.get("torn_tail") or 0
    torn_text = f", {torn} killed instances' torn last receipt lines skipped (expected)" if torn else ""
    return (f"pools: {acc['events_received']} of {acc['events_expected']} (application, event) pairs received, "
            f"{acc['events_late']} late, {acc['events_lost']} lost, {acc['events_duplicated']} duplicated, "
            f"{acc['affinity_violations']} affinity violations; {len(acc['rebalance_s'])} changes, {times}, "
            f"{acc['moved']} moved{torn_text} — {'OK' if acc['ok'] else 'FAILED'}")


def problems(acc: dict[str, Any] | None) -> list[str]:
    """One sentence per thing a researcher must see in the pools account."""
    if not acc:
        return []
    out = []
    if acc.get("events_lost"):
        out.append(f"{acc['events_lost']} pooled events lost (an application never got them, held nowhere)")
    if acc.get("events_duplicated"):
        out.append(f"{acc['events_duplicated']} pooled events duplicated (an application got them more than once)")
    if acc.get("affinity_violations"):
        out.append(f"{acc['affinity_violations']} pooled events broke affinity (another instance than their "
                   f"consumer's)")
    if acc.get("events_late"):
        out.append(f"{acc['events_late']} pooled events still on their way at teardown (late)")
    if acc.get("rebalance_unfinished"):
        out.append(f"{acc['rebalance_unfinished']} map changes never applied at every consumer they moved")
    return out
