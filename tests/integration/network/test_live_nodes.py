"""`testbed up` starts node daemons (not on a daemon-less router), mail flows across the router, `down` ends all."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from network_support import TESTS_DIR, free_mgmt_subnet, ours_left
from node.client import NodeClient
from testbed import netstate, registry
from testbed.runtime.netns import netns_pids

# `testbed up` allows one network on the machine and down/status act on it: one such test at a time,
# whichever worker it runs on (the session's `up` lock)
pytestmark = [pytest.mark.testbed_up,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, veth, iptables"),
              pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, timeout: float = 150, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env=env)


def scenario_file(tmp_path: Path) -> Path:
    p = tmp_path / "live.yaml"
    p.write_text(f"""name: livetest
topology: {{generator: linear, nodes: [n1, r, n2], mgmt_pool: {free_mgmt_subnet()}}}
link_defaults: {{delay: 2ms}}
shaper: auto
nodes:
  all: {{session: {{keepalive: 0.3, hold_time: 1.5, backoff_min: 0.05, backoff_max: 0.5}}}}
  r: {{daemon: false}}
""")
    return p


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_up_with_a_daemonless_router_delivers_and_down_leaves_nothing(tmp_path: Path) -> None:
    """`up --insecure`: plaintext and no tokens (said in one line)."""
    if netstate.running():
        pytest.skip("a `testbed up` network is running on this machine; not touching it")
    run_dir = tmp_path / "run"
    r = cli("up", str(scenario_file(tmp_path)), "--run-dir", str(run_dir), "--insecure")
    assert r.returncode == 0, r.stdout + r.stderr
    rec = netstate.running()[0]
    pids: list[int] = []
    try:
        assert "node daemons: n1, n2 (healthy); no daemon: r" in r.stdout
        assert "security: none: the management ports are plaintext" in r.stdout
        nodes = rec.state["nodes"]
        pids = [d["pid"] for d in nodes["daemons"]]
        assert [d["host"] for d in nodes["daemons"]] == ["n1", "n2"] and nodes["without_daemon"] == ["r"]
        assert all(_alive(p) for p in pids)
        prefix = registry.prefix(rec.run_id)
        assert netns_pids(f"{prefix}-r") == []                            # the router runs nothing
        assert not (run_dir / "nodes" / "r" / "node.yaml").exists()
        cfg = yaml.safe_load((run_dir / "nodes" / "n1" / "node.yaml").read_text())
        assert list(cfg["neighbours"]) == ["n2"] and "daemon" not in cfg    # n2 is n1's MTA neighbour, over r
        assert "security" not in cfg

        r = cli("send", "n1", "--to", "n2", "--size", "3000")
        assert r.returncode == 0, r.stderr
        msg_id = r.stdout.strip()
        deadline, items = time.monotonic() + 30, []
        while time.monotonic() < deadline:
            r = cli("mailbox", "n2", "--json")
            assert r.returncode == 0, r.stderr
            items = json.loads(r.stdout)
            if items:
                break
            time.sleep(0.3)
        assert [(i["msg_id"], i["src"], i["size"], i["hops"]) for i in items] == [(msg_id, "n1", 3000, 1)]

        r = cli("send", "r", "--to", "n2", "--size", "10")
        assert r.returncode == 2 and "r runs no node daemon" in r.stderr and "Traceback" not in r.stderr
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert [p for p in pids if _alive(p)] == []
    assert ours_left(rec.run_id) == [] and registry.load(rec.run_id) is None
    assert not (run_dir / "nodes").exists()                               # records removed without --keep


def test_up_has_tls_and_auth_by_default_the_cli_carries_tokens_and_down_removes_the_secrets(tmp_path: Path) -> None:
    """`up` (TLS and tokens unless told otherwise, and says how to turn them off): n1 dials n2 over mTLS at n2's
    loopback (across the router), the management ports take TLS only, the CLI takes the run's tokens (the node's
    admin token, or a named user's), another node's admin token is one sentence, `down` removes the secrets."""
    if netstate.running():
        pytest.skip("a `testbed up` network is running on this machine; not touching it")
    run_dir = tmp_path / "run"
    scenario = scenario_file(tmp_path)
    scenario.write_text(scenario.read_text() + "  n2: {local_users: [alice, bob]}\n")
    r = cli("up", str(scenario), "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    rec = netstate.running()[0]
    try:
        assert "security: mTLS between the nodes, TLS on the management ports; tokens in" in r.stdout
        assert "to run without TLS and tokens: `testbed up --insecure`" in r.stdout
        with NodeClient(netstate.mgmt_address("n2"), timeout=5.0) as plain:    # plaintext: no answer at all
            assert not plain.health()
        cfg = yaml.safe_load((run_dir / "nodes" / "n2" / "node.yaml").read_text())
        assert set(cfg["security"]) == {"tls", "auth"} and set(cfg["security"]["auth"]["users"]) == {"alice", "bob"}
        assert "0.0.0.0" not in cfg["data_listen"] + "".join(cfg["data_listen_also"])
        for user in ("alice", "bob"):
            r = cli("send", "n1", "--to", f"{user}@n2", "--size", "100")
            assert r.returncode == 0, r.stderr
        deadline, items = time.monotonic() + 30, []
        while time.monotonic() < deadline and len(items) < 2:
            r = cli("mailbox", "n2", "--json")            # the admin token: every user's mail
            assert r.returncode == 0, r.stderr
            items = json.loads(r.stdout)
            time.sleep(0.2)
        assert sorted(i["user"] for i in items) == ["alice", "bob"]
        r = cli("mailbox", "n2", "--json", "--user", "alice")   # alice's own token
        assert r.returncode == 0 and [i["user"] for i in json.loads(r.stdout)] == ["alice"], r.stderr
        n1_admin = json.loads((run_dir / "secrets" / "tokens.json").read_text())["admin"]["n1"]
        r = cli("mailbox", "n2", extra_env={"WANBED_TOKEN": n1_admin})
        assert r.returncode == 2 and "unknown token" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert ours_left(rec.run_id) == [] and not (run_dir / "secrets").exists()


def test_up_test_pings_the_mta_neighbours_sends_across_and_tears_down(tmp_path: Path) -> None:
    """`up --test` (TLS and tokens, as `up` has by default): n1 and n2 are MTA neighbours over the router r; the
    check pings n2's address from n1, sends n1 -> n2, takes the network down and exits 0."""
    if netstate.running():
        pytest.skip("a `testbed up` network is running on this machine; not touching it")
    run_dir = tmp_path / "run"
    r = cli("up", str(scenario_file(tmp_path)), "--run-dir", str(run_dir), "--test")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("test: ")]
    assert len(lines) == 3 and lines[0].startswith("test: ping n1 -> n2: ok (")
    assert lines[1].startswith("test: message n1 -> n2 (1 MTA hops): ok (") and "delivered in" in lines[1]
    assert lines[2].startswith("test: passed")
    assert netstate.running() == [] and not (run_dir / "nodes").exists()
    r = cli("up", str(scenario_file(tmp_path)), "--no-nodes", "--test")
    assert r.returncode == 2 and r.stderr == "testbed: --test checks the node daemons: it cannot go with --no-nodes.\n"
