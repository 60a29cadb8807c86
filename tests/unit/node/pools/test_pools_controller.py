"""The pool controller (node/pools/controller.py): 3 replicas in one process, real pysyncobj over real loopback TCP.

The assignment function is a stand-in (`toy_apply`): the controller must not care what `apply` does, only that
every replica applies the same commands in the same order and that a refused command changes nothing.
"""
from __future__ import annotations

import asyncio
import copy
import logging
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from node.errors import ConfigError
from node.pools.controller import (DEADLINE_SLACK_S, TICK_S, CommandRefused, ControllerError, NotLeader,
                                   PoolController, RaftTimeouts, _tick_wait, initial_state, raft_clock)

PASSWORD = "pools-test-secret"
FAST = RaftTimeouts().scaled(0.5)     # elections in 0.2-0.7 s: the tests that do not measure fail-over


def toy_apply(state: dict, command: dict) -> tuple[dict, list]:
    """define_app (refused twice for one app) and load (no version bump); explode is a bug; anything else is
    refused."""
    new = copy.deepcopy(state)
    op = command.get("op")
    if op == "define_app":
        if command["app"] in new["apps"]:
            raise ValueError(f"app {command['app']!r} is already defined")
        new["apps"][command["app"]] = {"algorithm": "round_robin", "move_share": 0.5, "types": [], "instances": {}}
        new["version"] += 1
    elif op == "explode":
        raise RuntimeError("a bug in apply")
    elif op == "load":
        new["load"].setdefault(command["consumer"], {})[command["app"]] = command["rate"]
    else:
        raise ValueError(f"unknown op {op!r}")
    new["term"] = command.get("term", new["term"])
    return new, [op]


