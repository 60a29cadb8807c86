"""The pool controller: the pool state replicated by Raft between 3 (or 5) replicas, on pysyncobj.

The state is one JSON-able dict (Application, Consumer and Pooled Connection maps, load, map version, term; see
`initial_state`). Every change is a command dict appended to the Raft log; once committed, every replica applies it
in log order through the same pure function `apply(state, command) -> (new state, moves)` (node/pools/assign.py in
the daemon; a constructor argument here), so all replicas hold the same state. A command the function refuses
(ValueError), or one proposed in a term older than the state's (a deposed leader's late command), is refused on
every replica alike and changes nothing.

A partitioned leader (what pysyncobj 0.3.17 does): a leader commits an entry only once a majority holds it and it
is of the leader's own term, and applies committed entries only; cut off from the majority it commits and applies
nothing more. Its proposals wait uncommitted in its log (`submit` ends with CommitTimeout, or NotLeader), and the
new leader's log replaces them after the heal. It goes on believing it leads until no majority has answered for
`leaderFallbackTimeout` (RaftTimeouts.leader_fallback_s, 2.8 s; pysyncobj's default is 30 s), then follows. It
stands for election (in vain: it reaches no voter) while its silent connections still count as up, until
`connectionTimeout` (connection_s, 3.5 s), so its term may grow by one or two; pysyncobj has no pre-vote, so after
the heal that term can depose the new leader once more, and another election follows. Meanwhile the other replicas
elect a leader of a newer term within the election timeout. So nothing a cut-off leader proposes takes effect, and
what it publishes (its
host publishes committed states only, each under the state's own term: node/pools/host.py) is a map already
committed, never newer than what the new leader publishes under its newer term; consumers refuse the older one
wherever it arrives late (a `refused` line).

Threads: pysyncobj runs in one thread of its own, which builds the SyncObj, ticks it and destroys it (autoTick off,
so the thread's life is ours: `close()` ends it; a follower ticks at its election deadline too, `_tick_wait`). That
thread never touches an asyncio object: every callback is handed to the loop with `call_soon_threadsafe`. The loop
only reads attributes and queues proposals (pysyncobj's queue is locked), so nothing blocks it.

Security: pysyncobj unpickles what it receives, so the password is mandatory. It encrypts and authenticates every
message (Fernet, key derived from the password); without it, anyone who reaches the port would run code in the
daemon.

Durability: the Raft log, the current term and the vote are written to `journal` (and `<journal>.meta`) as they
change; log compaction writes the state to `<journal>.dump` (pysyncobj's default keeps all of it in memory: a
restart would forget the vote). A restarted replica applies what it last recorded as committed (pysyncobj stores the
commit index once a second) before `start()` returns, and the rest of its log once the leader's commit index says so.
pysyncobj's warning "truncating already-applied log entries ... may have diverged" is harmless here: a late reply of
a replica that was behind rewinds the leader, which resends from its own log entries the replica already applied,
and pysyncobj drops and re-appends them without applying them again. They are the same entries, because a replica
applies only up to a commit index learnt once its log matched the leader's (the one it stores for a restart too), and
a committed entry is in every later leader's log at the same index.
One path does diverge for a while: a replica behind the leader's last log compaction (every 5 minutes, or 5000
entries) gets a snapshot in several messages, and pysyncobj raises its commit index on the first of them without that
check, so entries of its own that were never committed (a deposed leader's proposals) are applied and reported to
`on_applied` until the snapshot replaces its state. Only a follower is in that position, and its host publishes
nothing.
"""
from __future__ import annotations

import _socket
import asyncio
import copy
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, SyncObjException, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.monotonic import monotonic as raft_clock   # the clock of pysyncobj's deadlines

from node.errors import ConfigError

# pysyncobj's TCP transport imports its Windows shim, which replaces socket.inet_ntop on every platform with a
# function that only works on Windows: any later caller in this process (pyroute2 decoding an address it reads,
# for one) would fail. The C library's function goes back; pysyncobj itself works with it.
socket.inet_ntop = _socket.inet_ntop

log = logging.getLogger("node.pools")

ApplyFn = Callable[[dict, dict], tuple[dict, list]]
AppliedHook = Callable[[dict, list, dict], None]
ElectedHook = Callable[[int], None]

