"""The network CLI end to end, through subprocesses: up -> status -> exec -> link -> partition/heal -> down."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from network_support import TESTS_DIR, free_mgmt_subnet, ours_left
from testbed import netstate, registry

# `testbed up` allows one network on the machine and down/status act on it: one such test at a time,
# whichever worker it runs on (the session's `up` lock)
pytestmark = [pytest.mark.testbed_up,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, veth, iptables"),
              pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[3]
LINK_DELAY_MS = 5.0


FACTORY = ["--factory", "network_support:cli_network"]     # linear(3) on plain veth links, no loader needed


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env=env)


def one_line_error(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("testbed: ")


@pytest.fixture
def nothing_up() -> None:
    if netstate.running():
        pytest.skip("a `testbed up` network is running on this machine; not touching it")


def test_commands_with_nothing_up_give_one_line_errors(nothing_up, tmp_path: Path) -> None:
    for args in (["status"], ["exec", "n1", "--", "true"], ["link", "n1", "n2", "--delay", "5ms"],
                 ["partition", "n1", "n2"], ["heal"], ["down"]):
        r = cli(*args)
        one_line_error(r)
        assert "no network is up" in r.stderr
    r = cli("status", "--json")            # a script asking gets a state, not an error
    assert (r.returncode, json.loads(r.stdout), r.stderr) == (0, {"running": False}, "")
    one_line_error(cli("up", str(tmp_path / "missing.yaml")))
    one_line_error(cli("link", "n1", "n2"))                 # nothing to change: checked before anything else
    one_line_error(cli("link", "n1", "n2", "--delay", "fast"))
    one_line_error(cli("link", "n1", "n2", "--loss", "150%"))


def scenario_file(tmp_path: Path, mgmt: str) -> Path:
    p = tmp_path / "cli.yaml"
    p.write_text(f"""name: clitest
topology:
  generator: linear
  params: {{n: 3}}
  mgmt_pool: {mgmt}
link_defaults:
  delay: {LINK_DELAY_MS:g}ms
