"""The dashboard's full page in a real headless Chromium (selenium, the system chromedriver, nothing downloaded).

All tests share ONE `testbed up --dashboard` network (linear(3) on plain veth links) and one browser, in file
order: the page loads, shows what topology.json holds, shows a cut link within 2 s and its fault on the
timeline, a replay of the run shows the same final state (and the cut at a past moment), and the browser
logged no error. One screenshot per test goes to tests/artifacts/dashboard/ (ignored by git).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from network_support import TESTS_DIR
from tests.integration.support import skip_while_a_network_is_up

REPO = Path(__file__).resolve().parents[3]
STATIC = REPO / "testbed" / "dashboard" / "static"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = REPO / "tests" / "artifacts" / "dashboard"
FACTORY = ["--factory", "network_support:cli_network"]     # linear(3) on plain veth links
SERVER_INTERVAL = 1.0            # the dashboard reads the run directory once a second
CUT_SHOWN_S = 2.0                # the bound: a link cut reaches the page within 2 s
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: network namespaces, veth, iptables"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: run make setup"
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        return "chromium or chromium-driver is not installed: run make setup"
    if not (STATIC / "cytoscape.min.js").is_file():
        return "the dashboard's libraries are not in testbed/dashboard/static/: run make setup"
    return None


pytestmark = [pytest.mark.testbed_up, pytest.mark.timeout(120),
              pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env=env)


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    skip_while_a_network_is_up()
    tmp = tmp_path_factory.mktemp("dash")
    scen = tmp / "x.yaml"
    scen.write_text("name: x\n")
    run_dir = tmp / "run"
    r = cli("up", str(scen), "--run-dir", str(run_dir), *FACTORY, "--dashboard")
    assert r.returncode == 0, r.stderr
    try:
        [url] = re.findall(r"^dashboard: (http://127\.0\.0\.1:\d+/\?token=\S+)$", r.stdout, re.M)
        yield {"url": url, "run_dir": run_dir, "topology": json.loads((run_dir / "topology.json").read_text())}
    finally:
        down = cli("down")
        assert down.returncode == 0, down.stderr


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    os.environ["SE_OFFLINE"] = "true"          # Selenium Manager must not look for (or fetch) a driver
    profile = tempfile.mkdtemp(prefix="dash-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={profile}", "--window-size=1400,900"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    driver.logged = []                          # the browser log of every test, for the last one
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def save_screenshot(browser: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    browser.save_screenshot(str(shot))
    browser.shot = name
    with browser.capsys.disabled():           # named in the test output, captured or not
        print(f"\nscreenshot: {shot}")


@pytest.fixture(autouse=True)
def screenshot(request: pytest.FixtureRequest, browser: Any, capsys: pytest.CaptureFixture) -> Iterator[None]:
    browser.shot, browser.capsys = None, capsys
    yield
    if browser.shot != request.node.name:       # a test that leaves the page takes its own before
        save_screenshot(browser, request.node.name)
    browser.logged += browser.get_log("browser")


def js(driver: Any, script: str) -> Any:
    return driver.execute_script(script)


def wait_for(driver: Any, script: str, within: float, what: str) -> float:
    """Seconds until `script` returns true in the page; fails after `within`."""
    t0 = time.monotonic()
    while not js(driver, script):
        assert time.monotonic() - t0 < within, f"{what}: not within {within} s"
        time.sleep(0.05)
    return time.monotonic() - t0


def edge(driver: Any, link: str) -> dict[str, Any]:
    return js(driver, f"const e = window.dash.cy.getElementById('link:{link}'); "
                      "return {state: e.data('state'), style: e.style('line-style'), colour: e.style('line-color')};")


def test_the_page_loads(network: dict[str, Any], browser: Any) -> None:
    browser.get(network["url"])
    wait_for(browser, "return window.dash && window.dash.renders > 0", 10, "the first render")
    assert browser.title == "testbed dashboard"
    assert js(browser, "return document.getElementById('conn').textContent") == "(live)"


def test_node_and_link_counts_equal_topology_json(network: dict[str, Any], browser: Any) -> None:
    topo = network["topology"]
    assert js(browser, "return window.dash.cy.nodes().map(n => n.id()).sort()") == \
        sorted(h["name"] for h in topo["hosts"])
    assert js(browser, "return window.dash.cy.edges().length") == len(topo["links"]) == 2


def test_a_cut_link_is_shown_within_2s_and_restored(network: dict[str, Any], browser: Any) -> None:
    assert edge(browser, "n2-n3")["style"] == "solid"
    assert cli("link", "n2", "n3", "--down").returncode == 0
    took = wait_for(browser, "const e = window.dash.cy.getElementById('link:n2-n3'); "
                             "return e.data('state') === 'down' && e.style('line-style') === 'dashed'",
                    CUT_SHOWN_S, "the cut link drawn dashed")
    print(f"cut shown after {took:.2f} s")
    assert edge(browser, "n2-n3")["colour"] == "rgb(221,34,34)" and edge(browser, "n1-n2")["style"] == "solid"
    assert cli("link", "n2", "n3", "--up").returncode == 0
    wait_for(browser, "const e = window.dash.cy.getElementById('link:n2-n3'); "
                      "return e.data('state') === 'up' && e.style('line-style') === 'solid'",
             CUT_SHOWN_S, "the restored link drawn solid")


def test_the_fault_is_on_the_timeline(network: dict[str, Any], browser: Any) -> None:
    # the cut and the heal of the previous test, as marks on the strip and as rows of the list
    wait_for(browser, "return document.querySelectorAll('#timeline-strip rect.fault').length === 2",
             2 * SERVER_INTERVAL, "two fault marks")
    rows = js(browser, "return [...document.querySelectorAll('#timeline li[data-kind=fault]')]"
                       ".map(li => li.textContent)")
    assert [r.split(" fault: ")[1].split()[0] for r in rows] == ["link_up", "link_down"]      # newest first
    assert all("n2-n3" in r for r in rows)


def test_a_replay_shows_the_same_final_state(network: dict[str, Any], browser: Any) -> None:
    from testbed.dashboard.server import DashboardServer
    live = js(browser, "return window.dash.state")
    server = DashboardServer(network["run_dir"], replay=True).start()
    try:
        browser.get(server.url)
        wait_for(browser, "return window.dash && window.dash.renders > 0", 10, "the replay's first render")
        replay = js(browser, "return window.dash.state")
        assert replay["counts"] == live["counts"]
        assert [(l["name"], l["state"]) for l in replay["links"]] == [(l["name"], l["state"]) for l in live["links"]]
        assert [e["text"] for e in replay["timeline"]] == [e["text"] for e in live["timeline"]]
        assert not js(browser, "return document.getElementById('replay').hidden")
        # the slider to just after the cut: the link is drawn cut again
        down_ts = [e["ts"] for e in replay["timeline"] if e["event"] == "link_down"][0]
        js(browser, f"const s = document.getElementById('slider'); s.value = {down_ts + 0.01}; "
                    "s.dispatchEvent(new Event('input'));")
        wait_for(browser, "return window.dash.cy.getElementById('link:n2-n3').style('line-style') === 'dashed'",
                 5, "the cut at the slider's time")
        save_screenshot(browser, "test_a_replay_shows_the_same_final_state")
    finally:
        browser.get("about:blank")        # closes the stream first: a refused reconnect would be a logged error
        server.stop()


def test_the_reports_topology_html_opens_from_a_file(network: dict[str, Any], browser: Any,
                                                      tmp_path: Path) -> None:
    from testbed.dashboard import export
    page = export.write(network["run_dir"], tmp_path / "topology.html")
    assert page is not None
    browser.get(page.as_uri())                 # no server: libraries and states are in the file
    wait_for(browser, "return window.dash && window.dash.renders > 0", 10, "the saved page's render")
    assert js(browser, "return window.dash.cy.edges().length") == len(network["topology"]["links"])
    assert js(browser, "return document.querySelectorAll('#timeline li[data-kind=fault]').length") == 2
    assert edge(browser, "n2-n3")["style"] == "solid"         # as the run ended: the link restored


def test_a_100_host_grid_is_laid_out_by_name_and_answers_quickly(browser: Any, tmp_path: Path) -> None:
    from testbed.dashboard.server import DashboardServer
    d = {"delay": 0.01, "jitter": 0.0, "loss": 0.0, "rate": 1e7, "queue": 1000}
    names = [f"r{i}c{j}" for i in range(1, 11) for j in range(1, 11)]
    pairs = [((i, j), (i, j + 1)) for i in range(1, 11) for j in range(1, 10)] + \
        [((i, j), (i + 1, j)) for i in range(1, 10) for j in range(1, 11)]
    links = [{"name": f"r{a[0]}c{a[1]}-r{b[0]}c{b[1]}", "a": f"r{a[0]}c{a[1]}", "b": f"r{b[0]}c{b[1]}",
              "state": "up", "a_to_b": d, "b_to_a": d} for a, b in pairs]
    (tmp_path / "topology.json").write_text(json.dumps({"topology": "grid", "generator": "grid", "links": links,
                                                        "hosts": [{"name": n, "role": "host"} for n in names]}))
    server = DashboardServer(tmp_path).start()
    try:
        browser.get(server.url)
        wait_for(browser, "return window.dash && window.dash.renders > 0", 10, "the grid's first render")
        assert js(browser, "return [window.dash.cy.nodes().length, window.dash.cy.edges().length]") == [100, 180]
        pos = js(browser, "const p = n => window.dash.cy.getElementById(n).position(); "
                          "return [p('r1c1'), p('r1c2'), p('r2c1')];")
        assert pos[0]["y"] == pos[1]["y"] and pos[1]["x"] > pos[0]["x"]       # columns by c<j>
        assert pos[0]["x"] == pos[2]["x"] and pos[2]["y"] > pos[0]["y"]       # rows by r<i>
        # the bounds: an update re-renders within 200 ms, a hover answers within 100 ms
        update_ms = js(browser, "const s = window.dash.state; s.links.forEach(l => l.state = 'down'); "
                                "const t = performance.now(); window.dash.rerender(s); return performance.now() - t;")
        assert update_ms < 200 and edge(browser, "r1c1-r1c2")["style"] == "dashed"
        hover_ms = js(browser, "const t = performance.now(); "
                               "window.dash.cy.getElementById('link:r5c5-r5c6').emit('mouseover'); "
                               "return document.getElementById('tip').hidden ? null : performance.now() - t;")
        assert hover_ms is not None and hover_ms < 100
        save_screenshot(browser, "test_a_100_host_grid_is_laid_out_by_name_and_answers_quickly")
        browser.get("about:blank")
    finally:
        server.stop()


def test_a_drill_fault_appears_on_the_timeline(network: dict[str, Any], browser: Any,
                                               tmp_path: Path) -> None:
    # The drill's first fault (kill n3 at 12 s) is what the page must show; the rest of the run (two cells,
    # a 45 s drain) does not fit the browser tests' budget, so the run is interrupted once it is shown.
    run = subprocess.Popen([sys.executable, "-m", "testbed", "run", "scenarios/drill-relay-crash.yaml", "--quick",
                            "--set", "capture=none", "--out", str(tmp_path / "drill"), "--dashboard"],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for text_line in run.stderr:           # announced once on standard error, before anything is built
            m = re.match(r"dashboard: (http://127\.0\.0\.1:\d+/\?token=\S+)$", text_line.strip())
            if m:
                url = m.group(1)
                break
        assert url, "`testbed run --dashboard` printed no URL"
        threading.Thread(target=run.stderr.read, daemon=True).start()    # keep the pipe drained
        browser.get(url)
        wait_for(browser, "return [...document.querySelectorAll('#timeline li[data-kind=fault]')]"
                          ".some(li => li.textContent.includes('kill'))", 60, "the drill's kill on the timeline")
        assert js(browser, "return document.querySelectorAll('#timeline-strip rect.fault').length") >= 1
        assert " rep 1: " in js(browser, "return document.getElementById('phase').textContent")   # cell rep N: phase
        save_screenshot(browser, "test_a_drill_fault_appears_on_the_timeline")
        browser.get("about:blank")             # before the run (and its dashboard) ends
    finally:
        run.send_signal(signal.SIGINT)
        try:
            run.wait(timeout=90)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


def test_no_console_errors(browser: Any) -> None:
    errors = [e for e in browser.logged + browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == []
    js(browser, "console.error('dashboard test probe')")     # the log is really read: a page error would show
    assert any("dashboard test probe" in e["message"] for e in browser.get_log("browser"))
