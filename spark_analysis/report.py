"""Write report.html (self-contained: plots embedded), the plots (PNG, optionally SVG), every table as CSV
and Parquet, and the one-screen console summary."""
from __future__ import annotations

import base64
import html
import io
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from .compare import BUCKET_ORDER
from .headline import cell_table, cell_table_display, sentences
from .stats import LOG_T, RAW_T_FLOOR
from .pubsub import PubSubTables, section_html as pubsub_html
from .rates import RateTables, section_html as rates_html
from .routing import RoutingTables, section_html as routing_html

log = logging.getLogger(__name__)

PLOT_FORMATS = ("png", "svg")
MODE_COLOURS = {"fragmenting": "tab:blue", "non-fragmenting": "tab:orange"}


@dataclass
class ReportTables:
    """Everything the report shows; pandas tables, small (aggregates, not packets)."""
    runs: pd.DataFrame
    summary: pd.DataFrame
    delays: pd.DataFrame
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)
    sweeps: dict[str, pd.DataFrame] = field(default_factory=dict)
    latency_cdf: pd.DataFrame = field(default_factory=pd.DataFrame)
    hops: pd.DataFrame = field(default_factory=pd.DataFrame)
    health: pd.DataFrame = field(default_factory=pd.DataFrame)
    refusals: pd.DataFrame = field(default_factory=pd.DataFrame)
    resources: pd.DataFrame = field(default_factory=pd.DataFrame)
    buffer_classes: pd.DataFrame = field(default_factory=pd.DataFrame)
    links: pd.DataFrame = field(default_factory=pd.DataFrame)
    flows: pd.DataFrame = field(default_factory=pd.DataFrame)
    utilisation: pd.DataFrame = field(default_factory=pd.DataFrame)
    routing: RoutingTables | None = None     # routing.py; None: not computed
    pubsub: PubSubTables | None = None       # pubsub.py; None (or not present): no section
    rates: RateTables | None = None          # rates.py; None (or not present): no section


def parse_formats(text: str) -> tuple[str, ...]:
    from node.errors import UserError

    fmts = tuple(dict.fromkeys(f.strip().lower() for f in (text or "png").split(",") if f.strip()))
    bad = [f for f in fmts if f not in PLOT_FORMATS]
    if bad or not fmts:
        raise UserError(f"--plots takes a comma-separated list of {', '.join(PLOT_FORMATS)}, not {text!r}.")
    return fmts if "png" in fmts else ("png", *fmts)  # PNG is always made: the HTML embeds it


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: Path, name: str, formats: tuple[str, ...]) -> bytes:
    plt = _plt()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    png = buf.getvalue()
    (out / f"{name}.png").write_bytes(png)
    if "svg" in formats:
        fig.savefig(out / f"{name}.svg", format="svg")
    plt.close(fig)
    return png


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def interval_bars(g: pd.DataFrame, mean_col: str = "mean") -> tuple[list[float], list[list[float]]]:
    """Points and asymmetric error bars (below, above) from ci_centre/ci95_lo/ci95_hi; tables without
    the bounds fall back to mean ± ci95; no interval draws no bar."""
    if {"ci_centre", "ci95_lo", "ci95_hi"} <= set(g.columns):
        centre = [_num(c) if not math.isnan(_num(c)) else _num(m) for c, m in zip(g["ci_centre"], g[mean_col])]
        lo, hi = [_num(v) for v in g["ci95_lo"]], [_num(v) for v in g["ci95_hi"]]
    else:
        centre = [_num(m) for m in g[mean_col]]
        half = [_num(c) for c in g["ci95"]] if "ci95" in g else [math.nan] * len(g)
        lo, hi = [c - h for c, h in zip(centre, half)], [c + h for c, h in zip(centre, half)]
    below = [0.0 if math.isnan(c - v) else max(0.0, c - v) for c, v in zip(centre, lo)]
    above = [0.0 if math.isnan(v - c) else max(0.0, v - c) for c, v in zip(centre, hi)]
    return centre, [below, above]


