"""The report's Pools section: the cells (round-robin and load-aware, or whatever the sweep varies) side by side
with 95% confidence intervals over their repetitions, and the pool controller's and consumers' records by event.

Sources: summary.json `pools` (testbed/accounting/pools.py) and nodes/<node>/pools.jsonl (docs/run-directory.md).
Only for runs with a `pools:` section.
"""
from __future__ import annotations

import html
from collections import Counter
from typing import Any

import pandas as pd

from node import jsonlines

from .. import stats
from ..layout import Run
from .base import Page, RunData, Section, empty_table

# summary key -> what the row says (every one is a count, time or ratio: its interval is floored at 0)
METRICS: dict[str, str] = {
    "rebalance_p50_s": "re-balance p50 (s)",
    "rebalance_p99_s": "re-balance p99 (s)",
    "moved": "connections moved",
    "balance_max_over_mean": "balance max/mean",
    "fence_pause_p50_s": "fence pause p50 (s)",
    "fence_pause_max_s": "fence pause max (s)",
    "crash_detect_mean_s": "crash detection (s)",
    "failover_mean_s": "fail-over (s)",
    "events_lost": "events lost",
    "events_duplicated": "events duplicated",
    "affinity_violations": "affinity violations",
    "refused": "refused control lines",
    "refused_stale": "stale-term assignments refused",
}
COMPARE_COLUMNS = ["metric", "cell", "n", "mean", "lo", "hi", "text"]
EVENT_COLUMNS = ["cell", "event", "lines", "per_run"]


def _pools(run: Run) -> dict[str, Any] | None:
    s = run.summary if isinstance(run.summary, dict) else {}
    acc = s.get("pools")
    return acc if isinstance(acc, dict) else None


def _label(run: Run) -> str:
    algorithm = run.params.get("pools.algorithm")
    # a sweep's cell name spells round_robin "round-robin": say the algorithm only when the name does not
    if not algorithm or str(algorithm).replace("_", "-") in run.cell.replace("_", "-"):
        return run.cell
    return f"{run.cell} ({algorithm})"


def _mean(values: Any) -> float | None:
    vals = [float(v) for v in values or [] if isinstance(v, (int, float))]
    return sum(vals) / len(vals) if vals else None


def compare(runs: list[Run]) -> pd.DataFrame:
    """One row per (metric, cell): the mean over the cell's repetitions with its 95% interval."""
    per_cell: dict[str, dict[str, list[float | None]]] = {}
    for run in runs:
        acc = _pools(run)
        if acc is None:
            continue
        row = dict(acc, crash_detect_mean_s=_mean(acc.get("crash_detect_s")),
                   failover_mean_s=_mean(acc.get("failover_s")))
        cell = per_cell.setdefault(_label(run), {k: [] for k in METRICS})
        for key in METRICS:
            cell[key].append(row.get(key))
    rows = []
    for key, what in METRICS.items():
        for cell, values in sorted(per_cell.items()):
            iv = stats.ci95(values[key], nonnegative=True)
            rows.append({"metric": what, "cell": cell, "n": iv.n, "mean": iv.mean, "lo": iv.lo, "hi": iv.hi,
                         "text": stats.fmt_interval(iv.mean, iv.lo, iv.hi)})
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS) if rows else empty_table(COMPARE_COLUMNS)


def events(runs: list[Run]) -> pd.DataFrame:
    """pools.jsonl lines by event, per cell (in all and per repetition)."""
    counts: dict[str, Counter] = {}
    reps: Counter = Counter()
    for run in runs:
        if _pools(run) is None:
            continue
        cell = _label(run)
        reps[cell] += 1
        c = counts.setdefault(cell, Counter())
        for path in run.files("pools.jsonl"):
            c.update(str(rec.get("event")) for rec in jsonlines.objects(path))   # a torn last line: skipped
    rows = [{"cell": cell, "event": ev, "lines": n, "per_run": n / reps[cell]}
            for cell, c in sorted(counts.items()) for ev, n in sorted(c.items())]
    return pd.DataFrame(rows, columns=EVENT_COLUMNS) if rows else empty_table(EVENT_COLUMNS)


def section_html(built: dict[str, pd.DataFrame], render: Any) -> str:
    table = built["compare"]
    if table.empty:
        return ""
    wide = table.pivot(index="metric", columns="cell", values="text").reindex(
        list(METRICS.values())).reset_index()
    bad = table[table["metric"].isin(["events lost", "events duplicated", "affinity violations"])
                & (table["mean"].fillna(0) > 0)]
    verdict = ("Every repetition kept every event once, at its consumer's instance." if bad.empty else
               f"{len(bad)} cell metrics show lost or duplicated events or affinity violations.")
    return f"""<h2 id="pools">Pools</h2>
<p>Pooled event consumption (<code>node/pools/</code>): the cells side by side, each value the mean over the
repetitions with its 95% confidence interval. Re-balance: from the leader's map change to the new map applied
at every consumer it moved (target 1 s); fence pause: how long an instance held a moved consumer's events
until its predecessor acknowledged the fence; fail-over: a kill of the leader to the new term applied at
every consumer (target 2 s). {html.escape(verdict)}</p>
{render(wide, "pools-compare")}
<p>Records of the controller replicas and the consumers (<code>pools.jsonl</code>), by event.</p>
{render(built["events"], "pools-events")}
"""


class PoolsSection(Section):
    name = anchor = "pools"
    link = "pools"
    step = "pools (re-balance, balance, fences, the pooled events' account)"

    def wanted(self, runs: list[Run]) -> bool:
        return any(_pools(r) is not None for r in runs)

    def build(self, data: RunData) -> dict[str, pd.DataFrame]:
        return {"compare": compare(data.runs), "events": events(data.runs)}

    def tables(self, built: dict[str, pd.DataFrame] | None) -> dict[str, pd.DataFrame]:
        if not built or built["compare"].empty:
            return {}
        return {"pools_compare": built["compare"], "pools_events": built["events"]}

    def html(self, built: dict[str, pd.DataFrame] | None, page: Page) -> str:
        return "" if not built else section_html(built, page.table)


SECTION = PoolsSection()
