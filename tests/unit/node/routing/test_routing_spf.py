"""Shortest paths, per-link flap damping and route selection with hysteresis (node/routing/)."""
from __future__ import annotations

import itertools
import math
import random
import time

import pytest

from node.routing.config import DampingConfig
from node.routing.damping import FlapDamper
from node.routing.selector import Route, RouteSelector
from node.routing.spf import Path, natural_key, path_cost, shortest_paths

INF = math.inf

# Gunduz thesis, Figure/Table 3: undirected unit links between the numbered nodes.
GUNDUZ = {(1, 2): 1, (1, 3): 1, (2, 10): 1, (2, 11): 1, (3, 12): 1, (3, 21): 1,
          (11, 12): 3, (10, 20): 1, (20, 21): 1, (21, 30): 1}
CHANGE_1 = {(3, 12): 3, (11, 12): 1}
CHANGE_2 = {(1, 2): 3}
# dest: (next hop, cost) as seen from b1
TABLE_3 = {"b2": ("b2", 1), "b3": ("b3", 1), "b10": ("b2", 2), "b11": ("b2", 2), "b12": ("b3", 2),
           "b20": ("b2", 3), "b21": ("b3", 2), "b30": ("b3", 3)}
TABLE_4 = {**TABLE_3, "b12": ("b2", 3)}
TABLE_5 = {"b2": ("b2", 3), "b3": ("b3", 1), "b10": ("b2", 4), "b11": ("b2", 4), "b12": ("b3", 4),
           "b20": ("b3", 3), "b21": ("b3", 2), "b30": ("b3", 3)}


def undirected(edges: dict[tuple[int, int], float], scale: float = 1.0) -> dict[str, dict[str, float]]:
    graph: dict[str, dict[str, float]] = {}
    for (a, b), cost in edges.items():
        graph.setdefault(f"b{a}", {})[f"b{b}"] = cost * scale
        graph.setdefault(f"b{b}", {})[f"b{a}"] = cost * scale
    return graph


def hops_and_costs(paths: dict[str, Path]) -> dict[str, tuple[str, float]]:
    return {dst: (p.next_hop, p.cost) for dst, p in paths.items()}


# --- spf -------------------------------------------------------------------------------------------

def test_natural_key_compares_digit_runs_as_numbers() -> None:
    names = ["b20", "england", "b11", "cgl2", "b2", "b10", "cgl1", "a", "a1"]
    assert sorted(names, key=natural_key) == ["a", "a1", "b2", "b10", "b11", "b20", "cgl1", "cgl2", "england"]
    assert natural_key("b2") != natural_key("b02")      # distinct names never compare equal


def test_gunduz_tables_from_plain_shortest_paths() -> None:
    g3 = undirected(GUNDUZ)
    g4 = undirected({**GUNDUZ, **CHANGE_1})
    g5 = undirected({**GUNDUZ, **CHANGE_1, **CHANGE_2})
    assert hops_and_costs(shortest_paths(g3, "b1")) == TABLE_3
    assert hops_and_costs(shortest_paths(g4, "b1")) == TABLE_4
    assert hops_and_costs(shortest_paths(g5, "b1")) == TABLE_5
    assert shortest_paths(g3, "b1")["b20"].nodes == ("b1", "b2", "b10", "b20")


def test_paths_are_consistent_with_their_cost_and_next_hop() -> None:
    graph = undirected({**GUNDUZ, **CHANGE_1})
    for dst, p in shortest_paths(graph, "b1").items():
        assert p.nodes[0] == "b1" and p.nodes[-1] == dst and p.nodes[1] == p.next_hop
        assert path_cost(graph, p.nodes) == p.cost


def test_ties_go_to_the_first_hop_in_natural_order_then_the_node_sequence() -> None:
    # b10 sorts before b2 as a string; natural order puts b2 first.
    graph = {"s": {"b10": 1, "b2": 1}, "b10": {"d": 1}, "b2": {"d": 1}}
    assert shortest_paths(graph, "s")["d"] == Path(2, "b2", ("s", "b2", "d"))
    # Same first hop: the node sequence decides.
    graph = {"s": {"a": 1}, "a": {"x10": 1, "x9": 1}, "x10": {"d": 1}, "x9": {"d": 1}}
    assert shortest_paths(graph, "s")["d"].nodes == ("s", "a", "x9", "d")


