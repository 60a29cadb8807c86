"""The figure's PNG: mean with its 95% CI per x, one line per series (the report's sweep plot, generalised)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from node.natural import natural_key
from testbed.reproduce.spec import MESSAGE_SIZE, Plot
from testbed.reproduce.table import Point, as_float, is_number


@dataclass
class Layout:
    """Where each series' points go on the x axis, the axis' tick labels (None: numeric axis) and its label."""
    xs: dict[str, list[float]]
    ticks: list[str] | None
    x_label: str
    side_by_side: bool = False     # one x value: the series are the categories, no legend


def layout(pts: list[Point], plot: Plot) -> Layout:
    numeric = all(is_number(pt.x) for pt in pts)
    categories = [str(x) for x in sorted(dict.fromkeys(pt.x for pt in pts), key=natural_key)]
    names = list(dict.fromkeys(pt.series for pt in pts))
    x_label = "message size (fragments)" if plot.x == MESSAGE_SIZE else plot.x
    if len(categories) == 1 and len(names) > 1:
        # a figure at one point: the series side by side, not stacked on one vertical line
        return Layout({name: [float(i)] for i, name in enumerate(names)},
                      [name.replace(", ", "\n") for name in names], f"{x_label} = {categories[0]}", side_by_side=True)
    xs = {name: [as_float(pt.x) if numeric else float(categories.index(str(pt.x)))
                 for pt in pts if pt.series == name] for name in names}
    return Layout(xs, None if numeric else categories, x_label)


def write_png(pts: list[Point], plot: Plot, title: str, path: Path, y_label: str | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")          # no display on the machine that runs the sweep
    import matplotlib.pyplot as plt

    lay = layout(pts, plot)
    shares = any(pt.share is not None for pt in pts)
    if shares:
        # a second panel: the delivered share each mean delay covers (the undelivered ones are censored)
        fig, (ax, ax_share) = plt.subplots(2, 1, figsize=(7, 7), sharex=True, height_ratios=(3, 1.4))
    else:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    for series, xs in lay.xs.items():
        own = [pt for pt in pts if pt.series == series]
        ys = [pt.mean for pt in own]
        # asymmetric error bars from the bounds; none where the CI is undefined (one repetition)
        low = [0.0 if math.isnan(pt.ci_lo) else max(0.0, pt.mean - pt.ci_lo) for pt in own]
        high = [0.0 if math.isnan(pt.ci_hi) else max(0.0, pt.ci_hi - pt.mean) for pt in own]
        ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=series)
        if shares:
            share = [pt.share or (math.nan,) * 4 for pt in own]
            ax_share.errorbar(xs, [v[1] for v in share],
                              yerr=[[0.0 if math.isnan(v[2]) else max(0.0, v[1] - v[2]) for v in share],
                                    [0.0 if math.isnan(v[3]) else max(0.0, v[3] - v[1]) for v in share]],
                              marker=".", capsize=2, linewidth=0.8)
    if lay.side_by_side and lay.ticks is not None:
        ax.set_xticks(range(len(lay.ticks)), lay.ticks, fontsize="x-small")
        ax.set_xlim(-0.5, len(lay.ticks) - 0.5)
    elif lay.ticks is not None:
        ax.set_xticks(range(len(lay.ticks)), lay.ticks)
    if shares:
        ax_share.set_ylabel("delivered share\n(Wilson 95% CI)", fontsize="small")
        ax_share.set_ylim(0, 1.05)
        ax_share.grid(alpha=0.3)
        ax_share.set_xlabel(lay.x_label)
    else:
        ax.set_xlabel(lay.x_label)
    methods = {pt.method for pt in pts if pt.method}
    centre = "geometric mean, 95% CI t on logs" if methods == {"t on logs"} else "mean, 95% CI"
    ax.set_ylabel(f"{y_label or plot.y}\n({centre})")
    ax.set_title(title, fontsize="small", wrap=True)
    ax.grid(alpha=0.3)
    if pts and not lay.side_by_side:
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
