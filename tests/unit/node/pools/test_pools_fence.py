"""The handover fence: every event released once, in order, by the instance that owns its sequence, whatever
the order and duplication of events, fences and acknowledgements."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from node.pools.fence import Acked, ConsumerSwitch, Drained, Fence, FenceDone, InstanceFence, Release


def test_consumer_switch_routes_by_cut() -> None:
    sw = ConsumerSwitch("PS1")
    assert sw.target("A", 1) is None and sw.cut("A", 0) is None
    sw.assign("A", "i1", version=1, term=1)
    assert sw.pending() == {"A": "i1"} and sw.target("A", 1) is None
    assert sw.cut("A", 0) == Fence("PS1", "A", 0, None, "i1", 1, 1)
    sw.assign("A", "i2", version=2, term=1)
    assert sw.target("A", 4) == "i1"                    # pending: still the old instance until the cut
    assert sw.cut("A", 3) == Fence("PS1", "A", 3, "i1", "i2", 2, 1)
    assert [sw.target("A", s) for s in (1, 3, 4, 9)] == ["i1", "i1", "i2", "i2"]
    sw.assign("A", "i2", version=3, term=1)             # the same instance again: nothing to switch
    assert sw.pending() == {} and sw.cut("A", 5) is None


def plan(n: int, cuts: list[tuple[int, str]]) -> tuple[list[Fence], dict[int, str]]:
    """The fences and the owner of each sequence 1..n for a consumer cutting at (seq, instance) in turn."""
    sw = ConsumerSwitch("c")
    fences = []
    for version, (seq, inst) in enumerate(cuts, start=1):
        sw.assign("A", inst, version=version, term=1)
        fences.append(sw.cut("A", seq))
    return fences, {s: sw.target("A", s) for s in range(1, n + 1)}


N = 8
CUTS = [(0, "i1"), (3, "i2"), (5, "i1"), (5, "i3")]        # i1's second window (5, 5] is empty


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.data())
def test_handovers_release_each_event_once_in_order_under_any_delivery(data) -> None:
    fences, owner = plan(N, CUTS)
    nodes = {i: InstanceFence(i) for i in ("i1", "i2", "i3")}
    # messages in flight: (instance, kind, payload); each fence goes to its old and new instance
    flight = [(f.new, "fence", f) for f in fences] + [(f.old, "fence", f) for f in fences if f.old]
    flight += [(owner[s], "event", s) for s in range(1, N + 1)]
    log: list[tuple[str, int]] = []
    duplicates = 0
    while flight:
        k = data.draw(st.integers(0, len(flight) - 1))
        inst, kind, payload = flight[k]
        if duplicates < 6 and data.draw(st.booleans()):
            duplicates += 1                             # delivered now and again later
        else:
            flight.pop(k)
        node = nodes[inst]
        step = (node.on_fence(payload) if kind == "fence" else node.on_predecessor_acked(payload) if kind == "ack"
                else node.on_event("c", "A", payload, f"e{payload}"))
        assert step.refused is None
        log += [(inst, r.seq) for r in step.released]
        flight += [(i, "ack", m) for m in step.send if isinstance(m, Acked) for i in nodes if i != inst]
    assert [s for _, s in log] == list(range(1, N + 1))             # once each, in order across instances
    assert all(owner[s] == inst for inst, s in log)
    assert all(not n.held() for n in nodes.values())


def test_events_before_their_fence_are_held_then_released() -> None:
    i2 = InstanceFence("i2")
    assert i2.on_event("c", "A", 5, "e5").released == ()
    assert i2.on_event("c", "A", 4, "e4").released == ()
    assert i2.held() == {("c", "A"): 2}
    step = i2.on_fence(Fence("c", "A", 3, "i1", "i2", 2, 1))
    assert step.released == () and i2.held() == {("c", "A"): 2}     # i1 has not acknowledged 3 yet
    step = i2.on_predecessor_acked(Acked("c", "A", 3, "i1", 2, 1))
    assert [r.seq for r in step.released] == [4, 5] and step.send == (FenceDone("c", "A", 3, "i2", 2, 1),)
    assert i2.on_event("c", "A", 4, "e4").ignored == 1 and i2.held() == {}


def test_stale_conflicting_and_foreign_fences_are_refused() -> None:
    i1 = InstanceFence("i1")
    i1.on_fence(Fence("c", "A", 0, None, "i1", 5, 2))
    assert "stale fence" in i1.on_fence(Fence("c", "A", 0, None, "i1", 9, 1)).refused      # older term
    assert "stale fence" in i1.on_fence(Fence("c", "A", 0, "i0", "i1", 4, 2)).refused      # older version
    assert "conflicts" in i1.on_fence(Fence("c", "A", 7, None, "i1", 5, 2)).refused
    assert "not i1" in i1.on_fence(Fence("c", "A", 0, "i2", "i3", 6, 2)).refused
    assert i1.on_fence(Fence("c", "A", 0, None, "i1", 5, 2)) == i1.on_fence(Fence("c", "A", 0, None, "i1", 5, 2))
    # the old side says Acked again when its outgoing fence comes twice (the first Acked may be lost)
    i1.on_event("c", "A", 1, "e1")
    out = Fence("c", "A", 1, "i1", "i2", 6, 2)
    first, second = i1.on_fence(out), i1.on_fence(out)
    assert first.send == second.send == (Acked("c", "A", 1, "i1", 6, 2),)


def test_crash_takeover_drains_the_backlog_before_the_moved_events() -> None:
    i2 = InstanceFence("i2")
    i2.on_fence(Fence("c", "A", 5, "i1", "i2", 3, 1))              # i1 died; its backlog held 3..5
    assert i2.on_event("c", "A", 6, "e6").released == () and i2.on_event("c", "A", 7, "e7").released == ()
    backlog = [i2.on_backlog("c", "A", s, f"e{s}") for s in (3, 4, 4, 5)]
    assert [r.seq for b in backlog for r in b.released] == [3, 4, 5] and backlog[2].ignored == 1
    assert i2.held() == {("c", "A"): 2}
    step = i2.on_drained(Drained("A", "i1"))
    assert step.released == (Release("c", "A", 6, "e6"), Release("c", "A", 7, "e7")) and i2.held() == {}
