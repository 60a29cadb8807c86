"""Message streams as the node runs them (node/resource_manager.py with node/transfer_queue.py).

Credits throttle a 4-hop chain back to the source; a stream opens only when its whole allocation fits;
credits go out only for free, unpromised slots; an idle stream that holds nothing closes.
"""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from node.config import NodeConfig

from node.registry import config_from_dict as from_dict
from node.resource_manager import ROOM, ResourceManager
from node.piece import Piece
from node.transfer_queue import TransferQueue

F = 1000
NAMES = ["s", "m1", "m2", "m3", "r"]  # source -> three transit MTAs -> recipient MTA
HOPS = len(NAMES) - 1
SID = "msg-1"
MKEY = (SID, "r")


def chain_cfg(name: str, allocation: int) -> NodeConfig:
    """A node of the chain; it knows all five nodes, so it has buffer classes 0..4 (class k at hop k)."""
    i = NAMES.index(name)
    neighbours = {n: f"127.0.0.1:{7000 + j}" for j, n in enumerate(NAMES) if abs(j - i) == 1}
    routes = {n: NAMES[i + 1] if j > i else NAMES[i - 1] for j, n in enumerate(NAMES) if abs(j - i) > 1}
    return from_dict({"name": name, "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                      "neighbours": neighbours, "routes": routes,
                      "resources": {"stream_allocation": allocation, "transit_buffers": 40, "class_min": 1,
                                    "input_pool": 40, "adjust_every": 10**6,      # fixed class limits
                                    "recipient_pool": 40, "recipient_single_share": 0.25,   # multi part: 30
                                    "removal_interval": 0.0, "rbsad": 0.0}})


def frag(msg: str, dst: str, off: int, fragments: int, hops: int, src: str = "s") -> Piece:
    now = time.time()
    return Piece(msg, dst, off * F, fragments * F, hops, src, "", ["bob"], 1, now, now + 3600, "", fragments,
                 b"x" * F)


class Chain:
    """Five resource managers and the four outgoing queues between them, wired as the engine wires them:
    a popped piece is offered to the next hop (admit), stored there (stored) and acked (forwarded); a
    "not now" refusal puts it back at the front (with its credit back, unless the stream was full); the
    credits a hop grants (take_credits) reach the previous hop's queue (credit)."""

    def __init__(self, fragments: int, allocation: int) -> None:
        self.rms = [ResourceManager(chain_cfg(n, allocation), lambda _peer: None) for n in NAMES]
        self.queues: list[TransferQueue] = [rm.make_queue(NAMES[k + 1], lambda: None)
                                            for k, rm in enumerate(self.rms[:-1])]
        self.allocation = allocation
        self.fragments = fragments
        self.delivered = 0
        self.rooms = 0
        self.refusals: list[str] = []
        pieces = [frag(SID, "r", o, fragments, hops=0) for o in range(fragments)]
        assert self.rms[0].admit_submission(pieces, fragments, internal=False) is None
        for p in pieces:
            self.queues[0].push(p)

    def step(self) -> int:
        moved = 0
        for k in range(HOPS, 0, -1):                    # credits travel upstream
            for mkey, n in self.rms[k].take_credits(NAMES[k - 1]):
                if mkey == ROOM:
                    self.rooms += 1                     # this loop offers refused pieces every step anyway
                else:
                    self.queues[k - 1].credit(mkey, n)
        for k in range(HOPS - 1, -1, -1):               # fragments travel downstream, one hop per step
            q, sender, receiver = self.queues[k], self.rms[k], self.rms[k + 1]
            while (p := q.pop()) is not None:
                arrived = replace(p, hops=p.hops + 1, charge=None, not_before=0.0, retries=0)
                verdict = receiver.admit(NAMES[k], arrived)
                if verdict is not None:
                    assert verdict[1] > 0, verdict     # "not now", never a permanent refusal
                    self.refusals.append(verdict[0].split(":")[0])
                    if sender.is_stream(p) and not verdict[0].startswith("stream_full"):
                        q.credit(p.mkey, 1)
                    q.push(p, front=True)
                    break                               # offered again next step
                receiver.stored(NAMES[k], arrived, True)
                sender.forwarded(p)
                moved += 1
                if k + 1 < HOPS:
                    self.queues[k + 1].push(arrived)
                else:
                    self.delivered += 1
        return moved

    def check_within_allocation(self) -> None:
        for k in range(1, HOPS):
            st = self.rms[k].streams.get(MKEY)
            usage = self.rms[k].pool.snapshot()["usage"]
            if st is None:
                assert sum(usage) == 0
                continue
            assert st.allocation == self.allocation
            assert st.held + st.granted <= st.allocation
            assert usage[k] == st.allocation and sum(usage) == st.allocation   # exactly the allocation, class k


