"""`testbed reproduce NAME`: the scenario with the figure's overrides, resumable, then the report and the figure.

    run:    runner.run_experiment into OUT (default runs/reproduce/NAME, NAME-quick with --quick) with
            --resume semantics: complete repetitions are skipped, so an interrupted figure continues
    report: the Spark report of OUT into OUT/report (no packet captures: a figure needs none)
    figure: OUT/report/summary.csv (delay_by_size.csv for x message_size, its delays in model seconds) by
            plot.x and plot.series
            -> NAME.csv and NAME.png in the figure folder (OUT/figure with --quick, so a smoke run never
            replaces the committed figure), and reps.csv there: one row per repetition (its value,
            accepted / delivered / late / lost, stalled, host CPU, saturated, wall time), and with
            plot.ratio ratio.csv: the two cells' ratio repetition by repetition, with its CI; with `table:`
            NAME-table.csv (its metrics per cell) and, for dynamic routing, routes.csv, tables.csv, links.csv
    statements: each of the file's statements on every repetition it is about, printed beside the paper's
            words and written to statements.csv in the figure folder; one that does not hold makes the
            status 1. The series they measure over time: NAME-series.csv and NAME-series.png there
    section tables: the report's tables and figures of a subsystem section the figure's runs have (the MQ
            rate control's rate_*.csv and rate_*.png), copied to the figure folder: every CSV behind a
            figure is committed with it
    commits: every CSV the run wrote there gets a `commit` column (the commit each row's repetitions ran
            at) and commits.txt says in one sentence whether the rows mix commits (commits.py)
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, TextIO

import yaml

from node.errors import UserError
from testbed.experiment import runner, sweep
from testbed.experiment.progress import Progress
from testbed.reproduce import commits, plot, routes, statements, table, traces
from testbed.reproduce.spec import MESSAGE_SIZE, REPO, Reproduction

EXIT_INTERRUPTED = runner.EXIT_INTERRUPTED


def default_out(repro: Reproduction, quick: bool) -> Path:
    return REPO / "runs" / "reproduce" / (f"{repro.name}-quick" if quick else repro.name)


def set_arguments(repro: Reproduction, quick: bool) -> list[str]:
    """The figure's overrides as --set strings. A full run: `set:` then `sweep:`. With --quick the scenario's
    own quick: section wins over `set:` for the keys it names, the figure's sweep is left out (the scenario's
    quick sweep, or the figure's quick: section, decides), and the figure's quick: overrides come last."""
    if not quick:
        extra = {"sweep": repro.sweep} if repro.sweep is not None else {}
        return sweep.set_arguments({**repro.sets, **extra})
    quick_keys = set(_scenario_quick(repro.scenario))
    sets = {k: v for k, v in repro.sets.items() if k not in quick_keys}
    return sweep.set_arguments({**sets, **repro.quick})


def check_metric(repro: Reproduction) -> None:
    """plot.y and table.metrics must be metrics of the report's summary table: say so before hours of runs,
    not after."""
    from spark_analysis.compare import RUN_METRICS, SUMMARY_METRICS    # here: it loads pandas and pyspark
    metrics = [*RUN_METRICS, *SUMMARY_METRICS]
    # with x message_size the spec already required the by-size table's mean_delay_s
    wanted = [] if repro.plot.x == MESSAGE_SIZE else [("plot.y", repro.plot.y)]
    wanted += [("table.metrics", m) for m in (repro.table.metrics if repro.table else [])]
    for key, metric in wanted:
        if metric not in metrics:
            raise UserError(f"{repro.source}: {key}: {metric!r} is not a metric of the report's summary table "
                            f"(metrics: {', '.join(metrics)}).")


def reproduce(repro: Reproduction, out: Path, reps: int | None, quick: bool, progress: Progress,
              stream: TextIO) -> int:
    """Run, report, figure; returns the run's exit status (0, 1 problems in some rep, 130 interrupted)."""
    check_metric(repro)
    sets = set_arguments(repro, quick)
    try:
        runner.plan(str(repro.scenario), out, reps, quick, sets)     # every cell valid, before anything runs
    except UserError as exc:
        # the error speaks of --set; the value came from the reproduction file
        raise UserError(f"{repro.source} (set:, sweep:, quick:): {exc}") from None
    print(f"testbed reproduce {repro.name}: {repro.title}", file=stream)
    rc = runner.run_experiment(str(repro.scenario), out, reps, True, quick, sets, progress, stream=stream)
    if rc == EXIT_INTERRUPTED or rc >= 128:
        return rc
    figure_dir = out / "figure" if quick else repro.figure_dir
    written_from = time.time()
    csv_path, png_path = write_figure(repro, out, figure_dir)
    print(f"figure: {png_path}\ntable:  {csv_path}", file=stream)
    if repro.paper is not None:
        print("paper:  " + yaml.safe_dump(repro.paper, default_flow_style=True, width=200).strip(), file=stream)
    if not check_statements(repro, out, figure_dir, stream) and rc == 0:
        rc = 1
    copied = copy_section_tables(out / "report", figure_dir)
    if copied:
        print(f"tables: {', '.join(p.name for p in copied)} (in {figure_dir})", file=stream)
    print(f"commits: {commits.stamp_folder(out, figure_dir, written_from)}", file=stream)
    return rc


