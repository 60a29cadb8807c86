"""`testbed reproduce` end to end on a tiny figure: quickstart --quick (two cells), the report, the PNG and CSV.
(Resuming is the runner's --resume, tested with `testbed run`.) The figure's quick: section shortens the
scenario's own quick run: 2 wall s of workload, a 0.05 wall s recipient delay and links 8 times as fast, so the
queues drain in a few seconds, and no packet capture, which the figure's report never reads. What is tested is
the pipeline, not the values."""
from __future__ import annotations

import csv
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.e2e.test_testbed_run import REPO, run_cli

FIGURE = f"""
title: "tiny: throughput by mode"
scenario: {REPO / 'scenarios' / 'quickstart.yaml'}
set: {{duration: 8s}}
sweep: {{grid: {{nodes.all.mode: [fragmenting, non-fragmenting]}}, reps: 3}}
plot: {{x: nodes.all.mode, y: throughput_multi}}
quick: {{duration: 80s, nodes.all.resources.rbsad: 2, link_defaults.rate: 64000bit, capture: none,
         sweep: {{grid: {{nodes.all.mode: [fragmenting, non-fragmenting]}}, reps: 1}}}}
paper: {{shape: anything}}
"""


@pytest.mark.root
@pytest.mark.timeout(300)
def test_tiny_figure_quick_end_to_end() -> None:
    work = Path(tempfile.mkdtemp(prefix="tb-e2e-reproduce-"))
    try:
        fig = work / "tiny-1.yaml"
        fig.write_text(FIGURE)
        out = work / "out"
        first = run_cli("reproduce", str(fig), "--quick", "--out", str(out), timeout=280)
        assert first.returncode == 0, f"{first.stdout[-3000:]}\n{first.stderr[-3000:]}"
        png, table = out / "figure" / "tiny-1.png", out / "figure" / "tiny-1.csv"
        assert png.read_bytes()[:4] == b"\x89PNG"
        rows = list(csv.DictReader(table.open()))
        assert [r["x"] for r in rows] == ["fragmenting", "non-fragmenting"]
        assert all(float(r["value"]) >= 0 and r["n"] == "1" for r in rows)
        assert "paper:" in first.stdout and str(png) in first.stdout
        assert (out / "report" / "report.html").is_file()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_unknown_figure_is_one_line_exit_2() -> None:
    r = run_cli("reproduce", "no-such-figure", timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "unknown reproduction" in r.stderr
