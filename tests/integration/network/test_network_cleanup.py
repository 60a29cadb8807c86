"""Nothing of a run survives: stop(), an exception half-way through start(), SIGINT, kill -9 + `testbed clean`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from network_support import TESTS_DIR, VethShaper, free_mgmt_subnet, hand_plan, linear, ours_left, ping
from testbed import registry
from tests.integration.support import signal_and_wait
from testbed.network import Network

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, veth, iptables"),
              pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[3]


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


class FailingShaper(VethShaper):
    """Fails on the second link, after hosts, bridge and one link exist."""

    def add_link(self, link_id, a, b, a_to_b, b_to_a, pcap=None) -> None:
        if self.links:
            raise RuntimeError("injected failure in the middle of start()")
        super().add_link(link_id, a, b, a_to_b, b_to_a, pcap)


def _net(topo, shaper, tmp_path: Path) -> Network:
    mgmt = free_mgmt_subnet()
    return Network(topo, hand_plan(topo, mgmt), shaper=shaper, run_dir=tmp_path, kind="test",
                   pools=("10.200.0.0/16", "10.202.0.0/16", mgmt))


def test_stop_leaves_nothing_and_is_idempotent(tmp_path: Path) -> None:
    net = _net(linear(3), VethShaper(), tmp_path)
    net.start()
    assert len(ours_left(net.run_id, net_only=True)) == 3 + 3 + 1      # namespaces, mgmt veths, bridge
    net.partition(["n1"], ["n3"])
    net.stop()
    net.stop()
    assert ours_left(net.run_id) == []
    assert registry.load(net.run_id) is None


def test_exception_in_the_middle_of_start_tears_down(tmp_path: Path) -> None:
    net = _net(linear(4), FailingShaper(), tmp_path)
    with pytest.raises(RuntimeError, match="injected"):
        net.start()
    assert ours_left(net.run_id) == []
    assert registry.load(net.run_id) is None
    # a broken address plan fails later, while configuring hosts
    topo = linear(3)
    net = _net(topo, VethShaper(), tmp_path / "b")
    net.plan.routes["n1"][0].via = "192.0.2.77"          # not on any of n1's subnets: ip refuses
    with pytest.raises(RuntimeError, match="addresses and routes"):
        net.start()
    assert ours_left(net.run_id) == []


def _holder(tmp_path: Path) -> tuple[subprocess.Popen, dict]:
    p = subprocess.Popen([sys.executable, str(TESTS_DIR / "hold_network.py"), str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=REPO)
    line = p.stdout.readline()
    assert line, p.stderr.read()
    info = json.loads(line)
    assert ours_left(info["run_id"]) and not gone(info["pid"])
    return p, info


def test_sigint_to_the_holding_process_tears_down(tmp_path: Path) -> None:
    p, info = _holder(tmp_path)
    signal_and_wait(p, signal.SIGINT, 60)
    assert p.returncode != 0              # KeyboardInterrupt after teardown
    assert ours_left(info["run_id"]) == []
    assert gone(info["pid"])
    assert registry.load(info["run_id"]) is None


def test_sigterm_to_the_holding_process_tears_down(tmp_path: Path) -> None:
    p, info = _holder(tmp_path)
    signal_and_wait(p, signal.SIGTERM, 60)
    assert ours_left(info["run_id"]) == [] and gone(info["pid"])


def test_kill_9_then_clean_removes_everything_but_live_runs(tmp_path: Path, make_net) -> None:
    live = make_net(linear(2))                       # owned by this (live) pytest process
    p, info = _holder(tmp_path / "crashed")
    p.kill()
    p.wait(timeout=30)
    time.sleep(0.2)
    assert ours_left(info["run_id"]), "kill -9 should have left resources for clean to find"
    r = run_cli("clean")
    assert r.returncode == 0, r.stderr
    assert f"tb{info['run_id']}" in r.stdout
    assert ours_left(info["run_id"]) == []
    assert gone(info["pid"])
    assert registry.load(info["run_id"]) is None
    # the live run is untouched and still works
    assert len(ours_left(live.run_id, net_only=True)) == 2 + 2 + 1
    assert f"tb{live.run_id}" not in r.stdout
    assert ping(live.host("n1"), live.data_address("n2")).returncode == 0
    r = run_cli("clean", "--run-id", live.run_id)
    assert r.returncode == 2 and "live" in r.stderr and "Traceback" not in r.stderr


def test_sigint_in_the_middle_of_start_tears_down(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, str(TESTS_DIR / "hold_network.py"), str(tmp_path), "--slow"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    info = json.loads(p.stdout.readline())
    deadline = time.monotonic() + 20
    while not ours_left(info["run_id"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.8)                                  # hosts exist, links half made (0.5 s each)
    assert ours_left(info["run_id"]), "the network never started building"
    signal_and_wait(p, signal.SIGINT, 60)
    assert p.returncode != 0
    assert "KeyboardInterrupt" in p.stderr.read()
    assert ours_left(info["run_id"]) == []
    assert registry.load(info["run_id"]) is None