@pytest.mark.parametrize("allocation", [1, 3])
def test_stalled_recipient_throttles_the_source(allocation: int) -> None:
    chain = Chain(fragments=30, allocation=allocation)
    r = chain.rms[HOPS]
    # The recipient's mailbox holds an unread 5-fragment message: 25 of the 30 multi-fragment slots are left,
    # so the stream's reservation (the whole message, 5.5.1) has to wait.
    for o in range(5):
        hog = frag("hog", "r", o, 5, hops=HOPS, src="m3")
        assert r.admit("m3", hog) is None
        r.stored("m3", hog, True)
    r.take_credits("m3")                               # the hog's own credits: not part of this chain

    for _ in range(200):
        chain.step()
        chain.check_within_allocation()
    # Every transit hop holds exactly its allocation and grants no more; the source keeps the rest.
    # (Was 4 x allocation past the source, the recipient holding stream slots too: the recipient MTA now
    # reserves the whole message up front, so without space it refuses the first fragment.)
    for k in range(1, HOPS):
        assert chain.rms[k].streams[MKEY].held == allocation
    assert chain.rms[0].pool.usage(0) == 30 - 3 * allocation
    assert len(chain.queues[0]) == 30 - 3 * allocation
    assert chain.delivered == 0 and r.recipient.queue_length() == 1
    assert chain.step() == 0                           # no movement at all
    assert chain.refusals and set(chain.refusals) == {"recipient_wait"}   # credits, not refusals, throttle

    r.release_mail("hog")                              # the mail is read: the queued reservation is granted
    for _ in range(400):
        chain.step()
        chain.check_within_allocation()
        if chain.delivered == 30:
            break
    assert chain.delivered == 30 and chain.rooms >= 1  # m3 was told there is room again
    assert r.recipient.used("multi") == 30
    for k, rm in enumerate(chain.rms):
        assert rm.streams == {}, k
        assert sum(rm.pool.snapshot()["usage"]) == 0, k
    assert all(len(q) == 0 for q in chain.queues)


def cfg(**res) -> NodeConfig:
    """Node b between a and c; it knows five nodes, so classes 0..4."""
    return from_dict({"name": "b", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                      "neighbours": {"a": "127.0.0.1:3", "c": "127.0.0.1:4"}, "routes": {"d": "c", "e": "c"},
                      "resources": {"adjust_every": 10**6, **res}})


def manager(**res) -> ResourceManager:
    return ResourceManager(cfg(**res), lambda _peer: None)


def arrive(rm: ResourceManager, p: Piece, peer: str = "a") -> None:
    assert rm.admit(peer, p) is None
    rm.stored(peer, p, True)


def test_credits_only_for_free_unpromised_slots_and_fragments_share_the_link_one_by_one() -> None:
    # Was the half-allocation rule (ceil(allocation/2) fragments per turn): the node has no burst limit;
    # its queue multiplexes fragment by fragment, so a stream never sends two in a row while another waits.
    rm = manager(stream_allocation=4, transit_buffers=40)
    frags = [frag("s", "d", o, 10, hops=1, src="a") for o in range(10)]
    arrive(rm, frags[0])
    assert rm.take_credits("a") == [(("s", "d"), 3)]  # 4 slots, one used by the set-up fragment
    assert rm.take_credits("a") == []                 # already promised
    for p in frags[1:4]:
        arrive(rm, p)
    assert rm.take_credits("a") == []                 # every slot full, none promised twice
    st = rm.streams[("s", "d")]
    assert st.held == 4 and st.granted == 0

    q = rm.make_queue("c", lambda: None)
    other = [frag("o", "d", o, 4, hops=1, src="a") for o in range(4)]
    for p in frags[:4] + other:
        q.push(p)
    q.credit(("s", "d"), 3)                            # next hop c granted the rest of both allocations
    q.credit(("o", "d"), 3)
    order = [q.pop().msg_id for _ in range(8)]
    assert order.count("s") == 4 and order.count("o") == 4
    assert all(a != b for a, b in zip(order, order[1:])), order
    assert q.pop() is None                             # no credit left for either stream