def test_float_noise_does_not_break_a_tie() -> None:
    # 0.1 + 0.2 == 0.30000000000000004 > 0.15 + 0.15 == 0.3: without rounding b3 would win.
    graph = {"s": {"b2": 0.1, "b3": 0.15}, "b2": {"d": 0.2}, "b3": {"d": 0.15}}
    p = shortest_paths(graph, "s")["d"]
    assert p.next_hop == "b2" and p.cost == 0.3


def test_directed_links_missing_and_infinite_costs() -> None:
    graph = {"a": {"b": 1, "c": INF}, "b": {"d": 2}, "c": {"a": 1}}
    paths = shortest_paths(graph, "a")
    assert set(paths) == {"b", "d"}        # c only via an infinite link; nothing leads back into a
    assert shortest_paths(graph, "b") == {"d": Path(2, "d", ("b", "d"))}
    assert shortest_paths(graph, "zz") == {}
    assert shortest_paths({"a": {"b": 0}, "b": {"a": 0}}, "a") == {"b": Path(0, "b", ("a", "b"))}
    with pytest.raises(ValueError):
        shortest_paths({"a": {"b": -1}}, "a")
    with pytest.raises(ValueError):
        shortest_paths({"a": {"b": math.nan}}, "a")


def test_path_cost() -> None:
    graph = {"a": {"b": 1.5, "c": INF}, "b": {"c": 2}}
    assert path_cost(graph, ("a", "b", "c")) == 3.5
    assert path_cost(graph, ("a", "c")) == INF
    assert path_cost(graph, ("b", "a")) == INF
    assert path_cost(graph, ("a",)) == 0


def brute_force(graph: dict[str, dict[str, float]], src: str) -> dict[str, Path]:
    """Every simple path, ranked by the documented order: (cost, first hop, node sequence)."""
    best: dict[str, tuple] = {}

    def walk(nodes: tuple[str, ...], cost: float) -> None:
        for v, c in graph.get(nodes[-1], {}).items():
            if v in nodes or c == INF:
                continue
            path, total = nodes + (v,), cost + c
            rank = (round(total, 9), natural_key(path[1]), tuple(natural_key(n) for n in path))
            if v not in best or rank < best[v][0]:
                best[v] = (rank, Path(round(total, 9), path[1], path))
            walk(path, total)

    walk((src,), 0.0)
    return {v: p for v, (_rank, p) in best.items()}


def test_matches_brute_force_on_small_random_graphs_with_many_ties() -> None:
    rng = random.Random(7)
    names = ["n1", "n2", "n3", "n10", "n11", "n20"]
    for _ in range(300):
        graph = {u: {v: rng.choice([0, 1, 1, 2, 2, 3, INF]) for v in names if v != u and rng.random() < 0.6}
                 for u in names}
        src = rng.choice(names)
        assert shortest_paths(graph, src) == brute_force(graph, src)


def grid(n: int, seed: int = 1) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    graph: dict[str, dict[str, float]] = {}
    for x, y in itertools.product(range(n), repeat=2):
        for dx, dy in ((1, 0), (0, 1)):
            if x + dx < n and y + dy < n:
                a, b = f"g{x}x{y}", f"g{x + dx}x{y + dy}"
                graph.setdefault(a, {})[b] = rng.choice([1.0, 1.0, 1.1, 1.2, 2.0])
                graph.setdefault(b, {})[a] = rng.choice([1.0, 1.0, 1.1, 1.2, 2.0])
    return graph


def test_400_node_grid_is_fast() -> None:
    graph = grid(20)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        paths = shortest_paths(graph, "g0x0")
        times.append(time.perf_counter() - start)
    assert len(paths) == 399
    assert min(times) < 0.05


# --- damping ---------------------------------------------------------------------------------------

L = ("a", "b")