TICK_S = 0.05          # the Raft thread's longest sleep: a message or a proposal wakes it at once
DEADLINE_SLACK_S = 0.001   # a tick due at the election deadline runs this much after it (poll rounds to 1 ms)
CLOSE_WAIT_S = 5.0     # close() waits this long for the Raft thread (a tick is at most TICK_S)
RAFT_LEADER = 2        # pysyncobj's state number for a leader, as onStateChanged reports it
# pysyncobj failures that mean "this replica does not lead (any more)": the caller should ask the leader
LEADERSHIP_LOST = {FAIL_REASON.NOT_LEADER, FAIL_REASON.LEADER_CHANGED, FAIL_REASON.DISCARDED,
                   FAIL_REASON.MISSING_LEADER}
FAIL_NAMES = {v: k.lower() for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}


def initial_state() -> dict:
    """The pool state before any command: empty maps, term 0, version 0."""
    return {"term": 0, "version": 0, "apps": {}, "consumers": {}, "connections": {}, "load": {}}


@dataclass(frozen=True)
class RaftTimeouts:
    """The controller's Raft timing, in seconds. Election and heartbeat are pysyncobj's defaults; `scaled()` tunes
    them all at once."""
    election_min_s: float = 0.4    # a follower that hears no leader for a random time in [min, max] stands
    election_max_s: float = 1.4
    append_period_s: float = 0.1   # the leader's heartbeat (append entries) period
    # a leader that hears from no majority this long steps down; pysyncobj's 30 s would leave a cut-off leader
    # believing it leads for half a minute
    leader_fallback_s: float = 2.8
    connection_s: float = 3.5      # a silent connection is dropped after this (pysyncobj's default)
    # retry period towards an unreachable replica (pysyncobj's default is 5 s). Below election_min_s: a restarted
    # replica hears the leader before its first election timeout (no pre-vote: standing would depose the leader),
    # and two followers not yet connected to each other when the leader dies connect before either times out
    # (connected late, both would stand in the same tick)
    reconnect_s: float = 0.2
    commit_s: float = 2.0          # submit() gives up with CommitTimeout after this (the command may still commit)

    def validate(self) -> None:
        """ConfigError unless pysyncobj can run with these (its own checks are asserts)."""
        for key, value in vars(self).items():
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
                raise ConfigError(f"raft timeouts: {key} must be a positive number of seconds, not {value!r}.")
        if self.election_min_s <= 3 * self.append_period_s:
            raise ConfigError("raft timeouts: election_min_s must be more than 3 x append_period_s (a follower "
                              "would stand while its leader is alive).")
        if self.election_max_s <= self.election_min_s:
            raise ConfigError("raft timeouts: election_max_s must be more than election_min_s.")
        if self.leader_fallback_s <= self.append_period_s:
            raise ConfigError("raft timeouts: leader_fallback_s must be more than append_period_s.")
        if self.connection_s < self.election_max_s:
            raise ConfigError("raft timeouts: connection_s must be at least election_max_s.")

    def scaled(self, factor: float) -> RaftTimeouts:
        """These timeouts with every Raft period multiplied by `factor` (commit_s kept)."""
        if not factor > 0:
            raise ConfigError(f"raft timeouts: the scale factor must be positive, not {factor!r}.")
        return replace(self, election_min_s=self.election_min_s * factor, election_max_s=self.election_max_s * factor,
                       append_period_s=self.append_period_s * factor, connection_s=self.connection_s * factor,
                       leader_fallback_s=self.leader_fallback_s * factor, reconnect_s=self.reconnect_s * factor)


class ControllerError(Exception):
    """The controller could not do what was asked (not started, closed, cannot bind, not committed)."""


class NotLeader(ControllerError):
    """This replica does not lead: propose at `leader` (None while no leader is known)."""

    def __init__(self, leader: str | None) -> None:
        self.leader = leader
        super().__init__(f"not the pool controller's leader; the leader is {leader}" if leader else
                         "no pool controller leader is known (an election is under way or there is no quorum)")


class CommitTimeout(ControllerError):
    """The command was not committed in time; it may still commit later (read the state before proposing again)."""


