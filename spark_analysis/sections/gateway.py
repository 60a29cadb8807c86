"""The report's gateway section: the EMG test bed's measures per cell, and the gateway's decisions.

Sources (docs/run-directory.md):
- summary.json `gateway` (testbed/accounting/gateway.py): per outgoing connector the largest queue, the model
  seconds above the threshold and the delivered rate; throttled, dropped, refusals by reason;
- nodes/<gateway>/gateway.jsonl: one line per decision (counted by action per cell);
- nodes/<gateway>/metrics.jsonl: the first outgoing connector's queue over time (the paper's Fig. 10 plots
  its outgoing connector 1), from each line's `gateway` section or else neighbours.<peer>.queue_messages.

Both files are read per run with plain Python (one node's lines, a few thousand): no Spark. Times are model
seconds from the run's first metrics line; rates are messages per model second. Intervals are 95% over the
repetitions of a cell (spark_analysis/stats.py). A run without a gateway has no section.
"""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from node import jsonlines

from .. import stats
from ..layout import Run, RunTimeline
from .base import Page, RunData, Section, empty_table

MEASURES = ("max_queue", "above_threshold_s", "delivered_rate")
CONNECTOR_COLUMNS = ["cell", "connector", "reps", *[f"{m}{s}" for m in MEASURES for s in ("", "_lo", "_hi")]]
TOTAL_COLUMNS = ["cell", "rep", "throttled", "deferred", "dropped", "refused_throttled", "refused_no_credits",
                 "refused_locked", "refused_not_permitted", "decisions"]
DECISION_COLUMNS = ["cell", "action", "decisions", "reps"]
QUEUE_COLUMNS = ["cell", "rep", "connector", "t", "queue"]


@dataclass
class GatewayTables:
    present: bool = False
    connectors: pd.DataFrame = field(default_factory=lambda: empty_table(CONNECTOR_COLUMNS))
    totals: pd.DataFrame = field(default_factory=lambda: empty_table(TOTAL_COLUMNS))
    decisions: pd.DataFrame = field(default_factory=lambda: empty_table(DECISION_COLUMNS))
    queue: pd.DataFrame = field(default_factory=lambda: empty_table(QUEUE_COLUMNS))
    threshold: int | None = None
    # (cell, rep) -> (wall clock of the queue plot's 0, time_scale): where the run's phases go on it
    clocks: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def named(self) -> dict[str, pd.DataFrame]:
        return {"gateway_connectors": self.connectors, "gateway_totals": self.totals,
                "gateway_decisions": self.decisions, "gateway_queue": self.queue}


def account(run: Run) -> dict[str, Any] | None:
    s = run.summary if isinstance(run.summary, dict) else None
    acc = s.get("gateway") if s else None
    return acc if isinstance(acc, dict) else None


def any_records(runs: list[Run]) -> bool:
    return any(account(r) is not None for r in runs)


def _lines(run: Run, node: str, name: str) -> list[dict[str, Any]]:
    """The JSON objects of nodes/<node>/<name> (a bad line, a partial last one, is skipped)."""
    return jsonlines.objects(run.path / "nodes" / node / name)


def _queue_series(run: Run, node: str, connector: str, scale: float) -> tuple[pd.DataFrame, float | None]:
    """The connector's queue per metrics line, t in model seconds from the first; and that line's wall clock."""
    rows = []
    t0 = None
    for rec in _lines(run, node, "metrics.jsonl"):
        ts = rec.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        q = (((rec.get("gateway") or {}).get("outgoing") or {}).get(connector) or {}).get("queue")
        if q is None:
            q = ((rec.get("neighbours") or {}).get(connector) or {}).get("queue_messages")
        if not isinstance(q, (int, float)):
            continue
        t0 = ts if t0 is None else t0
        rows.append({"cell": run.cell, "rep": run.rep, "connector": connector, "t": (ts - t0) / scale,
                     "queue": int(q)})
    return pd.DataFrame(rows, columns=QUEUE_COLUMNS), t0


def build(runs: list[Run]) -> GatewayTables:
    gt = GatewayTables()
    per_connector: dict[tuple[str, str], dict[str, list[float]]] = {}
    totals, queues = [], []
    actions: dict[str, Counter[str]] = {}
    reps: Counter[str] = Counter()
    for run in runs:
        acc = account(run)
        if acc is None:
            continue
        gt.present = True
        gt.threshold = gt.threshold if gt.threshold is not None else acc.get("threshold")
        scale = float((run.summary or {}).get("time_scale") or 1.0)
        outgoing = acc.get("outgoing") or {}
        for name, v in outgoing.items():
            m = per_connector.setdefault((run.cell, name), {k: [] for k in MEASURES})
            for k in MEASURES:
                if isinstance(v.get(k), (int, float)):
                    m[k].append(float(v[k]))
        refused = acc.get("refused") or {}
        totals.append({"cell": run.cell, "rep": run.rep, "throttled": acc.get("throttled"),
                       "deferred": acc.get("deferred"), "dropped": acc.get("dropped"),
                       **{f"refused_{k}": refused.get(k) for k in ("throttled", "no_credits", "locked",
                                                                  "not_permitted")},
                       "decisions": sum((acc.get("decisions") or {}).values())})
        node = str(acc.get("node") or "")
        reps[run.cell] += 1
        made = actions.setdefault(run.cell, Counter())
        for rec in _lines(run, node, "gateway.jsonl"):
            made[str(rec.get("action", "none"))] += 1
        if outgoing:
            series, t0 = _queue_series(run, node, next(iter(outgoing)), scale)
            queues.append(series)
            if t0 is not None:
                gt.clocks[(run.cell, run.rep)] = (float(t0), scale)
    if not gt.present:
        return gt
    rows = []
    for (cell, name), m in per_connector.items():
        row: dict[str, Any] = {"cell": cell, "connector": name, "reps": reps[cell]}
        for k in MEASURES:
            iv = stats.ci95(m[k], nonnegative=True)
            row.update({k: iv.centre, f"{k}_lo": iv.lo, f"{k}_hi": iv.hi})
        rows.append(row)
    gt.connectors = pd.DataFrame(rows, columns=CONNECTOR_COLUMNS)
    gt.totals = pd.DataFrame(totals, columns=TOTAL_COLUMNS)
    gt.decisions = pd.DataFrame([{"cell": c, "action": a, "decisions": n, "reps": reps[c]}
                                 for c, made in actions.items() for a, n in sorted(made.items())],
                                columns=DECISION_COLUMNS)
    queues = [q for q in queues if len(q)]
    gt.queue = pd.concat(queues, ignore_index=True) if queues else gt.queue
    return gt


