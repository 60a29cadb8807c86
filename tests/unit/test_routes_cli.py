"""`testbed routes` and `testbed rules`: one-line errors without a network or a daemon, and the table, JSON and
rule upload against an in-process Control service (no root, no namespaces)."""
from __future__ import annotations

import json
import time
from concurrent import futures
from typing import Iterator

import grpc
import pytest

from node.rpc import control_pb2, control_pb2_grpc
from testbed import cli, registry
from testbed.commands import routing as routes_cmd

pytestmark = pytest.mark.timeout(30)
INF = float("inf")


class FakeControl(control_pb2_grpc.ControlServicer):
    """GetRoutes answers a fixed table; SetRules refuses a rule without `to` like a node would."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.rules_json = json.dumps([{"match": {"dst": "b3"}, "to": "b2"}])

    def GetRoutes(self, request, context):
        time.sleep(self.delay)
        routes = [control_pb2.RouteEntry(destination=d, next_hop=h, cost=c, learned=l) for d, h, c, l in (
            ("b10", "b2", 31.0, "dynamic"), ("b2", "b2", 10.0, "neighbour"), ("b3", "b2", 20.5, "dynamic"),
            ("b9", "", INF, "unreachable"))]
        links = [control_pb2.LinkEntry(neighbour="b2", up=True, latency_ms=10.04, sd_ms=0.52, jitter_ms=0.31,
                                       loss=0.025, probes_sent=40, probes_answered=39, cost=10.0),
                 control_pb2.LinkEntry(neighbour="b11", up=False, probes_sent=5, loss=1.0, cost=INF,
                                       suppressed=True)]
        return control_pb2.GetRoutesReply(node="b1", mode="dynamic", routes=routes, links=links,
                                          rules_json=self.rules_json)

    def SetRules(self, request, context):
        rules = json.loads(request.rules_json)
        if any("to" not in r for r in rules):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "rule 1: needs one of to, round_robin, failover\n")
        self.rules_json = request.rules_json
        return control_pb2.SetRulesReply(installed=len(rules))


@pytest.fixture
def node() -> Iterator[tuple[str, FakeControl]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    fake = FakeControl()
    control_pb2_grpc.add_ControlServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", fake
    server.stop(None)


@pytest.fixture(autouse=True)
def no_network(tmp_path, monkeypatch) -> None:
    """An empty registry and no address from the environment: no network is up."""
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path / "registry")
    monkeypatch.delenv("WANBED_NODE_ADDRESS", raising=False)
    monkeypatch.delenv("WANBED_NODES", raising=False)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("args", [["routes", "b1"], ["routes", "b1", "--json"], ["rules", "b1", "--show"],
                                  ["rules", "b1", "--clear"]])
def test_no_network_is_one_line(capsys, args) -> None:
    code, out, err = run(capsys, *args)
    assert code != 0 and out == ""
    assert err == "testbed: no network is up (start one with `testbed up SCENARIO`).\n"


def test_a_node_that_does_not_answer(capsys, unused_port: int) -> None:
    code, _, err = run(capsys, "routes", "b1", "--address", f"127.0.0.1:{unused_port}")
    assert code != 0
    assert err == f"testbed: cannot get the routes of b1: node at 127.0.0.1:{unused_port} is not reachable " \
                  f"(unavailable).\n"


def test_a_node_that_answers_too_late(capsys, node, monkeypatch) -> None:
    address, fake = node
    monkeypatch.setattr(routes_cmd, "ANSWER_TIMEOUT", 0.2)
    fake.delay = 1.0
    code, out, err = run(capsys, "routes", "b1", "--address", address)
    assert code != 0 and out == ""
    assert err == f"testbed: cannot get the routes of b1: node at {address} is not reachable (deadline_exceeded).\n"


def test_rules_needs_exactly_one_action(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["rules", "b1"])
    assert e.value.code == 2
    assert "one of the arguments --file --show --clear is required" in capsys.readouterr().err


def test_rules_file_errors_come_before_the_network(capsys, tmp_path) -> None:
    bad = tmp_path / "rules.yaml"
    bad.write_text("to: b2\n")
    assert run(capsys, "rules", "b1", "--file", str(bad))[2] == \
        f"testbed: {bad}: expected a list of rules (or `rules: [...]`), got a dict.\n"
    bad.write_text("- [unclosed\n")
    assert run(capsys, "rules", "b1", "--file", str(bad))[2].startswith(f"testbed: {bad}:2: not valid YAML (")
    code, _, err = run(capsys, "rules", "b1", "--file", str(tmp_path / "missing.yaml"))
    assert code != 0 and err == f"testbed: cannot read {tmp_path / 'missing.yaml'}: No such file or directory.\n"


def test_routes_table(capsys, node) -> None:
    address, _ = node
    code, out, err = run(capsys, "routes", "b1", "--address", address)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "routes at b1 (dynamic)",
        "Destination  Next hop  Cost  Learned",
        "b2           b2        10    neighbour",
        "b3           b2        20.5  dynamic",
        "b9           -         inf   unreachable",
        "b10          b2        31    dynamic",
        "",
        "Neighbour  Up   Latency ms  Sd   Jitter  Loss %  Probes  Cost  Suppressed",
        "b2         yes  10.0        0.5  0.3     2.5     40/39   10    no",
        "b11        no   -           -    -       100.0   5/0     inf   yes",
        "",
        "1 rule(s) in force (testbed rules b1 --show)",
    ]


def test_routes_json(capsys, node) -> None:
    address, _ = node
    code, out, _ = run(capsys, "routes", "b1", "--json", "--address", address)
    data = json.loads(out)
    assert code == 0 and data["node"] == "b1" and data["mode"] == "dynamic"
    assert [r["destination"] for r in data["routes"]] == ["b2", "b3", "b9", "b10"]
    assert data["routes"][2] == {"destination": "b9", "next_hop": "", "cost": None, "learned": "unreachable"}
    assert [l["neighbour"] for l in data["links"]] == ["b2", "b11"]
    assert data["links"][0]["probes_answered"] == 39 and data["links"][1]["cost"] is None
    assert data["rules"] == [{"match": {"dst": "b3"}, "to": "b2"}]


def test_rules_upload_show_and_refusal(capsys, node, tmp_path) -> None:
    address, fake = node
    good = tmp_path / "good.yaml"
    good.write_text("rules:\n  - {match: {keyword: urgent}, to: b5}\n  - {to: b2}\n")
    code, out, _ = run(capsys, "rules", "b1", "--file", str(good), "--address", address)
    assert code == 0 and out.startswith("b1: 2 rule(s) in force")
    assert json.loads(fake.rules_json) == [{"match": {"keyword": "urgent"}, "to": "b5"}, {"to": "b2"}]
    code, out, _ = run(capsys, "rules", "b1", "--show", "--address", address)
    assert code == 0 and out.splitlines()[0] == "- match:"
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {match: {dst: b3}}\n")
    code, out, err = run(capsys, "rules", "b1", "--file", str(bad), "--address", address)
    assert code != 0 and out == ""
    assert err == f"testbed: b1 did not take the rules: node at {address}: rule 1: needs one of to, round_robin, " \
                  f"failover.\n"
    assert run(capsys, "rules", "b1", "--clear", "--address", address)[1].startswith("b1: 0 rule(s) in force")
    assert run(capsys, "rules", "b1", "--show", "--address", address)[1] == "no rules at b1\n"


def test_natural_order() -> None:
    assert sorted(["b10", "b2", "a1", "b1", "korea", "cgl3", "cgl1"], key=routes_cmd.natural_key) == \
        ["a1", "b1", "b2", "b10", "cgl1", "cgl3", "korea"]


@pytest.fixture
def unused_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def live(node) -> str:
    """A registered `testbed up` run (this process owns it) whose b1 is the fake node on 127.0.0.1."""
    from testbed import netstate
    address, _ = node
    port = int(address.rsplit(":", 1)[1])
    run_id = "abc123"
    registry.register(run_id, netstate.UP_KIND, state={
        "ready": True, "mgmt_port": port,
        "nodes": {"run_dir": "/nonexistent", "daemons": [{"host": "b1", "pid": 1, "started": 0.0}],
                  "without_daemon": ["r1"]}})
    netstate.state_path(run_id).write_text(json.dumps(
        {"plan": {"mgmt_address": {"b1": "127.0.0.1/8", "r1": "127.0.0.2/8"}}}))
    return run_id


def test_through_the_running_network(capsys, live) -> None:
    code, out, _ = run(capsys, "routes", "b1")
    assert code == 0 and out.startswith("routes at b1 (dynamic)\n")
    code, _, err = run(capsys, "routes", "b7")
    assert code != 0 and err == f"testbed: no node named 'b7' in the running network {live}.\n"
    code, _, err = run(capsys, "rules", "r1", "--show")
    assert code != 0 and err == "testbed: r1 runs no node daemon (nodes.r1.daemon: false); hosts with one: b1.\n"


def test_a_static_node_has_no_costs() -> None:
    nan = float("nan")
    reply = control_pb2.GetRoutesReply(
        node="n1", mode="static", routes=[control_pb2.RouteEntry(destination=d, next_hop=h, cost=nan, learned=l)
                                          for d, h, l in (("n3", "n2", "static"), ("n2", "n2", "neighbour"))],
        links=[control_pb2.LinkEntry(neighbour="n2", up=True, cost=INF)], rules_json="[]")
    plain = routes_cmd.reply_plain(reply)
    assert plain["routes"][0] == {"destination": "n2", "next_hop": "n2", "cost": None, "learned": "neighbour"}
    json.dumps(plain, allow_nan=False)                   # valid JSON: no NaN or Infinity
    assert routes_cmd.render(plain).splitlines() == [
        "routes at n1 (static)",
        "Destination  Next hop  Cost  Learned",
        "n2           n2        -     neighbour",
        "n3           n2        -     static",
        "",
        "Neighbour  Up   Latency ms  Sd  Jitter  Loss %  Probes  Cost  Suppressed",
        "n2         yes  -           -   -       -       0/0     -     no",
    ]
