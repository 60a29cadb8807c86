"""The report's plotting helpers: matplotlib set up for files, saving a figure, interval bars, and the
core figures (delay by size, sweeps, latency CDF, series over time, link throughput).

The report's sections draw with `pyplot()` and hand their figures to the page, which
saves them with `save_figure`; nothing here imports the report or a section.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd

from .compare import BUCKET_ORDER
from .layout import RunTimeline
from .stats import LOG_T, RAW_T_FLOOR

MODE_COLOURS = {"fragmenting": "tab:blue", "non-fragmenting": "tab:orange"}


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display); imported on first use, as matplotlib is slow to load."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, out: Path, name: str, formats: tuple[str, ...]) -> bytes:
    """Write `fig` as out/name.png (and .svg when asked), close it; returns the PNG (the HTML embeds it)."""
    plt = pyplot()
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


def ci_label(df: pd.DataFrame) -> str:
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


# a value axis spanning this ratio or more goes logarithmic: otherwise one bucket dominates and the rest
# lie flat at the bottom
LOG_RATIO = 20.0


def wants_log(values) -> bool:
    """Whether an axis over these values should be logarithmic (all > 0, max / min >= LOG_RATIO)."""
    vals = [float(v) for v in values if v is not None and v == v]
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) >= LOG_RATIO


def delay_plot(delays: pd.DataFrame):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (cell, mode), g in delays.groupby(["cell", "mode"], sort=True):
        x = [BUCKET_ORDER.index(b) for b in g["bucket"]]
        y, err = interval_bars(g, "mean_delay_s")
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=f"{mode} ({cell})")
    ax.set_xticks(range(len(BUCKET_ORDER)), BUCKET_ORDER)
    ax.set_xlabel("message size (fragments)")
    ax.set_ylabel(f"delay of delivered messages (wall s): {ci_label(delays)}")
    centre = "ci_centre" if "ci_centre" in delays else "mean_delay_s"
    if len(delays) and wants_log(delays[centre]):
        ax.set_yscale("log")
    ax.set_title("Mean delivery delay by size bucket")
    ax.grid(alpha=0.3)
    if len(delays):
        ax.legend(fontsize="small")
    return fig


def sweep_plot(key: str, table: pd.DataFrame, metric: str):
    plt = pyplot()
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
    ax.set_ylabel(f"{metric}\n{ci_label(table)}")
    ax.set_title(f"{metric} vs {key.split('.')[-1]}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def cdf_plot(cdf: pd.DataFrame):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (cell, mode), g in cdf.groupby(["cell", "mode"], sort=True):
        ax.plot(g["delay_s"], g["q"], label=f"{mode} ({cell}, n={int(g['n_runs'].iloc[0])})")
    ax.set_xlabel("delivery latency (wall s)")
    if len(cdf) and wants_log(cdf["delay_s"]):
        ax.set_xscale("log")
    ax.set_ylabel("fraction of deliveries")
    ax.set_title("Latency CDF (all repetitions pooled)")
    ax.grid(alpha=0.3)
    if len(cdf):
        ax.legend(fontsize="small")
    return fig


PHASE_COLOURS = {"warm-up": "tab:olive", "workload": "tab:cyan", "drain": "tab:purple"}
PHASE_ALPHA = 0.12
# one colour per fault kind, in order of first appearance on a plot
FAULT_COLOURS = ("tab:red", "tab:brown", "black", "tab:pink", "tab:gray", "darkred", "darkgoldenrod")
MAX_FAULT_NAMES = 12        # faults named on a plot; more would cover it (their lines are all drawn)


def mark_timelines(ax, shown: list[tuple[RunTimeline, float, float]]) -> int:
    """Shade the phases (warm-up, workload, drain) and draw a dotted line at each fault of the runs on `ax`,
    one legend entry per phase and per fault kind. `shown`: (timeline, origin, per) per run drawn, the origin
    being the wall-clock second at x = 0 of that run's curve and `per` the wall seconds per unit of the x axis
    (1 for wall seconds, the time_scale for model seconds). Several runs' spans share the shading, so where
    they agree it is as dark as one run's. Returns how many marks were drawn."""
    drawn = 0
    labelled: set[str] = set()

    def label(text: str) -> str:
        if text in labelled:
            return "_nolegend_"
        labelled.add(text)
        return text

    alpha = PHASE_ALPHA / max(1, len(shown))
    for timeline, origin, per in shown:
        for name, start, end in timeline.phases():
            ax.axvspan((start - origin) / per, (end - origin) / per, color=PHASE_COLOURS[name], alpha=alpha,
                       linewidth=0, label=label(name))
            drawn += 1
    named: set[tuple[float, str]] = set()
    colours: dict[str, str] = {}
    many = sum(len(timeline.faults) for timeline, _, _ in shown) > MAX_FAULT_NAMES
    for timeline, origin, per in shown:
        for fault in timeline.faults:
            x = (fault.ts - origin) / per
            colour = colours.setdefault(fault.kind, FAULT_COLOURS[len(colours) % len(FAULT_COLOURS)])
            ax.axvline(x, color=colour, linestyle=":", linewidth=1.2, label=label(f"fault: {fault.kind}"))
            text = f"{fault.kind} {fault.target}".strip()
            # the same fault of several runs is named once; past MAX_FAULT_NAMES the legend names the kinds
            if not many and (round(x, 1), text) not in named:
                named.add((round(x, 1), text))
                ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                            textcoords="offset points", rotation=90, va="top", fontsize="xx-small",
                            color=colour)
            drawn += 1
    return drawn


