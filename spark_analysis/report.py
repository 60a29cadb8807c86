"""Write report.html (self-contained: plots embedded), the plots (PNG, optionally SVG), every table as CSV
and Parquet, and the one-screen console summary. After the core tables come the sections of the registry
(spark_analysis/sections/), in its order; the plots are drawn by spark_analysis/plots.py."""
from __future__ import annotations

import base64
import datetime
import html
import logging
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from rich.console import Console

from .headline import cell_table, cell_table_display, sentences
from .layout import RunTimeline
from .plots import (TOP_LINKS, cdf_plot, delay_plot, link_throughput_plot, save_figure, series_plot,
                    sweep_plot)
from .render import console_table, html_table
from .sections import SECTIONS, Page
from .topodraw import topology_svg

log = logging.getLogger(__name__)

PLOT_FORMATS = ("png", "svg")


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
    # section name -> what its build returned (spark_analysis/sections/); absent: not built
    sections: dict[str, Any] = field(default_factory=dict)
    # the runs' experiment.json (layout.experiment_doc): time_scale and provenance; {} for a lone run
    experiment: dict[str, Any] = field(default_factory=dict)
    # (cell, rep) -> the run's phases and faults (layout.run_timelines): marked on the time plots
    timelines: dict[tuple[str, str], RunTimeline] = field(default_factory=dict)
    # the first run's topology.json, its daemon hosts (None: not known) and which run it is (layout.run_topology)
    topology: dict[str, Any] = field(default_factory=dict)
    daemons: set[str] | None = None
    topology_run: str = ""


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


def _is_time_column(name: Any) -> bool:
    """Columns holding Unix timestamps (seconds), shown as times rather than 1.796e+09."""
    name = str(name)
    return name == "ts" or name.endswith("_ts")


