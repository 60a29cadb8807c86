"""The report's Accepted set section: per run, the workload driver's own record of what the nodes accepted
(accepted.jsonl) against the nodes' submission lines, and the record lines the nodes could not write.

Source: summary.json, where the loss checker (testbed/accounting) put `accounting.client` and
`records_failed` (docs/run-directory.md). A run from before the driver kept that record has no row.
"""
from __future__ import annotations

import html
from typing import Any

import pandas as pd

from ..layout import Run
from .base import Page, RunData, Section, empty_table

COLUMNS = ["cell", "rep", "accepted", "reconciled", "client_only", "node_only", "unanswered", "records_failed",
           "problem"]


def _client(run: Run) -> dict[str, Any] | None:
    s = run.summary if isinstance(run.summary, dict) else {}
    acc = s.get("accounting") if isinstance(s.get("accounting"), dict) else {}
    client = acc.get("client")
    return client if isinstance(client, dict) and client.get("present") else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def build(runs: list[Run]) -> pd.DataFrame:
    """One row per run that has the driver's record."""
    rows = []
    for run in runs:
        client = _client(run)
        if client is None:
            continue
        failed = (run.summary or {}).get("records_failed")
        rows.append({"cell": run.cell, "rep": run.rep,
                     **{k: _count(client.get(k)) for k in COLUMNS[2:7]},
                     "records_failed": sum(v for v in failed.values() if _count(v)) if isinstance(failed, dict)
                     else None,
                     "problem": str(client.get("problem") or "")})
    return pd.DataFrame(rows, columns=COLUMNS) if rows else empty_table(COLUMNS)


def section_html(table: pd.DataFrame, render: Any) -> str:
    if table.empty:
        return ""
    bad = table[(table[["client_only", "node_only", "records_failed"]].fillna(0).sum(axis=1) > 0)
                | (table["problem"] != "")]
    verdict = (f"{len(bad)} of {len(table)} runs disagree: their records are incomplete." if len(bad)
               else f"All {len(table)} runs agree: {int(table['reconciled'].sum())} of "
                    f"{int(table['accepted'].sum())} accepted copies reconciled.")
    return f"""<h2 id="accepted">Accepted set</h2>
<p>Copies the workload driver saw accepted (<code>accepted.jsonl</code>) against the nodes' submission lines:
<code>reconciled</code> on both sides, <code>client_only</code> with no submission line at the node,
<code>node_only</code> accepted by a node but never per the driver, <code>unanswered</code> accepted by a node
whose reply the driver never got (allowed); <code>records_failed</code>: record lines the nodes could not write.
Any of client_only, node_only or records_failed fails the run. {html.escape(verdict)}</p>
{render(table, "accepted-table")}
"""


class AcceptedSection(Section):
    name = anchor = "accepted"
    link = "accepted set"
    step = "accepted set (the driver's record against the nodes')"

    def wanted(self, runs: list[Run]) -> bool:
        return any(_client(r) is not None for r in runs)

    def build(self, data: RunData) -> pd.DataFrame:
        return build(data.runs)

    def tables(self, built: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
        return {} if built is None or built.empty else {"accepted_set": built}

    def html(self, built: pd.DataFrame | None, page: Page) -> str:
        return "" if built is None or built.empty else section_html(built, page.table)


SECTION = AcceptedSection()
