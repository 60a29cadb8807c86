"""The gateway on a real engine and a real SQLite spool (no sessions): users' refusals and durable credits,
an incoming neighbour's "not now", Engine.give_up and the manager's drops. Daemons:
tests/integration/node/test_node_gateway.py."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from node import schema
from node.gateway.subsystem import GatewaySubsystem
from node.gateway.users import op_load
from node.mta import make_engine
from node.piece import Piece
from node.records import Records
from node.registry import config_from_dict
from node.routing.subsystem import RoutingSubsystem
from node.spool import Spool

NEIGHBOURS = {"s1": "127.0.0.1:3", "o1": "127.0.0.1:4", "o2": "127.0.0.1:5"}
RULES = [{"match": {"dst": "mobile"}, "round_robin": ["o1", "o2"]}]
MOBILE = [("mobile", "bob")]


def cfg_for(tmp: Path, gateway: dict):
    return config_from_dict({"name": "gw", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                             "neighbours": NEIGHBOURS, "routes": {"mobile": "o1", "src": "s1"},
                             "records_dir": str(tmp), "routing": {"rules": RULES},
                             "gateway": {"enabled": True, **gateway}})


async def start(tmp: Path, gateway: dict):
    cfg = cfg_for(tmp, gateway)
    spool = Spool(cfg.spool_path, 0.001)
    spool.open()
    gw = GatewaySubsystem(cfg)
    eng = make_engine(cfg, spool, Records(tmp, cfg.name), subsystems=[RoutingSubsystem(cfg), gw])
    await eng.recover()
    gw.policy.users.load(await spool.run(op_load()))      # what start() does, without the manager's loop
    return eng, gw


async def close(eng) -> None:
    await eng.settle()
    eng.spool.close()
    eng.records.close()


def test_users_refused_with_the_reason_and_credits_charged_durably(tmp_path: Path) -> None:
    users = {"locked": {"locked_until": time.time() + 3600}, "poor": {"credits": 0},
             "two": {"credits": 2}, "o2only": {"deny": ["o1", "o2"]}, "slow": {"throughput": 0.001}}

    async def go() -> None:
        eng, gw = await start(tmp_path, {"users": users})
        ok, _m, why = await eng.submit("locked", MOBILE, b"x", None)
        assert not ok and why.startswith("locked until ") and why.endswith("+00:00")
        assert (await eng.submit("poor", MOBILE, b"x", None))[2] == "no credits left"
        assert (await eng.submit("o2only", MOBILE, b"x", None))[2] in ("not permitted on o1", "not permitted on o2")
        assert (await eng.submit("slow", MOBILE, b"x", None))[0]
        assert (await eng.submit("slow", MOBILE, b"x", None))[2] == "throttled"
        assert [(await eng.submit("two", MOBILE, b"x", None))[0] for _ in range(3)] == [True, True, False]
        assert gw.policy.refused == {"throttled": 1, "no_credits": 2, "locked": 1, "not_permitted": 1}
        await close(eng)
        eng, gw = await start(tmp_path, {"users": users})             # a restart: the charge was durable
        assert gw.policy.users.credits_left("two") == 0
        assert (await eng.submit("two", MOBILE, b"x", None))[2] == "no credits left"
        await close(eng)
    asyncio.run(go())


def test_a_crash_between_admission_and_commit_leaves_neither_the_submission_nor_the_charge(tmp_path: Path) -> None:
    """The origin row and the credit are one transaction: a submission that never commits (the process died
    between admission and the commit; or the transaction failed) costs no credit, and the undo frees the
    in-memory one."""
    async def go() -> None:
        eng, gw = await start(tmp_path, {"users": {"carol": {"credits": 5}}})
        prep = eng.origination._prepare(__import__("node.origination", fromlist=["NewMessage"]).NewMessage(
            "carol", MOBILE, b"x", 1, 60.0))
        assert gw.policy.users.credits_left("carol") == 4           # admitted: reserved in memory

        def fails(c) -> None:
            prep.origin(c)
            raise OSError("disk gone")                              # after the origin row and the charge
        try:
            await eng.spool.run(fails)
        except OSError:
            prep.undo()
        assert gw.policy.users.credits_left("carol") == 5
        used = await eng.spool.run(op_load())
        origin = await eng.spool.run(lambda c: c.execute("SELECT COUNT(*) FROM origin").fetchone()[0])
        assert used == {} and origin == 0
        await close(eng)                                             # "kill -9" here: nothing was committed
        eng, gw = await start(tmp_path, {"users": {"carol": {"credits": 5}}})
        assert gw.policy.users.credits_left("carol") == 5
        ok, msg_id, _ = await eng.submit("carol", MOBILE, b"x", None)
        assert ok
        rows = await eng.spool.run(lambda c: c.execute("SELECT msg_id FROM origin").fetchall())
        assert rows == [(msg_id,)] and await eng.spool.run(op_load()) == {"carol": 1}
        await close(eng)
    asyncio.run(go())


def piece(msg: str, src: str = "src", dst: str = "mobile") -> Piece:
    return Piece(msg, dst, 0, 10, 1, src, "alice", ["bob"], 1, time.time(), time.time() + 600, "", 1, b"0123456789")


def test_an_incoming_neighbour_over_its_throughput_hears_not_now_and_nothing_is_stored(tmp_path: Path) -> None:
    async def go() -> None:
        eng, gw = await start(tmp_path, {"incoming": {"s1": {"neighbour": "s1", "throughput": 1.0}}, "period": 2.0})
        got = await eng.receive("s1", [piece("a"), piece("b")])
        assert got[0] is None and got[1] is not None and got[1].for_now
        assert 0.5 < got[1].retry_after <= 1.0 + 1e-3                # the time to the next token
        assert "gateway throughput" in got[1].reason
        gw.policy.set_throughput("s1", 0.0)
        got = await eng.receive("s1", [piece("c")])
        assert got[0].retry_after == 2.0                             # rate 0: the tick, never "never"
        status = await eng.spool.run(Spool.op_status("b"))
        assert not status.get("states")                               # not stored: the sender keeps it
        await close(eng)
    asyncio.run(go())


def test_a_neighbour_told_not_now_is_told_to_offer_again_at_the_first_tick_with_a_token(tmp_path: Path) -> None:
    # the sender's own backoff doubles per refusal of a copy: without the signal a restored THROUGHPUT would
    # wait for it (seen as o1's queue falling well below `lower` after each restore in emg-10)
    async def go() -> None:
        eng, gw = await start(tmp_path, {"incoming": {"s1": {"neighbour": "s1", "throughput": 1.0}}})
        assert (await eng.receive("s1", [piece("a")]))[0] is None           # the one token
        gw.policy.set_throughput("s1", 0.0)                                    # throttled
        assert (await eng.receive("s1", [piece("b")]))[0].for_now
        await gw.manager.tick()
        assert not eng.policy.has_credits("s1") and eng.policy.take_credits("s1") == []   # no token: no signal
        gw.policy.set_throughput("s1", 1000.0)                                 # restored: a token within 1 ms
        await asyncio.sleep(0.01)
        eng.peers["s1"].wake.clear()
        await gw.manager.tick()
        assert eng.policy.has_credits("s1") and eng.peers["s1"].wake.is_set()  # its writer sends it now
        assert eng.policy.take_credits("s1") == [(("", ""), 1)]               # ROOM: a credit without a message
        await gw.manager.tick()
        assert not eng.policy.has_credits("s1")                                # once per "not now"
        assert gw.snapshot()["offered_again"] == 1
        await close(eng)
    asyncio.run(go())


def test_give_up_removes_the_copy_and_stores_its_report_in_one_transaction(tmp_path: Path) -> None:
    async def go() -> None:
        eng, gw = await start(tmp_path, {})
        assert await eng.receive("s1", [piece("a"), piece("b")]) == [None, None]
        a = next(p for peer in eng.peers.values() for p in peer.queue.pieces() if p.msg_id == "a")
        ops: list = []
        real = eng.spool.run
        eng.spool.run = lambda op: (ops.append(op), real(op))[1]     # count the transactions give_up makes
        assert await eng.give_up(a, "dropped by gateway policy")
        eng.spool.run = real
        assert len(ops) == 1
        assert not any(p.msg_id == "a" for peer in eng.peers.values() for p in peer.queue.pieces())
        frag = await eng.spool.run(lambda c: c.execute("SELECT msg_id FROM frag WHERE dst='mobile'").fetchall())
        ndr = await eng.spool.run(lambda c: c.execute("SELECT msg_id FROM origin").fetchall())
        assert frag == [("b",)] and ndr == [("ndr.a.mobile",)]
        reports = [json.loads(x) for x in (tmp_path / "reports.jsonl").read_text().splitlines()]
        assert [(r["msg_id"], r["reason"]) for r in reports] == [("a", "dropped by gateway policy")]
        # a copy with a piece in flight is never dropped
        b = next(p for peer in eng.peers.values() for p in peer.queue.pieces() if p.msg_id == "b")

        class Session:
            inflight = {1: b}
        eng.peers["o1"].session = Session()
        assert not await eng.give_up(b, "dropped by gateway policy")
        # nor one with a piece taken for sending (its bytes being read: in no queue, not in flight yet)
        two = [Piece("c", "mobile", off, 20, 1, "src", "alice", ["bob"], 1, time.time(), time.time() + 600, "", 2,
                     b"0123456789") for off in (0, 10)]
        assert await eng.receive("s1", two) == [None, None]
        taken = [x for peer in eng.peers.values() for x in peer.queue.remove_if(lambda x: x.off == 10)]
        assert len(taken) == 1 and not await eng.give_up(two[0], "dropped by gateway policy")
        assert any(x.msg_id == "c" for peer in eng.peers.values() for x in peer.queue.pieces())
        await close(eng)
    asyncio.run(go())


def test_negative_gamma_drops_the_excess_share_as_reported_copies(tmp_path: Path) -> None:
    async def go() -> None:
        eng, gw = await start(tmp_path, {"gamma": -0.5, "threshold": 2, "lower": 1, "actions": ["drop"],
                                         "drop_order": ["newest"], "outgoing": {"o1": {}, "o2": {}}})
        for i in range(8):
            assert await eng.receive("s1", [piece(f"m{i}")]) == [None]
        assert gw.manager.queues() == {"o1": 4, "o2": 4}                 # round robin
        await gw.manager.tick()
        assert gw.manager.dropped == 2 and gw.manager.queues() == {"o1": 3, "o2": 3}   # ceil(0.5 x 2) each
        lines = [json.loads(x) for x in (tmp_path / "gateway.jsonl").read_text().splitlines()]
        dropped = [m for x in lines for m in x["values"].get("dropped", [])]
        assert sorted(dropped) == ["m6", "m7"]                             # the newest of each queue
        assert all(x["event"] == "queue_high" and x["action"] == "drop" and x["gamma"] == -0.5 for x in lines)
        reports = [json.loads(x) for x in (tmp_path / "reports.jsonl").read_text().splitlines()]
        assert sorted(r["msg_id"] for r in reports) == ["m6", "m7"]       # reported, never silent
        status = await eng.spool.run(Spool.op_status("m7"))
        assert not status.get("states")
        assert all(schema.validate("gateway", x) == [] for x in lines)
        snap = gw.snapshot()                                   # the metrics section of the node config contract
        assert set(snap) >= {"gamma", "maxrate", "threshold", "outgoing", "incoming", "users", "refused", "dropped"}
        assert snap["dropped"] == 2 and snap["outgoing"]["o1"]["queue"] == 3
        assert set(snap["outgoing"]["o1"]) >= {"queue", "deactivated", "rate", "sent"}
        assert schema.validate_optional("metrics", {"gateway": snap}) == []
        await close(eng)
    asyncio.run(go())


def test_deactivation_keeps_queued_copies_unless_move_queued(tmp_path: Path) -> None:
    async def go(move: bool) -> tuple[dict, dict]:
        d = tmp_path / str(move)
        eng, gw = await start(d, {"gamma": 0.0, "threshold": 2, "lower": 1, "actions": ["deactivate_lb"],
                                  "move_queued": move, "outgoing": {"o1": {}, "o2": {}}})
        for i in range(6):
            assert await eng.receive("s1", [piece(f"m{i}")]) == [None]
        await gw.manager.tick()             # both above 2: load balancing off on both; o1 first in rule order
        after_tick = gw.manager.queues()
        gw.manager.engine.router.activate("o2")     # o2 healthy again: new copies avoid only o1
        for i in range(6, 10):
            assert await eng.receive("s1", [piece(f"m{i}")]) == [None]
        out = gw.manager.queues()
        await close(eng)
        return after_tick, out

    kept, later = asyncio.run(go(False))
    assert kept == {"o1": 3, "o2": 3} and later == {"o1": 3, "o2": 7}     # remembered choices stand
    moved, later = asyncio.run(go(True))
    assert sum(moved.values()) == 6 and later["o1"] + later["o2"] == 10
    assert later["o1"] == moved["o1"]                                      # nothing new for o1


def test_a_copy_refused_for_now_takes_no_round_robin_turn(tmp_path: Path) -> None:
    # emg-10: a throttled neighbour's copies were each given a member when first offered (and refused), and came
    # back after the restore in their own retry order, so o1's share of s1 after a restore ranged 11..24 of 36
    async def go() -> dict:
        eng, gw = await start(tmp_path, {"incoming": {"s1": {"neighbour": "s1", "throughput": 1.0}},
                                         "outgoing": {"o1": {}, "o2": {}}})
        assert await eng.receive("s1", [piece("first")]) == [None]     # the one token; o1's turn
        gw.policy.set_throughput("s1", 0.0)
        for i in range(6):
            assert (await eng.receive("s1", [piece(f"m{i}")]))[0].for_now
        gw.policy.set_throughput("s1", None)
        for i in (0, 2, 4):                                # back in another order than first offered
            assert await eng.receive("s1", [piece(f"m{i}")]) == [None]
        out = gw.manager.queues()
        await close(eng)
        return out
    assert asyncio.run(go()) == {"o1": 2, "o2": 2}         # turns in the order taken (before: o1 1, o2 3)


def test_a_denied_member_is_skipped_like_an_unusable_one(tmp_path: Path) -> None:
    async def go() -> None:
        eng, gw = await start(tmp_path, {"users": {"picky": {"deny": ["o1"]}, "only": {"permit": ["o2"]}},
                                         "outgoing": {"o1": {}, "o2": {}}})
        for user in ("picky", "only", "picky", "only"):
            assert (await eng.submit(user, MOBILE, b"x", None))[0]
        assert gw.manager.queues() == {"o1": 0, "o2": 4}          # never o1, though round robin would
        for _ in range(4):
            assert (await eng.submit("anyone", MOBILE, b"x", None))[0]
        assert gw.manager.queues() == {"o1": 2, "o2": 6}          # the others still share
        await close(eng)
    asyncio.run(go())


CHILD = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.unit.node.gateway.test_gateway_engine import MOBILE, start

async def go():
    eng, gw = await start(Path({tmp!r}), {{"users": {{"carol": {{"credits": 100000}}}}}})
    print("up", flush=True)
    while True:
        await eng.submit("carol", MOBILE, b"x", None)

asyncio.run(go())
"""


def test_kill_9_while_submitting_leaves_every_submission_charged_and_no_charge_without_one(tmp_path: Path) -> None:
    """A real process submitting as fast as it can is killed (SIGKILL) mid-stream: afterwards the spool holds
    exactly as many charged credits as accepted submissions (origin rows) of the user."""
    import os
    import signal
    import subprocess
    import sys
    root = str(Path(__file__).resolve().parents[4])
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=root, tmp=str(tmp_path))],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": root})
    try:
        assert child.stdout.readline().strip() == "up"
        time.sleep(0.5)                                  # a few hundred submissions in
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        child.stdout.close()

    async def go() -> tuple[int, dict]:
        eng, gw = await start(tmp_path, {"users": {"carol": {"credits": 100000}}})
        origin = await eng.spool.run(
            lambda c: c.execute("SELECT COUNT(*) FROM origin WHERE originator='carol'").fetchone()[0])
        used = await eng.spool.run(op_load())
        await close(eng)
        return origin, used

    origin, used = asyncio.run(go())
    assert origin > 0 and used == {"carol": origin}