def free_addresses(n: int) -> list[str]:
    """n loopback addresses on ports the kernel just handed out, sorted: pysyncobj's higher address dials the lower,
    so starting them in this order has each one dial replicas that already listen."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return sorted(f"127.0.0.1:{s.getsockname()[1]}" for s in socks)
    finally:
        for s in socks:
            s.close()


def raft_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pools-raft-")]


class Replicas:
    """Controllers of one group by address, with what their callbacks saw."""

    def __init__(self, tmp: Path, addresses: list[str], timeouts: RaftTimeouts) -> None:
        self.tmp, self.addresses, self.timeouts = tmp, addresses, timeouts
        self.running: dict[str, PoolController] = {}
        self.applied: dict[str, list[tuple[dict, list, dict]]] = {a: [] for a in addresses}
        self.elected: dict[str, list[int]] = {a: [] for a in addresses}

    async def start(self, addr: str, password: str = PASSWORD, journal: str = "raft") -> PoolController:
        c = PoolController(addr, self.addresses, password=password, journal=self.tmp / addr / journal,
                           loop=asyncio.get_running_loop(), apply=toy_apply, timeouts=self.timeouts,
                           on_applied=lambda s, m, cmd: self.applied[addr].append((s, m, cmd)),
                           on_elected=self.elected[addr].append)
        await c.start()
        self.running[addr] = c
        return c

    async def start_all(self) -> None:
        for addr in self.addresses:
            await self.start(addr)

    async def stop(self, addr: str) -> None:
        await self.running.pop(addr).close()

    async def stop_all(self) -> None:
        for addr in list(self.running):
            await self.stop(addr)
        assert raft_threads() == []

    async def leader(self, within: float) -> PoolController:
        """The one running leader, once every running replica names it."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            leaders = [c for c in self.running.values() if c.is_leader()]
            if len(leaders) == 1 and all(c.leader() == leaders[0].self_addr for c in self.running.values()):
                return leaders[0]
            await asyncio.sleep(0.01)
        raise AssertionError(f"no leader known to all within {within:.1f} s")

    async def settled(self, within: float) -> None:
        """Every running replica has applied what the leader committed."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            applied = {c.status()["last_applied"] for c in self.running.values()}
            commits = {c.status()["commit_index"] for c in self.running.values()}
            if len(applied) == 1 and applied == commits:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("replicas did not converge")


def election_bound(t: RaftTimeouts) -> float:
    """Start-up: the replicas connect (at once, in address order), then one election; plus a second election
    should the first split its votes."""
    return 2 * t.election_max_s + 10 * t.append_period_s


def test_commands_replicate_and_refused_ones_change_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        group = Replicas(tmp_path, free_addresses(3), FAST)
        await group.start_all()
        try:
            leader = await group.leader(election_bound(FAST))
            followers = [c for c in group.running.values() if c is not leader]
            with pytest.raises(NotLeader) as e:
                await followers[0].submit({"op": "define_app", "app": "A"})
            assert e.value.leader == leader.self_addr

            first = await leader.submit({"op": "define_app", "app": "A"})
            assert first == {"term": leader.term(), "version": 1, "moves": ["define_app"]}
            with pytest.raises(CommandRefused, match="already defined"):
                await leader.submit({"op": "define_app", "app": "A"})
            with pytest.raises(CommandRefused, match="unknown op"):
                await leader.submit({"op": "nonsense"})
            # a bug in apply is a refusal too: raised in the Raft thread, it would stall the log at that entry
            with pytest.raises(CommandRefused, match="RuntimeError: a bug in apply"):
                await leader.submit({"op": "explode"})
            load = await leader.submit({"op": "load", "consumer": "c1", "app": "A", "rate": 2.5})
            assert load["version"] == 1
            await group.settled(10 * FAST.append_period_s)

            expected = leader.state()
            assert expected["apps"].keys() == {"A"} and expected["load"] == {"c1": {"A": 2.5}}
            for addr, c in group.running.items():
                assert c.state() == expected
                # the refused commands reached no on_applied and are counted alike everywhere
                assert [cmd["op"] for _, _, cmd in group.applied[addr]] == ["define_app", "load"]
                assert group.applied[addr][-1][0] == expected
                assert c.status()["refused"] == 3
                assert c.status()["leader"] == leader.self_addr
        finally:
            await group.stop_all()
    asyncio.run(main())


def test_a_new_leader_within_the_election_bound_and_a_late_command_is_refused(tmp_path: Path) -> None:
    timeouts = RaftTimeouts()      # pysyncobj's defaults: the fail-over the 2 s target is set for
    async def main() -> None:
        group = Replicas(tmp_path, free_addresses(3), timeouts)
        await group.start_all()
        try:
            old = await group.leader(election_bound(timeouts))
            before = await old.submit({"op": "define_app", "app": "A"})
            await group.settled(10 * timeouts.append_period_s)

            killed = time.monotonic()
            await group.stop(old.self_addr)
            # survivors stand after at most election_max_s of silence; a split vote costs one more election
            bound = 2 * timeouts.election_max_s
            result = None
            while result is None and time.monotonic() - killed < bound:
                for c in group.running.values():
                    if c.is_leader():
                        try:
                            result = await c.submit({"op": "define_app", "app": "B"}, timeout=bound)
                            new = c
                        except NotLeader:
                            pass
                await asyncio.sleep(0.01)
            assert result is not None, f"no command committed within {bound:.1f} s of the leader's close"
            assert result["term"] > before["term"] and result["version"] == 2
            assert group.elected[new.self_addr][-1] == result["term"]

            # the old leader's thread is gone and its port listens no more (its closed connections wait in
            # TIME_WAIT, which SO_REUSEADDR passes, as pysyncobj's own bind does)
            assert old.self_addr not in {t.name.removeprefix("pools-raft-") for t in raft_threads()}
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", int(old.self_addr.rsplit(":", 1)[1])))

            # a deposed leader's late proposal: it carries the old term, and every replica refuses it
            done = asyncio.get_running_loop().create_future()
            new._log.command({"op": "define_app", "app": "C", "term": before["term"]},
                             callback=lambda res, err: done.get_loop().call_soon_threadsafe(done.set_result, res))
            late = await asyncio.wait_for(done, timeouts.commit_s)
            assert late["ok"] is False and "stale term" in late["reason"]
            await group.settled(10 * timeouts.append_period_s)
            for c in group.running.values():
                assert c.state()["apps"].keys() == {"A", "B"} and c.status()["refused"] == 1
        finally:
            await group.stop_all()
    asyncio.run(main())


def test_the_journal_keeps_the_state_across_a_restart_of_all_replicas(tmp_path: Path) -> None:
    async def main() -> None:
        group = Replicas(tmp_path, free_addresses(3), FAST)
        await group.start_all()
        try:
            leader = await group.leader(election_bound(FAST))
            await leader.submit({"op": "define_app", "app": "A"})
            await leader.submit({"op": "define_app", "app": "B"})
            await group.settled(10 * FAST.append_period_s)
            # compaction (every 5 minutes in a daemon) keeps the last applied entry and drops the older ones from
            # the journal: A lives on in the dump only
            for c in group.running.values():
                c._sync.forceLogCompaction()
            await asyncio.sleep(4 * FAST.append_period_s)
            assert all((tmp_path / a / "raft.dump").exists() for a in group.addresses)
            before = await leader.submit({"op": "define_app", "app": "C"})
            await group.settled(10 * FAST.append_period_s)
            state = leader.state()
            await group.stop_all()
            for a in group.addresses:
                group.applied[a].clear()

            await group.start_all()
            # the dump comes back at start (a snapshot for on_applied), then the journal's log and votes; the new
            # leader's first commit covers the entries its predecessor committed
            assert all(group.applied[a][0][2] == {"op": "snapshot"} for a in group.addresses)
            leader = await group.leader(election_bound(FAST))
            await group.settled(10 * FAST.append_period_s)
            for c in group.running.values():
                assert c.state() == state
            after = await leader.submit({"op": "define_app", "app": "D"})
            assert after["version"] == 4 and after["term"] > before["term"]
        finally:
            await group.stop_all()
    asyncio.run(main())


def test_a_replica_with_the_wrong_password_learns_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        a, b, c = free_addresses(3)
        group = Replicas(tmp_path, [a, b, c], FAST)
        await group.start(a)
        await group.start(b)
        try:
            leader = await group.leader(election_bound(FAST))
            await leader.submit({"op": "define_app", "app": "A"})
            # c, the highest address, dials a and b itself: its messages do not decrypt, so they hang up
            intruder = await group.start(c, password="not-the-password")
            await asyncio.sleep(FAST.reconnect_s + 10 * FAST.append_period_s)
            assert intruder.state() == initial_state() and intruder.leader() is None
            assert group.applied[c] == [] and intruder.term() == 0
            assert leader.is_leader() and leader.state()["version"] == 1
            await group.stop(c)

            # the control: the same replica with the password catches up at once
            await group.start(c, journal="raft-good")
            await group.settled(FAST.reconnect_s + 10 * FAST.append_period_s)
            assert group.running[c].state() == leader.state()
        finally:
            await group.stop_all()
    asyncio.run(main())


def test_construction_refuses_a_missing_password_and_bad_settings(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    try:
        common = {"journal": tmp_path / "raft", "loop": loop, "apply": toy_apply}
        for password in ("", "  ", None):
            with pytest.raises(ValueError, match="needs a password: pysyncobj unpickles"):
                PoolController("127.0.0.1:4000", [], password=password, **common)
        with pytest.raises(ValueError, match="is not host:port"):
            PoolController("127.0.0.1:4000", ["127.0.0.1"], password=PASSWORD, **common)
        with pytest.raises(ValueError, match="twice"):
            PoolController("127.0.0.1:4000", ["127.0.0.1:4001", "127.0.0.1:4001"], password=PASSWORD, **common)
        with pytest.raises(ConfigError, match="more than 3 x append_period_s"):
            PoolController("127.0.0.1:4000", [], password=PASSWORD, timeouts=RaftTimeouts(election_min_s=0.2),
                           **common)
        with pytest.raises(ConfigError, match="election_max_s must be more"):
            RaftTimeouts(election_max_s=0.3).validate()
        with pytest.raises(ConfigError, match="positive"):
            RaftTimeouts(commit_s=0).validate()
        RaftTimeouts().scaled(0.25).validate()
        assert not list(tmp_path.iterdir())     # nothing written by a refused construction
    finally:
        loop.close()


def test_start_on_a_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    async def main() -> None:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            addr = f"127.0.0.1:{busy.getsockname()[1]}"
            c = PoolController(addr, [], password=PASSWORD, journal=tmp_path / "raft",
                               loop=asyncio.get_running_loop(), apply=toy_apply)
            with pytest.raises(ControllerError, match="cannot bind"):
                await c.start()
            await c.close()
        assert raft_threads() == []
    asyncio.run(main())


def test_a_late_reply_of_a_restarted_replica_makes_the_leader_resend_applied_entries_and_nothing_diverges(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A replica restarted behind the leader answers each append that arrived before it caught up with "resend from
    my log's end" (pysyncobj's reset reply); one such reply arriving after it caught up rewinds the leader, which
    resends entries the replica already applied. pysyncobj then truncates them ("truncating already-applied log
    entries ... may have diverged") and appends the leader's: the very entries it applied. The late reply is handed
    to the leader's Raft thread as the transport would (its timing is a matter of luck on a real network)."""
    async def main() -> None:
        group = Replicas(tmp_path, free_addresses(3), FAST)
        await group.start_all()
        try:
            leader = await group.leader(election_bound(FAST))
            for app in ("A", "B"):
                await leader.submit({"op": "define_app", "app": app})
            await group.settled(10 * FAST.append_period_s)
            restarted = next(a for a in group.addresses if a != leader.self_addr)
            log_end = group.running[restarted].status()["last_applied"]
            await group.stop(restarted)
            for app in ("C", "D"):
                await leader.submit({"op": "define_app", "app": app})
            group.applied[restarted].clear()
            await group.start(restarted)       # from its journal: its state is rebuilt from the start
            await group.settled(FAST.reconnect_s + 10 * FAST.append_period_s)
            assert group.running[restarted].status()["last_applied"] > log_end   # it applied C and D
            # should it have stood before hearing the leader (no pre-vote), another one leads now: never the
            # restarted one, whose log was behind
            leader = await group.leader(election_bound(FAST))

            sync = leader._sync
            node = next(n for n in sync._SyncObj__otherNodes if n.address == restarted)
            late = {"type": "next_node_idx", "next_node_idx": log_end + 1, "reset": True, "success": False}
            delivered = threading.Event()

            def deliver() -> None:   # the Raft thread, between two ticks
                if not delivered.is_set():
                    delivered.set()
                    sync._SyncObj__onMessageReceived(node, late)
            caplog.set_level(logging.WARNING, logger="pysyncobj")
            sync.addOnTickCallback(deliver)
            while not delivered.is_set():
                await asyncio.sleep(FAST.append_period_s / 10)
            sync.removeOnTickCallback(deliver)
            await leader.submit({"op": "define_app", "app": "E"})
            await group.settled(10 * FAST.append_period_s)
            await asyncio.sleep(0)   # on_applied reaches the loop (call_soon_threadsafe) before the index moves

            assert f"truncating already-applied log entries from index {log_end + 1}" in caplog.text
            expected = leader.state()
            assert expected["apps"].keys() == set("ABCDE") and expected["version"] == 5
            for addr, c in group.running.items():
                # an entry applied twice would be a second define_app of one app: refused, and counted
                assert c.state() == expected and c.status()["refused"] == 0
                assert [cmd["app"] for _, _, cmd in group.applied[addr]] == list("ABCDE")
        finally:
            await group.stop_all()
    asyncio.run(main())


