"""The full page: served at / once `make setup` put its libraries in static/ (the minimal page until then), the
replay flag and the run's first time that its slider needs, and layout.js's placement by generator (run in
node, skipped without it)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testbed.dashboard import server as server_mod
from testbed.dashboard.server import FULL_PAGE_NEEDS, DashboardServer

LAYOUT_JS = Path(server_mod.__file__).resolve().parent / "page" / "layout.js"
T0 = 1_700_000_000.0


def fetch(s: DashboardServer, path: str) -> tuple[int, bytes]:
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    c.request("GET", path + ("&" if "?" in path else "?") + f"token={s.token}")
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


@pytest.fixture
def run(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "topology.json").write_text(json.dumps({"topology": "t", "generator": "linear", "hosts": [], "links": []}))
    (d / "events.jsonl").write_text("".join(json.dumps({"ts": T0 + i, "node": "testbed", "event": "link_down",
                                                       "target": "a-b"}) + "\n" for i in (3, 7)))
    return d


def test_root_serves_the_full_page_once_its_libraries_are_there(run: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    static = tmp_path / "static"
    static.mkdir()
    monkeypatch.setattr(server_mod, "STATIC_DIR", static)
    s = DashboardServer(run).start()
    try:
        status, body = fetch(s, "/")
        assert status == 200 and b"href=\"/app\"" in body and b"cytoscape" not in body     # the minimal page
        status, body = fetch(s, "/app")
        assert status == 503 and body == b"the full dashboard page needs its libraries: run make setup\n"
        for name in FULL_PAGE_NEEDS:
            (static / name).write_text("/* a library */")
        for path in ("/", "/app"):
            status, body = fetch(s, path)
            assert status == 200 and b"/static/cytoscape.min.js" in body and b"/page/app.js" in body, path
        assert fetch(s, "/page/app.js")[0] == fetch(s, "/page/layout.js")[0] == 200
    finally:
        s.stop()


def test_the_state_says_replay_and_where_the_run_starts(run: Path) -> None:
    for replay in (True, False):
        s = DashboardServer(run, replay=replay).start()
        try:
            state = json.loads(fetch(s, "/state")[1])
            assert state["replay"] is replay
            assert (state["first_ts"], state["last_ts"]) == (T0 + 3, T0 + 7)
            assert json.loads(fetch(s, f"/state?t={T0 + 5}")[1])["replay"] is replay
        finally:
            s.stop()


def layout(generator: str, hosts: list[dict[str, Any]], links: list[tuple[str, str]]) -> Any:
    script = (LAYOUT_JS.read_text() + "\nconsole.log(JSON.stringify(window.dashLayout.positions("
              + json.dumps(generator) + ", " + json.dumps(hosts) + ", "
              + json.dumps([{"a": a, "b": b} for a, b in links]) + ")));")
    out = subprocess.run(["node", "-e", "const window = {};\n" + script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: run make setup")
def test_layout_by_generator() -> None:
    # grid: column from c<j>, row from r<i>
    grid = layout("grid", [{"name": f"r{i}c{j}"} for i in range(1, 11) for j in range(1, 11)], [])
    assert len(grid) == 100
    assert grid["r1c2"]["x"] > grid["r1c1"]["x"] and grid["r1c1"]["y"] == grid["r1c2"]["y"]
    assert grid["r2c1"]["y"] > grid["r1c1"]["y"] and grid["r2c1"]["x"] == grid["r1c1"]["x"]
    assert layout("grid", [{"name": "a"}], []) is None                     # not r<i>c<j>: a force layout
    # ring: in ring order around one circle (n1 at the top, n2 clockwise after it)
    ring = layout("ring", [{"name": f"n{i}"} for i in range(1, 7)], [])
    radii = {round((p["x"] ** 2 + p["y"] ** 2) ** 0.5, 6) for p in ring.values()}
    assert len(radii) == 1 and ring["n1"]["y"] < 0 and ring["n2"]["x"] > 0 > ring["n6"]["x"]
    # tree: levels by BFS from the root
    tree = layout("tree", [{"name": "n1", "role": "root"}, {"name": "n2"}, {"name": "n3"}, {"name": "n4"}],
                  [("n1", "n2"), ("n1", "n3"), ("n2", "n4")])
    assert tree["n1"]["y"] < tree["n2"]["y"] == tree["n3"]["y"] < tree["n4"]["y"]
    # clusters: each cluster's members closer to each other than to another cluster's
    hosts = [{"name": f"c{c}h{h}", "attrs": {"cluster": c}} for c in range(3) for h in range(3)]
    cl = layout("clusters", hosts, [])
    d = lambda a, b: ((cl[a]["x"] - cl[b]["x"]) ** 2 + (cl[a]["y"] - cl[b]["y"]) ** 2) ** 0.5   # noqa: E731
    assert d("c0h0", "c0h1") < d("c0h0", "c1h0")
    # by attributes: Gunduz's brokers west to east, cdnnet15's regions west to east
    ic = layout("intercontinental6", [{"name": n, "attrs": {"broker": b}} for n, b in
                                      (("korea", "Korea"), ("sandiego", "SanDiego"), ("england", "England"))], [])
    assert ic["korea"]["x"] < ic["sandiego"]["x"] < ic["england"]["x"]
    cdn = layout("cdnnet15", [{"name": "n1", "attrs": {"region": "west"}},
                              {"name": "n13", "attrs": {"region": "atlantic"}}], [])
    assert cdn["n1"]["x"] < cdn["n13"]["x"]
    assert layout("explicit", [{"name": "a"}], []) is None
