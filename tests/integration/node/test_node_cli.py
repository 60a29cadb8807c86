"""`testbed send`, `mailbox`, `queue`, `trace` and `pub` with a literal body against real daemons.

One network for the module: a chain n1 - n2 - n3. The first test runs the commands as real processes (what a
user types); the others run in-process through `testbed.cli.main` (what the console script calls), to keep the
module quick. The queue test stops n3 and starts it again: every node runs when it ends.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from node.rpc import control_pb2
from nodenet_support import FAST, chain, wait_until
from testbed import cli

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(120)
NAMES = ["n1", "n2", "n3"]
DELIVERY = 20 * FAST["session"]["hold_time"]      # seconds a message may take across two hops, a restart included


@pytest.fixture(scope="module")
def net():
    yield from chain("wanbed-cli-node-", NAMES)


@pytest.fixture
def addresses(net, monkeypatch) -> dict[str, str]:
    """Nodes found by name through WANBED_NODES, as a user of `testbed up` finds them through the network state."""
    monkeypatch.setenv("WANBED_NODES", ",".join(f"{name}={node.mgmt}" for name, node in net.nodes.items()))
    monkeypatch.delenv("WANBED_NODE_ADDRESS", raising=False)
    return {name: node.mgmt for name, node in net.nodes.items()}


def _tb(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, env={**os.environ, **(env or {})})


def tb(capsys, *args: str) -> tuple[int, str, str]:
    """One command in-process: (status, stdout, stderr)."""
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_send_and_mailbox(net, tmp_path: Path) -> None:
    a1, a2 = net.nodes["n1"].mgmt, net.nodes["n2"].mgmt
    out = _tb("send", "n1", "--to", "bob@n2", "--size", "2.5kB", "--lifetime", "10m", "--address", a1, "--json")
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout)
    assert (sent["from"], sent["to"], sent["size"]) == ("n1", ["bob@n2"], 2500)
    msg_id = sent["msg_id"]
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


def _queue(capsys, node: str) -> list[dict]:
    code, out, err = tb(capsys, "queue", node, "--json")
    assert code == 0, err
    return json.loads(out)


def test_queue_and_trace(net, addresses, capsys) -> None:
    """A copy for a stopped n1 waits at n2: `queue n2` lists it, `trace` finds it hop by hop (n3, n2, then n1:
    the route's order, not the names'); once n1 is back the queue empties and the trace ends in n1's mailbox."""
    net.stop("n1")
    try:
        code, out, err = tb(capsys, "send", "n3", "--to", "dave@n1", "--size", "3000")
        assert code == 0, err
        msg_id = out.strip()
        code, out, err = tb(capsys, "send", "n3", "--to", "n1", "--size", "10")
        assert code == 0, err
        wait_until(lambda: len(_queue(capsys, "n2")) == 2, DELIVERY, what="both copies in the queue of n2")
        with net.client("n2") as c:     # page by page (one copy a page) lists what one page lists
            assert [i.msg_id for i in c.queue(page=1)] == [i.msg_id for i in c.queue()] == \
                sorted(r["msg_id"] for r in _queue(capsys, "n2"))
            first = c.control.ListQueue(control_pb2.QueueRequest(limit=1), timeout=10)
            assert len(first.items) == 1 and first.next_page_token
            with pytest.raises(grpc.RpcError) as bad:
                c.control.ListQueue(control_pb2.QueueRequest(page_token="not-a-token"), timeout=10)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        row = next(r for r in _queue(capsys, "n2") if r["msg_id"] == msg_id)
        assert (row["destination"], row["next_hop"], row["state"], row["size"]) == ("n1", "n1", "queued", 3000)
        assert 0 < row["bytes"] <= 3000 and row["pieces"] >= 1 and row["age_s"] >= 0
        code, out, err = tb(capsys, "queue", "n2")
        assert code == 0 and msg_id in out and "queued" in out and "Next hop" in out, err
        code, out, err = tb(capsys, "queue", "n2", "--limit", "1", "--json")
        assert code == 0 and len(json.loads(out)) == 1
        code, out, err = tb(capsys, "trace", msg_id, "--json")
        assert code == 0, err
        rows = json.loads(out)
        assert [r["node"] for r in rows] == ["n3", "n2", "n1"] and rows[0]["origin"] is True
        assert rows[1]["state"] == "queued"
        assert rows[2]["state"] == "unknown" and "not reachable" in rows[2]["error"]
    finally:
        net.start("n1")
    wait_until(lambda: not _queue(capsys, "n2"), DELIVERY, what="the queue of n2 empty")
    assert tb(capsys, "queue", "n2")[1] == "queue of n2 is empty\n"
    code, out, err = tb(capsys, "trace", msg_id)
    assert code == 0 and out.startswith(f"message {msg_id}"), err
    assert [line.split()[:2] for line in out.splitlines()[2:]] == [["n3", "forwarded"], ["n1", "delivered"]]
    code, out, err = tb(capsys, "trace", "n1-nosuchmessage")
    assert code == 2 and err.startswith("testbed: no node of n1, n2, n3 knows") and len(err.splitlines()) == 1
    code, out, err = tb(capsys, "queue", "n2", "--limit", "-1")
    assert code == 2 and err == "testbed: --limit must not be negative.\n"


def test_bodies_and_mailbox_delete(net, addresses, capsys, monkeypatch) -> None:
    """`pub` takes a literal body, `send --file -` reads standard input; `mailbox --delete` deletes copies."""
    code, out, err = tb(capsys, "pub", "n1", "news.cli", "hello, literal")
    assert code == 0 and out.startswith("n1-") and "expected by" in out, err
    code, out, err = tb(capsys, "pub", "n1", "news.cli", "two bodies", "--size", "10")
    assert code == 2 and err == "testbed: give exactly one of BODY, --size or --file.\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"read from stdin")))
    code, out, err = tb(capsys, "send", "n1", "--to", "erin@n3", "--file", "-")
    assert code == 0, err
    msg_id = out.strip()

    def erins() -> list[dict]:
        return json.loads(tb(capsys, "mailbox", "n3", "--user", "erin", "--json")[1])
    wait_until(lambda: erins(), DELIVERY, what="erin's mail at n3")
    assert [(m["msg_id"], m["size"]) for m in erins()] == [(msg_id, len(b"read from stdin"))]
    code, out, err = tb(capsys, "mailbox", "n3", "--user", "erin", "--delete", msg_id, "n1-unknown", "--json")
    assert code == 0 and json.loads(out)["deleted"] == 1, err
    assert erins() == []
    code, out, err = tb(capsys, "mailbox", "n3", "--user", "erin", "--delete", msg_id)
    assert code == 0 and out.strip() == "n3: deleted 0 of 1 (erin's copies)"
