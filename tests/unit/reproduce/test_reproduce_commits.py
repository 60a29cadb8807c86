"""Every CSV row a reproduction writes names the commit it rests on; one sentence says when they mix."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from testbed.experiment.runner import _earlier_commits
from testbed.reproduce import commits
from testbed.reproduce.run import copy_section_tables


def experiment(out: Path, reps: dict[str, list[str | None]]) -> None:
    """experiment.json with cells -> the commit of each repetition (None: not recorded)."""
    cells = [{"id": cell, "reps": [{"rep": i + 1, "dir": f"{cell}/{i + 1}", **({"commit": c} if c else {})}
                                   for i, c in enumerate(cs)]} for cell, cs in reps.items()]
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps({"cells": cells}))


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_each_row_names_its_repetitions_commit_and_the_note_says_they_mix(tmp_path: Path) -> None:
    out, fig = tmp_path / "run", tmp_path / "fig"
    experiment(out, {"a": ["abc1234", "abc1234"], "b": ["abc1234", "def5678-dirty"]})
    fig.mkdir()
    (fig / "reps.csv").write_text("cell,rep,value\na,1,3\nb,2,4\n")
    (fig / "fig.csv").write_text("x,value,cell\n1,3,a\n2,4,b\n")
    (fig / "ratio.csv").write_text("x,ratio,of_cell,to_cell\n1,0.7,a,b\n")
    (fig / "other.csv").write_text("x,value\n1,2\n")
    text = commits.stamp_folder(out, fig)
    assert [r["commit"] for r in rows(fig / "reps.csv")] == ["abc1234", "def5678-dirty"]
    assert [r["commit"] for r in rows(fig / "fig.csv")] == ["abc1234", "abc1234+def5678-dirty"]
    assert rows(fig / "ratio.csv")[0]["commit"] == "abc1234+def5678-dirty"
    assert rows(fig / "other.csv")[0]["commit"] == "abc1234+def5678-dirty"
    assert text.startswith("The rows mix 2 commits: abc1234 (a/1, a/2, b/1); def5678-dirty (b/2)")
    assert (fig / commits.COMMITS_FILE).read_text().strip() == text
    commits.stamp_folder(out, fig)       # stamping again replaces the column, it does not add a second
    assert list(rows(fig / "reps.csv")[0]) == ["cell", "rep", "value", "commit"]


def test_one_commit_and_unrecorded_ones(tmp_path: Path) -> None:
    out = tmp_path / "run"
    experiment(out, {"a": ["abc1234", "abc1234"]})
    assert commits.note(commits.rep_commits(out)) == "Every row was produced at commit abc1234."
    experiment(out, {"a": [None]})
    assert commits.rep_commits(out) == {("a", "1"): "unknown"}


def test_a_csv_written_before_the_run_is_left_alone(tmp_path: Path) -> None:
    out, fig = tmp_path / "run", tmp_path / "fig"
    experiment(out, {"a": ["abc1234"]})
    fig.mkdir()
    old = fig / "old.csv"
    old.write_text("cell,rep\na,1\n")
    os.utime(old, (1_000_000, 1_000_000))
    commits.stamp_folder(out, fig, since=2_000_000)
    assert old.read_text() == "cell,rep\na,1\n"


def test_a_resumed_run_keeps_the_commits_of_the_reps_it_skips(tmp_path: Path) -> None:
    experiment(tmp_path, {"a": ["abc1234", None]})
    assert _earlier_commits(tmp_path) == {"a/1": "abc1234"}


def test_the_rate_sections_tables_are_copied_beside_the_figure(tmp_path: Path) -> None:
    report, fig = tmp_path / "report", tmp_path / "fig"
    report.mkdir()
    for name in ("rate_client_series.csv", "rate_root_queue.csv", "rate_fig9_overflow.png", "summary.csv"):
        (report / name).write_text("cell,rep\n")
    copied = copy_section_tables(report, fig)
    assert sorted(p.name for p in copied) == ["rate_client_series.csv", "rate_fig9_overflow.png",
                                               "rate_root_queue.csv"]
    assert not (fig / "summary.csv").exists()
