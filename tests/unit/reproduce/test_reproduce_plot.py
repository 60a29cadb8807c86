"""The figure's x axis: numbers, categories, or (one x value) the series side by side."""
from __future__ import annotations

from pathlib import Path

from testbed.reproduce.plot import layout, write_png
from testbed.reproduce.spec import MESSAGE_SIZE, Plot
from testbed.reproduce.table import Point

PLOT = Plot(x="nodes.all.resources.rbsad", y="throughput_2plus_Bps", series=["nodes.all.mode"])


def pt(x: object, series: str, mean: float = 1.0) -> Point:
    return Point(x, series, mean, mean * 0.9, mean * 1.1, 3, "cell", "t on logs")


def test_numeric_x_keeps_the_values_and_a_legend() -> None:
    lay = layout([pt(0, "a"), pt(400, "a"), pt(0, "b"), pt(400, "b")], PLOT)
    assert lay.xs == {"a": [0.0, 400.0], "b": [0.0, 400.0]} and lay.ticks is None and not lay.side_by_side
    assert lay.x_label == "nodes.all.resources.rbsad"


def test_categorical_x_in_natural_order() -> None:
    size = Plot(x=MESSAGE_SIZE, y="mean_delay_s")
    lay = layout([pt("11-20", "a"), pt("1", "a"), pt("2-10", "a")], size)
    assert lay.ticks == ["1", "2-10", "11-20"] and lay.xs == {"a": [2.0, 0.0, 1.0]}
    assert lay.x_label == "message size (fragments)"


def test_one_x_value_puts_the_series_side_by_side(tmp_path: Path) -> None:
    pts = [pt(400, "mode=fragmenting, rate=4000bit", 988.0), pt(400, "mode=non-fragmenting, rate=4000bit", 867.0)]
    lay = layout(pts, PLOT)
    assert lay.side_by_side and lay.x_label == "nodes.all.resources.rbsad = 400"
    assert lay.xs == {"mode=fragmenting, rate=4000bit": [0.0], "mode=non-fragmenting, rate=4000bit": [1.0]}
    assert lay.ticks == ["mode=fragmenting\nrate=4000bit", "mode=non-fragmenting\nrate=4000bit"]
    out = tmp_path / "fig.png"
    write_png(pts, PLOT, "one point", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_series_at_one_x_stays_a_plain_point() -> None:
    lay = layout([pt(400, "a")], PLOT)
    assert not lay.side_by_side and lay.xs == {"a": [400.0]}
