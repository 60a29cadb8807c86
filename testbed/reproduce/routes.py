"""A routing reproduction's data: summary.json's `routing` account of every repetition as CSV files.

    routes.csv   per cell, repetition, node and destination: route moves (and per model hour), the share of
                 the workload on a right next hop, whether the right one changed, the most-held next hop and
                 Dijkstra's on the mean costs
    tables.csv   per checkpoint (the end of each phase): next hop and cost against Dijkstra's on the
                 configured costs (Gunduz Tables 3-5 are b1's rows)
    links.csv    per node, neighbour and phase: the settled link cost against the configured one (Table 10)

Nothing is written when no repetition has a routing account (static routing).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

ROUTE_COLUMNS = ("cell", "rep", "node", "dst", "moves", "moves_per_hour", "right_share", "varies", "modal",
                 "modal_right")
TABLE_COLUMNS = ("cell", "rep", "checkpoint", "node", "dst", "next_hop", "cost", "right", "right_cost", "match")
LINK_COLUMNS = ("cell", "rep", "node", "neighbour", "phase", "samples", "settled", "configured_ms", "error")
FILES = (("routes.csv", "pairs", ROUTE_COLUMNS), ("tables.csv", "tables", TABLE_COLUMNS),
         ("links.csv", "links", LINK_COLUMNS))


def rows(out: Path, part: str, nodes: list[str]) -> list[dict[str, Any]]:
    """The account's `part` (pairs, tables, links) of every repetition in `out`, cut to `nodes` if given."""
    try:
        doc = json.loads((Path(out) / "experiment.json").read_text())
    except (OSError, ValueError):
        return []
    table: list[dict[str, Any]] = []
    for cell in doc.get("cells", []):
        for rep in cell.get("reps", []):
            try:
                summary = json.loads((Path(out) / str(rep.get("dir", "")) / "summary.json").read_text())
            except (OSError, ValueError):
                continue
            account = summary.get("routing") if isinstance(summary, dict) else None
            if not isinstance(account, dict):
                continue
            for r in account.get(part) or []:
                if nodes and r.get("node") not in nodes:
                    continue
                table.append({"cell": cell.get("id", ""), "rep": rep.get("rep", ""),
                              **{k: _text(v) for k, v in r.items()}})
    return table


def write(out: Path, figure_dir: Path, nodes: list[str]) -> list[Path]:
    """The three CSVs in `figure_dir`; the paths written."""
    written: list[Path] = []
    for name, part, columns in FILES:
        table = rows(out, part, nodes)
        if not table:
            continue
        path = figure_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            w.writeheader()
            w.writerows(table)
        written.append(path)
    return written


def _text(value: Any) -> Any:
    """A list (equal next hops) as one cell: "n2 n4"."""
    return " ".join(map(str, value)) if isinstance(value, list) else value
