"""testbed/reproduce: the reproduction file loader, its --set arguments, and the figure table."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from node.errors import UserError
from testbed.reproduce import run, spec, table

pytestmark = pytest.mark.timeout(30)

GOOD = """
title: "a figure"
scenario: {scenario}
set: {{duration: 100s}}
sweep: {{grid: {{nodes.all.mode: [fragmenting, non-fragmenting], nodes.all.resources.rbsad: [0, 400]}}, reps: 2}}
plot: {{x: nodes.all.resources.rbsad, y: throughput_multi, series: [nodes.all.mode]}}
quick: {{sweep: {{grid: {{nodes.all.resources.rbsad: [0]}}, reps: 1}}}}
"""


def write(tmp_path: Path, text: str, name: str = "paper-1.2.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write(tmp_path, GOOD.format(scenario=spec.REPO / "scenarios" / "brachman-biring.yaml"))


def test_shipped_reproductions_load_and_plan() -> None:
    assert "brachman-6.4" in spec.names()
    for name in spec.names():
        r = spec.load(spec.find(name))
        assert r.scenario.is_file()
        assert r.plot.x == spec.MESSAGE_SIZE or r.plot.x in (r.sweep or {}).get("grid", {r.plot.x: 0})
        run.check_metric(r)
    r = spec.load(spec.find("brachman-6.4"))
    assert r.figure_dir == spec.REPO / "docs" / "reproductions" / "brachman" / "brachman-6.4"
    assert r.sweep is not None and r.sweep["reps"] == 3 and len(r.sweep["grid"]) == 3


def test_good_file_and_its_set_arguments(good: Path) -> None:
    r = spec.load(good)
    assert (r.name, r.title, r.plot.series) == ("paper-1.2", "a figure", ["nodes.all.mode"])
    assert r.figure_dir == spec.REPO / "docs" / "reproductions" / "paper" / "paper-1.2"
    full = run.set_arguments(r, quick=False)
    assert full[0] == 'duration="100s"' and full[1].startswith('sweep={"grid"')
    # --quick: the scenario's quick: names duration (it wins), the figure's sweep gives way to its quick:
    assert run.set_arguments(r, quick=True) == \
        ['sweep={"grid": {"nodes.all.resources.rbsad": [0]}, "reps": 1}']


@pytest.mark.parametrize("edit,message", [
    (lambda t: t + "colour: red\n", "unknown key 'colour'"),
    (lambda t: t.replace('title: "a figure"\n', ""), "missing key 'title'"),
    (lambda t: t.replace("y: throughput_multi", "y: 3"), "plot.y: expected a non-empty string"),
    (lambda t: t.replace("x: nodes.all.resources.rbsad", "x: duration"), "'duration' is not a key of sweep.grid"),
    (lambda t: t.replace("reps: 2", "reps: 0"), "sweep.reps"),
    (lambda t: t.replace("x: nodes.all.resources.rbsad", "x: message_size"), "plots mean_delay_s"),
    (lambda t: t.replace("set: {duration: 100s}", "set: [duration]"), "set: expected a mapping"),
    (lambda t: t + "  bad: [\n", "not valid YAML"),
    (lambda t: t.replace('title: "a figure"', 'title: &t "a figure"\nalso: *t'), "anchors and aliases"),
    (lambda t: t.replace("scenario: ", "scenario: /nonexistent"), "does not exist"),
])
def test_bad_files_are_one_sentence(good: Path, edit, message: str) -> None:
    good.write_text(edit(good.read_text()))
    with pytest.raises(UserError) as info:
        spec.load(good)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_name_lists_the_known_ones(tmp_path: Path) -> None:
    write(tmp_path, "title: x\n", "known-1.yaml")
    with pytest.raises(UserError, match="known: known-1"):
        spec.find("nope", tmp_path)


def test_unknown_metric_is_refused_before_running(good: Path) -> None:
    good.write_text(good.read_text().replace("y: throughput_multi", "y: happiness"))
    with pytest.raises(UserError, match="happiness"):
        run.check_metric(spec.load(good))


@pytest.mark.parametrize("ci_columns", ["half", "bounds"])
def test_table_reads_either_ci_form(tmp_path: Path, ci_columns: str) -> None:
    cells = [{"id": f"c{m}{v}", "params": {"nodes.all.mode": m, "nodes.all.resources.rbsad": v}}
             for m in ("frag", "non") for v in (400, 0)]
    (tmp_path / "experiment.json").write_text(json.dumps({"cells": cells}))
    head = "cell,mode,metric,mean,ci95,n" if ci_columns == "half" else "cell,mode,metric,mean,ci95_lo,ci95_hi,n"
    lines = [head]
    for c in cells:
        ci = "2.0" if ci_columns == "half" else "8.0,12.0"
        lines.append(f"{c['id']},m,throughput_multi,10.0,{ci},3")
        lines.append(f"{c['id']},m,latency_mean,1.0,{ci},3")
    lines.append("cfrag0,m,throughput_multi,,,,1" if ci_columns == "bounds" else "other,m,throughput_multi,1,,1")
    (tmp_path / "summary.csv").write_text("\n".join(lines) + "\n")
    plot = spec.Plot(x="nodes.all.resources.rbsad", y="throughput_multi", series=["nodes.all.mode"])
    pts = table.points(tmp_path / "summary.csv", table.cell_params(tmp_path / "experiment.json"), plot)
    keys = [(p.series, p.x) for p in pts]
    assert keys == sorted(keys) and {k[0] for k in keys} == {"mode=frag", "mode=non"}     # by series, then x
    full = [p for p in pts if p.n == 3]
    assert len(full) == 4 and all((p.ci_lo, p.ci_hi) == (8.0, 12.0) for p in full)     # either form: bounds
    table.write_csv(pts, tmp_path / "fig.csv")
    assert (tmp_path / "fig.csv").read_text().splitlines()[0] == ",".join(table.COLUMNS)
    with pytest.raises(UserError, match="not a metric"):
        table.points(tmp_path / "summary.csv", {}, spec.Plot(x="a", y="nope"))
    one = [p for p in pts if p.n == 1]
    assert all(math.isnan(p.ci_lo) for p in one)


def test_a_bad_set_value_names_the_file_before_anything_runs(good: Path, tmp_path: Path) -> None:
    import io

    good.write_text(good.read_text().replace("set: {duration: 100s}", "set: {durationn: 100s}"))
    with pytest.raises(UserError, match=r"paper-1\.2\.yaml.*durationn"):
        run.reproduce(spec.load(good), tmp_path / "out", None, False, progress=None, stream=io.StringIO())
    assert not (tmp_path / "out").exists()


def test_points_sort_unit_suffixed_x_by_their_number() -> None:
    from testbed.reproduce.table import natural_key
    xs = ["16000bit", "2667bit", "8000bit", "4000bit"]
    assert sorted(xs, key=natural_key) == ["2667bit", "4000bit", "8000bit", "16000bit"]
    assert sorted([400, 0, 1600], key=natural_key) == [0, 400, 1600]


def test_by_size_figure_reads_the_delay_table(tmp_path: Path, good: Path) -> None:
    good.write_text(good.read_text().replace("x: nodes.all.resources.rbsad, y: throughput_multi",
                                             "x: message_size, y: mean_delay_s"))
    r = spec.load(good)
    run.check_metric(r)
    assert table.report_table(r.plot) == "delay_by_size.csv"
    cells = [{"id": m, "params": {"nodes.all.mode": m}} for m in ("frag", "non")]
    (tmp_path / "experiment.json").write_text(json.dumps({"cells": cells}))
    lines = ["cell,mode,bucket,mean_delay_s,ci95,ci95_lo,ci95_hi,ci_centre,ci_method,n,messages"]
    for c in ("frag", "non"):
        for bucket, d in (("11-20", 30.0), ("1", 2.0), ("101+", 90.0), ("2-10", 9.0)):
            lines.append(f"{c},m,{bucket},{d},1,{d - 1},{d + 1},{d - 0.5},t on logs,3,40")
    (tmp_path / "delay_by_size.csv").write_text("\n".join(lines) + "\n")
    pts = table.points(tmp_path / "delay_by_size.csv", table.cell_params(tmp_path / "experiment.json"), r.plot)
    assert [p.x for p in pts if p.series == "mode=frag"] == ["1", "2-10", "11-20", "101+"]     # size order
    first = pts[0]
    assert (first.mean, first.ci_lo, first.ci_hi, first.n) == (1.5, 1.0, 3.0, 3)     # the CI's centre
    # the report's delays are wall seconds: the figure gives them in model seconds (time_scale 0.05 = x20)
    (tmp_path / "experiment.json").write_text(json.dumps({"cells": cells, "time_scale": 0.05}))
    model = table.in_model_seconds(pts, table.experiment_time_scale(tmp_path / "experiment.json"))
    assert (model[0].mean, model[0].ci_lo, model[0].ci_hi, model[0].n) == (30.0, 20.0, 60.0, 3)
    assert table.experiment_time_scale(tmp_path / "missing.json") == 1.0
    assert table.in_model_seconds(pts, 1.0) is pts


def test_reps_table_has_a_row_per_repetition(tmp_path: Path) -> None:
    cells = [{"id": "c1", "params": {}, "reps": [{"rep": 1, "dir": "c1/1", "seed": 5, "status": "complete",
                                                  "wall_s": 44.84},
                                                 {"rep": 2, "dir": "c1/2", "seed": 6, "status": "failed"}]}]
    (tmp_path / "experiment.json").write_text(json.dumps({"cells": cells}))
    (tmp_path / "c1" / "1").mkdir(parents=True)
    (tmp_path / "c1" / "1" / "summary.json").write_text(json.dumps(
        {"accepted": 10, "delivered": 8, "late": 2, "lost": 0, "stalled": False,
         "saturation": {"saturated": False, "mean_cpu": 40.5, "max_cpu": 81.0}}))
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "runs.csv").write_text("cell,rep,mode,throughput_2plus_Bps\nc1,1,m,123.456789\n")
    plot = spec.Plot(x="k", y="throughput_2plus_Bps")
    rows = table.rep_rows(tmp_path, plot)
    assert rows[0] == {"cell": "c1", "rep": 1, "seed": 5, "status": "complete", "value": 123.5, "accepted": 10,
                       "delivered": 8, "late": 2, "lost": 0, "stalled": False, "host_cpu_mean": 40.5,
                       "host_cpu_max": 81.0, "saturated": False, "wall_s": 44.8}
    assert rows[1]["status"] == "failed" and rows[1]["value"] == "" and rows[1]["wall_s"] == ""
    table.write_reps(rows, tmp_path / "fig" / "reps.csv")
    lines = (tmp_path / "fig" / "reps.csv").read_text().splitlines()
    assert lines[0] == ",".join(table.REP_COLUMNS) and len(lines) == 3
    by_size = table.rep_rows(tmp_path, spec.Plot(x=spec.MESSAGE_SIZE, y="mean_delay_s"))
    assert by_size[0]["value"] == ""             # one delay per bucket, not per rep: no single value


def test_ratio_pairs_the_cells_by_repetition(tmp_path: Path) -> None:
    sweep = {"grid": {"mode": ["frag", "non"], "rate": [1, 2]}, "reps": 3, "seeds": "per_rep"}
    plot = spec._plot("f.yaml", {"x": "rate", "y": "thr", "series": ["mode"],
                                 "ratio": {"key": "mode", "of": "frag", "to": "non"}}, sweep)
    params = {f"{m}-{r}": {"mode": m, "rate": r} for m in ("frag", "non") for r in (1, 2)}
    values = {("frag-1", 1): 2.0, ("frag-1", 2): 4.0, ("frag-1", 3): 8.0,
              ("non-1", 1): 1.0, ("non-1", 2): 2.0, ("non-1", 3): 4.0,     # always half: ratio 2 exactly
              ("frag-2", 1): 1.0, ("non-2", 1): 4.0, ("non-2", 2): 1.0}   # one pair only
    rows = [{"cell": c, "rep": r, "value": v} for (c, r), v in values.items()]
    table.write_ratios(table.ratios(rows, params, plot), tmp_path / "ratio.csv")
    lines = (tmp_path / "ratio.csv").read_text().splitlines()
    assert lines[0] == ",".join(table.RATIO_COLUMNS)
    assert lines[1].startswith("1,all,2.0,2.0,2.0,3,t on logs,2 2 2,frag-1,non-1")
    assert lines[2].startswith("2,all,0.25,nan,nan,1,")     # one repetition: no interval


@pytest.mark.parametrize("ratio,sweep_seeds,message", [
    ({"key": "rate", "of": 1, "to": 2}, "per_rep", "not one of plot.series"),
    ({"key": "mode", "of": "frag", "to": "non"}, "per_cell", "needs sweep.seeds: per_rep"),
    ({"key": "mode", "of": "frag", "to": "x"}, "per_rep", "plot.ratio.to: 'x' is not a value"),
    ({"key": "mode", "of": "frag", "too": "non"}, "per_rep", "unknown key 'too'"),
])
def test_bad_ratio_is_one_sentence(ratio: dict, sweep_seeds: str, message: str) -> None:
    sweep = {"grid": {"mode": ["frag", "non"], "rate": [1, 2]}, "reps": 3, "seeds": sweep_seeds}
    with pytest.raises(UserError, match=message):
        spec._plot("f.yaml", {"x": "rate", "y": "thr", "series": ["mode"], "ratio": ratio}, sweep)