def mark_runs(ax, timelines: dict[tuple[str, str], RunTimeline] | None,
              clocks: dict[tuple[str, str], tuple[float, float]]) -> int:
    """mark_timelines for the runs drawn on `ax`: `clocks` maps each one's (cell, rep) to (the wall-clock second
    at x = 0, wall seconds per x unit); runs without a timeline are left unmarked."""
    if not timelines:
        return 0
    return mark_timelines(ax, [(timelines[k], origin, per) for k, (origin, per) in sorted(clocks.items())
                               if k in timelines])


def _run_key(key) -> tuple[str, str]:
    return str(key[0]), str(key[1])


def series_plot(df: pd.DataFrame, x: str, y: str, group: list[str], xlabel: str, ylabel: str, title: str,
                timelines: dict[tuple[str, str], RunTimeline] | None = None):
    """One line per group over time. With `timelines` and a `t0` column (the wall-clock second of each run's
    x = 0, x in wall seconds), the runs' phases and faults are marked (mark_timelines)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, g in df.groupby(group, sort=True):
        label = " ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        ax.plot(g[x], g[y], label=label, linewidth=1)
    marks = 0
    if timelines and {"cell", "rep", "t0"} <= set(df.columns):
        origins = df.groupby(["cell", "rep"], sort=True)["t0"].min()
        marks = mark_runs(ax, timelines, {_run_key(k): (float(t0), 1.0) for k, t0 in origins.items() if t0 == t0})
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(df) and df.groupby(group).ngroups <= 12:
        ax.legend(fontsize="x-small")
    elif marks:     # too many runs to name: the legend says only what the marks are
        handles = [h for h, lbl in zip(*ax.get_legend_handles_labels()) if lbl in PHASE_COLOURS or
                   lbl.startswith("fault: ")]
        ax.legend(handles=handles, fontsize="x-small")
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


def link_throughput_plot(utilisation: pd.DataFrame, timelines: dict[tuple[str, str], RunTimeline] | None = None):
    """One panel per shown run: the busiest links (by bytes) named and coloured, each with its configured
    rate as a dashed line; the other links thin and grey; the run's phases and faults marked when its
    timeline is given. Returns (figure, note on the runs shown)."""
    plt = pyplot()
    shown, note = link_panel_runs(utilisation)
    cols = 2 if len(shown) > 1 else 1
    rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.2 * rows), squeeze=False)
    for ax, (cell, rep) in zip(axes.flat, shown):
        u = utilisation[(utilisation["cell"].astype(str) == cell) & (utilisation["rep"].astype(str) == rep)].copy()
        origin = float(u["bin"].min())
        u["t"] = u["bin"] - origin
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
        mark_runs(ax, timelines, {(cell, rep): (origin, 1.0)})
        ax.set_title(f"{cell} rep {rep}", fontsize="medium")
        ax.set_xlabel("wall seconds since the run's first captured packet")
        ax.set_ylabel("kbit/s (1 s bins)")
        ax.grid(alpha=0.3)
        if busiest or ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small", title=f"top {len(busiest)} by bytes; dashed: configured rate",
                      title_fontsize="x-small")
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    return fig, note