def test_the_raft_thread_wakes_at_the_election_deadline_not_a_whole_tick_later(tmp_path: Path) -> None:
    """Whole TICK_S sleeps would put every follower's candidacy on the grid that the leader's last heartbeat set
    for all of them (a split vote whenever two timeouts fall in one tick); the Raft thread sleeps to its own
    deadline instead."""
    class Follower:
        def __init__(self, deadline: float) -> None:
            self._SyncObj__raftElectionDeadline = deadline

        def _isLeader(self) -> bool:
            return False

    now = raft_clock()
    assert _tick_wait(Follower(now + TICK_S / 5)) == pytest.approx(TICK_S / 5 + DEADLINE_SLACK_S, abs=TICK_S / 10)
    assert _tick_wait(Follower(now + 10 * TICK_S)) == TICK_S
    assert _tick_wait(Follower(now - 1.0)) == TICK_S     # past: it could not stand (no peer); no busy loop

    async def main() -> None:
        # the attribute read is pysyncobj's own: a version that renamed it would tick on the grid again
        group = Replicas(tmp_path, free_addresses(3), FAST)
        c = await group.start(group.addresses[0])
        try:
            assert isinstance(c._sync._SyncObj__raftElectionDeadline, float)
        finally:
            await group.stop_all()
    asyncio.run(main())


def test_importing_the_controller_leaves_socket_inet_ntop_working() -> None:
    """pysyncobj's Windows shim replaces socket.inet_ntop on every platform; a later pyroute2 import binds it and
    cannot decode an address. In a fresh interpreter, pysyncobj first, then pyroute2 reads the loopback address."""
    code = ("import node.pools.controller, socket\n"
            "assert socket.inet_ntop(socket.AF_INET, bytes([127, 0, 0, 1])) == '127.0.0.1'\n"
            "from pyroute2 import IPRoute\n"
            "with IPRoute() as ipr:\n"
            "    addrs = [a.get_attr('IFA_ADDRESS') for a in ipr.get_addr(label='lo', family=socket.AF_INET)]\n"
            "assert '127.0.0.1' in addrs, addrs\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parents[4])
    assert r.returncode == 0, r.stderr[-2000:]
