"""A controller replica in the node daemon: the pool controller (node/pools/controller.py) and what it does over
the broker.

Every replica applies the same commands (Raft); only the leader acts on the outside world:
  - elected: it writes `elected`, commits `office` (so that it holds every command committed before its
    term, and the state carries its term), enters the applications of `pools.apps` (define_app, for those the
    state lacks or holds differently), and publishes every consumer's assignment, so every consumer hears the
    new term even when nothing moves;
  - heartbeats (`_pools.hb.<name>`, non-durable; every replica listens, so a new leader knows who is alive): a
    consumer or instance it has not seen registers (consumer_join, instance_join), an instance announcing
    "leaving" leaves (instance_leave), a consumer's load that changed enough becomes a `load` command;
  - silence: an instance unheard for `pools.crash_timeout` is crashed (instance_crash), or gone when it was
    leaving (instance_gone); a consumer unheard that long leaves (consumer_leave). A new leader counts the
    silence of those it never heard from since its election;
  - each applied change: a `map` line, and the assignment of every consumer whose connections changed, durable
    on `_pools.assign.<consumer>` ({term, version, connections, fences}); one whose subscription is not known
    here yet is owed its assignment until it is.
Only committed states are published, each under its own term (the term of the leader that committed its last
command): (term, version) grows along the Raft log, and a consumer keeps the highest it has seen, so it takes maps
in log order. A leader cut off from the other replicas commits nothing (node/pools/controller.py), so it publishes
nothing new; an assignment it published before the cut that arrives late (held by store-and-forward while a path
was cut) carries an older term than the new leader's and is refused (`refused`, the map kept).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Callable

from node.broker.broker import Broker
from node.pools import assign
from node.pools.config import PoolsConfig
from node.pools.controller import CommandRefused, CommitTimeout, ControllerError, PoolController
from node.pools.listen import Listener
from node.pools.messages import BadMessage, ConsumerBeat, InstanceBeat, parse_heartbeat
from node.records import Records
from node.rpc import pubsub_pb2

log = logging.getLogger("node.pools")

ASSIGN_TOPIC = "_pools.assign"        # + .<consumer>: durable, from the leader
HB_TOPIC = "_pools.hb"                # + .<name>: non-durable heartbeats (registration, load, leave)
LOAD_CHANGE = 0.2                     # a consumer's load is proposed again once it moved by this share ...
LOAD_FLOOR = 0.5                      # ... or by this many events/s, whichever is more


def assignment_body(state: dict, consumer: str, term: int) -> bytes:
    return json.dumps({"term": term, "version": state["version"],
                       "connections": state["connections"].get(consumer, {}), "fences": {}},
                      sort_keys=True).encode()


class ControllerHost:
    """One per replica node (node/pools/subsystem.py builds it when this node is named in `pools.replicas`)."""

    def __init__(self, me: str, sec: PoolsConfig, journal: Any, broker: Broker, records: Records,
                 make: Callable[..., PoolController] = PoolController) -> None:
        self.me = me
        self.sec = sec
        self.broker = broker
        self.records = records
        addr = sec.replicas[me]
        self.controller = make(addr, [a for n, a in sorted(sec.replicas.items()) if n != me],
                               password=sec.password, journal=journal, loop=asyncio.get_running_loop(),
                               apply=assign.apply, on_applied=self._applied, on_elected=self._elected, name=me)
        self.state: dict = assign.empty_state()
        self.heard: dict[tuple[str, str], float] = {}    # ("consumer", name) / (app, instance) -> monotonic time
        self.office = 0.0                                 # monotonic time this replica last became the leader
        self.owed: set[str] = set()                       # consumers whose assignment is still to be published
        self.proposed: dict[str, int] = {}
        self.refused = 0
        self._inflight: set[tuple] = set()
        self._tasks: list[asyncio.Task] = []
        self._bg: set[asyncio.Task] = set()
        self.listener = Listener(broker, f"pools.hb.{me}", f"{HB_TOPIC}.>", False, self._on_beat)

    async def start(self) -> None:
        await self.controller.start()
        self.state = self.controller.state()
        await self.listener.start()
        self._tasks.append(asyncio.ensure_future(self._watch()))

    async def stop(self) -> None:
        for t in [*self._tasks, *self._bg]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._bg, return_exceptions=True)
        await self.listener.stop()
        await self.controller.close()

    # -- the controller's callbacks (in the loop) --------------------------------------------------------
    def _elected(self, term: int) -> None:
        self.office = time.monotonic()
        self.records.write("pool", event="elected", term=term)
        self._spawn(self._take_office(term))

    async def _take_office(self, term: int) -> None:
        if not await self._commit_office(term):
            return
        state = self.controller.state()
        for app, a in sorted(self.sec.apps.items()):
            have = state["apps"].get(app)
            want = {"algorithm": a.algorithm, "move_share": float(a.move_share), "types": list(a.types)}
            if have is None or any(have.get(k) != v for k, v in want.items() if k != "types") \
                    or sorted(have.get("types", [])) != sorted(a.types):
                await self._propose({"op": "define_app", "app": app, **want})
        self.owed |= set(self.controller.state()["consumers"])
        await self._pay()

    async def _commit_office(self, term: int) -> bool:
        """Commit `office` in this leader's term; False once it is no longer the leader of `term`.

        A new leader holds every command its predecessor committed, but may not know yet that the last ones
        committed: Raft tells it with its first commit of its own term. Until then its state can be older than a
        map the predecessor already published; under the newer term, consumers would take that older map. Once
        `office` is applied, so is everything before it, and the state's term is this leader's."""
        while self.controller.is_leader() and self.controller.term() == term:
            try:
                await self.controller.submit({"op": "office"})
                return True
            except CommitTimeout:
                continue                       # no majority yet: still the leader, it may come
            except ControllerError as exc:     # deposed meanwhile (NotLeader), or refused
                log.info("%s: pools: office of term %d not committed: %s", self.me, term, exc)
                return False
        return False

    def _applied(self, state: dict, moves: list, command: dict) -> None:
        self.state = state
        if not self.controller.is_leader():
            return
        if command.get("op") not in ("load", "office"):
            apps = sorted({m.app for m in moves})
            self.records.write("pool", event="map", version=state["version"], term=state["term"], op=command.get("op"),
                               algorithm={a: state["apps"][a]["algorithm"] for a in apps if a in state["apps"]},
                               moves=[{"consumer": m.consumer, "app": m.app, "old": m.old, "new": m.new}
                                      for m in moves])
        changed = {m.consumer for m in moves}
        if command.get("op") == "consumer_join":
            changed.add(command.get("consumer"))      # it hears its map (even an empty one) when it registers
        self.owed |= {c for c in changed if c in state["consumers"]}
        if self.owed:
            self._spawn(self._pay())

    # -- assignments --------------------------------------------------------------------------------------
    async def _pay(self) -> None:
        """Publish the assignments owed, each once its consumer's subscription is known here.

        An assignment is a committed state under that state's own term (the term of the leader that committed its
        last command), never under the Raft term of the moment: along the Raft log (term, version) only grows, so
        a consumer that keeps the highest (term, version) takes the maps in log order, whoever publishes them and
        whenever they arrive; a deposed leader's late one is refused."""
        state = self.state
        term = state["term"]
        for consumer in sorted(self.owed):
            if not self.controller.is_leader():
                return                         # deposed (or stepped down without a majority): the next leader pays
            topic = f"{ASSIGN_TOPIC}.{consumer}"
            if consumer not in state["consumers"]:
                self.owed.discard(consumer)
                continue
            if not any(s.durable for subs in self.broker.interest.matching(topic).values() for s in subs):
                continue                       # not known here yet: the watch tries again
            self.owed.discard(consumer)
            reply = await self.broker.publish(topic, assignment_body(state, consumer, term), None, 1, 0.0,
                                              f"{term}:{state['version']}", "")
            if not reply.accepted:
                self.owed.add(consumer)
                log.warning("%s: pools: assignment for %s not published now: %s", self.me, consumer, reply.reason)

    # -- heartbeats and silence ---------------------------------------------------------------------------
    async def _on_beat(self, d: pubsub_pb2.Delivery) -> None:
        try:
            beat = parse_heartbeat(d.payload)
            if isinstance(beat, ConsumerBeat) and d.publisher:
                # consumers are nodes (publisher ""); instances run as their application's user
                raise BadMessage(f"a consumer heartbeat from user {d.publisher!r}: only nodes are consumers")
        except BadMessage as exc:
            self.refused += 1
            if self.refused <= 10 or self.refused % 1000 == 0:     # a stream of bad beats costs few lines
                self.records.write("pool", event="refused", reason=str(exc), pub_id=d.pub_id, topic=d.topic,
                                   refused=self.refused)
            return
        now = time.monotonic()
        if isinstance(beat, ConsumerBeat):
            self.heard[("consumer", beat.name)] = now
        else:
            self.heard[(beat.app, beat.name)] = now
        if self.controller.is_leader():
            await self._act(beat)

    async def _act(self, beat: ConsumerBeat | InstanceBeat) -> None:
        st = self.state
        if isinstance(beat, ConsumerBeat):
            have = st["consumers"].get(beat.name)
            if have is None or have["node"] != beat.node or sorted(have["types"]) != sorted(beat.types):
                await self._propose({"op": "consumer_join", "consumer": beat.name, "node": beat.node,
                                     "types": list(beat.types)})
                return
            interested = set(assign.interested(st, beat.name))
            for app, rate in sorted(beat.load.items()):
                old = st["load"].get(beat.name, {}).get(app)
                if app in interested and (old is None or abs(rate - old) > max(LOAD_FLOOR, LOAD_CHANGE * old)):
                    await self._propose({"op": "load", "consumer": beat.name, "app": app, "rate": rate})
            return
        app = st["apps"].get(beat.app)
        allowed = self.sec.apps.get(beat.app)
        if app is None or (allowed is not None and allowed.instances
                           and allowed.instances.get(beat.name) != beat.node):
            return                             # not an instance of this pool's configuration
        inst = app["instances"].get(beat.name)
        if inst is None and beat.state == assign.ACTIVE:
            await self._propose({"op": "instance_join", "app": beat.app, "instance": beat.name, "node": beat.node})
        elif inst is not None and beat.state == assign.LEAVING and inst["state"] == assign.ACTIVE:
            await self._propose({"op": "instance_leave", "app": beat.app, "instance": beat.name})

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.sec.heartbeat)
            try:
                if self.controller.is_leader():
                    await self._silence()
                    if self.owed:
                        await self._pay()
            except Exception:
                log.exception("%s: pools: controller watch failed", self.me)

    async def _silence(self) -> None:
        st, now, limit = self.state, time.monotonic(), self.sec.crash_timeout
        for app, a in sorted(st["apps"].items()):
            for inst, i in sorted(a["instances"].items()):
                if now - max(self.heard.get((app, inst), 0.0), self.office) > limit:
                    op = "instance_gone" if i["state"] == assign.LEAVING else "instance_crash"
                    await self._propose({"op": op, "app": app, "instance": inst})
        for consumer in sorted(st["consumers"]):
            if now - max(self.heard.get(("consumer", consumer), 0.0), self.office) > limit:
                await self._propose({"op": "consumer_leave", "consumer": consumer})

    async def _propose(self, command: dict) -> None:
        """Submit a command once at a time per (op, subject); a refusal or a lost leadership is logged only."""
        key = tuple(sorted((k, str(v)) for k, v in command.items() if k != "rate"))
        if key in self._inflight:
            return
        self._inflight.add(key)
        try:
            await self.controller.submit(command)
            self.proposed[command["op"]] = self.proposed.get(command["op"], 0) + 1
        except CommandRefused as exc:
            log.info("%s: pools: %s refused: %s", self.me, command.get("op"), exc.reason)
        except ControllerError as exc:
            log.info("%s: pools: %s not committed: %s", self.me, command.get("op"), exc)
        finally:
            self._inflight.discard(key)

    def _spawn(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def snapshot(self) -> dict:
        st = self.state
        return {"leader": self.controller.is_leader(), "term": self.controller.term(), "version": st["version"],
                "consumers": len(st["consumers"]), "instances": sum(len(a["instances"]) for a in st["apps"].values()),
                "owed": len(self.owed), "proposed": dict(sorted(self.proposed.items())), "refused": self.refused}
