"""The dashboard: its CPU during a run, update latency to a real browser, a link cut to the browser, first paint.

Prints one `measured / bound = ratio` line per measure (a part that timed out prints its wait as a lower bound,
`measured > X`; a part that could not run says so in one line):

    dashboard cpu (brachman-biring quick, 2 clients): measured X % / bound 5.00 % = ratio R  (of one core)
    record to browser event p50: measured X s / bound 1.50 s = ratio R   (and p99)
    link cut to browser: measured X s / bound 2.00 s = ratio R           (worst of the cuts)
    first paint 100-host grid: measured X s / bound 3.00 s = ratio R

CPU: `testbed run SCENARIO --quick` runs as its own process; this process follows the experiment folder with
the same DashboardServer `--dashboard` uses, with 2 clients on its event stream, so the CPU this process uses
over the run's wall time is the dashboard's alone. Latency: a line appended to a run directory's events.jsonl
at a known time, until the page (headless Chromium) has received the state that holds it. Link cut: `testbed
up` (3 hosts, no daemons) with --dashboard, `testbed link n1 n2 --down`: from the cut's record in events.jsonl
(written as the link goes down) to the render that draws the link dashed (the page's clock: same machine); the
note adds the time from the start of the command (its start-up included).
First paint: a 10 x 10 grid's topology.json, from the page request until the first render. Needs root (CPU and
link cut), chromium, chromium-driver, selenium and the page's libraries in testbed/dashboard/static/ (`make
setup`): without them the server answers `/` with its minimal page, which never renders the full one.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.dashboard.server import FULL_PAGE_NEEDS, STATIC_DIR, DashboardServer  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CPU_BOUND = 5.0          # percent of one core
LATENCY_BOUND = 1.5      # seconds, p50 and p99
CUT_BOUND = 2.0
PAINT_BOUND = 3.0


class NotWithin(Exception):
    """A wait that ran out: what was waited for and for how long (a lower bound of the measure)."""

    def __init__(self, what: str, waited: float) -> None:
        super().__init__(f"{what}: not within {waited:g} s")
        self.what, self.waited = what, waited


def line(name: str, measured: float, bound: float, unit: str = "s", note: str = "", above: bool = False) -> None:
    more = "> " if above else ""          # a timed-out wait: the measure is at least this
    print(f"{name}: measured {more}{measured:.2f} {unit} / bound {bound:.2f} {unit} = ratio {more}"
          f"{measured / bound:.2f}" + (f" ({note})" if note else ""), flush=True)


def not_measured(name: str, why: str) -> None:
    print(f"{name}: not measured ({why})", flush=True)


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    os.environ["SE_OFFLINE"] = "true"
    profile = tempfile.mkdtemp(prefix="bench-dash-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={profile}", "--window-size=1400,900"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    driver.profile = profile
    return driver


def close(driver: Any) -> None:
    driver.quit()
    shutil.rmtree(driver.profile, ignore_errors=True)


def wait_for(driver: Any, script: str, within: float, what: str) -> float:
    t0 = time.monotonic()
    while not driver.execute_script(script):
        if time.monotonic() - t0 > within:
            raise NotWithin(what, within)
        time.sleep(0.02)
    return time.monotonic() - t0


FIRST_RENDER = "return window.dash && window.dash.renders > 0"


def stream_reader(url: str, stop: threading.Event) -> None:
    """A client of the event stream that reads everything it is sent."""
    with urllib.request.urlopen(url.replace("/?", "/events?"), timeout=30) as r:
        while not stop.is_set() and r.readline():
            pass


# ---- CPU during a run ---------------------------------------------------------------------------------------

def cpu(scenario: str, sets: list[str]) -> None:
    out = Path(tempfile.mkdtemp(prefix="bench-dash-run-"))
    try:
        server = DashboardServer(out / "exp", check=False, experiment=True).start()
        stop = threading.Event()
        readers = [threading.Thread(target=stream_reader, args=(server.url, stop), daemon=True) for _ in range(2)]
        for t in readers:
            t.start()
        cmd = [sys.executable, "-m", "testbed", "run", scenario, "--quick", "--out", str(out / "exp")]
        for s in sets:
            cmd += ["--set", s]
        c0, w0 = time.process_time(), time.monotonic()
        run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        c1, w1 = time.process_time(), time.monotonic()
        stop.set()
        server.stop()
        if run.returncode not in (0, 1):
            not_measured("dashboard cpu", f"the run failed with status {run.returncode}: "
                                          f"{' '.join(run.stderr.strip().splitlines()[-1:])}")
            return
        line(f"dashboard cpu ({Path(scenario).stem} quick, 2 clients)", 100 * (c1 - c0) / (w1 - w0), CPU_BOUND,
             "%", f"{w1 - w0:.0f} s run, {c1 - c0:.2f} s CPU")
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ---- latency of a record to the browser ---------------------------------------------------------------------

def latency(driver: Any, samples: int) -> None:
    run = Path(tempfile.mkdtemp(prefix="bench-dash-lat-"))
    try:
        (run / "topology.json").write_text(json.dumps({"topology": "t", "generator": "linear", "hosts": [
            {"name": "n1", "role": "host", "attrs": {}}, {"name": "n2", "role": "host", "attrs": {}}],
            "links": [{"name": "n1-n2", "a": "n1", "b": "n2", "state": "up", "a_to_b": {}, "b_to_a": {}}]}))
        (run / "events.jsonl").write_text("")
        server = DashboardServer(run).start()
        lags: list[float] = []
        try:
            driver.get(server.url)
            wait_for(driver, FIRST_RENDER, 10, "the first render")
            for i in range(samples):
                time.sleep(0.3 + (i % 7) * 0.15)        # spread over the server's 1 s reading interval
                written = time.time()
                with open(run / "events.jsonl", "a") as f:
                    f.write(json.dumps({"ts": written, "node": "testbed", "event": "link_down",
                                        "target": "n1-n2"}) + "\n")
                wait_for(driver, f"return window.dash.live && window.dash.live.timeline.length === {i + 1}",
                         10 * LATENCY_BOUND, f"record {i + 1} in the page")
                lags.append(driver.execute_script("return window.dash.receivedAt") / 1000 - written)
        except NotWithin as e:
            line("record to browser event p99", e.waited, LATENCY_BOUND, note=f"{e}; {len(lags)} records before",
                 above=True)
            return
        finally:
            driver.get("about:blank")               # the stream closed before its server
            server.stop()
        lags.sort()
        line("record to browser event p50", statistics.median(lags), LATENCY_BOUND, note=f"{samples} records")
        line("record to browser event p99", lags[min(len(lags) - 1, int(0.99 * len(lags)))], LATENCY_BOUND)
    finally:
        shutil.rmtree(run, ignore_errors=True)


# ---- a link cut on a `testbed up` network to the browser -----------------------------------------------------

def last_cut(events: Path) -> float:
    """When the network took n1-n2 down last (its own record, written as the link went down)."""
    cuts = [r["ts"] for r in map(json.loads, events.read_text().splitlines())
            if r.get("event") == "link_down" and r.get("target") == "n1-n2"]
    return cuts[-1]


def link_cut(driver: Any, cuts: int) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
    tmp = Path(tempfile.mkdtemp(prefix="bench-dash-up-"))
    scen = tmp / "dashbench.yaml"
    scen.write_text("name: dashbench\ntopology:\n  generator: linear\n  params: {n: 3}\n")
    up = cli("up", str(scen), "--run-dir", str(tmp / "run"), "--no-nodes", "--dashboard")
    if up.returncode != 0:
        not_measured("link cut to browser", f"`testbed up` failed: {' '.join(up.stderr.strip().splitlines()[-1:])}")
        shutil.rmtree(tmp, ignore_errors=True)
        return
    took: list[float] = []           # from the cut (its record in events.jsonl) to the render that drew it
    with_command: list[float] = []   # from the start of `testbed link --down` to the page showing it
    try:
        [url] = re.findall(r"^dashboard: (http://\S+)$", up.stdout, re.M)
        driver.get(url)
        wait_for(driver, FIRST_RENDER, 10, "the first render")
        edge = "window.dash.cy.getElementById('link:n1-n2').style('line-style')"
        for _ in range(cuts):
            for state, style in (("--down", "dashed"), ("--up", "solid")):
                t0 = time.monotonic()
                done = cli("link", "n1", "n2", state)
                if done.returncode != 0:
                    not_measured("link cut to browser", f"`testbed link n1 n2 {state}` failed: "
                                                        f"{' '.join(done.stderr.strip().splitlines()[-1:])}")
                    return
                wait_for(driver, f"return {edge} === '{style}'", 10 * CUT_BOUND, f"the link drawn {style}")
                if state == "--down":
                    with_command.append(time.monotonic() - t0)
                    drawn_at = driver.execute_script("return window.dash.renderedAt") / 1000
                    took.append(drawn_at - last_cut(tmp / "run" / "events.jsonl"))
        line("link cut to browser", max(took), CUT_BOUND,
             note=f"worst of {cuts} from the cut's record to the render; median {statistics.median(took):.2f} s; "
                  f"from the start of `testbed link --down`: worst {max(with_command):.2f} s, "
                  f"median {statistics.median(with_command):.2f} s")
    except NotWithin as e:
        line("link cut to browser", e.waited, CUT_BOUND, note=f"{e}; {len(took)} cuts before", above=True)
    finally:
        driver.get("about:blank")
        cli("down")
        shutil.rmtree(tmp, ignore_errors=True)


# ---- first paint of a 100-host grid -------------------------------------------------------------------------

def first_paint(driver: Any) -> None:
    run = Path(tempfile.mkdtemp(prefix="bench-dash-grid-"))
    try:
        hosts = [{"name": f"r{i}c{j}", "role": "host", "attrs": {}} for i in range(1, 11) for j in range(1, 11)]
        links = []
        for i in range(1, 11):
            for j in range(1, 11):
                for a, b in (((i, j), (i, j + 1)), ((i, j), (i + 1, j))):
                    if b[0] <= 10 and b[1] <= 10:
                        na, nb = f"r{a[0]}c{a[1]}", f"r{b[0]}c{b[1]}"
                        d = {"delay": 0.01, "jitter": 0, "loss": 0, "rate": 1e7, "queue": 1000}
                        links.append({"name": f"{na}-{nb}", "a": na, "b": nb, "state": "up", "a_to_b": d,
                                      "b_to_a": d})
        (run / "topology.json").write_text(json.dumps({"topology": "grid", "generator": "grid", "hosts": hosts,
                                                       "links": links}))
        server = DashboardServer(run).start()
        try:
            driver.get("about:blank")
            t0 = time.monotonic()
            driver.get(server.url)
            wait_for(driver, FIRST_RENDER, 10 * PAINT_BOUND, "the grid's first render")
            paint = time.monotonic() - t0
            render_ms = driver.execute_script("return window.dash.renderMs")
            # an update: every link restyled (a re-render without a new layout)
            rerender_ms = driver.execute_script("const t = performance.now(); const s = window.dash.state; "
                                                "s.links.forEach(l => l.state = 'down'); window.dash.rerender(s); "
                                                "return performance.now() - t;")
            line("first paint 100-host grid", paint, PAINT_BOUND,
                 note=f"{len(links)} links; the render itself {render_ms:.0f} ms, an update's {rerender_ms:.0f} ms")
        except NotWithin as e:
            line("first paint 100-host grid", e.waited, PAINT_BOUND, note=str(e), above=True)
        finally:
            driver.get("about:blank")
            server.stop()
    finally:
        shutil.rmtree(run, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(REPO / "scenarios" / "brachman-biring.yaml"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to `testbed run` (e.g. duration=5s for a short trial)")
    ap.add_argument("--samples", type=int, default=40, help="records for the latency percentiles")
    ap.add_argument("--cuts", type=int, default=5)
    ap.add_argument("--skip-run", action="store_true", help="no CPU measurement (it runs the scenario)")
    args = ap.parse_args()
    from shutil import which
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("bench_dashboard: skipped (selenium missing: run make setup)")
        return 0
    if not (which(CHROMIUM) and which(CHROMEDRIVER)):
        print("bench_dashboard: skipped (chromium or chromium-driver missing: run make setup)")
        return 0
    root = os.geteuid() == 0
    if root and not args.skip_run:
        cpu(args.scenario, args.set)
    missing = [f for f in FULL_PAGE_NEEDS if not (STATIC_DIR / f).is_file()]
    if missing:
        # `/` would serve the minimal page: no graph, no window.dash, every wait for a render would run out
        where = STATIC_DIR.relative_to(REPO) if STATIC_DIR.is_relative_to(REPO) else STATIC_DIR
        print(f"bench_dashboard: latency, link cut and first paint skipped (the full page's libraries are not in "
              f"{where}/: run make setup)")
        return 0
    driver = browser()
    try:
        latency(driver, args.samples)
        if root:
            link_cut(driver, args.cuts)
        first_paint(driver)
    finally:
        close(driver)
    if not root:
        print("bench_dashboard: cpu and link cut skipped (need root)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