def _ci_label(df: pd.DataFrame) -> str:
    """Axis wording for the intervals a table's rows carry."""
    methods = set(df["ci_method"].dropna()) - {""} if "ci_method" in df else set()
    if methods == {LOG_T}:
        return "geometric mean over reps,\n95% CI (t on logs)"
    if not methods:
        return "mean over reps"
    floor = ", floored at 0" if RAW_T_FLOOR in methods else ""
    if LOG_T not in methods:
        return f"mean over reps, 95% CI (t{floor})"
    return f"over reps, 95% CI (t on logs; t where a value ≤ 0{floor})"


def delay_plot(delays: pd.DataFrame):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (cell, mode), g in delays.groupby(["cell", "mode"], sort=True):
        x = [BUCKET_ORDER.index(b) for b in g["bucket"]]
        y, err = interval_bars(g, "mean_delay_s")
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=f"{mode} ({cell})")
    ax.set_xticks(range(len(BUCKET_ORDER)), BUCKET_ORDER)
    ax.set_xlabel("message size (fragments)")
    ax.set_ylabel(f"delay (s): {_ci_label(delays)}")
    ax.set_title("Mean delivery delay by size bucket")
    ax.grid(alpha=0.3)
    if len(delays):
        ax.legend(fontsize="small")
    return fig


def sweep_plot(key: str, table: pd.DataFrame, metric: str):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    by = "series" if "series" in table.columns else "mode"
    for series, g in table.groupby(by, sort=True):
        y, err = interval_bars(g)
        mode = g["mode"].iloc[0]
        single = table[by].nunique() == table["mode"].nunique()     # one series per mode: colour by mode
        ax.errorbar(g["value"], y, yerr=err, marker="o", capsize=3, label=series,
                    color=MODE_COLOURS.get(mode) if single else None,
                    linestyle="-" if mode == "fragmenting" else "--")
    ax.set_xlabel(key)
    ax.set_ylabel(f"{metric}\n{_ci_label(table)}")
    ax.set_title(f"{metric} vs {key.split('.')[-1]}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def cdf_plot(cdf: pd.DataFrame):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (cell, mode), g in cdf.groupby(["cell", "mode"], sort=True):
        ax.plot(g["delay_s"], g["q"], label=f"{mode} ({cell}, n={int(g['n_runs'].iloc[0])})")
    ax.set_xlabel("delivery latency (s)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_title("Latency CDF (all repetitions pooled)")
    ax.grid(alpha=0.3)
    if len(cdf):
        ax.legend(fontsize="small")
    return fig


def series_plot(df: pd.DataFrame, x: str, y: str, group: list[str], xlabel: str, ylabel: str, title: str):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, g in df.groupby(group, sort=True):
        label = " ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        ax.plot(g[x], g[y], label=label, linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(df) and df.groupby(group).ngroups <= 12:
        ax.legend(fontsize="x-small")
    return fig


MAX_LINK_PANELS = 8
TOP_LINKS = 5


def link_panel_runs(utilisation: pd.DataFrame) -> tuple[list[tuple[str, str]], str]:
    """The runs (cell, rep) to draw, one panel each, and a note saying which: every run when they fit in
    MAX_LINK_PANELS, else each cell's first repetition (the first MAX_LINK_PANELS cells)."""
    runs = sorted({(str(c), str(r)) for c, r in zip(utilisation["cell"], utilisation["rep"])},
                  key=lambda cr: (cr[0], _rep_key(cr[1])))
    if len(runs) <= MAX_LINK_PANELS:
        return runs, f"one panel per run (all {len(runs)} runs)"
    first: dict[str, tuple[str, str]] = {}
    for cell, rep in runs:
        first.setdefault(cell, (cell, rep))
    shown = list(first.values())[:MAX_LINK_PANELS]
    more = f" of {len(first)} cells" if len(first) > MAX_LINK_PANELS else ""
    return shown, f"each cell's first repetition ({len(shown)}{more}; {len(runs)} runs in all)"


def _rep_key(rep: str) -> tuple[int, str]:
    return (int(rep), rep) if rep.isdigit() else (1 << 30, rep)


def _busiest(u: pd.DataFrame, top: int) -> list[tuple[str, str]]:
    """(link, direction) pairs of one run by bytes carried, largest first."""
    total = u.groupby(["link", "direction"])["bits_per_s"].sum().sort_values(ascending=False)
    return [tuple(k) for k in total.index[:top]]


def link_throughput_plot(utilisation: pd.DataFrame):
    """One panel per shown run: the busiest links (by bytes) named and coloured, each with its configured
    rate as a dashed line; the other links thin and grey. Returns (figure, note on the runs shown)."""
    plt = _plt()
    shown, note = link_panel_runs(utilisation)
    cols = 2 if len(shown) > 1 else 1
    rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.2 * rows), squeeze=False)
    for ax, (cell, rep) in zip(axes.flat, shown):
        u = utilisation[(utilisation["cell"].astype(str) == cell) & (utilisation["rep"].astype(str) == rep)].copy()
        u["t"] = u["bin"] - u["bin"].min()
        busiest = _busiest(u, TOP_LINKS)
        for (link, direction), g in u.groupby(["link", "direction"], sort=True):
            if (link, direction) not in busiest:
                ax.plot(g["t"], g["bits_per_s"] / 1e3, color="0.75", linewidth=0.6)
        for i, (link, direction) in enumerate(busiest):
            g = u[(u["link"] == link) & (u["direction"] == direction)].sort_values("t")
            colour = f"C{i}"
            ax.plot(g["t"], g["bits_per_s"] / 1e3, color=colour, linewidth=1.2, label=f"{link} {direction}")
            rate = _num(g["rate_bps"].dropna().iloc[0]) if "rate_bps" in g and g["rate_bps"].notna().any() else math.nan
            if not math.isnan(rate):
                ax.axhline(rate / 1e3, color=colour, linestyle="--", linewidth=0.9)
        ax.set_title(f"{cell} rep {rep}", fontsize="medium")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("kbit/s (1 s bins)")
        ax.grid(alpha=0.3)
        if busiest:
            ax.legend(fontsize="x-small", title=f"top {len(busiest)} by bytes; dashed: configured rate",
                      title_fontsize="x-small")
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    return fig, note


