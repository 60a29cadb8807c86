"""The node's resource decisions (node/resource_manager.py) piece by piece, without processes or sockets.

The integration tests in tests/integration/resources/ run the same code in real daemons; these pin the rules.
"""
from __future__ import annotations

import time

import pytest

from node.config import ConfigError

from node.registry import config_from_dict as from_dict
from node.resource_manager import CONGESTED, ROOM, ResourceManager
from node.piece import Piece

F = 1000


def cfg(mode: str = "fragmenting", **res):
    return from_dict({"name": "b", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2", "mode": mode,
                      "neighbours": {"a": "127.0.0.1:3", "c": "127.0.0.1:4"},
                      "routes": {"d": "c", "e": "c"}, "resources": res})


def piece(msg: str, dst: str, off: int = 0, total: int = F, hops: int = 1, fragments: int = 1,
          src: str = "a", size: int | None = None) -> Piece:
    n = min(F, total - off) if size is None else size
    return Piece(msg, dst, off, total, hops, src, "", [""], 1, time.time(), time.time() + 60, "", fragments,
                 b"x" * n)


def manager(mode: str = "fragmenting", **res) -> tuple[ResourceManager, list[str]]:
    woken: list[str] = []
    return ResourceManager(cfg(mode, **res), woken.append), woken