@pytest.mark.parametrize("quantum,expect", [(1, 1), (3, 3), (0, 4)])     # 0: half the allocation of 8
def test_stream_quantum_gives_a_stream_that_many_fragments_per_round(quantum: int, expect: int) -> None:
    rm = manager(stream_allocation=8, transit_buffers=40, stream_quantum=quantum)
    q = rm.make_queue("c", lambda: None)
    for o in range(8):
        q.push(frag("s", "d", o, 10, hops=1, src="a"))
    q.credit(("s", "d"), 7)                            # the whole allocation granted
    for name in ("x", "y", "z"):                       # single-fragment messages: one fragment a round
        q.push(frag(name, "d", 0, 1, hops=1, src="a"))
    order = [q.pop().msg_id for _ in range(11)]
    first_round = order[:expect + 3]                   # stride scheduling: within a round the order interleaves
    assert first_round.count("s") == expect and sorted(set(first_round) - {"s"}) == ["x", "y", "z"], order
    assert order.count("s") == 8 and q.pop() is None


def test_allocation_one_still_moves() -> None:
    rm = manager(stream_allocation=1, transit_buffers=40)
    frags = [frag("s", "d", o, 5, hops=1, src="a") for o in range(5)]
    for p in frags:
        arrive(rm, p)
        assert rm.take_credits("a") == []             # the one slot is taken
        rm.forwarded(p)
        expect = [] if p is frags[-1] else [(("s", "d"), 1)]
        assert rm.take_credits("a") == expect         # freed by the ack: one credit upstream
    assert rm.streams == {} and rm.pool.usage(1) == 0


def test_allocation_is_capped_by_message_size_and_granted_only_when_it_all_fits() -> None:
    rm = manager(stream_allocation=4, transit_buffers=20, class_min=1)   # 4 transit classes of 5
    assert rm.pool.snapshot()["limits"][1] == 5
    small = [frag("small", "d", o, 3, hops=1, src="a") for o in range(3)]
    arrive(rm, small[0])
    assert rm.streams[("small", "d")].allocation == 3 and rm.pool.usage(1) == 3   # min(3 fragments, 4)
    verdict = rm.admit("a", frag("big", "d", 0, 9, hops=1, src="a"))
    assert verdict is not None and verdict[0].startswith("stream_refused") and verdict[1] > 0
    assert rm.snapshot()["refusals"] == {"stream_refused": 1}
    assert rm.pool.usage(1) == 3 and ("big", "d") not in rm.streams   # 2 were free: none taken
    for p in small[1:]:
        arrive(rm, p)
    for p in small:
        rm.forwarded(p)                                # the whole message left: its stream closes
    assert rm.streams == {} and rm.pool.usage(1) == 0
    arrive(rm, frag("big", "d", 0, 9, hops=1, src="a"))
    assert rm.streams[("big", "d")].allocation == 4 and rm.pool.usage(1) == 4


def test_a_fragment_beyond_the_allocation_is_refused_for_now_and_an_unknown_stream_opens() -> None:
    # Was a protocol error (StreamError) in the old table: the node answers "not now" instead, so a
    # credit restored after a reconnect or a probe costs a retry, never the session.
    rm = manager(stream_allocation=2, transit_buffers=40)
    frags = [frag("s", "d", o, 10, hops=1, src="a") for o in range(10)]
    arrive(rm, frags[0])
    arrive(rm, frags[1])
    verdict = rm.admit("a", frags[2])
    assert verdict is not None and verdict[0].startswith("stream_full") and verdict[1] > 0
    assert rm.streams[("s", "d")].held == 2 and rm.pool.usage(1) == 2
    late = frag("late", "d", 5, 10, hops=1, src="a")  # its stream closed here or was never seen
    arrive(rm, late)
    assert rm.streams[("late", "d")].held == 1 and rm.pool.usage(1) == 4


def test_idle_streams_that_hold_nothing_close_and_free_their_buffers() -> None:
    # Was expiry after a fixed lifetime whatever the stream held: the node closes a stream only when it
    # holds no fragment here and saw no activity for `stream_idle` seconds (sweep).
    rm = manager(stream_allocation=2, transit_buffers=40)
    a0, b0 = frag("a", "d", 0, 5, hops=2, src="a"), frag("b", "d", 0, 5, hops=2, src="a")
    arrive(rm, a0)
    rm.forwarded(a0)                                   # a holds nothing any more
    arrive(rm, b0)                                     # b holds its fragment
    assert rm.pool.usage(2) == 4
    rm.sweep(idle=60.0, stream_idle=60.0)
    assert len(rm.streams) == 2
    time.sleep(0.3)
    rm.sweep(idle=60.0, stream_idle=0.15)
    assert list(rm.streams) == [("b", "d")] and rm.pool.usage(2) == 2   # a closed; b holds a fragment
    rm.forwarded(b0)                                   # activity: b's idle time starts again
    rm.sweep(idle=60.0, stream_idle=0.15)
    assert list(rm.streams) == [("b", "d")]
    time.sleep(0.3)
    rm.sweep(idle=60.0, stream_idle=0.15)
    assert rm.streams == {} and rm.pool.usage(2) == 0
