"""`testbed pools`: its text form from a GetPools reply, and a node that does not answer as one line, status 2."""
from __future__ import annotations

import json

from node.rpc import pools_pb2
from testbed import cli
from testbed.commands.pools import as_dict, render


def reply() -> pools_pb2.GetPoolsReply:
    return pools_pb2.GetPoolsReply(
        node="r2", leader="r1", is_leader=False, term=3, version=17,
        apps=[pools_pb2.PoolApp(name="A", algorithm="load_aware", move_share=0.5, types=["alarm", "counter"])],
        instances=[pools_pb2.PoolInstance(app="A", instance="a1", node="h1", state="active", load=12.5),
                   pools_pb2.PoolInstance(app="A", instance="a2", node="h2", state="leaving", load=0.0)],
        consumers=[pools_pb2.PoolConsumer(name="c1", node="c1", types=["alarm"])],
        connections=[pools_pb2.PoolConnection(consumer="c1", app="A", instance="a1", load=12.5)])


def test_render_names_the_leader_the_maps_and_the_load() -> None:
    p = as_dict(reply())
    text = render(p)
    assert text.splitlines()[0] == "r2: leader r1, term 3, map version 17"
    assert "load_aware" in text and "a2        h2    leaving  0" in text and "c1        A            a1" in text
    assert json.loads(json.dumps(p))["instances"][1]["load"] == 0.0      # zeros are written out in --json
    assert "none (an election is on)" in render(as_dict(pools_pb2.GetPoolsReply(node="r1")))


def test_a_node_that_does_not_answer_is_one_line(capsys) -> None:
    assert cli.main(["pools", "r1", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "r1" in err[0]
