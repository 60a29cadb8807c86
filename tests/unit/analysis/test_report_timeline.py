"""The report's time plots mark each run's phases (warm-up, workload, drain) and its faults."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from spark_analysis import plots
from spark_analysis.layout import find_runs, run_timeline, run_timelines

END = 1_000_100.0   # the workload_end event's wall clock


def _run_dir(root: Path, cell: str = "c", rep: str = "1") -> Path:
    """A run directory with only what the timeline reads: time_scale 0.5, 40 model s of warm-up (20 wall s),
    a 60 wall s workload ending at END, a 10 s drain, a kill and a partition during the workload."""
    d = root / cell / rep
    (d / "nodes" / "n1").mkdir(parents=True)
    (d / "scenario.yaml").write_text("name: t\nduration: 120.0\ntime_scale: 0.5\nworkload:\n  warmup: 40.0\n")
    (d / "summary.json").write_text(json.dumps({"time_scale": 0.5, "duration_wall_s": 60.0,
                                                "drain": {"seconds": 10.0, "empty": True}}))
    events = [{"ts": END - 30, "node": "testbed", "event": "kill", "target": "n2", "scope": "process"},
              {"ts": END - 20, "node": "testbed", "event": "partition", "target": [["n1"], ["n2", "n3"]]},
              {"ts": END, "node": "testbed", "event": "workload_end", "target": "all", "accepted": 3},
              {"ts": END + 5, "node": "testbed", "event": "records_failed", "target": "all", "counts": {}}]
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + "not json\n")
    return d


def test_timeline_from_the_run_directory(tmp_path) -> None:
    run = find_runs(_run_dir(tmp_path))[0]
    tl = run_timeline(run)
    assert tl.phases() == [("warm-up", END - 80, END - 60), ("workload", END - 60, END), ("drain", END, END + 10)]
    assert [(f.kind, f.target, f.ts) for f in tl.faults] == [("kill", "n2", END - 30),
                                                              ("partition", "n1 | n2 n3", END - 20)]
    (run.path / "events.jsonl").unlink()      # no workload_end: no phases, and no error
    assert run_timeline(run).phases() == [] and run_timeline(run).faults == ()


def _spans(ax) -> dict[str, tuple[float, float]]:
    out = {}
    for p in ax.patches:     # axvspan: a Rectangle (a Polygon in older matplotlib)
        xs = [p.get_x(), p.get_x() + p.get_width()] if hasattr(p, "get_width") else [x for x, _ in p.get_xy()]
        if p.get_label() in plots.PHASE_COLOURS:
            out[p.get_label()] = (min(xs), max(xs))
    return out


@pytest.mark.parametrize("per_run", [False, True])
def test_time_plots_mark_phases_and_faults(tmp_path, per_run) -> None:
    _run_dir(tmp_path)
    timelines = run_timelines(find_runs(tmp_path))
    t0 = END - 90      # the run's first sample: x = 0
    if per_run:        # link throughput: one panel per run, x = 0 at the first packet bin
        util = pd.DataFrame({"cell": "c", "rep": "1", "link": "n1-n2", "direction": "a_to_b",
                             "bin": [t0 + b for b in range(100)], "bits_per_s": 1000.0, "rate_bps": 8000.0})
        fig, _ = plots.link_throughput_plot(util, timelines)
    else:              # resources over time, several runs' lines in one axes
        res = pd.DataFrame({"cell": "c", "rep": "1", "run_mode": "fragmenting", "t": range(100), "t0": t0,
                            "buffers_used": 1.0})
        fig = plots.series_plot(res, "t", "buffers_used", ["run_mode", "cell", "rep"], "wall s", "buffers", "b",
                                timelines)
    ax = fig.axes[0]
    spans = _spans(ax)
    assert spans == {"warm-up": pytest.approx((10, 30)), "workload": pytest.approx((30, 90)),
                     "drain": pytest.approx((90, 100))}
    faults = {ln.get_label(): ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == ":"}
    assert faults == {"fault: kill": pytest.approx(60), "fault: partition": pytest.approx(70)}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"warm-up", "workload", "drain", "fault: kill", "fault: partition"} <= set(legend)
    assert any("n2" in t.get_text() for t in ax.texts)       # the fault's target is named on the plot
    plots.pyplot().close(fig)


def test_report_page_explains_the_marks(tmp_path) -> None:
    from spark_analysis.report import ReportTables, write

    _run_dir(tmp_path / "runs")
    res = pd.DataFrame({"cell": "c", "rep": "1", "run_mode": "fragmenting", "t": range(3), "t0": END - 90,
                        "pool_occupancy": float("nan"), "buffers_used": 1.0})
    tables = ReportTables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), resources=res,
                          timelines=run_timelines(find_runs(tmp_path / "runs")))
    page = write(tmp_path / "out", "src", tables).read_text()
    assert "phases are shaded" in page and (tmp_path / "out" / "buffer_use.png").is_file()


def test_section_time_plots_mark_phases_on_their_own_clock(tmp_path) -> None:
    """The gateway queue (model s from the first metrics line) and the rate figures (the paper's clock)."""
    from spark_analysis.layout import Fault, RunTimeline
    from spark_analysis.sections import gateway
    from spark_analysis.sections.rates import figures
    from tests.unit.analysis.test_rates_section import tables
    from tests.unit.analysis.test_report_gateway_section import acc, run

    gt = gateway.build([run(tmp_path, "g", "1", acc(250, 100.0, 0.9, {}))])    # metrics from ts 100, scale 0.1
    timelines = {("g", "1"): RunTimeline(99.9, 100.0, 100.2, 100.3, (Fault(100.1, "link_down", "gw-o1"),))}
    fig, _, _ = gateway.figure(gt, timelines)
    ax = fig.axes[0]
    assert _spans(ax) == {"warm-up": pytest.approx((-1, 0)), "workload": pytest.approx((0, 2)),
                          "drain": pytest.approx((2, 3))}
    assert [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_label() == "fault: link_down"] == [pytest.approx(1)]
    rt = tables()
    rt.clocks = {("with", "1"): (1000.0, 0.5)}          # the paper's 0 at wall 1000, half a wall s per model s
    for fig, _, _ in figures(rt, {("with", "1"): RunTimeline(1000.0, 1010.0, 1100.0)}):
        assert _spans(fig.axes[0]) == {"warm-up": pytest.approx((0, 20)), "workload": pytest.approx((20, 200))}
        plots.pyplot().close(fig)