def _fmt_time(v) -> str:
    if v is None or not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
        return _fmt(v)
    return datetime.datetime.fromtimestamp(v, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _table(df: pd.DataFrame, table_id: str = "") -> str:
    if df is None or df.empty:
        return "<p><em>no data</em></p>"
    fmts = [_fmt_time if _is_time_column(c) else _fmt for c in df.columns]
    rows = [[f(v) for f, v in zip(fmts, row)] for row in df.itertuples(index=False)]
    return html_table([str(c) for c in df.columns], rows, table_id)


def _sub(title: str, df: pd.DataFrame | None, table_id: str) -> str:
    """A sub-heading with its table; "" when the table is empty (no empty sections)."""
    return "" if df is None or df.empty else f"<h3>{html.escape(title)}</h3>{_table(df, table_id)}"


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


# provenance keys in the order shown, with their labels
PROVENANCE = [("wanbed_version", "wanbed version"), ("git_commit", "git commit"), ("command", "command line"),
              ("date", "started (UTC)"), ("seeds", "seeds"), ("shaper", "shaper backend"), ("kernel", "kernel"),
              ("host_cpus", "host CPUs")]


def provenance_html(experiment: dict[str, Any]) -> str:
    """The provenance block: what made the runs (experiment.json's `provenance`), the time scale, and the
    resolved scenario folded away; "" when the runs carry none."""
    prov = experiment.get("provenance") if isinstance(experiment.get("provenance"), dict) else {}
    ts = experiment.get("time_scale")
    rows = []
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        rows.append(("time_scale", f"{ts:g} wall seconds per model second"))
    for key, label in PROVENANCE:
        v = prov.get(key)
        if v is None or v == "" or v == []:
            continue
        if key == "command" and isinstance(v, list):
            v = shlex.join(str(a) for a in v)
        elif isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        rows.append((label, str(v)))
    if not rows:
        return ""
    scenario = prov.get("scenario")
    folded = ""
    if isinstance(scenario, dict):
        text = yaml.safe_dump(scenario, sort_keys=False, default_flow_style=False, allow_unicode=True)
        folded = f"<details><summary>resolved scenario</summary><pre>{html.escape(text)}</pre></details>"
    return (f'<h2 id="provenance">Provenance</h2>'
            f'{html_table(None, [list(r) for r in rows], "provenance-table", row_heads=True, align="l")}{folded}')


def topology_html(t: ReportTables, out: Path) -> str:
    """The topology drawing (also written as topology.svg) with what it shows; "" without topology.json."""
    svg = topology_svg(t.topology, t.daemons)
    if not svg:
        return ""
    (out / "topology.svg").write_text(svg, encoding="utf-8")
    ts = t.experiment.get("time_scale")
    model = (f" (model rate = wall rate × {ts:g}, model delay = wall delay / {ts:g})"
             if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts > 0 else "")
    live = (' <a href="topology.html">The interactive view</a> (the dashboard page with the run\'s sampled '
            "states, self-contained)." if (out / "topology.html").is_file() else "")
    return (f'<figure id="topology">{svg}<figcaption>Topology of run {html.escape(t.topology_run)} '
            f"(topology.json): links labelled with their delay and rate as emulated, in wall-clock units"
            f"{model}, at the end of the run.{live}</figcaption></figure>")


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
    built = [(section, t.sections.get(section.name)) for section in SECTIONS]
    for section, result in built:
        named.update(section.tables(result))
    for name, df in named.items():
        if df is not None:
            _save_table(df, out, name)

    delay_png = (save_figure(delay_plot(t.delays), out, "delay_by_size", formats)
                 if t.delays is not None and len(t.delays) else b"")
    sweep_html = []
    for key, df in t.sweeps.items():
        metric = str(df["metric"].iloc[0]) if len(df) else "throughput_multi"
        png = save_figure(sweep_plot(key, df, metric), out, f"sweep_{key.split('.')[-1]}", formats)
        unit = ("bytes per model second, delivered within the workload window" if metric == "throughput_2plus_Bps"
                else "messages per second")
        sweep_html.append(f"<h3>throughput of 2+ fragment messages ({unit}) vs {html.escape(key)}</h3>"
                          f"{_img(png, key)}{_table(df)}")
    cdf_html = ""
    if len(t.latency_cdf):
        cdf_html = _img(save_figure(cdf_plot(t.latency_cdf), out, "latency_cdf", formats), "latency CDF")
    marks_note = ""
    if any(tl.phases() or tl.faults for tl in t.timelines.values()):
        marks_note = ("<p>On the time plots the runs' phases are shaded (warm-up, workload, drain: from events.jsonl's "
                      "<code>workload_end</code>, the workload's wall duration and the drain's seconds in "
                      "summary.json, the warm-up in scenario.yaml; several runs drawn together share the "
                      "shading, so it is darkest where they agree) and each fault or link change in "
                      "events.jsonl is a dotted line, one colour per kind, named at the top; here in wall "
                      "seconds.</p>")
    res_html = ""
    for column, ylabel, title in (("pool_occupancy", "recipient pool occupancy (mean over nodes)",
                                   "Recipient pool occupancy"),
                                  ("buffers_used", "buffers in use (mean over nodes)", "Buffer use")):
        # a series no node reported (e.g. no recipient pool configured) would be an empty plot with a legend
        if column not in t.resources or not t.resources[column].notna().any():
            continue
        png = save_figure(series_plot(t.resources, "t", column, ["run_mode", "cell", "rep"],
                                      "wall seconds since the run's first sample", ylabel, title, t.timelines),
                          out, "pool_occupancy" if column == "pool_occupancy" else "buffer_use", formats)
        res_html += _img(png, title.lower())
    net_html = ""
    if len(t.utilisation):
        fig, note = link_throughput_plot(t.utilisation, t.timelines)
        png = save_figure(fig, out, "link_throughput", formats)
        net_html = (f"<h3>Link throughput</h3><p>Shown: {html.escape(note)}. Per panel the {TOP_LINKS} links (and "
                    "direction) that carried the most bytes are named, each with its configured rate "
                    "(topology.json) dashed; the other links are grey.</p>" + marks_note
                    + _img(png, "link throughput"))
    top_flows = t.flows.sort_values("bytes", ascending=False).head(20) if len(t.flows) else t.flows
    parts = Page(_table, lambda fig, name, alt: _img(save_figure(fig, out, name, formats), alt), t.timelines)
    shown = [(section, section.html(result, parts)) for section, result in built]
    shown = [(section, fragment) for section, fragment in shown if fragment]     # a section may show nothing
    section_links = "".join(f'<a href="#{s.anchor}">{html.escape(s.link)}</a> · ' for s, _ in shown)
    sections_html = "".join(fragment for _, fragment in shown)

    # core sections in page order: (anchor, link words, HTML); an empty one is left out with its link
    core = [
        ("comparison", "fragmenting vs non-fragmenting", "" if t.comparison is None or t.comparison.empty else
         f"""<h2 id="comparison">Fragmenting vs non-fragmenting</h2>
<p>Cells whose parameters differ only in the mode, side by side; ratio = fragmenting mean / non-fragmenting mean;
ci_separate: whether the two 95% CIs are disjoint (empty when either has none).</p>
{_table(t.comparison, "comparison-table")}"""),
        ("sweeps", "sweeps", f'<h2 id="sweeps">Sweeps</h2>{"".join(sweep_html)}' if sweep_html else ""),
        ("delay", "delay by size", "" if t.delays is None or t.delays.empty else
         f"""<h2 id="delay">Mean delay of delivered messages by size bucket</h2>
<p>Over delivered messages only (<code>messages</code>: how many each mean covers; the delivered share per cell
is in the headline table); wall seconds.</p>
{_img(delay_png, "mean delay by size bucket")}
{_table(t.delays, "delay-table")}"""),
        ("delivery", "delivery metrics", "" if not cdf_html and (t.hops is None or t.hops.empty) else
         f"""<h2 id="delivery">Delivery metrics</h2>
<p>delivery_prob = delivered (message, recipient) pairs / accepted copies; overhead_ratio = (bytes sent on
links − bytes delivered) / bytes delivered; latency in wall seconds over delivered messages; hops = links
crossed (see the summary table for means with n).</p>
{cdf_html}{_sub("Hop counts", t.hops, "hops-table")}"""),
        ("health", "run health", f"""<h2 id="health">Run health</h2>
<p>Losses and duplicates must be zero. <code>lost</code> and <code>late</code> are the loss checker's verdict
(<code>testbed check</code>: late copies were still held in a spool at teardown, naming no loss);
<code>undelivered</code> counts accepted copies without a delivery record. Host saturation (CPU above 90%,
or more than 10% of it stolen by the hypervisor, in more than 10% of the samples; the cause in brackets) makes a
run's timing suspect.</p>
{_table(t.health, "health-table")}{_sub("Refusals by reason", t.refusals, "refusals-table")}"""),
        ("resources", "resources", "" if not res_html and (t.buffer_classes is None or t.buffer_classes.empty) else
         f"""<h2 id="resources">Resources</h2>{marks_note if res_html else ""}{res_html}
{_sub("Buffer classes (index = hops made)", t.buffer_classes, "buffer-table")}"""),
        ("network", "network", "" if not net_html and (t.links is None or t.links.empty) else
         f"""<h2 id="network">Network (from the pcaps)</h2>{net_html}
<p>Direction on a link: <code>a_to_b</code>/<code>b_to_a</code> from the networks behind each end in topology.json;
<code>unknown</code> for frames that are not IPv4 (ARP, IPv6 neighbour discovery) or whose destination is
behind neither end or both.</p>
{_sub("Links", t.links, "links-table")}{_sub("Largest flows", top_flows, "flows-table")}"""),
    ]
    core = [(anchor, words, fragment) for anchor, words, fragment in core if fragment]
    core_links = ('<a href="#cells">headline</a> · <a href="#summary">summary</a> · '
                  + "".join(f'<a href="#{a}">{html.escape(w)}</a> · ' for a, w, _ in core))
    core_html = [fragment for _, _, fragment in core]
    n_runs = len(t.runs)
    headline = "".join(f'<p class="headline"><strong>{html.escape(x)}</strong></p>'
                       for x in sentences(t.comparison))
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>wanbed report: {html.escape(source)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0;font-size:90%}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}img{{max-width:100%}}
.top{{display:flex;flex-wrap:wrap;gap:1em 2em;align-items:flex-start}}.top>div{{flex:1 1 30em}}
.wide{{overflow-x:auto;margin:1em 0}}.wide>table{{margin:0}}#provenance-table td{{font-family:monospace}}
figure{{margin:0}}figcaption{{font-size:85%;max-width:640px}}</style></head><body>
<h1>wanbed report</h1><div class="top"><div><p>Source: <code>{html.escape(source)}</code>; {n_runs} runs.</p>
{headline}
{provenance_html(t.experiment)}</div>{topology_html(t, out)}</div>
<h2 id="cells">Headline metrics per cell and mode</h2>{_table(cell_table_display(cells), "headline-table")}
<p>Each entry is "value [95% CI]" over the repetitions (n per row; [–]: no interval with n &lt; 2).
Delays and throughputs are strictly positive and skewed, so their interval is Student-t on the logarithms
of the per-repetition values, an interval for the geometric mean (exp(mean(log x) ± t·s/√n), always &gt; 0),
and the value shown is that geometric mean. The delays are over delivered messages only: the delivered
share stands beside them. Delivered share (delivery_prob) is a proportion: its interval is a Wilson score
interval on the cell's pooled counts (delivered copies / accepted copies over all repetitions, the value shown),
so it stays inside [0, 1]. Counts use Student-t on the raw values around the arithmetic mean with the lower
bound cut at 0, as does a throughput that was 0 in some repetition ("t floored at 0"); t quantiles are
scipy.stats' exact ones. <code>lost</code> and <code>late</code> are only ever the loss checker's counts per
run (<code>testbed check</code>); <code>undelivered</code> (summary table) counts accepted messages without a
delivery record, which includes late copies still held in a spool. Saturated runs:
runs whose host was saturated. In every table <code>mean</code> is the arithmetic mean,
<code>ci95_lo</code>/<code>ci95_hi</code> the interval, <code>ci_centre</code> the value it bounds,
<code>ci_method</code> how it was computed (t, t on logs, t floored at 0, Wilson on pooled counts) and
<code>ci95</code> = (hi − lo)/2 (the half-width for t on raw values). Tables are beside this file as CSV and in tables/ as Parquet; the packet table (when pcaps were
captured) is in parquet/packets.</p>
<p>Sections: {core_links}{section_links}<a href="#runs">per run</a></p>
<h2 id="summary">Summary per cell, mode and metric</h2>{_table(t.summary, "summary-table")}
{"".join(core_html)}{sections_html}<h2 id="runs">Per-run figures</h2>{_table(t.runs, "runs-table")}
</body></html>
"""
    (out / "report.html").write_text(page, encoding="utf-8")
    return out / "report.html"


# the console's names for the model-unit columns, as the testbed's own table and the README call them
CONSOLE_LABELS = {"throughput_2plus_per_model_h": "thr2+/h", "throughput_2plus_Bps": "thr2+B/s",
                  "delay_model_s": "delay_model_s", "throughput_multi": "thr2+/wall_s",
                  "latency_mean": "delay_wall_s"}


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
    # the records alone cannot tell a copy still held in a spool from a lost one: their count is
    # `undelivered`; the loss checker's lost/late are in the health lines below
    cols = ["delivered", "undelivered", "duplicates", "throughput_2plus_per_model_h", "throughput_2plus_Bps",
            "delay_model_s", "throughput_multi", "delivery_prob", "latency_mean", "overhead_ratio"]
    cols = [c for c in cols if c in wide.columns]
    head = ["cell", "mode", "n", *(CONSOLE_LABELS.get(c, c) for c in cols)]
    rows = [[str(cell), str(mode), str(n[(cell, mode)]), *(_fmt(row.get(c)) for c in cols)]
            for (cell, mode), row in wide.iterrows()]
    console_table(head, rows, align="llr", title="wanbed: mean over repetitions", console=console)
    if health is not None and len(health) and "problems" in health:
        bad = health[health["problems"].astype(str) != ""]
        for r in bad.head(10).itertuples():
            console.print(f"[yellow]run {r.cell}/{r.rep}: {r.problems}[/yellow]")
        if len(bad) > 10:
            console.print(f"[yellow]... and {len(bad) - 10} more runs with problems (see health.csv)[/yellow]")
