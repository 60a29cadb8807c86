"""`testbed pub`, `sub`, `unsub` and `subs` against real daemons on loopback (testbed/commands/pubsub.py).

One network for the module: a chain n1 - n2 - n3, publishers at n1, subscribers at n3 (2 hops) and n2.
`sub` runs as a real process (it streams until --count or Ctrl-C); the one-shot commands run in-process
through `testbed.cli.main`, which is what the console script calls, to keep the module quick. The restart
test comes last: it leaves every node running again.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nodenet_support import FAST, chain, wait_until
from tests.integration.support import signal_and_wait
from testbed import cli

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(120)
NAMES = ["n1", "n2", "n3"]
SPREAD = 5 * FAST["session"]["hold_time"]        # interest reaches every node within a few frames
PUB_LINE = re.compile(r"^(n1-[0-9a-f]+)  expected by (\d+) subscriptions? \((\d+) durable, (\d+) non-durable\)$")
DELIVERY_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}  (\S+)  (\S+)  (\d+) B  (\d+\.\d) ms  (\d+) hops?( +\(redelivered\))?$")


@pytest.fixture(scope="module")
def net():
    yield from chain("wanbed-cli-pubsub-", NAMES)


@pytest.fixture(autouse=True)
def addresses(net, monkeypatch) -> dict[str, str]:
    """Nodes found by name through WANBED_NODES, as a user of `testbed up` finds them through the network state."""
    env = ",".join(f"{name}={node.mgmt}" for name, node in net.nodes.items())
    monkeypatch.setenv("WANBED_NODES", env)
    monkeypatch.delenv("WANBED_NODE_ADDRESS", raising=False)
    return {name: node.mgmt for name, node in net.nodes.items()}


def tb(capsys, *args: str) -> tuple[int, str, str]:
    """One command in-process: (status, stdout, stderr)."""
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


class Sub:
    """`testbed sub ...` as its own process; its first line (the node's confirmation) is read at once, `finish`
    returns the lines after it."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "testbed", "sub", *args], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
        self.first = (self.proc.stderr if "--json" in args else self.proc.stdout).readline().rstrip("\n")

    def line(self) -> str:
        return self.proc.stdout.readline().rstrip("\n")

    def finish(self, timeout: float = 20) -> tuple[int, list[str], list[str]]:
        """Wait for the end; (status, the lines after those read so far on stdout, on stderr). Not communicate():
        it reads the pipes underneath what readline() has buffered already. The outputs are small."""
        try:
            self.proc.wait(timeout)
        finally:
            self.proc.kill()
        out, err = self.proc.stdout.read(), self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode, out.splitlines(), err.splitlines()

    def interrupt(self) -> tuple[int, list[str], list[str]]:
        signal_and_wait(self.proc, signal.SIGINT, 20)
        return self.finish()


def subs(capsys, node: str, remote: bool = False) -> list[dict]:
    code, out, err = tb(capsys, "subs", node, "--json", *(["--remote"] if remote else []))
    assert code == 0, err
    return json.loads(out)


def known_at(capsys, node: str, owner: str, name: str) -> bool:
    return any((s["node"], s["name"]) == (owner, name) for s in subs(capsys, node, remote=True))


def pub(capsys, node: str, topic: str, *more: str) -> list[tuple[str, int, int, int]]:
    """Publish; (pub_id, expected, durable, non-durable) per line."""
    code, out, err = tb(capsys, "pub", node, topic, *more)
    assert code == 0 and err == "", err
    return [tuple(int(g) if g.isdigit() else g for g in PUB_LINE.match(line).groups())
            for line in out.splitlines() if PUB_LINE.match(line)]


def one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    assert len(err.splitlines()) == 1, err
    return err.strip()


def test_pub_with_no_subscribers(capsys, tmp_path) -> None:
    code, out, err = tb(capsys, "pub", "n1", "quiet.topic", "--size", "500", "--priority", "3", "--key", "k1")
    assert code == 0 and err == ""
    assert PUB_LINE.match(out.strip()).groups()[1:] == ("0", "0", "0")
    body = tmp_path / "body.bin"
    body.write_bytes(b"x" * 1234)
    code, out, err = tb(capsys, "pub", "n1", "quiet.topic", "--file", str(body), "--count", "3")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4 and all(PUB_LINE.match(line) for line in lines[:3])
    assert len({PUB_LINE.match(line).group(1) for line in lines[:3]}) == 3
    assert lines[3].startswith("published 3 on quiet.topic at n1 in ")
    # --json: one object per publication on stdout, the rate line on stderr; sizes and lifetimes with units
    code, out, err = tb(capsys, "pub", "n1", "quiet.topic", "--size", "1kB", "--lifetime", "30s", "--count", "2",
                        "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 2 and err.startswith("published 2 on quiet.topic at n1 in ")
    assert [(r["node"], r["topic"], r["expected"]) for r in rows] == [("n1", "quiet.topic", 0)] * 2
    # nothing is kept for a topic nobody wants
    assert subs(capsys, "n1", remote=True) == []
    assert tb(capsys, "subs", "n1")[1] == "no subscriptions at n1\n"


def test_sub_receives_what_pub_publishes(capsys) -> None:
    text = Sub("n3", "news.>", "--count", "2")
    js = Sub("n2", "news.*.c", "--name", "watcher", "--json", "--count", "1")
    assert re.fullmatch(r"subscribed to news\.> at n3 as (live-[0-9a-f]+) \(non-durable\)", text.first), text.first
    assert js.first == "subscribed to news.*.c at n2 as watcher (non-durable)"
    name = text.first.split(" as ")[1].split()[0]
    wait_until(lambda: known_at(capsys, "n1", "n3", name) and known_at(capsys, "n1", "n2", "watcher"), SPREAD,
               what="both subscriptions known at n1 (testbed subs n1 --remote)")
    listed = {s["name"]: s for s in subs(capsys, "n3")}
    assert listed[name] == {"node": "n3", "name": name, "owner": "(admin)", "pattern": "news.>", "durable": False,
                            "local": True, "connected": True, "backlog": 0, "delivered": 0, "dropped": 0}
    code, table, _ = tb(capsys, "subs", "n1", "--remote")
    assert code == 0 and table.splitlines()[0] == "subscriptions known at n1"
    assert re.search(r"^n2 +watcher +- +news\.\*\.c +no +- +- +- +-$", table, re.M), table
    [(first, *expected)] = pub(capsys, "n1", "news.a", "--size", "300")
    assert expected == [1, 0, 1]
    [(second, *expected)] = pub(capsys, "n1", "news.b.c", "--size", "40", "--key", "K", "--priority", "2")
    assert expected == [2, 0, 2]
    code, out, err = text.finish()
    assert code == 0 and err == [], err
    assert out[-1] == "received 2 publications"
    got = [DELIVERY_LINE.match(line).groups() for line in out[:-1]]
    assert [(g[0], g[1], g[2], g[4], g[5]) for g in got] == [("news.a", first, "300", "2", None),
                                                             ("news.b.c", second, "40", "2", None)]
    assert all(0 <= float(g[3]) < 10_000 for g in got)
    code, out, err = js.finish()
    assert code == 0 and err == ["received 1 publication"], err
    [d] = [json.loads(line) for line in out]
    assert {k: d[k] for k in ("node", "subscription", "pub_id", "topic", "origin", "key", "priority", "size",
                              "hops", "redelivered")} == {
        "node": "n2", "subscription": "watcher", "pub_id": second, "topic": "news.b.c", "origin": "n1",
        "key": "K", "priority": 2, "size": 40, "hops": 1, "redelivered": False}
    assert d["latency_ms"] >= 0 and abs(d["ts"] - d["publish_ts"] - d["latency_ms"] / 1000) < 0.01
    # a non-durable subscription ends with its stream
    wait_until(lambda: not known_at(capsys, "n1", "n3", name), SPREAD, what=f"{name} withdrawn at n1")


def test_durable_sub_gets_what_was_published_while_it_was_not_running(capsys) -> None:
    first = Sub("n3", "audit.>", "--durable", "audit")
    assert first.first == "subscribed to audit.> at n3 as audit (durable, 0 publications waiting)"
    code, out, err = first.interrupt()                       # Ctrl-C: a clean end, status 0
    assert (code, out, err) == (0, ["received 0 publications"], [])
    wait_until(lambda: known_at(capsys, "n1", "n3", "audit"), SPREAD, what="the durable subscription known at n1")
    sent = [p[0] for p in pub(capsys, "n1", "audit.login", "--size", "64", "--count", "3")]
    assert len(sent) == 3
    wait_until(lambda: {s["name"]: s for s in subs(capsys, "n3")}["audit"]["backlog"] == 3, 10,
               what="3 publications waiting at n3 for the durable subscription")
    assert {s["name"]: s for s in subs(capsys, "n3")}["audit"]["connected"] is False
    again = Sub("n3", "audit.>", "--durable", "audit", "--count", "3")
    assert again.first == "subscribed to audit.> at n3 as audit (durable, 3 publications waiting)"
    code, out, err = again.finish()
    assert code == 0 and err == []
    assert [DELIVERY_LINE.match(line).group(2) for line in out[:-1]] == sent
    assert out[-1] == "received 3 publications"
    # what sub printed it acknowledged: nothing waits, a new stream gets nothing again
    wait_until(lambda: {s["name"]: s for s in subs(capsys, "n3")}["audit"]["backlog"] == 0, 5,
               what="the acknowledged publications gone from the backlog")
    code, out, err = tb(capsys, "unsub", "n3", "audit")
    assert (code, out) == (0, "n3: subscription audit removed\n")
    assert one_error_line(*tb(capsys, "unsub", "n3", "audit")) == "testbed: no subscription 'audit' at n3."
    assert subs(capsys, "n3") == []


def test_bad_input_is_one_sentence(capsys, monkeypatch, tmp_path, addresses) -> None:
    def error(*args: str) -> str:
        return one_error_line(*tb(capsys, *args))

    assert error("pub", "n1", "a.*", "--size", "1") == \
        "testbed: n1 refused the publication: topic 'a.*' has a wildcard (*); wildcards are for subscriptions."
    assert error("pub", "n1", "a..b", "--size", "1").startswith("testbed: n1 refused the publication: topic 'a..b'")
    assert error("pub", "n1", "a.b", "--size", "1", "--priority", "99") == \
        "testbed: n1 refused the publication: priority 99 is not between 0 and 15."
    assert error("pub", "n1", "a.b", "--size", "-1").startswith("testbed: --size: expected a size like")
    assert error("pub", "n1", "a.b", "--file", str(tmp_path / "missing")) == \
        f"testbed: cannot read {tmp_path / 'missing'}: No such file or directory."
    assert error("sub", "n3", "a.>.b") == \
        "testbed: n3 refused the subscription: pattern 'a.>.b': '>' must be the last token."
    assert error("sub", "n3", "a", "--durable", "no spaces") == \
        "testbed: n3 refused the subscription: invalid subscription name 'no spaces' (letters, digits, '_.-')."
    assert error("sub", "n3", "a", "--count", "0") == "testbed: --count must be at least 1."
    for args in (["pub", "n1", "a", "--size", "1"], ["sub", "n1", "a"], ["subs", "n1"], ["unsub", "n1", "x"]):
        assert "127.0.0.1:1 is not reachable (unavailable)." in error(*args, "--address", "127.0.0.1:1")
    # a node name nobody knows: without WANBED_NODES the running network is asked, and none is up
    monkeypatch.setenv("WANBED_NODES", f"n1={addresses['n1']}")
    monkeypatch.setenv("WANBED_REGISTRY", str(tmp_path / "registry"))
    for args in (["pub", "n9", "a", "--size", "1"], ["sub", "n9", "a"], ["subs", "n9"], ["unsub", "n9", "x"]):
        out = subprocess.run([sys.executable, "-m", "testbed", *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=30)
        assert one_error_line(out.returncode, out.stdout, out.stderr) == \
            "testbed: no network is up (start one with `testbed up SCENARIO`)."
    # --size and --file together: argparse's usage and one error sentence, status 2
    with pytest.raises(SystemExit) as exit_:
        cli.main(["pub", "n1", "a", "--size", "1", "--file", "x"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == "testbed pub: error: argument --file: not allowed with argument --size"


def test_when_the_subscribers_node_goes_away(capsys, net) -> None:
    """Non-durable: one sentence, status 2. Durable: it says it reconnects, and gets what waited meanwhile."""
    live = Sub("n3", "gone.>")
    durable = Sub("n3", "gone.>", "--durable", "keeper", "--count", "1")
    assert durable.first.startswith("subscribed to gone.> at n3 as keeper (durable")
    wait_until(lambda: known_at(capsys, "n1", "n3", "keeper"), SPREAD, what="keeper known at n1")
    net.kill("n3")
    code, out, err = live.finish()
    assert code == 2 and out == []
    assert err == [f"testbed: n3 went away after 0 publications: node at {net.nodes['n3'].mgmt} is not reachable "
                   f"(unavailable)."]
    assert durable.line().startswith("n3 went away: ") and durable.proc.poll() is None
    [(pub_id, *_)] = pub(capsys, "n1", "gone.x", "--size", "10")     # waits at n2 for n3
    net.start("n3")
    # (the copy may reach n3 from n2 before or after the new stream starts: the backlog it names varies)
    assert durable.line().startswith("subscribed again to gone.> at n3 as keeper (durable, ")
    code, out, err = durable.finish()
    assert code == 0 and err == []
    assert DELIVERY_LINE.match(out[0]).group(2) == pub_id and out[1] == "received 1 publication"
    code, out, err = tb(capsys, "unsub", "n3", "keeper", "--json")
    gone = json.loads(out)
    assert code == 0 and {k: gone[k] for k in ("node", "name", "removed")} == {"node": "n3", "name": "keeper",
                                                                                "removed": True}, err