def test_first_cost_is_not_a_change_and_penalty_decays_by_half_life() -> None:
    d = FlapDamper(DampingConfig())
    assert d.observe(L, 10, now=0) == 10
    assert d.penalty(L, 0) == 0
    assert d.observe(L, 10, now=1) == 10 and d.penalty(L, 1) == 0     # same cost: no change
    assert d.observe(L, 15, now=2) == 15 and d.observe(L, 20, now=3) == 20
    assert d.penalty(L, 3) == 0         # a move to a new level in steps of one direction is not a flap
    assert d.observe(L, 10, now=5) == 10        # back down: a flap
    assert d.penalty(L, 5) == pytest.approx(1000)
    assert d.penalty(L, 20) == pytest.approx(500)
    assert d.penalty(L, 35) == pytest.approx(250)
    d.observe(L, INF, now=20)       # withdrawn counts as a change
    assert d.penalty(L, 20) == pytest.approx(1500)
    assert d.penalty(L, 35) == pytest.approx(750)
    assert d.penalty(("x", "y"), 0) == 0
    assert not d.suppressed(L, 35)


SUPPRESS = 1500.0      # two reversals one second apart pass it


def suppress_at_3(d: FlapDamper) -> None:
    """10, 30, 10, 30 one second apart: the reversals at t=2 and t=3 push the penalty past SUPPRESS."""
    for t, cost in enumerate([10, 30, 10]):
        d.observe(L, cost, now=t)
    assert not d.suppressed(L, 2)
    assert d.observe(L, 30, now=3) == 30
    assert d.suppressed(L, 3)


def test_suppressed_link_is_held_at_its_highest_cost_since_suppression() -> None:
    d = FlapDamper(DampingConfig(suppress=SUPPRESS))
    suppress_at_3(d)
    assert d.observe(L, 10, now=4) == 30         # better again, but held at the worst
    assert d.observe(L, 50, now=5) == 50
    assert d.observe(L, 20, now=6) == 50
    assert d.observe(L, INF, now=7) == INF       # withdrawn while suppressed: avoided
    assert d.observe(L, 10, now=8) == INF
    assert d.effective(L, 9) == INF
    assert d.effective(("x", "y"), 9) == INF     # never observed


def test_release_when_penalty_decays_below_reuse() -> None:
    d = FlapDamper(DampingConfig(suppress=SUPPRESS))
    suppress_at_3(d)
    assert d.observe(L, 10, now=4) == 30
    p4 = d.penalty(L, 4)
    due = 4 + 15 * math.log2(p4 / 750)           # before max_suppress (3 + 60)
    assert due < 63
    assert d.next_release(4) == pytest.approx(due)
    assert d.effective(L, due - 0.01) == 30 and d.suppressed(L, due - 0.01)
    assert d.effective(L, d.next_release(due)) == 10     # the caller's timer finds it released
    assert not d.suppressed(L, due) and d.next_release(due) is None
    assert d.penalty(L, due) == pytest.approx(750)


def test_release_after_max_suppress() -> None:
    d = FlapDamper(DampingConfig(half_life=1000.0, suppress=SUPPRESS))      # the penalty barely decays
    suppress_at_3(d)
    d.observe(L, 10, now=4)
    assert d.next_release(4) == 63
    assert d.effective(L, 62.9) == 30
    assert d.effective(L, 63) == 10
    assert d.penalty(L, 63) > 2000 and d.next_release(63) is None
    assert d.observe(L, 30, now=64) == 30                # still flapping: suppressed again at once
    assert d.observe(L, 10, now=65) == 30 and d.next_release(65) == 124


def test_disabled_damping_passes_costs_through() -> None:
    d = FlapDamper(DampingConfig(enabled=False))
    for t in range(20):
        cost = 10 if t % 2 else 30
        assert d.observe(L, cost, now=t) == cost
    assert not d.suppressed(L, 20) and d.penalty(L, 20) == 0 and d.next_release(20) is None
    assert d.effective(L, 20) == 10


def test_forget_makes_the_next_cost_a_first_one() -> None:
    d = FlapDamper(DampingConfig(suppress=SUPPRESS))
    suppress_at_3(d)
    d.forget(L)
    assert d.next_release(3) is None
    assert d.observe(L, 10, now=4) == 10 and d.penalty(L, 4) == 0


