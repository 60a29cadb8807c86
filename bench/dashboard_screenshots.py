"""Screenshots of the live dashboard during the pub/sub clusters drill: at the start, with a link cut, restored.

Runs `testbed run scenarios/pubsub-clusters.yaml --quick --dashboard` (12 hosts in three clusters; cluster 2's
gateway killed and restarted, then cluster 3 partitioned off and healed), drives headless Chromium on the URL it
prints, and saves three PNGs into reports/screenshots/dashboard/clusters-drill/ (git-ignored):

    1-start.png        the first render with every node's metrics, the workload running
    2-link-cut.png     cluster 3's gateway links drawn cut (dashed red)
    3-restored.png     the same links drawn up again

A partition is iptables rules in the hosts, not a link state: the page marks it on the timeline only and draws
no link cut. So the drill's quick faults are kept as they are and cluster 3's two gateway links (c1g1-c3g1,
c2g1-c3g1) are also taken down at the partition and up at the heal (`--set faults=`): the cut the drill makes
is then drawn. Each shot is taken once the page's graph holds the state it claims (read back through selenium
and printed with the path). Needs root, chromium, chromium-driver, selenium and the page's libraries (`make
setup`). About a minute.
"""
from __future__ import annotations

import argparse
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
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_dashboard import CHROMEDRIVER, CHROMIUM, FIRST_RENDER, NotWithin, browser, close, wait_for  # noqa: E402
from testbed.dashboard.server import FULL_PAGE_NEEDS, STATIC_DIR  # noqa: E402

SCENARIO = REPO / "scenarios" / "pubsub-clusters.yaml"
OUT = REPO / "reports" / "screenshots" / "dashboard" / "clusters-drill"
CUT = ("c1g1-c3g1", "c2g1-c3g1")        # cluster 3's links to the other gateways
UNCUT = "c1g1-c2g1"
URL = re.compile(r"dashboard: (http://127\.0\.0\.1:\d+/\?token=\S+)$")


def drill_faults() -> list[dict[str, Any]]:
    """The drill's quick faults, with cluster 3's gateway links cut while it is partitioned off."""
    faults = yaml.safe_load(SCENARIO.read_text())["quick"]["faults"]
    [cut_at] = [f["at"] for f in faults if f["action"] == "partition"]
    [heal_at] = [f["at"] for f in faults if f["action"] == "heal"]
    return faults + [{"at": cut_at, "action": "link_down", "target": link} for link in CUT] + \
        [{"at": heal_at, "action": "link_up", "target": link} for link in CUT]


def edges(driver: Any) -> dict[str, list[str]]:
    """Each link's state and how the page draws it: [state, line-style, line-color]."""
    return driver.execute_script(
        "const out = {}; window.dash.cy.edges().forEach(e => out[e.data('name')] = "
        "[e.data('state'), e.style('line-style'), e.style('line-color')]); return out;")


def drawn(style: str) -> str:
    return "return " + " && ".join(f"window.dash.cy.getElementById('link:{link}').style('line-style') === '{style}'"
                                   for link in CUT)


def shot(driver: Any, name: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    driver.save_screenshot(str(path))
    e = edges(driver)
    phase = driver.execute_script("return document.getElementById('phase').textContent")
    faults = driver.execute_script("return [...document.querySelectorAll('#timeline li[data-kind=fault]')]"
                                   ".map(li => li.textContent.split(' fault: ')[1]).reverse()")
    print(f"{path.relative_to(REPO)}: phase {phase!r}; " + ", ".join(f"{link} {e[link][0]} {e[link][1]} {e[link][2]}"
                                                                    for link in (*CUT, UNCUT))
          + f"; faults so far {faults}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds the whole drill may take")
    args = ap.parse_args()
    why = ("needs root" if os.geteuid() != 0 else
           "chromium or chromium-driver missing: run make setup" if not (shutil.which(CHROMIUM) and
                                                                          shutil.which(CHROMEDRIVER)) else
           "the full page's libraries are missing: run make setup"
           if not all((STATIC_DIR / f).is_file() for f in FULL_PAGE_NEEDS) else None)
    if why:
        print(f"dashboard_screenshots: not run ({why})")
        return 2
    work = Path(tempfile.mkdtemp(prefix="dash-shots-"))
    cmd = [sys.executable, "-m", "testbed", "run", str(SCENARIO), "--quick", "--out", str(work / "drill"),
           "--dashboard", "--set", "faults=" + json.dumps(drill_faults())]
    run = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    driver = None
    tail: list[str] = []
    try:
        url = None
        assert run.stderr is not None
        for text_line in run.stderr:          # the URL comes once on standard error, before anything is built
            tail = (tail + [text_line.rstrip()])[-5:]
            m = URL.match(text_line.strip())
            if m:
                url = m.group(1)
                break
        if not url:
            print(f"dashboard_screenshots: `testbed run --dashboard` printed no URL: {tail}")
            return 1
        # keep the pipe drained (a full pipe would stall the run), its last lines for a failure
        threading.Thread(target=lambda: [tail.append(x.rstrip()) for x in run.stderr or ()], daemon=True).start()
        driver = browser()
        driver.get(url)
        deadline = time.monotonic() + args.timeout
        wait_for(driver, FIRST_RENDER, 60, "the first render")
        wait_for(driver, "return window.dash.state.phase && window.dash.state.phase.phase === 'workload' && "
                         "Object.keys(window.dash.state.nodes || {}).length === window.dash.cy.nodes().length",
                 left(deadline), "the workload with every node's metrics")
        shot(driver, "1-start")
        wait_for(driver, drawn("dashed"), left(deadline), "the cut links drawn dashed")
        shot(driver, "2-link-cut")
        wait_for(driver, drawn("solid"), left(deadline), "the links drawn solid again")
        shot(driver, "3-restored")
        driver.get("about:blank")              # before the run (and its dashboard) ends
        rc = run.wait(timeout=left(deadline))
        print(f"the drill ended with status {rc}" + ("" if rc == 0 else f": {tail[-3:]}"))
        return 0
    except (NotWithin, subprocess.TimeoutExpired) as e:
        print(f"dashboard_screenshots: {e}; the run's last lines: {tail[-3:]}")
        return 1
    finally:
        if driver is not None:
            close(driver)
        if run.poll() is None:
            run.send_signal(signal.SIGINT)     # the run tears its network down on SIGINT
            try:
                run.wait(timeout=90)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
        shutil.rmtree(work, ignore_errors=True)


def left(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())


if __name__ == "__main__":
    sys.exit(main())
