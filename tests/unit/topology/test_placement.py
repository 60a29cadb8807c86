"""Placement over machines (testbed/placement.py): the cut it weighs, the balance it keeps, the explicit
placement it honours, and one error for each impossible placement."""
import pytest

from testbed import placement as P
from testbed.topology import generators
from testbed.topology.model import Direction

MBIT = 1e6


def _limited(topo, rate: float = MBIT):
    for link in topo.links:
        link.a_to_b.rate = link.b_to_a.rate = rate
    return topo


def test_cut_weight_sums_the_links_between_machines() -> None:
    topo = _limited(generators.linear(4))                      # n1-n2-n3-n4
    topo.link("n2", "n3").a_to_b.rate = 5 * MBIT               # the faster direction counts
    g = P.graph_of(topo, topo.node_names())
    assert P.cut_weight(g, {"n1": "a", "n2": "a", "n3": "b", "n4": "b"}) == 5 * MBIT
    assert P.cut_weight(g, {"n1": "a", "n2": "b", "n3": "a", "n4": "b"}) == 7 * MBIT
    assert P.cut_weight(g, dict.fromkeys(topo.node_names(), "a")) == 0


def test_auto_cuts_the_slow_link_between_two_fast_clusters() -> None:
    left, right = ["a1", "a2", "a3", "a4"], ["b1", "b2", "b3", "b4"]
    edges = [(x, y) for side in (left, right) for i, x in enumerate(side) for y in side[i + 1:]]
    topo = generators.explicit(left + right, edges + [("a4", "b1")], Direction(rate=100 * MBIT))
    topo.link("a4", "b1").a_to_b.rate = topo.link("a4", "b1").b_to_a.rate = MBIT
    g = P.graph_of(topo, topo.node_names())
    placed = P.place(g, {"m1": 2, "m2": 2})
    assert P.cut_weight(g, placed) == MBIT
    assert {placed[h] for h in left} != {placed[h] for h in right}
    assert len({placed[h] for h in left}) == 1 and len({placed[h] for h in right}) == 1


@pytest.mark.parametrize("rows, cols, cut", [(4, 4, 4), (10, 10, 10), (6, 8, 6), (6, 9, 7), (15, 20, 15)])
def test_a_grid_splits_in_halves_across_its_short_side(rows: int, cols: int, cut: int) -> None:
    topo = _limited(generators.grid(rows, cols))
    g = P.graph_of(topo, topo.node_names())
    placed = P.place(g, {"m1": 2, "m2": 2})
    assert P.machine_loads(g, placed, {"m1": 2, "m2": 2}) == {"m1": rows * cols / 2, "m2": rows * cols / 2}
    assert P.cut_weight(g, placed) == cut * MBIT


def test_balance_follows_the_cores_and_counts_routers_as_a_tenth() -> None:
    topo = _limited(generators.ring(12))
    g = P.graph_of(topo, topo.node_names())
    machines = {"small": 1, "big": 2}
    placed = P.place(g, machines)
    assert P.machine_loads(g, placed, machines) == {"small": 4.0, "big": 8.0} == P.targets(g, machines)
    assert P.cut_weight(g, placed) == 2 * MBIT                 # a ring is cut twice, no more
    routers = P.graph_of(topo, [n for n in topo.node_names() if n not in ("n1", "n2")])
    assert routers.loads["n1"] == P.ROUTER_LOAD and routers.loads["n3"] == P.DAEMON_LOAD
    loads = P.machine_loads(routers, P.place(routers, machines), machines)
    target = P.targets(routers, machines)
    assert all(abs(loads[m] - target[m]) <= 0.5 for m in machines), (loads, target)


def test_an_unlimited_link_weighs_as_the_fastest_one() -> None:
    topo = _limited(generators.linear(3))
    topo.link("n1", "n2").a_to_b.rate = 8 * MBIT
    topo.link("n2", "n3").a_to_b.rate = topo.link("n2", "n3").b_to_a.rate = None
    g = P.graph_of(topo, topo.node_names())
    assert g.edges == {("n1", "n2"): 8 * MBIT, ("n2", "n3"): 8 * MBIT}


def test_an_explicit_placement_is_honoured_even_when_auto_would_cut_less() -> None:
    topo = _limited(generators.linear(4))
    g = P.graph_of(topo, topo.node_names())
    explicit = {"n1": "m1", "n2": "m2", "n3": "m1", "n4": "m2"}
    assert P.place(g, {"m1": 1, "m2": 1}, explicit) == explicit
    assert P.cut_weight(g, explicit) == 3 * MBIT > P.cut_weight(g, P.place(g, {"m1": 1, "m2": 1}))


@pytest.mark.parametrize("machines, explicit, expected", [
    ({}, None, "a placement needs at least one machine."),
    ({"m1": 0, "m2": 1}, None, "machine m1 needs a whole number of cores of at least 1, got 0."),
    ({"m1": 1, "m2": 1}, {"n1": "m1", "n2": "m1", "n3": "m2", "n9": "m2"},
     "the placement names host n9, which the topology does not have."),
    ({"m1": 1, "m2": 1}, {"n1": "m1", "n2": "m1", "n3": "m3"},
     "host n3 is placed on machine m3, which is not one of the machines (m1, m2)."),
    ({"m1": 1, "m2": 1}, {"n1": "m1", "n2": "m1"}, "the placement leaves 1 host(s) unplaced: n3."),
])
def test_every_impossible_placement_is_one_error(machines, explicit, expected: str) -> None:
    topo = _limited(generators.linear(3))
    with pytest.raises(P.PlacementError) as e:
        P.place(P.graph_of(topo, topo.node_names()), machines, explicit)
    assert str(e.value) == expected