def flap(enabled: bool) -> int:
    """A cost alternating 10 <-> 30 every 2 s for 120 s; the caller also re-reads at release times."""
    d = FlapDamper(DampingConfig(enabled=enabled))
    last = d.observe(L, 10, now=0)
    changes = 0
    for k in range(1, 61):
        now = 2.0 * k
        due = d.next_release(now)
        if due is not None and due <= now:      # a recomputation timer would have fired by now
            eff = d.effective(L, due)
            changes += eff != last
            last = eff
        eff = d.observe(L, 30 if k % 2 else 10, now=now)
        changes += eff != last
        last = eff
    return changes


def test_flapping_link_changes_effective_cost_a_bounded_number_of_times() -> None:
    assert flap(enabled=False) == 60
    assert 1 <= flap(enabled=True) <= 8       # 7 measured: held most of the time, released at max_suppress


def test_link_that_stops_flapping_is_used_at_its_current_cost() -> None:
    d = FlapDamper(DampingConfig(suppress=SUPPRESS))
    suppress_at_3(d)
    d.observe(L, 10, now=4)
    assert d.effective(L, 100) == 10 and not d.suppressed(L, 100)


# --- selector --------------------------------------------------------------------------------------

def table(sel: RouteSelector) -> dict[str, tuple[str, float]]:
    return {dst: (r.next_hop, r.cost) for dst, r in sel.table()}


@pytest.mark.parametrize("scale", [1.0, 10.0])      # 10.0: costs in ms at 10 ms per unit
def test_gunduz_tables_3_4_5_with_hysteresis(scale: float) -> None:
    def scaled(t: dict[str, tuple[str, float]]) -> dict[str, tuple[str, float]]:
        return {dst: (hop, cost * scale) for dst, (hop, cost) in t.items()}

    sel = RouteSelector("b1", hysteresis=0.1)
    changed = sel.update(undirected(GUNDUZ, scale))
    assert table(sel) == scaled(TABLE_3)
    assert set(changed) == set(TABLE_3) and all(old is None for old, _new in changed.values())
    assert [dst for dst, _r in sel.table()] == ["b2", "b3", "b10", "b11", "b12", "b20", "b21", "b30"]

    changed = sel.update(undirected({**GUNDUZ, **CHANGE_1}, scale))
    assert table(sel) == scaled(TABLE_4)
    assert set(changed) == {"b12"}
    old, new = changed["b12"]
    assert (old.next_hop, old.cost, new.next_hop, new.cost) == ("b3", 2 * scale, "b2", 3 * scale)

    changed = sel.update(undirected({**GUNDUZ, **CHANGE_1, **CHANGE_2}, scale))
    assert table(sel) == scaled(TABLE_5)
    assert set(changed) == {"b2", "b10", "b11", "b12", "b20"}
    assert sel.update(undirected({**GUNDUZ, **CHANGE_1, **CHANGE_2}, scale)) == {}


def two_ways(via_a: float, via_b: float) -> dict[str, dict[str, float]]:
    # first links of 10: the other neighbour stays strictly closer to d than s is (the loop-free condition)
    return {"s": {"a": 10, "b": 10}, "a": {"d": via_a - 10}, "b": {"d": via_b - 10}}


def test_hysteresis_keeps_a_slightly_worse_route_and_switches_for_a_clearly_better_one() -> None:
    sel = RouteSelector("s", hysteresis=0.1)
    sel.update(two_ways(100, 120))
    assert sel.routes["d"] == Route("a", 100, ("s", "a", "d"))
    assert sel.update(two_ways(100, 95)) == {}                      # 5% better: stay
    assert sel.routes["d"].next_hop == "a"
    changed = sel.update(two_ways(104, 95))                         # current re-costed, still kept
    assert changed == {"d": (Route("a", 100, ("s", "a", "d")), Route("a", 104, ("s", "a", "d")))}
    changed = sel.update(two_ways(100, 80))                         # 20% better: switch
    assert sel.routes["d"] == Route("b", 80, ("s", "b", "d")) and changed["d"][1].next_hop == "b"


def test_zero_hysteresis_switches_only_to_a_strictly_cheaper_path() -> None:
    sel = RouteSelector("s", hysteresis=0.0)
    sel.update(two_ways(100, 120))
    assert sel.update(two_ways(100, 100)) == {} and sel.routes["d"].next_hop == "a"
    sel.update(two_ways(100, 99))
    assert sel.routes["d"].next_hop == "b"