def test_resources_section_switches_management_on_and_its_absence_keeps_it_off() -> None:
    base = {"name": "b", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2"}
    assert from_dict(dict(base)).resources.enabled is False
    assert from_dict({**base, "resources": {}}).resources.enabled is True
    assert from_dict({**base, "resources": {"rbsad": 4.0}}).resources.rbsad == 4.0
    assert from_dict({**base, "resources": {"enabled": False}}).resources.enabled is False
    with pytest.raises(ConfigError):
        from_dict({**base, "resources": {"bogus": 1}})


def test_a_hop_h_piece_only_ever_takes_a_class_h_buffer() -> None:
    rm, _ = manager(transit_buffers=8, class_min=1)
    assert rm.classes == 5                     # b, a, c, d, e: routes of at most 4 hops
    for h in (1, 2, 3, 4):
        p = piece(f"m{h}", "d", hops=h)
        assert rm.admit("a", p) is None
        usage = rm.pool.snapshot()["usage"]
        assert usage[h] == 1 and sum(usage) == 1, (h, usage)
        rm.stored("a", p, True)
        rm.forwarded(p)
        assert sum(rm.pool.snapshot()["usage"]) == 0


def test_full_class_refuses_for_now_and_a_duplicate_gives_the_buffer_back() -> None:
    rm, _ = manager(transit_buffers=4, class_min=1)          # 4 transit classes of 1 buffer
    p1, p2 = piece("m1", "d", hops=2), piece("m2", "d", hops=2)
    assert rm.admit("a", p1) is None
    verdict = rm.admit("a", p2)
    assert verdict is not None and verdict[0].startswith("class_full") and verdict[1] > 0
    assert rm.admit("a", piece("m3", "d", hops=3)) is None  # another class still has room
    rm.stored("a", p1, False)                                # the spool already had it
    assert rm.pool.usage(2) == 0
    assert rm.admit("a", p2) is None


def test_input_pool_congestion_and_the_half_pool_rule_for_small_messages() -> None:
    rm, _ = manager(input_pool=4)
    small = [piece(f"s{i}", "d", hops=0) for i in range(3)]
    assert rm.admit_submission([small[0]], 1, internal=False) is None
    assert rm.admit_submission([small[1]], 1, internal=False) is None
    reason = rm.admit_submission([small[2]], 1, internal=False)
    assert reason and reason.startswith(CONGESTED)          # single-fragment messages: at most half of 4
    big = [piece("b", "d", off=o, total=3 * F, hops=0, fragments=3) for o in (0, F, 2 * F)]
    reason = rm.admit_submission(big, 3, internal=False)
    assert reason and reason.startswith(CONGESTED)          # 2 + 3 > 4
    assert rm.admit_submission(big, 3, internal=True) is None   # reports are never refused
    rm.forwarded(small[0])
    assert rm.pool.snapshot()["single_fragment_input_usage"] == 1


def test_non_fragmenting_charges_one_buffer_per_message_until_all_its_bytes_are_acked() -> None:
    rm, _ = manager("non-fragmenting", transit_buffers=4, class_min=1, buffer_classes=True)
    total = 3000
    chunks = [piece("m", "d", off=o, total=total, hops=1, size=1000) for o in (0, 1000, 2000)]
    for c in chunks:
        assert rm.admit("a", c) is None
        rm.stored("a", c, True)
    assert rm.pool.usage(1) == 1
    assert rm.admit("a", piece("other", "d", hops=1, total=10)) is not None   # class 1 holds one message
    rm.forwarded(chunks[0])
    rm.forwarded(chunks[1])
    assert rm.pool.usage(1) == 1
    rm.forwarded(chunks[2])
    assert rm.pool.usage(1) == 0


def test_buffer_classes_off_is_one_shared_pool_for_submissions_and_transit() -> None:
    rm, _ = manager("non-fragmenting", buffer_classes=False, transit_buffers=2, input_pool=1)
    assert rm.pool.config.classes_enabled is False
    own = piece("own", "d", hops=0, total=2 * F, size=2 * F)
    assert rm.admit_submission([own], 1, internal=False) is None
    assert rm.admit("a", piece("t1", "d", hops=1)) is None
    assert rm.admit("a", piece("t2", "d", hops=3)) is None
    assert rm.admit("a", piece("t3", "d", hops=2)) is not None    # 3 buffers in all, whatever the hops
    assert rm.pool.snapshot()["usage"] == [3]


def test_stream_holds_at_most_its_allocation_and_grants_credits_as_slots_free() -> None:
    rm, woken = manager(stream_allocation=2, transit_buffers=40)
    frags = [piece("s", "d", off=o * F, total=10 * F, hops=1, fragments=10) for o in range(10)]
    assert rm.admit("a", frags[0]) is None
    rm.stored("a", frags[0], True)
    assert rm.take_credits("a") == [(("s", "d"), 1)]        # allocation 2, one slot used by the set-up fragment
    assert woken == ["a"]
    assert rm.admit("a", frags[1]) is None
    rm.stored("a", frags[1], True)
    assert rm.take_credits("a") == []                         # both slots full
    verdict = rm.admit("a", frags[2])
    assert verdict is not None and verdict[0].startswith("stream_full")
    assert rm.pool.usage(1) == 2                              # the allocation, nothing more
    rm.forwarded(frags[0])                                    # next hop acked one: a slot is free
    assert rm.take_credits("a") == [(("s", "d"), 1)]
    for p in frags[2:]:
        assert rm.admit("a", p) is None
        rm.stored("a", p, True)
        rm.forwarded(p)
    rm.forwarded(frags[1])
    assert rm.streams == {} and rm.pool.usage(1) == 0        # the stream closed and freed its buffers


def test_recipient_reservations_are_fcfs_and_a_full_pool_says_not_now() -> None:
    rm, _ = manager(recipient_pool=40, recipient_single_share=0.25, removal_interval=0.0)   # multi part: 30
    first = piece("big1", "b", total=20 * F, fragments=20)
    assert rm.admit("a", first) is None
    second, third = piece("big2", "b", total=20 * F, fragments=20), piece("big3", "b", total=5 * F, fragments=5)
    v2, v3 = rm.admit("a", second), rm.admit("c", third)
    assert v2 and v2[0].startswith("recipient_wait") and v3 and v3[0].startswith("recipient_wait")
    assert rm.recipient.queue_length() == 2                  # big3 would fit, but waits behind big2 (FCFS)
    rm.release_mail("big1")
    assert rm.recipient.is_granted("big2") and rm.recipient.is_granted("big3")     # in order: 20 + 5 <= 30
    assert rm.admit("a", second) is None
    never = rm.admit("a", piece("huge", "b", total=31 * F, fragments=31))
    assert never is not None and never[1] == 0               # can never fit: a permanent refusal


def test_single_fragment_messages_are_stored_optimistically_until_their_share_is_full() -> None:
    rm, _ = manager(recipient_pool=8, recipient_single_share=0.25, removal_interval=0.0)     # single part: 2
    assert rm.admit("a", piece("x1", "b")) is None
    assert rm.admit("a", piece("x2", "b")) is None
    v = rm.admit("a", piece("x3", "b"))
    assert v and v[0].startswith("recipient_full") and v[1] > 0
    rm.remove(1)                                              # a synthetic reader took one message
    assert rm.admit("a", piece("x3", "b")) is None


def test_rbsad_gate_only_at_the_next_to_last_mta_and_once_per_message() -> None:
    rm, _ = manager(rbsad=5.0, rbsad_probability=1.0)
    p = piece("m", "d", hops=1)
    t = rm.gate(p)
    assert t > time.monotonic() + 1.0                         # Normal(5, 1.25) truncated at 0: > 1 s surely
    assert rm.gate(piece("m", "d", off=F, hops=1)) == t      # the same message waits once
    off, _ = manager(rbsad=0.0, rbsad_probability=1.0)
    assert off.gate(p) == 0.0


def test_rbsad_no_wait_is_remembered_so_a_long_message_draws_once() -> None:
    """A message that drew "no wait" must not draw again for its later fragments (a sweep used to forget a
    no-wait decision at once, so a 65-fragment stream drew about once per half second and was nearly always
    held in the middle: ~6x the thesis' probability 0.1 per message)."""
    rm, _ = manager(rbsad=5.0, rbsad_probability=0.5)
    draws_before = rm.rbsad.draws
    waits = []
    for i in range(40):
        rm.sweep(idle=60.0, stream_idle=60.0)                 # the engine sweeps every 0.5 s between fragments
        waits.append(rm.gate(piece("long", "d", off=i * F, hops=1)))
    assert rm.rbsad.draws == draws_before + 1
    assert len(set(waits)) == 1
    rm.sweep(idle=0.0, stream_idle=60.0)                      # gone for longer than idle (and the wait is over)
    if waits[0] == 0.0:
        assert ("long", "d") not in {k[:2] for k in rm.gates}


def test_recovery_counts_what_is_stored_even_above_the_limits() -> None:
    rm, _ = manager(transit_buffers=4, class_min=1)
    for i in range(3):
        rm.recover(piece(f"r{i}", "d", hops=1))
    assert rm.pool.usage(1) == 3
    snap = rm.snapshot()
    assert snap["buffers"]["usage"][1] == 3 and "refusals" in snap and "recipient" in snap


def test_idle_stream_closes_and_a_new_session_regrants_credits() -> None:
    rm, _ = manager(stream_allocation=3, transit_buffers=40)
    frags = [piece("s", "d", off=o * F, total=9 * F, hops=1, fragments=9) for o in range(9)]
    assert rm.admit("a", frags[0]) is None
    rm.stored("a", frags[0], True)
    assert rm.take_credits("a") == [(("s", "d"), 2)]
    rm.session_up("a")                                        # those 2 credits may have died with the session
    assert rm.take_credits("a") == [(("s", "d"), 2)]
    rm.forwarded(frags[0])
    rm.take_credits("a")
    rm.sweep(idle=60.0, stream_idle=0.0)                      # nothing held here: the stream may close
    assert rm.streams == {} and rm.pool.usage(1) == 0
    assert rm.admit("a", frags[1]) is None                    # a late fragment simply reopens it
    assert rm.pool.usage(1) == 3


def test_a_refused_neighbour_gets_a_room_signal_when_space_frees() -> None:
    rm, woken = manager(transit_buffers=4, class_min=1)
    p1 = piece("m1", "d", hops=2)
    assert rm.admit("a", p1) is None
    assert rm.admit("c", piece("m2", "d", hops=2)) is not None        # c was told "not now"
    assert rm.take_credits("c") == []
    rm.stored("a", p1, True)
    rm.forwarded(p1)                                                  # a class-2 buffer is free again
    assert rm.take_credits("c") == [(ROOM, 1)] and "c" in woken
    rm.forwarded(piece("m3", "d", hops=1))                           # nothing refused since: no new signal
    assert rm.take_credits("c") == []


def test_user_quotas_reach_the_recipient_pool_and_negative_ones_are_refused() -> None:
    m, _ = manager(user_hard_quota=30, user_soft_limit=12)
    assert m.recipient.config.user_hard_quota == 30
    assert m.recipient.config.user_soft_limit == 12
    unset, _ = manager()
    assert unset.recipient.config.user_hard_quota is None      # 0 in the config = no quota
    with pytest.raises(ConfigError, match="user_hard_quota"):
        cfg(user_hard_quota=-1)


def test_a_stream_never_asks_a_class_for_more_than_its_whole_limit() -> None:
    """Readjustment can cut a class below the stream allocation; only a full class may grow again, so an empty
    class of limit 2 asked for 4 would refuse that stream for ever (seen as a livelock on a 6-node ring)."""
    rm, _woken = manager(stream_allocation=4, transit_buffers=40)
    rm.pool._limits[1] = 2                      # what expression 5.1's readjustment had left the class
    frags = [piece("s", "d", off=o * F, total=10 * F, hops=1, fragments=10) for o in range(10)]
    assert rm.admit("a", frags[0]) is None      # set up with allocation 2, not refused
    assert rm.streams[("s", "d")].allocation == 2 and rm.pool.usage(1) == 2
