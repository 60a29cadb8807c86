"""The MQ rate-control account of one repetition (summary.json `overflowed` and `rate_control`).

Reads (docs/run-directory.md): nodes/<client>/submissions.jsonl (refusals with the reason "overflow": a full
client queue, the experiment's measure), nodes/<node>/rates.jsonl and consumer.json.

  overflowed     client -> submissions refused because its queue was full
  rate_control   rule, R, T (model units, like every rate here); per client: accepted, overflowed, the largest queue it reported, its assigned
                 rates (rounds, mean, max, the share of rounds above R/N), `starved_s` (below); the totals
                 `overflowed_total` and `starved_s_total` (the reproduction's per-cell metrics); the root: the
                 largest queue, "not now" refusals; the consumer's rounds and removals

starved_s: model seconds a client had messages queued while the rate in force was below STARVED_SHARE of
R/N (0 included): from its periodic reports (every T/2), each counting until the next with the queue and
the rate it states. The literal decile rule gives a client 0 whenever another alone has a weight, so its
queue waits with nothing allowed out: the starvation the other rules avoid.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from node.rate.admission import OVERFLOW
from testbed.accounting.records import RecordReader, reason_group
from testbed.scenario.spec import Scenario

STARVED_SHARE = 0.1      # a rate below a tenth of R/N counts as starved: it drains a full queue 10x slower


def account(rep_dir: Path, reader: RecordReader, scenario: Scenario,
            submissions: list[dict[str, Any]]) -> tuple[dict[str, int] | None, dict[str, Any] | None]:
    rc = scenario.rate_control
    if not rc.enabled:
        return None, None
    rep_dir = Path(rep_dir)
    overflowed = {c: 0 for c in rc.clients}
    accepted = {c: 0 for c in rc.clients}
    for r in submissions:
        node = r.get("node")
        if node not in overflowed:
            continue
        if r["accepted"]:
            accepted[node] += 1
        elif reason_group(r["reason"]) == OVERFLOW:
            overflowed[node] += 1
    fair = rc.rate / len(rc.clients)
    scale = scenario.time_scale          # the nodes ran in wall units: rates x time_scale are model bit/s
    clients: dict[str, Any] = {}
    for c in rc.clients:
        recs = list(reader.records(rep_dir / "nodes" / c / "rates.jsonl", "rate"))
        rates = [float(x["rate_bps"]) * scale for x in recs if x["event"] == "assigned"]
        queue = [int(x["queue_bytes"]) for x in recs if x["event"] == "report"]     # every report: the peaks too
        periodic = [x for x in recs if x["event"] == "report" and x.get("periodic", True)]
        clients[c] = {"accepted": accepted[c], "overflowed": overflowed[c],
                      "max_queue_bytes": max(queue, default=0),
                      "assigned": len(rates), "mean_rate_bps": round(sum(rates) / len(rates), 1) if rates else None,
                      "max_rate_bps": max(rates, default=None),
                      "above_fair_share": round(sum(1 for x in rates if x > fair * 1.0001) / len(rates), 4)
                      if rates else None,
                      "starved_s": starved_seconds(periodic, fair * STARVED_SHARE / scale, scale)}
    root_recs = list(reader.records(rep_dir / "nodes" / rc.root / "rates.jsonl", "rate"))
    root_queue = [int(x["queue_bytes"]) for x in root_recs if x["event"] == "queue"]
    deferred = [int(x.get("deferred", 0)) for x in root_recs if x["event"] == "queue"]
    consumer: Any = None
    try:
        consumer = json.loads((rep_dir / "consumer.json").read_text())
    except (OSError, ValueError):
        consumer = None
    return overflowed, {
        "rule": rc.rule, "rate_bps": rc.rate, "interval_s": rc.interval,      # model units
        "clients": clients,
        "overflowed_total": sum(overflowed.values()),
        "starved_s_total": round(sum(c["starved_s"] for c in clients.values()), 1),
        "root": {"node": rc.root, "max_queue_bytes": max(root_queue, default=0),
                 "rounds": sum(1 for x in root_recs if x["event"] == "assign") // max(1, len(rc.clients)),
                 "not_now": max(deferred, default=0)},
        "consumer": consumer,
    }


def starved_seconds(reports: list[dict[str, Any]], below_bps: float, scale: float) -> float:
    """Model seconds (wall / scale) between consecutive reports (time order) where the earlier one states a
    non-empty queue and a rate in force below `below_bps` (wall units, as the records). The last report
    counts nothing: where it ends is unknown."""
    pts = []
    for r in reports:
        try:
            pts.append((float(r["ts"]), int(r["queue_bytes"]), float(r["rate_bps"])))
        except (KeyError, TypeError, ValueError):
            continue        # a malformed line is the schema check's to report, not a reason to fail the summary
    pts.sort()
    wall = sum(t1 - t0 for (t0, queued, rate), (t1, _q, _r) in zip(pts, pts[1:]) if queued > 0 and rate < below_bps)
    return round(wall / scale, 1)


def line(account: dict[str, Any]) -> str:
    """One console line: the rule and each client's overflow (the experiment's measure)."""
    clients = account.get("clients") or {}
    over = ", ".join(f"{c} {v.get('overflowed', 0)}" for c, v in clients.items())
    root = account.get("root") or {}
    return (f"rate control ({account.get('rule')}): overflowed {over}; root queue at most "
            f"{int(root.get('max_queue_bytes', 0)) // 1000} kB, {root.get('not_now', 0)} \"not now\"")
