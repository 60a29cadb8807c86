import pytest

from node.errors import UserError
from testbed.topology import generators as g, routing


def test_unidirectional_ring_goes_one_way():
    t = g.ring(6)
    table = routing.next_hops(t, "unidirectional")
    names = t.node_names()
    for i, src in enumerate(names):
        assert set(table[src]) == set(names) - {src}
        assert set(table[src].values()) == {names[(i + 1) % 6]}
        for j, dst in enumerate(names):
            if src != dst:
                assert routing.route_length(table, src, dst) == (j - i) % 6
    assert routing.max_route_length(table) == 5


def test_unidirectional_needs_ring():
    with pytest.raises(UserError, match="needs a ring"):
        routing.next_hops(g.linear(4), "unidirectional")


def test_shortest_tie_break_per_seed():
    t = g.ring(6)    # n1 -> n4 is three hops either way: a tie
    tables = {seed: routing.next_hops(t, "shortest", seed) for seed in range(20)}
    assert routing.next_hops(t, "shortest", 5) == tables[5]
    choices = {tables[s]["n1"]["n4"] for s in tables}
    assert choices == {"n2", "n6"}
    for table in tables.values():
        assert routing.max_route_length(table) == 3
        assert table["n1"]["n2"] == "n2" and table["n1"]["n3"] == "n2"     # no tie: the short way


def test_shortest_on_grid_and_linear():
    assert routing.max_route_length(routing.next_hops(g.grid(3, 4))) == 5
    assert routing.max_route_length(routing.next_hops(g.linear(7))) == 6
    lan = g.star(4, lan=True)
    assert routing.max_route_length(routing.next_hops(lan)) == 1


def test_delay_policy_intercontinental():
    t = g.intercontinental6()
    table = routing.next_hops(t, "delay")
    # one-way delays = Table 8 costs: england-cgl3 50 + cgl3-cgl1 1.2 = 51.2 < england-cgl1 52
    assert table["england"]["cgl1"] == "cgl3"
    assert table["england"]["korea"] == "cgl3"            # 50 + 1.2 + 102 = 153.2 < 52 + 102 = 154
    assert table["sandiego"]["korea"] == "cgl2"           # 30 + 99 = 129 < 29 + 1.2 + 102 = 132.2
    assert table["korea"]["england"] == "cgl1"            # 102 + 52 = 154 < 99 + 30 + 29 + 50 = 208
    assert routing.max_route_length(table) >= 2


def test_unknown_policy_and_bad_table():
    with pytest.raises(UserError, match="unknown routing policy"):
        routing.next_hops(g.ring(3), "fastest")
    with pytest.raises(UserError, match="loops"):
        routing.route_length({"a": {"c": "b"}, "b": {"c": "a"}, "c": {}}, "a", "c")
    with pytest.raises(UserError, match="no route"):
        routing.route_length({"a": {}}, "a", "b")


def test_cdnnet15_diameter():
    assert routing.max_route_length(routing.next_hops(g.cdnnet15())) == 3


def test_max_route_length_matches_route_length():
    for t in (g.cdnnet15(), g.grid(3, 5), g.tree(3, 2), g.clusters(3, 2, 2)):
        table = routing.next_hops(t, "shortest", 3)
        brute = max(routing.route_length(table, s, d) for s in table for d in table[s])
        assert routing.max_route_length(table) == brute
    with pytest.raises(UserError, match="loops"):
        routing.max_route_length({"a": {"c": "b"}, "b": {"c": "a"}, "c": {}})
