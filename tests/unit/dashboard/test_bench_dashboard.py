"""bench/bench_dashboard.py's reporting: without the page's libraries the browser parts are skipped in one line
(the server would answer with its minimal page, which never renders), and a wait that runs out is printed as a
`measured > X / bound = ratio > R` line, not a traceback. No browser: the logic only."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import bench_dashboard  # noqa: E402


class _NeverTrue:
    """A page on which the awaited condition never holds."""

    def execute_script(self, script: str) -> bool:
        return False


def test_without_the_page_libraries_the_browser_parts_are_skipped_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("selenium")
    monkeypatch.setattr(shutil, "which", lambda name: name)       # as if chromium and its driver were there
    monkeypatch.setattr(bench_dashboard, "STATIC_DIR", tmp_path)  # no libraries in it

    def no_browser() -> Any:
        raise AssertionError("a browser was started for the minimal page")
    monkeypatch.setattr(bench_dashboard, "browser", no_browser)
    monkeypatch.setattr(sys, "argv", ["bench_dashboard.py", "--skip-run"])
    assert bench_dashboard.main() == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "skipped" in out[0] and "run make setup" in out[0], out


def test_a_wait_that_runs_out_prints_a_lower_bound_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(bench_dashboard.NotWithin) as caught:
        bench_dashboard.wait_for(_NeverTrue(), "return false", 0.05, "the first render")
    bench_dashboard.line("first paint", caught.value.waited, 3.0, note=str(caught.value), above=True)
    out = capsys.readouterr().out.strip()
    assert re.fullmatch(r"first paint: measured > 0\.05 s / bound 3\.00 s = ratio > 0\.02 "
                        r"\(the first render: not within 0\.05 s\)", out), out