# report tables and figures of a subsystem section, by name prefix: a figure drawn from them needs them committed
SECTION_PREFIXES = ("rate_",)


def copy_section_tables(report_dir: Path, figure_dir: Path) -> list[Path]:
    """The report's section CSVs and PNGs (SECTION_PREFIXES) copied into the figure folder; the copies."""
    copied: list[Path] = []
    for src in sorted(Path(report_dir).glob("*")):
        if src.suffix in (".csv", ".png") and src.name.startswith(SECTION_PREFIXES) and src.is_file():
            figure_dir.mkdir(parents=True, exist_ok=True)
            # a fresh modification time (copyfile keeps none): the commit stamp takes the files written now
            copied.append(Path(shutil.copyfile(src, figure_dir / src.name)))
    return copied


def check_statements(repro: Reproduction, out: Path, figure_dir: Path, stream: TextIO) -> bool:
    """The file's statements on the run in `out`: printed, and statements.csv in the figure folder; False
    when one does not hold (n/a is not a failure: a quick run may not reach the time a statement names)."""
    if not repro.statements:
        return True
    results = statements.check(repro.statements, out)
    statements.write_csv(repro.statements, results, figure_dir / "statements.csv")
    for line in statements.lines(repro.statements, results):
        print(line, file=stream)
    print(f"statements: {figure_dir / 'statements.csv'}", file=stream)
    png = figure_dir / f"{repro.name}-series.png"
    if traces.write(repro.statements, out, figure_dir / f"{repro.name}-series.csv", png, repro.title):
        print(f"series: {png}", file=stream)
    return False not in statements.verdicts(repro.statements, results)


def write_figure(repro: Reproduction, out: Path, figure_dir: Path) -> tuple[Path, Path]:
    """The Spark report of `out`, then the figure's CSV and PNG from its summary table."""
    from spark_analysis.__main__ import report

    report(str(out), out=str(out / "report"), pcaps=False, quiet=False)
    pts = table.points(out / "report" / table.report_table(repro.plot),
                       table.cell_params(out / runner.EXPERIMENT_FILE), repro.plot)
    y_label = None
    if repro.plot.x == MESSAGE_SIZE:        # the report's delays are wall seconds; the paper's model seconds
        pts = table.in_model_seconds(pts, table.experiment_time_scale(out / runner.EXPERIMENT_FILE))
        y_label = "mean delay (model s)"
    csv_path, png_path = figure_dir / f"{repro.name}.csv", figure_dir / f"{repro.name}.png"
    table.write_csv(pts, csv_path)
    reps = table.rep_rows(out, repro.plot)
    table.write_reps(reps, figure_dir / "reps.csv")
    if repro.plot.ratio is not None:
        table.write_ratios(table.ratios(reps, table.cell_params(out / runner.EXPERIMENT_FILE), repro.plot),
                           figure_dir / "ratio.csv")
    plot.write_png(pts, repro.plot, repro.title, png_path, y_label)
    if repro.table is not None:
        table.write_metric_table(table.metric_table(out / "report" / "summary.csv",
                                                    table.cell_params(out / runner.EXPERIMENT_FILE),
                                                    repro.table.metrics, reps),
                                 figure_dir / f"{repro.name}-table.csv")
        routes.write(out, figure_dir, repro.table.nodes)
    return csv_path, png_path


def _scenario_quick(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return {}       # the scenario loader reports it properly
    q = data.get("quick") if isinstance(data, dict) else None
    return q if isinstance(q, dict) else {}


def describe(repro: Reproduction) -> str:
    """One line for --list."""
    return f"{repro.name:<24} {repro.title}"