def test_a_next_hop_without_a_path_any_more_forces_a_switch() -> None:
    graph = {"s": {"a": 1, "b": 1}, "a": {"d": 9}, "b": {"d": 9.5}}
    sel = RouteSelector("s", hysteresis=0.1)
    sel.update(graph)
    assert sel.routes["d"].path == ("s", "a", "d")
    graph["a"]["d"] = INF         # best is now via b (10.5), only 5% off the old path's cost
    changed = sel.update(graph)
    assert sel.routes["d"] == Route("b", 10.5, ("s", "b", "d")) and set(changed) == {"d"}


def test_a_broken_path_through_a_next_hop_that_has_another_is_kept_within_the_margin() -> None:
    graph = {"s": {"a": 5, "b": 5}, "a": {"d": 5, "c": 1}, "b": {"d": 6}, "c": {"d": 5}}
    sel = RouteSelector("s", hysteresis=0.1)
    sel.update(graph)
    graph["a"]["d"] = INF         # via a is now s-a-c-d (11), via b 11: a tie, a is kept
    sel.update(graph)
    assert sel.routes["d"] == Route("a", 11, ("s", "a", "c", "d"))


def test_hysteresis_never_keeps_a_next_hop_that_is_not_closer_than_we_are() -> None:
    # cgl3 learned england via cgl1 first (its direct link not yet measured); then the direct link costs 50
    # while cgl1 is 52 from england: keeping cgl1 (within 10% of 50) could loop, since cgl1 may route
    # england via cgl3 (2 + 50 = 52, a tie with its direct link, cgl3 first in natural order)
    sel = RouteSelector("cgl3", hysteresis=0.1)
    sel.update({"cgl3": {"cgl1": 2}, "cgl1": {"cgl3": 2, "england": 52}, "england": {"cgl1": 52}})
    assert sel.routes["england"].next_hop == "cgl1"
    sel.update({"cgl3": {"cgl1": 2, "england": 50}, "cgl1": {"cgl3": 2, "england": 52},
                "england": {"cgl1": 52, "cgl3": 50}})
    assert sel.routes["england"] == Route("england", 50, ("cgl3", "england"))


def test_next_hops_in_use_never_loop_whatever_each_node_saw_before() -> None:
    import random
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(1, 9)]
    links = {(a, b) for a in nodes for b in nodes if a < b and rng.random() < 0.45}
    links |= {(nodes[i], nodes[i + 1]) for i in range(len(nodes) - 1)}     # connected
    sels = {n: RouteSelector(n, hysteresis=0.3) for n in nodes}
    cost = {link: rng.uniform(1, 20) for link in links}
    for step in range(300):
        for link in rng.sample(sorted(links), 3):         # a few links move a lot every step
            cost[link] = max(1.0, cost[link] * rng.uniform(0.5, 1.8))
        graph: dict[str, dict[str, float]] = {}
        for (a, b), c in cost.items():
            graph.setdefault(a, {})[b] = round(c)
            graph.setdefault(b, {})[a] = round(c)
        for n in rng.sample(nodes, len(nodes)):          # every node sees the same map (flooding done)
            sels[n].update(graph)
        for src in nodes:
            for dst in nodes:
                at, seen = src, {src}
                while at != dst:
                    at = sels[at].routes[dst].next_hop
                    assert at not in seen, f"step {step}: loop from {src} to {dst} at {at}"
                    seen.add(at)


def test_unreachable_destination_keeps_its_next_hop_at_infinite_cost() -> None:
    graph = {"s": {"a": 1}, "a": {"d": 1}}
    sel = RouteSelector("s", hysteresis=0.1)
    sel.update(graph)
    graph["a"]["d"] = INF
    changed = sel.update(graph)
    assert set(changed) == {"d"}
    assert sel.routes["d"] == Route("a", INF, ("s", "a", "d"))
    assert sel.routes["a"] == Route("a", 1, ("s", "a"))
    assert sel.update(graph) == {}                  # no news while it stays unreachable
    assert sel.update({}) == {"a": (Route("a", 1, ("s", "a")), Route("a", INF, ("s", "a")))}
    changed = sel.update({"s": {"b": 1}, "b": {"d": 3}})     # reachable again, another way
    assert sel.routes["d"] == Route("b", 4, ("s", "b", "d")) and "d" in changed


