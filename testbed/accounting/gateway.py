"""The gateway account of one repetition (summary.json `gateway`; null without a gateway).

Reads (docs/run-directory.md), all at the gateway node: nodes/<gw>/metrics.jsonl (each line's `gateway`
section; the queue falls back on neighbours.<peer>.queue_messages where a line has none),
nodes/<gw>/gateway.jsonl (one line per decision) and the node's submissions.jsonl lines (their refusal reasons).

  node, gamma, threshold, lower, actions   the scenario's settings (threshold and lower: messages)
  outgoing   per outgoing connector: max_queue (the highest queue a metrics line or one of the gateway's own
             decisions saw: a decision fires between two metrics samples), above_threshold_s (model s the queue spent above the configured
             threshold), deactivated_s (model s with load balancing off for it), delivered_rate (messages per
             model second it sent over the run), sent
  throttled  submissions refused "throttled" plus messages deferred ("not now") from neighbours over their rate
  dropped    copies the gateway dropped (each a non-delivery report: `reported` in the loss checker's verdict)
  refused    submissions refused by reason: throttled, no_credits, locked, not_permitted
  decisions  gateway.jsonl lines by action
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from node import schema
from testbed.accounting.records import RecordReader
from testbed.scenario.spec import Scenario

DECISIONS_FILE = "gateway.jsonl"
KIND = "gateway"
# submission refusal reasons (the node's wording) -> the account's key
REASONS = (("throttled", "throttled"), ("no credits left", "no_credits"), ("locked until", "locked"),
           ("not permitted on", "not_permitted"))


def refusal_key(reason: str) -> str | None:
    """The account's key for a gateway refusal reason; None for any other reason."""
    for prefix, key in REASONS:
        if reason.startswith(prefix):
            return key
    return None


def decisions(reader: RecordReader, path: Path) -> list[dict[str, Any]]:
    """The decision lines of a gateway.jsonl. Checked against node/schema.py's `gateway` kind where it is
    defined; otherwise every JSON object with `ts` and `node` counts, and any other line is a problem."""
    if KIND in schema.RECORDS:
        return list(reader.records(path, KIND))
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return out
    except OSError as exc:
        reader.problem(f"{reader.rel(path)}: cannot read ({exc.strerror})")
        return out
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        reader.lines += 1
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or not isinstance(rec.get("ts"), (int, float)) or "node" not in rec:
            reader.problem(f"{reader.rel(path)}:{lineno}: not a gateway decision line")
            continue
        out.append(rec)
    return out


def _queue(line: dict[str, Any], connector: str) -> int | None:
    """The connector's queue in one metrics line: the gateway section's, else the neighbour's queue_messages."""
    out = ((line.get("gateway") or {}).get("outgoing") or {}).get(connector) or {}
    value = out.get("queue")
    if value is None:
        value = ((line.get("neighbours") or {}).get(connector) or {}).get("queue_messages")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _connector(lines: list[dict[str, Any]], name: str, threshold: int, scale: float) -> dict[str, Any]:
    """One outgoing connector over the sorted metrics lines; times and rates in model units."""
    above = deactivated = 0.0
    queues: list[int] = []
    sent: list[tuple[float, int]] = []
    prev: dict[str, Any] | None = None
    for line in lines:
        q = _queue(line, name)
        if q is not None:
            queues.append(q)
        state = ((line.get("gateway") or {}).get("outgoing") or {}).get(name) or {}
        if isinstance(state.get("sent"), int):
            sent.append((float(line["ts"]), int(state["sent"])))
        if prev is not None:
            dt = float(line["ts"]) - float(prev["ts"])       # the state of the earlier sample held for dt
            before = ((prev.get("gateway") or {}).get("outgoing") or {}).get(name) or {}
            pq = _queue(prev, name)
            if pq is not None and pq > threshold:
                above += dt
            if before.get("deactivated") is True:
                deactivated += dt
        prev = line
    rate = None
    if len(sent) >= 2 and sent[-1][0] > sent[0][0]:
        rate = round((sent[-1][1] - sent[0][1]) / (sent[-1][0] - sent[0][0]) * scale, 4)
    return {"max_queue": max(queues, default=0), "above_threshold_s": round(above / scale, 3),
            "deactivated_s": round(deactivated / scale, 3), "delivered_rate": rate,
            "sent": sent[-1][1] if sent else None}


def account(rep_dir: Path, reader: RecordReader, scenario: Scenario,
            submissions: list[dict[str, Any]]) -> dict[str, Any] | None:
    gw = scenario.gateway
    if not gw.enabled:
        return None
    node_dir = Path(rep_dir) / "nodes" / gw.node
    scale = scenario.time_scale          # the nodes ran in wall units: wall s / scale = model s
    lines = sorted(reader.records(node_dir / "metrics.jsonl", "metrics"), key=lambda r: float(r["ts"]))
    # the connectors the scenario names, and any the node reported
    names = list(gw.outgoing)
    for line in lines:
        for name in ((line.get("gateway") or {}).get("outgoing") or {}):
            if name not in names:
                names.append(name)
    sections = [line["gateway"] for line in lines if isinstance(line.get("gateway"), dict)]
    last = sections[-1] if sections else {}
    deferred = sum(int(v.get("deferred", 0)) for v in (last.get("incoming") or {}).values()
                   if isinstance(v, dict))
    refused = {key: 0 for _, key in REASONS}
    for r in submissions:
        if r.get("node") == gw.node and not r.get("accepted"):
            key = refusal_key(str(r.get("reason", "")))
            if key is not None:
                refused[key] += 1
    made = decisions(reader, node_dir / DECISIONS_FILE)
    outgoing = {name: _connector(lines, name, gw.threshold, scale) for name in names}
    for d in made:
        c = outgoing.get(str(d.get("connector", "")))
        if c is not None and isinstance(d.get("queue"), int):
            c["max_queue"] = max(c["max_queue"], d["queue"])
    return {
        "node": gw.node, "gamma": gw.gamma, "threshold": gw.threshold, "lower": gw.lower,
        "actions": list(gw.actions),
        "outgoing": outgoing,
        "throttled": refused["throttled"] + deferred,
        "deferred": deferred,
        "dropped": int(last.get("dropped", 0) or 0),
        "refused": refused,
        "decisions": dict(sorted(Counter(str(d.get("action", "none")) for d in made).items())),
        "samples": len(sections),
    }


def problems(account: dict[str, Any] | None) -> list[str]:
    """What a researcher must see: a gateway that never reported its section (the node side missing?)."""
    if not account:
        return []
    if not account.get("samples"):
        return [f"the gateway {account.get('node')} wrote no `gateway` section in metrics.jsonl: its queues come "
                f"from the neighbour counters and nothing of its actions is known"]
    return []


def line(account: dict[str, Any]) -> str:
    """One console line: each outgoing connector's largest queue and time above threshold, then the totals."""
    outs = account.get("outgoing") or {}
    per = ", ".join(f"{n} max {v.get('max_queue', 0)} ({v.get('above_threshold_s', 0):.0f} s above)"
                    for n, v in outs.items())
    decisions_made = sum((account.get("decisions") or {}).values())
    return (f"gateway {account.get('node')} (gamma {account.get('gamma'):g}, threshold {account.get('threshold')}): "
            f"{per or 'no outgoing connector'}; throttled {account.get('throttled', 0)}, dropped "
            f"{account.get('dropped', 0)}, {decisions_made} decisions")