def _table(df: pd.DataFrame, table_id: str = "") -> str:
    if df is None or df.empty:
        return "<p><em>no data</em></p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False))
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _save_table(df: pd.DataFrame, out: Path, name: str) -> None:
    df.to_csv(out / f"{name}.csv", index=False)
    try:
        # mixed-type object columns (e.g. summary values) are written as text
        safe = df.copy()
        for c in safe.columns:
            if safe[c].dtype == object:
                safe[c] = safe[c].map(lambda v: None if v is None else str(v))
        safe.to_parquet(out / "tables" / f"{name}.parquet", index=False)
    except (ValueError, TypeError, ImportError) as e:  # a table Parquet cannot hold stays CSV only
        log.warning("table %s not written as Parquet: %s", name, e)


def write(out: Path, source: str, tables: ReportTables | pd.DataFrame, summary: pd.DataFrame | None = None,
          delays: pd.DataFrame | None = None, formats: tuple[str, ...] = ("png",)) -> Path:
    """Write the report into `out`; returns the path of report.html."""
    if not isinstance(tables, ReportTables):  # the older (runs, summary, delays) call
        tables = ReportTables(tables, summary, delays)
    t = tables
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    cells = cell_table(t.summary, t.health)
    named = {"headline": cells, "runs": t.runs, "summary": t.summary, "delay_by_size": t.delays,
             "comparison": t.comparison,
             "latency_cdf": t.latency_cdf, "hops": t.hops, "health": t.health, "refusals": t.refusals,
             "resources": t.resources, "buffer_classes": t.buffer_classes, "links": t.links, "flows": t.flows,
             "utilisation": t.utilisation}
    for key, df in t.sweeps.items():
        named[f"sweep_{key.split('.')[-1]}"] = df
    if t.routing is not None:
        named.update(t.routing.named())
    if t.pubsub is not None and t.pubsub.present:
        named.update(t.pubsub.named())
    if t.rates is not None and t.rates.present:
        named.update(t.rates.named())
    for name, df in named.items():
        if df is not None:
            _save_table(df, out, name)

    delay_png = _save(delay_plot(t.delays), out, "delay_by_size", formats)
    sweep_html = []
    for key, df in t.sweeps.items():
        metric = str(df["metric"].iloc[0]) if len(df) else "throughput_multi"
        png = _save(sweep_plot(key, df, metric), out, f"sweep_{key.split('.')[-1]}", formats)
        unit = ("bytes per model second, delivered within the workload window" if metric == "throughput_2plus_Bps"
                else "messages per second")
        sweep_html.append(f"<h3>throughput of 2+ fragment messages ({unit}) vs {html.escape(key)}</h3>"
                          f"{_img(png, key)}{_table(df)}")
    cdf_html = ""
    if len(t.latency_cdf):
        cdf_html = _img(_save(cdf_plot(t.latency_cdf), out, "latency_cdf", formats), "latency CDF")
    res_html = ""
    if len(t.resources):
        png = _save(series_plot(t.resources, "t", "pool_occupancy", ["run_mode", "cell", "rep"], "seconds since start",
                                "recipient pool occupancy (mean over nodes)", "Recipient pool occupancy"),
                    out, "pool_occupancy", formats)
        png2 = _save(series_plot(t.resources, "t", "buffers_used", ["run_mode", "cell", "rep"], "seconds since start",
                                 "buffers in use (mean over nodes)", "Buffer use"), out, "buffer_use", formats)
        res_html = _img(png, "recipient pool occupancy") + _img(png2, "buffer use")
    net_html = ""
    if len(t.utilisation):
        fig, note = link_throughput_plot(t.utilisation)
        png = _save(fig, out, "link_throughput", formats)
        net_html = (f"<h3>Link throughput</h3><p>Shown: {html.escape(note)}. Per panel the {TOP_LINKS} links (and "
                    "direction) that carried the most bytes are named, each with its configured rate "
                    "(topology.json) dashed; the other links are grey.</p>" + _img(png, "link throughput"))
    top_flows = t.flows.sort_values("bytes", ascending=False).head(20) if len(t.flows) else t.flows
    pubsub_section = pubsub_html(t.pubsub, _table, lambda fig, name, alt: _img(_save(fig, out, name, formats), alt))
    pubsub_link = '<a href="#pubsub">pub/sub</a> · ' if pubsub_section else ""
    rates_section = rates_html(t.rates, _table, lambda fig, name, alt: _img(_save(fig, out, name, formats), alt))
    pubsub_link += '<a href="#rates">rate control</a> · ' if rates_section else ""

    n_runs = len(t.runs)
    headline = "".join(f'<p class="headline"><strong>{html.escape(x)}</strong></p>'
                       for x in sentences(t.comparison))
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>wanbed report: {html.escape(source)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0;font-size:90%}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>wanbed report</h1><p>Source: <code>{html.escape(source)}</code>; {n_runs} runs.</p>
{headline}
<h2 id="cells">Headline metrics per cell and mode</h2>{_table(cell_table_display(cells), "headline-table")}
<p>Each entry is "value [95% CI]" over the repetitions (n per row; [–]: no interval with n &lt; 2).
Delays and throughputs are strictly positive and skewed, so their interval is Student-t on the logarithms
of the per-repetition values, an interval for the geometric mean (exp(mean(log x) ± t·s/√n), always &gt; 0),
and the value shown is that geometric mean; delivery probability and lost (which can be 0) use Student-t
on the raw values around the arithmetic mean (a throughput that was 0 in some repetition too, its lower
bound raised to 0: "t floored at 0"). lost is the loss checker's count per run; saturated runs:
runs whose host was saturated. In every table <code>mean</code> is the arithmetic mean,
<code>ci95_lo</code>/<code>ci95_hi</code> the interval, <code>ci_centre</code> the value it bounds,
<code>ci_method</code> how it was computed and <code>ci95</code> = (hi − lo)/2 (the half-width for t on raw
values). Tables are beside this file as CSV and in tables/ as Parquet; the packet table (when pcaps were
captured) is in parquet/packets.</p>
<p>Sections: <a href="#cells">headline</a> · <a href="#summary">summary</a> ·
<a href="#comparison">fragmenting vs non-fragmenting</a> ·
<a href="#sweeps">sweeps</a> · <a href="#delay">delay by size</a> · <a href="#delivery">delivery metrics</a> ·
<a href="#health">run health</a> · <a href="#resources">resources</a> · <a href="#network">network</a> ·
<a href="#routing">routing</a> · {pubsub_link}<a href="#runs">per run</a></p>
<h2 id="summary">Summary per cell, mode and metric</h2>{_table(t.summary, "summary-table")}
<h2 id="comparison">Fragmenting vs non-fragmenting</h2>
<p>Cells whose parameters differ only in the mode, side by side; ratio = fragmenting mean / non-fragmenting mean;
ci_separate: whether the two 95% CIs are disjoint (empty when either has none).</p>
{_table(t.comparison, "comparison-table")}
<h2 id="sweeps">Sweeps</h2>{"".join(sweep_html) or "<p><em>no swept numeric parameter</em></p>"}
<h2 id="delay">Mean delay by size bucket</h2>
{_img(delay_png, "mean delay by size bucket")}
{_table(t.delays, "delay-table")}
<h2 id="delivery">Delivery metrics</h2>
<p>delivery_prob = delivered (message, recipient) pairs / accepted copies; overhead_ratio = (bytes sent on
links − bytes delivered) / bytes delivered; latency in seconds; hops = links crossed (see the summary table
for means with n).</p>
{cdf_html}<h3>Hop counts</h3>{_table(t.hops, "hops-table")}
<h2 id="health">Run health</h2>
<p>Losses and duplicates must be zero. <code>lost</code> and <code>late</code> are the loss checker's verdict
(<code>testbed check</code>: late copies were still held in a spool at teardown, naming no loss);
<code>undelivered</code> counts accepted copies without a delivery record. Host saturation makes a run's
timing suspect.</p>
{_table(t.health, "health-table")}<h3>Refusals by reason</h3>{_table(t.refusals, "refusals-table")}
<h2 id="resources">Resources</h2>{res_html or "<p><em>no resource metrics in the runs</em></p>"}
<h3>Buffer classes (index = hops made)</h3>{_table(t.buffer_classes, "buffer-table")}
<h2 id="network">Network (from the pcaps)</h2>{net_html}
<h3>Links</h3>{_table(t.links, "links-table")}<h3>Largest flows</h3>{_table(top_flows, "flows-table")}
<h2 id="routing">Routing</h2>{routing_html(t.routing, _table)}
{pubsub_section}{rates_section}<h2 id="runs">Per-run figures</h2>{_table(t.runs, "runs-table")}
</body></html>
"""
    (out / "report.html").write_text(page, encoding="utf-8")
    return out / "report.html"


def console_summary(summary: pd.DataFrame, health: pd.DataFrame | None = None, console: Console | None = None,
                    comparison: pd.DataFrame | None = None) -> None:
    """One screen: the headline sentence (as in the report), mean per cell and mode with n, then any
    run-health problems."""
    console = console or Console()
    for sentence in sentences(comparison):
        console.print(f"[bold]{sentence}[/bold]", highlight=False)
    if summary is None or summary.empty or "metric" not in summary:
        return
    wide = summary.pivot_table(index=["cell", "mode"], columns="metric", values="mean", aggfunc="first")
    n = summary.groupby(["cell", "mode"])["n"].max()
    table = Table(title="wanbed: mean over repetitions")
    cols = ["delivered", "lost", "duplicates", "throughput_multi", "delivery_prob", "latency_mean", "overhead_ratio"]
    cols = [c for c in cols if c in wide.columns]
    # the records alone cannot tell a copy still held in a spool from a lost one: the loss checker's
    # lost/late are in the health lines below, so this column says what the records can say
    for c in ["cell", "mode", "n", *cols]:
        table.add_column("undelivered" if c == "lost" else c, justify="left" if c in ("cell", "mode") else "right",
                         overflow="fold")
    for (cell, mode), row in wide.iterrows():
        table.add_row(str(cell), str(mode), str(n[(cell, mode)]), *(_fmt(row.get(c)) for c in cols))
    console.print(table)
    if health is not None and len(health) and "problems" in health:
        bad = health[health["problems"].astype(str) != ""]
        for r in bad.head(10).itertuples():
            console.print(f"[yellow]run {r.cell}/{r.rep}: {r.problems}[/yellow]")
        if len(bad) > 10:
            console.print(f"[yellow]... and {len(bad) - 10} more runs with problems (see health.csv)[/yellow]")
