"""`testbed up --dashboard`: the supervisor serves the run directory until `down`; links.jsonl is sampled."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from network_support import TESTS_DIR
from testbed import netstate
from tests.integration.support import skip_while_a_network_is_up

pytestmark = [pytest.mark.testbed_up,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, veth, iptables"),
              pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[3]
FACTORY = ["--factory", "network_support:cli_network"]     # linear(3) on plain veth links
SERVER_INTERVAL = 1.0                                      # the dashboard reads the run directory once a second


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env=env)


def state(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url.replace("/?", "/state?"), timeout=5).read())


def test_up_serves_the_dashboard_until_down(tmp_path: Path) -> None:
    skip_while_a_network_is_up()
    scen = tmp_path / "x.yaml"
    scen.write_text("name: x\n")
    run_dir = tmp_path / "run"
    r = cli("up", str(scen), "--run-dir", str(run_dir), *FACTORY, "--dashboard")
    assert r.returncode == 0, r.stderr
    try:
        [url] = re.findall(r"^dashboard: (http://127\.0\.0\.1:\d+/\?token=\S+)$", r.stdout, re.M)
        topo = json.loads((run_dir / "topology.json").read_text())
        s = state(url)
        assert s["counts"] == {"hosts": len(topo["hosts"]), "links": len(topo["links"])} == {"hosts": 3, "links": 2}
        assert cli("link", "n2", "n3", "--down").returncode == 0
        t0 = time.monotonic()
        while [l["state"] for l in state(url)["links"] if l["name"] == "n2-n3"] != ["down"]:
            assert time.monotonic() - t0 < 2 * SERVER_INTERVAL + 1, "the cut link is not shown"
            time.sleep(0.1)
        assert [e["event"] for e in state(url)["timeline"]] == ["link_down"]
        recs = [json.loads(l) for l in (run_dir / "links.jsonl").read_text().splitlines()]
        assert {r["link"] for r in recs} == {"n1-n2", "n2-n3"}
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    with pytest.raises(urllib.error.URLError):
        state(url)


def test_up_with_the_dashboard_port_in_use_builds_nothing(tmp_path: Path) -> None:
    skip_while_a_network_is_up()
    scen = tmp_path / "x.yaml"
    scen.write_text("name: x\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = cli("up", str(scen), "--run-dir", str(tmp_path / "run"), *FACTORY, "--dashboard", "--port",
                str(busy.getsockname()[1]))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("testbed: the dashboard cannot listen on 127.0.0.1:")
    assert not netstate.running() and not (tmp_path / "run" / "topology.json").exists()