shaper: auto
""")
    return p


def rtt_ms(out: str) -> float:
    line = [l for l in out.splitlines() if "min/avg/max" in l][0]
    return float(line.split("=")[1].split("/")[1])


@pytest.mark.parametrize("real", [pytest.param(True, id="scenario"), pytest.param(False, id="veth")])
def test_cli_end_to_end(nothing_up, tmp_path: Path, real: bool) -> None:
    scen = scenario_file(tmp_path, free_mgmt_subnet())
    run_dir = tmp_path / "run"
    r = cli("up", str(scen), "--run-dir", str(run_dir), *([] if real else [*FACTORY, "--json"]))
    assert r.returncode == 0, r.stderr
    rec = netstate.running()[0]
    try:
        assert "building the network" in r.stderr         # what `up` waits for, beside its result
        if real:
            assert "n1" in r.stdout and "n1-n2" in r.stdout
        else:
            up = json.loads(r.stdout)
            assert up["running"] and up["run_id"] == rec.run_id and up["nodes"] is None
            assert {l["name"] for l in up["links"]} == {"n1-n2", "n2-n3"}
        st = json.loads(cli("status", "--json").stdout)
        assert st["run_id"] == rec.run_id and st["runtime"] == "netns" and st["shaper"]
        hosts = {h["name"]: h for h in st["hosts"]}
        assert set(hosts) == {"n1", "n2", "n3"} and all(h["mgmt_address"] and h["data_address"] for h in hosts.values())
        assert {l["name"] for l in st["links"]} == {"n1-n2", "n2-n3"}
        d3 = hosts["n3"]["data_address"]
        r = cli("exec", "n1", "--", "ping", "-n", "-q", "-c2", "-i0.2", "-W2", d3)
        assert r.returncode == 0, r.stdout + r.stderr
        if real:
            assert all(l["a_to_b"]["delay"] == pytest.approx(LINK_DELAY_MS / 1000) for l in st["links"])
            # two links, both directions; tolerance: configured delay plus 10 ms scheduling slack per one-way hop
            assert 4 * LINK_DELAY_MS <= rtt_ms(r.stdout) <= 4 * LINK_DELAY_MS + 4 * 10
        assert cli("exec", "n1", "--", "sh", "-c", "exit 7").returncode == 7
        one_line_error(cli("exec", "nope", "--", "true"))
        r = cli("link", "n1", "n2", "--delay", "20ms", "--json")
        assert r.returncode == 0, r.stderr
        changed = json.loads(r.stdout)
        assert changed["link"] == "n1-n2" and changed["up"] and changed["a_to_b"]["delay"] == pytest.approx(0.02)
        if real:
            r = cli("exec", "n1", "--", "ping", "-n", "-q", "-c2", "-i0.2", "-W2", d3)
            assert rtt_ms(r.stdout) >= 2 * 20 + 2 * LINK_DELAY_MS
        assert cli("link", "n2", "n3", "--down").returncode == 0
        assert cli("exec", "n1", "--", "ping", "-n", "-q", "-c1", "-W1", d3).returncode != 0
        assert cli("link", "n2", "n3", "--up").returncode == 0
        assert cli("exec", "n1", "--", "ping", "-n", "-q", "-c1", "-W2", d3).returncode == 0
        assert cli("partition", "n1", "n3").returncode == 0
        assert cli("exec", "n1", "--", "ping", "-n", "-q", "-c1", "-W1", d3).returncode != 0
        assert cli("exec", "n1", "--", "ping", "-n", "-q", "-c1", "-W2", hosts["n2"]["data_address"]).returncode == 0
        assert cli("heal").returncode == 0
        assert cli("exec", "n1", "--", "ping", "-n", "-q", "-c1", "-W2", d3).returncode == 0
        st = json.loads(cli("status", "--json").stdout)
        l12 = [l for l in st["links"] if l["name"] == "n1-n2"][0]
        assert l12["a_to_b"]["delay"] == pytest.approx(0.02) and st["partitions"] == []
        events = [json.loads(x)["event"] for x in (run_dir / "events.jsonl").read_text().splitlines()]
        assert events == ["link_set", "link_down", "link_up", "partition", "heal"]
        r = cli("link", "n1", "n2", "--rate", "64kbit")
        assert r.returncode == 0 and "rate 64kbit" in r.stdout, r.stderr
        r = cli("link", "n1", "n2", "--rate", "0")          # not "carry nothing": it says what it does
        assert r.returncode == 0 and "removes the rate limit" in r.stderr and "rate unlimited" in r.stdout, r.stderr
        r = cli("up", str(scen), *([] if real else FACTORY))
        one_line_error(r)
        assert rec.run_id in r.stderr
    finally:
        r = cli("down")
    assert r.returncode == 0, r.stderr
    assert ours_left(rec.run_id) == [] and not registry.pid_alive(rec.owner_pid)
    assert registry.load(rec.run_id) is None


@pytest.mark.parametrize("real", [pytest.param(True, id="scenario"), pytest.param(False, id="veth")])
def test_kill_9_of_supervisor_then_clean(nothing_up, tmp_path: Path, real: bool) -> None:
    scen = scenario_file(tmp_path, free_mgmt_subnet())
    r = cli("up", str(scen), "--run-dir", str(tmp_path / "run"), *([] if real else FACTORY))
    assert r.returncode == 0, r.stderr
    rec = netstate.running()[0]
    children = _descendants(rec.owner_pid)
    os.kill(rec.owner_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while registry.pid_alive(rec.owner_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ours_left(rec.run_id)
    r = cli("down")
    one_line_error(r)
    assert "testbed clean" in r.stderr
    r = cli("clean", "--json")
    assert r.returncode == 0, r.stderr
    assert any(rec.run_id in item for item in json.loads(r.stdout)["removed"]), r.stdout
    assert ours_left(rec.run_id) == []
    assert registry.load(rec.run_id) is None
    time.sleep(0.5)
    assert [p for p in children if _alive(p)] == [], "emulator/child processes of the dead run survived"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    kids: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        kids.setdefault(pp, []).append(p)
    result, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            result.append(c)
            todo.append(c)
    return result


def test_not_root_gives_one_sentence(tmp_path: Path) -> None:
    scen = tmp_path / "x.yaml"
    scen.write_text("name: x\n")
    os.chmod(tmp_path, 0o755)
    for args in (["up", str(scen)], ["clean"]):
        r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-m",
                            "testbed", *args], capture_output=True, text=True, cwd="/tmp", timeout=60)
        one_line_error(r)
        assert "root" in r.stderr


def test_cli_value_parsers() -> None:
    from testbed.commands.network import parse_duration, parse_percent, parse_rate
    from node.errors import UserError
    assert parse_duration("25ms", "--delay") == pytest.approx(0.025)
    assert parse_duration("1.5s", "--delay") == pytest.approx(1.5)
    assert parse_rate("10Mbit", "--rate") == pytest.approx(10e6)
    assert parse_rate("4800bit", "--rate") == pytest.approx(4800)
    assert parse_percent("1%", "--loss") == pytest.approx(0.01)
    assert parse_percent("0.25", "--loss") == pytest.approx(0.25)
    for fn, bad in ((parse_duration, "fast"), (parse_duration, "-5ms"), (parse_rate, "lots"), (parse_percent, "101%"),
                    (parse_percent, "x")):
        with pytest.raises(UserError):
            fn(bad, "--opt")
