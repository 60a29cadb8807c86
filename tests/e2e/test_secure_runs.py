"""The quickstart and the relay-crash drill with `security: {tls: true, auth: true}`, quick variants.

One test, both runs one after the other (one cell each) to keep the added time small: every node config has its
certificate files and token digests, the data port listens on no wildcard address, the secrets are 0600, the
daemons ran mTLS and tokens, the testbed's own clients (health check, workload driver, drain) got through, and
the drill's kill, restart and link cut lose and duplicate nothing over mTLS.
"""
from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SECURE = ["--set", "security.tls=true", "--set", "security.auth=true"]
RUNS = {"quickstart": ["--set", "sweep={grid: {nodes.all.mode: [fragmenting]}, reps: 1}"],
        "drill-relay-crash": []}


def _run(name: str, out: Path) -> Path:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "testbed", "run", str(REPO / "scenarios" / f"{name}.yaml"), "--quick",
                        *SECURE, *RUNS[name], "--out", str(out)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(f"{name} --quick with tls and auth took {time.monotonic() - t0:.1f} s")
    [summary] = sorted(out.glob("*/1/summary.json"))
    return summary.parent


def _check_secure_rep(rep: Path) -> None:
    s = json.loads((rep / "summary.json").read_text())
    assert s["complete"], s["reason"]
    assert s["accepted"] > 0 and s["lost"] == 0 and s["duplicates"] == 0 and s["delivered"] == s["accepted"], s
    assert stat.S_IMODE((rep / "secrets" / "tokens.json").stat().st_mode) == 0o600
    assert not (rep / "secrets" / "ca.key").exists()       # the CA key is dropped once the certificates are made
    admins = json.loads((rep / "secrets" / "tokens.json").read_text())["admin"]
    assert len(set(admins.values())) == len(admins)                       # an admin token per node
    for node_dir in sorted((rep / "nodes").iterdir()):
        text = (node_dir / "node.yaml").read_text()
        cfg = yaml.safe_load(text)
        assert cfg["security"]["tls"] == {"cert": "node.crt", "key": "node.key", "ca": "ca.crt"}
        assert cfg["security"]["auth"]["admin"] and admins[node_dir.name] not in text   # a digest, never the token
        assert not any(a.startswith("0.0.0.0") for a in [cfg["data_listen"], *cfg["data_listen_also"]])
        assert stat.S_IMODE((node_dir / "node.key").stat().st_mode) == 0o600
        log = (node_dir / "node.log").read_text()
        assert "(mTLS)" in log and "(TLS) (tokens)" in log and "Traceback" not in log, node_dir


@pytest.mark.root
@pytest.mark.timeout(700)
def test_quickstart_and_relay_crash_drill_with_tls_and_auth() -> None:
    work = Path(tempfile.mkdtemp(prefix="tb-e2e-secure-"))
    try:
        for name in RUNS:
            rep = _run(name, work / name)
            _check_secure_rep(rep)
            if name == "drill-relay-crash":       # the faults really happened, and nothing failed
                events = [json.loads(line) for line in (rep / "events.jsonl").read_text().splitlines()]
                kinds = [e["event"] for e in events]
                assert {"kill", "restart", "link_down", "link_up"} <= set(kinds) and "fault_failed" not in kinds
    finally:
        shutil.rmtree(work, ignore_errors=True)