def shown(gt: GatewayTables) -> pd.DataFrame:
    """The connector table as the page shows it: "mean [lo, hi]" per measure."""
    out = gt.connectors[["cell", "connector", "reps"]].copy()
    for k, digits in (("max_queue", 4), ("above_threshold_s", 4), ("delivered_rate", 3)):
        out[k] = [stats.fmt_interval(c, lo, hi, digits) for c, lo, hi in
                  zip(gt.connectors[k], gt.connectors[f"{k}_lo"], gt.connectors[f"{k}_hi"])]
    return out


def figure(gt: GatewayTables, timelines: dict[tuple[str, str], RunTimeline] | None = None
           ) -> tuple[Any, str, str] | None:
    """The first outgoing connector's queue over time, one line per run, the threshold dashed; the runs'
    phases and faults marked when their timelines are given."""
    if gt.queue.empty:
        return None
    from ..plots import mark_runs, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (cell, rep), g in gt.queue.groupby(["cell", "rep"], sort=True):
        ax.plot(g["t"], g["queue"], label=f"{cell}/{rep}", linewidth=1)
    if gt.threshold:
        ax.axhline(float(gt.threshold), color="grey", linestyle="--", linewidth=0.8, label="threshold")
    drawn = {(str(c), str(r)) for c, r in zip(gt.queue["cell"], gt.queue["rep"])}
    mark_runs(ax, timelines, {k: v for k, v in gt.clocks.items() if k in drawn})
    connector = str(gt.queue["connector"].iloc[0])
    ax.set_xlabel("time (model s from the first metrics line)")
    ax.set_ylabel("queued messages")
    ax.set_title(f"{connector}'s queue (the paper's Fig. 10)")
    ax.grid(alpha=0.3)
    if gt.queue.groupby(["cell", "rep"]).ngroups <= 12:
        ax.legend(fontsize="x-small")
    return fig, "gateway_queue", f"{connector}'s queue over time per run"


def section_html(gt: GatewayTables | None, table: Callable[[pd.DataFrame, str], str],
                 figure_html: Callable[[Any, str, str], str] | None = None,
                 timelines: dict[tuple[str, str], RunTimeline] | None = None) -> str:
    """The section (heading included); "" when no run has a gateway."""
    if gt is None or not gt.present:
        return ""
    fig = figure(gt, timelines) if figure_html is not None else None
    img = figure_html(*fig) if fig is not None and figure_html is not None else ""
    return f"""<h2 id="gateway">Gateway policies</h2>
<p>Per cell and outgoing connector: the largest queue (messages), the model seconds its queue spent above the
configured threshold ({html.escape(str(gt.threshold))}) and the rate it delivered (messages per model second),
each the mean over the cell's repetitions with its 95% interval. From summary.json <code>gateway</code>;
the decisions from <code>nodes/&lt;gateway&gt;/gateway.jsonl</code>. On the queue plot (model seconds from
the first metrics line) the runs' phases are shaded and their faults dotted.</p>
{table(shown(gt), "gateway-connectors-table")}
<h3>Throttled, dropped and refused, per run</h3>
<p>Throttled: submissions refused <code>throttled</code> plus messages a neighbour was told "not now" over its
connector's throughput. Dropped copies are non-delivery reports (<code>reported</code> by the loss
checker).</p>
{table(gt.totals, "gateway-totals-table")}
<h3>Decisions by action</h3>
{table(gt.decisions, "gateway-decisions-table")}
{img}
"""


class GatewaySection(Section):
    name = anchor = "gateway"
    link = "gateway policies"
    step = "gateway policies (summary.json gateway, gateway.jsonl)"

    def wanted(self, runs: list[Run]) -> bool:
        return any_records(runs)

    def build(self, data: RunData) -> GatewayTables:
        return build(data.runs)

    def tables(self, built: GatewayTables | None) -> dict[str, pd.DataFrame]:
        return built.named() if built is not None and built.present else {}

    def html(self, built: GatewayTables | None, page: Page) -> str:
        return section_html(built, page.table, page.figure, page.timelines)


SECTION = GatewaySection()