B3_SIDE = {"b1": {"b3": 1}, "b3": {"b1": 1, "b21": 1}, "b21": {"b3": 1, "b20": 1}, "b20": {"b21": 1}}
BOTH_SIDES = {(1, 2): 1, (2, 10): 1, (10, 20): 1, (1, 3): 1, (3, 21): 1, (21, 20): 1}


def ring(n1_n2: float) -> dict[str, dict[str, float]]:
    """A ring of four 10 ms links (drill-flap's before its n4-n1 link became 25 ms); n1 reaches n3 for 20 both
    ways while n1-n2 is 10."""
    edges = {("n1", "n2"): n1_n2, ("n2", "n3"): 10, ("n3", "n4"): 10, ("n4", "n1"): 10}
    graph: dict[str, dict[str, float]] = {}
    for (a, b), cost in edges.items():
        graph.setdefault(a, {})[b] = cost
        graph.setdefault(b, {})[a] = cost
    return graph


def test_an_exact_tie_keeps_the_current_next_hop() -> None:
    sel = RouteSelector("b1", hysteresis=0.1)
    sel.update(B3_SIDE)                                 # b20 via b3 is the only path
    assert sel.update(undirected(BOTH_SIDES)).get("b20") is None       # via b2 ties: no gain, no move
    assert sel.routes["b20"] == Route("b3", 3, ("b1", "b3", "b21", "b20"))
    # the equal ring: n1-n2 goes to 40 (n1 moves to n4) and comes back: the tie does not move n1 back to n2
    sel = RouteSelector("n1", hysteresis=0.1)
    sel.update(ring(10))
    assert sel.routes["n3"].next_hop == "n2"            # chosen afresh: the natural-order first hop
    sel.update(ring(40))
    assert sel.routes["n3"] == Route("n4", 20, ("n1", "n4", "n3"))
    assert "n3" not in sel.update(ring(10))
    assert sel.routes["n3"] == Route("n4", 20, ("n1", "n4", "n3"))


def test_ties_go_by_natural_order_in_the_start_up_settle_window() -> None:
    settle = 5.0
    sel = RouteSelector("b1", hysteresis=0.1, settle=settle)
    sel.update(B3_SIDE, now=0.0)
    sel.update(undirected(BOTH_SIDES), now=2.0)         # b2's side is new: the window runs to 7.0
    assert (sel.routes["b20"].next_hop, sel.routes["b20"].cost) == ("b2", 3)
    sel = RouteSelector("n1", hysteresis=0.1, settle=settle)
    sel.update(ring(10), now=0.0)
    sel.update(ring(40), now=1.0)
    sel.update(ring(10), now=settle)                    # the window's last instant: natural order
    assert sel.routes["n3"].next_hop == "n2"
    sel.update(ring(40), now=settle + 1)
    sel.update(ring(10), now=settle + 2)                # settled: the tie keeps n4
    assert sel.routes["n3"].next_hop == "n4"
    with_n5 = {**ring(10), "n5": {"n1": 10}}
    with_n5["n1"] = {**with_n5["n1"], "n5": 10}
    sel.update(with_n5, now=100.0)                      # a link never seen before opens the window again
    assert sel.routes["n3"].next_hop == "n2"


def test_damping_charges_flaps_not_every_cost_change() -> None:
    # RFC 2439 charges per flap; a monitored link reaches a new level in several published steps
    d = FlapDamper(DampingConfig(half_life=1e9))        # no decay: the penalty counts the charges
    for t, cost in enumerate([10, 15, 20, 25, 30, 40]):     # five steps up: one move
        d.observe(L, cost, now=t)
    assert d.penalty(L, 6) == 0
    for t, cost in enumerate([30, 20, 10], start=6):    # back down: one reversal, one charge
        d.observe(L, cost, now=t)
    assert d.penalty(L, 9) == pytest.approx(1000) and not d.suppressed(L, 9)
    d.observe(L, INF, now=10)                           # withdrawn: a flap
    d.observe(L, 10, now=11)                            # back: a flap
    assert d.penalty(L, 11) == pytest.approx(3000) and d.suppressed(L, 11)
