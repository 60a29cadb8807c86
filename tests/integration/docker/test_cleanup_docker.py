"""Nothing labelled with a run id survives `testbed down`, Ctrl-C, or kill -9 + `testbed clean` on docker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import image, netstate, registry
from testbed.cleanup import root_links
from testbed.docker_engine import docker
from testbed.runtime.docker import PREFIX_LABEL, RUN_LABEL, run_containers
from testbed.runtime.netns import list_netns
from tests.integration.support import skip_while_a_network_is_up

# One Docker engine and image cache for the session: the Docker tests run on one worker. `testbed up` is the
# machine's one running network: its tests hold the session's `up` lock.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.testbed_up, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def left(run_id: str) -> list[str]:
    """Containers, namespaces, root interfaces and registry files of this run that still exist."""
    p = registry.prefix(run_id)
    names = [f"container {c}" for c in run_containers(run_id)]
    names += [n for n in list_netns() + root_links() if n.startswith(p)]
    if registry.REGISTRY_DIR.is_dir():
        names += [f.name for f in registry.REGISTRY_DIR.glob(f"{p}*")]
    return names


def scenario(tmp_path: Path) -> Path:
    p = tmp_path / "docker.yaml"
    p.write_text("name: dockerclean\ntopology:\n  generator: linear\n  params: {n: 3}\n"
                 "link_defaults:\n  delay: 5ms\nruntime: docker\nshaper: wire\n")
    return p


@pytest.fixture
def nothing_up(node_image: image.BuildResult) -> None:
    skip_while_a_network_is_up()


def _wait_gone(pid: int, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while registry.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def test_up_exec_down_leaves_nothing(nothing_up: None, tmp_path: Path) -> None:
    r = cli("up", str(scenario(tmp_path)), "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    rec = netstate.running()[0]
    try:
        assert len(run_containers(rec.run_id)) == 3
        assert cli("exec", "n1", "--", "ip", "-br", "addr").returncode == 0
    finally:
        r = cli("down")
    assert r.returncode == 0, r.stderr
    assert left(rec.run_id) == []


def test_sigint_to_the_supervisor_leaves_nothing(nothing_up: None, tmp_path: Path) -> None:
    r = cli("up", str(scenario(tmp_path)), "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    rec = netstate.running()[0]
    os.kill(rec.owner_pid, signal.SIGINT)         # the process holding the network, as Ctrl-C would
    _wait_gone(rec.owner_pid)
    assert not registry.pid_alive(rec.owner_pid)
    assert left(rec.run_id) == []


@pytest.mark.alone    # the signal must land while containers are being created: a busy machine can miss that window
def test_ctrl_c_during_up_leaves_nothing(nothing_up: None, tmp_path: Path) -> None:
    """SIGINT to `testbed up --runtime docker` while containers are being created."""
    before = set(_all_labelled())
    p = subprocess.Popen([sys.executable, "-m", "testbed", "up", str(scenario(tmp_path)), "--runtime", "docker",
                          "--run-dir", str(tmp_path / "run")], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    run_id = None
    deadline = time.monotonic() + 60
    while run_id is None and time.monotonic() < deadline and p.poll() is None:
        new = [n for n in _all_labelled() if n not in before]
        if new:
            run_id = registry.run_id_of(new[0])
        else:
            time.sleep(0.05)
    assert run_id is not None, "no container appeared"
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=120)
    if p.returncode == 0:
        # `up` had finished before the signal came: the network is up, and every later `up` test would skip
        cli("down")
        pytest.fail("`testbed up` had finished before the SIGINT arrived (not a test of Ctrl-C; taken down)")
    deadline = time.monotonic() + 30
    while left(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)      # the supervisor finishes its start, then tears down
    assert left(run_id) == []


def test_kill_9_then_clean_removes_containers(nothing_up: None, tmp_path: Path) -> None:
    r = cli("up", str(scenario(tmp_path)), "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    rec = netstate.running()[0]
    os.kill(rec.owner_pid, signal.SIGKILL)
    _wait_gone(rec.owner_pid, 10)
    assert run_containers(rec.run_id), "the containers should outlive a kill -9 of their owner"
    r = cli("clean")
    assert r.returncode == 0, r.stderr
    assert "container" in r.stdout + r.stderr
    assert left(rec.run_id) == []


def _all_labelled() -> list[str]:
    out = docker(["ps", "-a", "--filter", f"label={PREFIX_LABEL}", "--format",
                  '{{.Names}} {{.Label "' + RUN_LABEL + '"}}']).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]
