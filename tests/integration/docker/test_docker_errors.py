"""Clear one-sentence errors without an engine, and the small pure helpers of the re-plumbing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.docker_engine import require_engine
from node.errors import UserError
from testbed.runtime.docker import _has_rules

REPO = Path(__file__).resolve().parents[3]
NO_ENGINE = "unix:///nonexistent/wanbed-test/docker.sock"

# One Docker engine and image cache for the session: the Docker tests run on one worker. `testbed up` is the
# machine's one running network: its tests hold the session's `up` lock.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.testbed_up, pytest.mark.timeout(120)]


def test_no_engine_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    with pytest.raises(UserError) as exc:
        require_engine()
    msg = str(exc.value)
    assert "dockerd" in msg and "\n" not in msg


def test_image_build_without_engine_exits_2_without_traceback() -> None:
    r = subprocess.run([sys.executable, "-m", "testbed", "image", "build"], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "DOCKER_HOST": NO_ENGINE}, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Docker engine" in r.stderr or "docker" in r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="testbed up needs root")
def test_up_with_runtime_docker_without_engine_exits_2(tmp_path: Path) -> None:
    from testbed import netstate
    if netstate.running():
        pytest.skip("a `testbed up` network is running on this machine; not touching it")
    scen = tmp_path / "s.yaml"
    scen.write_text("name: noengine\ntopology:\n  generator: linear\n  params: {n: 2}\nruntime: docker\n")
    r = subprocess.run([sys.executable, "-m", "testbed", "up", str(scen), "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, cwd=REPO, env={**os.environ, "DOCKER_HOST": NO_ENGINE},
                       timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Docker engine" in r.stderr


def test_has_rules_tells_empty_tables_from_rules() -> None:
    empty = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
    assert not _has_rules(empty)
    assert _has_rules(empty.replace("COMMIT", "-A INPUT -s 10.0.0.1/32 -j DROP\nCOMMIT"))
    assert _has_rules(empty.replace("COMMIT", ":tbabc123-part - [0:0]\nCOMMIT"))
