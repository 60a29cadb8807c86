"""topology.html: the dashboard's page with its libraries and the run's sampled states inlined (nothing fetched),
none without the libraries, and report.html's link to it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from testbed.dashboard import export
from testbed.dashboard.server import FULL_PAGE_NEEDS

T0 = 1_700_000_000.0


@pytest.fixture
def static(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "static"
    d.mkdir()
    for name in FULL_PAGE_NEEDS:
        (d / name).write_text(f"/* {name} */")
    monkeypatch.setattr(export, "STATIC_DIR", d)
    return d


@pytest.fixture
def run(tmp_path: Path) -> Path:
    d = tmp_path / "runs" / "c" / "1"
    (d / "nodes" / "n1").mkdir(parents=True)
    (d / "topology.json").write_text(json.dumps({
        "topology": "t", "generator": "linear",
        "hosts": [{"name": "n1", "role": "host", "attrs": {}}, {"name": "n2", "role": "host", "attrs": {}}],
        "links": [{"name": "n1-n2", "a": "n1", "b": "n2", "state": "down", "a_to_b": {}, "b_to_a": {}}]}))
    (d / "events.jsonl").write_text("".join(json.dumps({"ts": T0 + dt, "node": "testbed", "event": ev,
                                                       "target": "n1-n2"}) + "\n"
                                            for dt, ev in ((0, "link_up"), (10, "link_down"))))
    return d


def test_topology_html_inlines_the_page_and_the_runs_states(static: Path, run: Path, tmp_path: Path) -> None:
    page = export.write(run, tmp_path / "out" / "topology.html").read_text()
    # nothing left to fetch: no stylesheet or script by address
    assert not re.search(r'<(script|link)[^>]* (src|href)="(?!data:)', page)
    for name in FULL_PAGE_NEEDS:
        assert f"/* {name} */" in page
    assert "window.dashLayout" in page and "window.DASH_FRAMES = " in page
    frames = json.loads(page.split("window.DASH_FRAMES = ", 1)[1].split(";\n</script>", 1)[0])
    assert len(frames) == export.FRAMES
    states = [f["links"][0]["state"] for f in frames]
    assert states[0] == "up" and states[-1] == "down" and states == sorted(states, key=lambda s: s == "down")
    assert all(f["replay"] for f in frames) and frames[-1]["last_ts"] == T0 + 10


def test_no_topology_html_without_the_libraries(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "STATIC_DIR", tmp_path / "nowhere")
    assert export.write(run, tmp_path / "topology.html") is None and not (tmp_path / "topology.html").exists()


def test_the_report_links_to_topology_html(static: Path, run: Path, tmp_path: Path) -> None:
    from spark_analysis.__main__ import _topology_page
    from spark_analysis.layout import find_runs, run_topology
    from spark_analysis.report import ReportTables, write

    runs = find_runs(tmp_path / "runs")
    topo, daemons, which = run_topology(runs)
    out = tmp_path / "out"
    _topology_page(runs, which, out)
    tables = ReportTables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), topology=topo, daemons=daemons,
                          topology_run=which)
    assert '<a href="topology.html">' in write(out, "src", tables).read_text()
    assert (out / "topology.html").is_file()
