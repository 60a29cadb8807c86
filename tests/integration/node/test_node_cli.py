"""`testbed send` and `testbed mailbox` against real daemons."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodenet_support import wait_until

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(120)


def _tb(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, env={**os.environ, **(env or {})})


def test_send_and_mailbox(localnet, tmp_path: Path) -> None:
    net = localnet(hops=1)
    a1, a2 = net.nodes["n1"].mgmt, net.nodes["n2"].mgmt
    out = _tb("send", "n1", "--to", "bob@n2", "--size", "2500", "--address", a1)
    assert out.returncode == 0, out.stderr
    msg_id = out.stdout.strip()
    f = tmp_path / "body.txt"
    f.write_text("hello from a file")
    out = _tb("send", "n1", "--to", "n2", "--file", str(f), "--priority", "3", env={"WANBED_NODES": f"n1={a1}"})
    assert out.returncode == 0, out.stderr
    out = _tb("send", "n1", "--to", "n7", "--size", "10", "--address", a1)
    assert out.returncode == 2 and "no route to n7" in out.stderr and "Traceback" not in out.stderr
    out = _tb("send", "n1", "--to", "n2", "--file", str(tmp_path / "missing"), "--address", a1)
    assert out.returncode == 2 and "cannot read" in out.stderr
    out = _tb("send", "n5", "--to", "n2", "--size", "1", env={"WANBED_NODES": "", "WANBED_NODE_ADDRESS": ""})
    # without an address the running network's state is asked (testbed/netstate.py): one clear sentence
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    wait_until(lambda: len(json.loads(_tb("mailbox", "n2", "--json", "--address", a2).stdout)) >= 2, 20,
               what="2 items in the mailbox of n2 (testbed mailbox --json)")
    items = json.loads(_tb("mailbox", "n2", "--json", "--address", a2).stdout)
    assert {i["msg_id"] for i in items} >= {msg_id} and {i["size"] for i in items} == {2500, 17}
    text = _tb("mailbox", "n2", "--address", a2).stdout
    assert msg_id in text and "bob" in text
    out = _tb("mailbox", "n2", "--address", "127.0.0.1:1")
    assert out.returncode == 2 and "not reachable" in out.stderr
