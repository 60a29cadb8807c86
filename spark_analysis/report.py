"""Write report.html (self-contained, plot embedded), CSV tables, and a console summary."""
from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from .compare import BUCKET_ORDER


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def delay_plot_png(delays: pd.DataFrame) -> bytes:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (cell, mode), g in delays.groupby(["cell", "mode"], sort=True):
        x = [BUCKET_ORDER.index(b) for b in g["bucket"]]
        err = [0 if math.isnan(c) else c for c in g["ci95"]]
        ax.errorbar(x, g["mean_delay_s"], yerr=err, marker="o", capsize=3, label=f"{mode} ({cell})")
    ax.set_xticks(range(len(BUCKET_ORDER)), BUCKET_ORDER)
    ax.set_xlabel("message size (fragments)")
    ax.set_ylabel("mean delay (s), 95% CI over reps")
    ax.set_title("Mean delivery delay by size bucket")
    ax.grid(alpha=0.3)
    if len(delays):
        ax.legend(fontsize="small")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write(out: Path, source: str, runs: pd.DataFrame, summary: pd.DataFrame, delays: pd.DataFrame) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    delays.to_csv(out / "delay_by_size.csv", index=False)
    png = delay_plot_png(delays)
    (out / "delay_by_size.png").write_bytes(png)
    img = base64.b64encode(png).decode("ascii")
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>wanbed report: {html.escape(source)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}</style></head><body>
<h1>wanbed report</h1><p>Source: <code>{html.escape(source)}</code>; {len(runs)} runs.
Means are over repetitions; ci95 is the Student-t 95% half-width; n is the number of repetitions.</p>
<h2 id="summary">Summary per cell and mode</h2>{_table(summary)}
<h2 id="delay">Mean delay by size bucket</h2>
<img alt="mean delay by size bucket" src="data:image/png;base64,{img}">
{_table(delays)}
<h2 id="runs">Per-run figures</h2>{_table(runs)}
</body></html>
"""
    (out / "report.html").write_text(page, encoding="utf-8")
    return out / "report.html"


def console_summary(summary: pd.DataFrame, console: Console | None = None) -> None:
    console = console or Console()
    wide = summary.pivot_table(index=["cell", "mode"], columns="metric", values="mean", aggfunc="first")
    n = summary.groupby(["cell", "mode"])["n"].max()
    table = Table(title="wanbed: mean over repetitions")
    cols = ["submitted", "accepted", "delivered", "lost", "duplicates", "throughput_multi"]
    for c in ["cell", "mode", "n", *cols]:
        table.add_column(c, justify="left" if c in ("cell", "mode") else "right", overflow="fold")
    for (cell, mode), row in wide.iterrows():
        table.add_row(str(cell), str(mode), str(n[(cell, mode)]), *(_fmt(row.get(c)) for c in cols))
    console.print(table)