class CommandRefused(ControllerError, ValueError):
    """The command was committed and refused on every replica (malformed, inapplicable or of a stale term)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"pool command refused: {reason}")


class _PoolLog(SyncObjConsumer):
    """The replicated part. Attributes set before SyncObjConsumer.__init__ are local (not serialised); `state` and
    `refused`, set after, are what pysyncobj serialises for log compaction and snapshots."""

    def __init__(self, name: str, apply: ApplyFn, report: Callable[[dict, dict, dict], None]) -> None:
        self._name = name
        self._apply = apply
        self._report = report
        super().__init__()
        self.state: dict = initial_state()
        self.refused = 0

    @replicated
    def command(self, command: dict) -> dict:
        """Applies one committed command: runs in the Raft thread of every replica, in log order. Returns the
        outcome: {"ok", "term", "version"} and "moves" or "reason"."""
        # An exception escaping here would stop pysyncobj at this log entry for good: every failure is a refusal
        # (the same on every replica, which runs the same code on the same state).
        reason = _stale(command, self.state)
        if reason is None:
            try:
                state, moves = self._apply(self.state, command)
                outcome = {"ok": True, "moves": list(moves), "term": state["term"], "version": state["version"]}
            except ValueError as e:
                reason = str(e) or type(e).__name__
            except Exception as e:   # a bug in apply
                log.exception("%s: pool command %r failed", self._name, command)
                reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            self.refused += 1
            outcome = {"ok": False, "reason": reason, "term": self.state["term"], "version": self.state["version"]}
        else:
            self.state = state
        self._tell(command, outcome)
        return outcome

    def _deserialize(self, data: dict) -> None:
        # a snapshot (from the leader, or the dump file at start): the state jumps without commands
        super()._deserialize(data)
        self._tell({"op": "snapshot"}, {"ok": True, "moves": [], "term": self.state["term"],
                                        "version": self.state["version"]})

    def _tell(self, command: Any, outcome: dict) -> None:
        try:
            self._report(command, outcome, self.state)
        except Exception:
            log.exception("%s: reporting pool command %r failed", self._name, command)


def _stale(command: Any, state: dict) -> str | None:
    """Why the controller refuses `command` before `apply` sees it, or None."""
    if not isinstance(command, dict):
        return f"a command is a dict, not {type(command).__name__}"
    term = command.get("term")
    if term is None:
        return None
    if not isinstance(term, int) or isinstance(term, bool):
        return f"term must be an integer, not {term!r}"
    if term < state["term"]:
        return f"stale term {term}: the pool state is at term {state['term']}"
    return None


def _check_address(addr: Any, what: str) -> str:
    host, sep, port = addr.rpartition(":") if isinstance(addr, str) else ("", "", "")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"pool controller {what} {addr!r} is not host:port.")
    return addr


class PoolController:
    """One replica of the pool controller. `await start()`, then `submit()` on the leader; `close()` at the end.

    `on_applied(state, moves, command)` runs in the loop after every command this replica applies (a private copy
    of the new state; replayed commands at start and installed snapshots too, the latter as {"op": "snapshot"});
    `on_elected(term)` runs in the loop when this replica becomes the leader.
    """

    def __init__(self, self_addr: str, partners: list[str], *, password: str, journal: Path,
                 loop: asyncio.AbstractEventLoop, apply: ApplyFn, on_applied: AppliedHook | None = None,
                 on_elected: ElectedHook | None = None, timeouts: RaftTimeouts = RaftTimeouts(),
                 name: str | None = None) -> None:
        if not isinstance(password, str) or not password.strip():
            raise ValueError("the pool controller needs a password: pysyncobj unpickles what it receives, and "
                             "without one anyone who reaches its port runs code in the daemon.")
        self.self_addr = _check_address(self_addr, "address")
        others = [_check_address(p, "partner") for p in partners if p != self_addr]
        if len(set(others)) != len(others):
            raise ValueError(f"pool controller partners {partners!r} name a replica twice.")
        timeouts.validate()
        self.partners = others
        self.name = name or self_addr
        self.timeouts = timeouts
        self._password = password
        self._journal = Path(journal)
        self._loop = loop
        self._on_applied = on_applied
        self._on_elected = on_elected
        self._log = _PoolLog(self.name, apply, self._committed)
        self._sync: SyncObj | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._closed = False
        self._pending: set[asyncio.Future] = set()

    # -- life cycle ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Binds the Raft port and applies the journal's committed commands; ControllerError if it cannot."""
        if self._thread is not None:
            raise ControllerError(f"{self.name}: the pool controller is already started.")
        ready: asyncio.Future = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=f"pools-raft-{self.self_addr}",
                                        daemon=True)
        self._thread.start()
        await ready

    async def close(self) -> None:
        """Stops Raft (connections, port, journal closed) and waits for its thread; pending submits fail."""
        self._closed = True
        thread = self._thread
        if thread is not None:
            self._stopping.set()
            deadline = self._loop.time() + CLOSE_WAIT_S
            while thread.is_alive() and self._loop.time() < deadline:
                await asyncio.sleep(0.01)
            if thread.is_alive():
                log.warning("%s: the pool controller's Raft thread did not stop within %.0f s", self.name,
                            CLOSE_WAIT_S)
        for fut in self._pending:
            if not fut.done():
                fut.set_exception(ControllerError(f"{self.name}: the pool controller closed"))
        self._pending.clear()

    def _conf(self) -> SyncObjConf:
        t = self.timeouts
        return SyncObjConf(
            password=self._password, journalFile=str(self._journal), fullDumpFile=f"{self._journal}.dump",
            useFork=False,                   # no fork of a daemon that runs gRPC; the state is small
            autoTick=False,                  # our thread ticks, so close() can end it
            appendEntriesUseBatch=False,     # send each command at once: latency over throughput
            commandsWaitLeader=False,        # no leader: fail at once (NotLeader) rather than queue
            dynamicMembershipChange=False, maxBindRetries=1,
            raftMinTimeout=t.election_min_s, raftMaxTimeout=t.election_max_s, appendEntriesPeriod=t.append_period_s,
            leaderFallbackTimeout=t.leader_fallback_s, connectionTimeout=t.connection_s,
            connectionRetryTime=t.reconnect_s, onStateChanged=self._state_changed)

    def _run(self, ready: asyncio.Future) -> None:
        """The Raft thread: build, tick until close(), destroy."""
        try:
            self._journal.parent.mkdir(parents=True, exist_ok=True)
            sync = SyncObj(self.self_addr, self.partners, conf=self._conf(), consumers=[self._log])
        except SyncObjException as e:
            why = "the port is in use or the address is not local" if e.errorCode == "BindError" else e.errorCode
            self._post(_settle_ready, ready, ControllerError(f"{self.name}: the pool controller cannot bind "
                                                             f"{self.self_addr} ({why})."))
            return
        except Exception as e:
            self._post(_settle_ready, ready, ControllerError(f"{self.name}: the pool controller cannot start "
                                                             f"({type(e).__name__}: {e})."))
            return
        self._sync = sync
        try:
            self._tick(sync, 0.0)            # applies what the journal holds as committed
            self._post(_settle_ready, ready, None)
            log.info("%s: pool controller replica %s started (partners %s)", self.name, self.self_addr,
                     ", ".join(self.partners) or "none")
            while not self._stopping.is_set():
                self._tick(sync, _tick_wait(sync))
        finally:
            try:
                sync.destroy()               # autoTick off: destroys here, in this thread
            except Exception:
                log.exception("%s: closing the pool controller failed", self.name)

    def _tick(self, sync: SyncObj, wait: float) -> None:
        try:
            sync.doTick(wait)
        except Exception:   # pysyncobj's own thread logs and retries too: one bad tick must not end Raft
            log.exception("%s: pool controller tick failed", self.name)
            time.sleep(wait or TICK_S)

    # -- callbacks from the Raft thread: hand over to the loop -------------------------------------------------

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:   # the loop is closed: nobody is left to tell
            pass

    def _state_changed(self, old: int, new: int) -> None:
        if new == RAFT_LEADER and self._sync is not None:
            self._post(self._elected, self._sync.raftCurrentTerm)

    def _committed(self, command: dict, outcome: dict, state: dict) -> None:
        if not outcome["ok"]:
            log.warning("%s: pool command %r refused: %s", self.name, command, outcome["reason"])
        elif self._on_applied is not None:
            self._post(self._on_applied, copy.deepcopy(state), outcome["moves"], command)

    def _elected(self, term: int) -> None:
        log.info("%s: elected pool controller leader at term %d", self.name, term)
        if self._on_elected is not None:
            self._on_elected(term)

    # -- the loop's side -------------------------------------------------------------------------------------

    async def submit(self, command: dict, timeout: float | None = None) -> dict:
        """Proposes `command` (tagged with this leader's term) and waits for it to be applied here:
        {"term", "version", "moves"}. NotLeader on a follower, CommitTimeout after `timeout` (default
        timeouts.commit_s), CommandRefused if every replica refused it."""
        sync = self._running()
        if not isinstance(command, dict):
            raise CommandRefused(f"a command is a dict, not {type(command).__name__}")
        if not sync._isLeader():
            raise NotLeader(self.leader())
        command = {**command, "term": sync.raftCurrentTerm}
        fut: asyncio.Future = self._loop.create_future()
        try:
            self._log.command(command, callback=functools.partial(self._proposal_done, fut))
        except Exception as e:   # pickling: the contract's commands are plain JSON-able values
            raise CommandRefused(f"the command cannot be serialised ({type(e).__name__}: {e})") from None
        self._pending.add(fut)
        try:
            outcome = await asyncio.wait_for(fut, self.timeouts.commit_s if timeout is None else timeout)
        except TimeoutError:
            raise CommitTimeout(f"{self.name}: pool command {command.get('op')!r} not committed within "
                                f"{self.timeouts.commit_s if timeout is None else timeout:g} s") from None
        finally:
            self._pending.discard(fut)
        if not outcome["ok"]:
            raise CommandRefused(outcome["reason"])
        return {"term": outcome["term"], "version": outcome["version"], "moves": outcome["moves"]}

    def _proposal_done(self, fut: asyncio.Future, outcome: Any, error: int) -> None:   # Raft thread
        self._post(self._settle, fut, outcome, error)

    def _settle(self, fut: asyncio.Future, outcome: Any, error: int) -> None:
        if fut.done():   # timed out or closed meanwhile
            return
        if error == FAIL_REASON.SUCCESS:
            fut.set_result(outcome)
        elif error in LEADERSHIP_LOST:
            fut.set_exception(NotLeader(self.leader()))
        else:
            fut.set_exception(ControllerError(f"{self.name}: pool command not committed "
                                              f"({FAIL_NAMES.get(error, error)})"))

    def _running(self) -> SyncObj:
        if self._sync is None or self._closed:
            raise ControllerError(f"{self.name}: the pool controller is not running.")
        return self._sync

    def state(self) -> dict:
        """A private copy of the pool state as applied here."""
        return copy.deepcopy(self._log.state)   # replaced, never changed in place: reading the reference is safe

    def leader(self) -> str | None:
        """The leader's address as this replica last heard it, or None."""
        if self._sync is None or self._closed:
            return None
        node = self._sync._getLeader()
        return getattr(node, "address", None) if node is not None else None

    def is_leader(self) -> bool:
        return self._sync is not None and not self._closed and self._sync._isLeader()

    def term(self) -> int:
        """The current Raft term (0 before start)."""
        return self._sync.raftCurrentTerm if self._sync is not None else 0

    def status(self) -> dict:
        """What a GetPools answer carries: this replica, the leader, terms, the maps, the commit index."""
        state = self.state()
        sync = self._sync
        return {"self": self.self_addr, "replicas": [self.self_addr, *self.partners], "leader": self.leader(),
                "is_leader": self.is_leader(), "term": self.term(), "map_term": state["term"],
                "version": state["version"], "apps": state["apps"], "consumers": state["consumers"],
                "connections": state["connections"], "load": state["load"],
                "commit_index": sync.raftCommitIndex if sync is not None else 0,
                "last_applied": sync.raftLastApplied if sync is not None else 0, "refused": self._log.refused}


def _tick_wait(sync: SyncObj) -> float:
    """How long the Raft thread may sleep before its next tick: TICK_S, or until just past this replica's election
    deadline when that comes sooner. pysyncobj checks the deadline only in a tick, and the leader's last heartbeat
    wakes every follower at once, so whole TICK_S sleeps would round each follower's random timeout up to one shared
    grid: two followers would stand in the same tick, a split vote, in about TICK_S / (election_max_s -
    election_min_s) of fail-overs (5% with the defaults) instead of only when their draws fall within a message's
    transit."""
    deadline = getattr(sync, "_SyncObj__raftElectionDeadline", None)   # private: pysyncobj offers no accessor
    if deadline is None or sync._isLeader():
        return TICK_S
    left = deadline - raft_clock()
    # a deadline already past (no peer connected: it cannot stand yet) waits a whole tick, not a busy loop
    return left + DEADLINE_SLACK_S if 0 <= left < TICK_S else TICK_S


def _settle_ready(fut: asyncio.Future, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)
