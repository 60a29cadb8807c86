"""The MTA overlay: daemon-less hosts contracted, listed MTA neighbours, routes over the overlay."""
import pytest

from testbed.scenario.spec import NodesSpec
from testbed.topology import generators as g, overlay, routing
from testbed.topology.model import Direction, Link, Node, Topology

ALL_GENERATED = [g.linear(5), g.ring(7), g.star(4), g.star(4, lan=True), g.grid(3, 3), g.tree(2, 3),
                 g.clusters(3, 2, 2, "ring"), g.cdnnet15(), g.intercontinental6()]


def nodes(**per_node: dict) -> NodesSpec:
    return NodesSpec(per_node=dict(per_node))


def chain(*names: str, delay: float = 0.0) -> Topology:
    links = [Link(a, b, Direction(delay=delay), Direction(delay=delay)) for a, b in zip(names, names[1:])]
    return Topology("chain", [Node(n) for n in names], links)


@pytest.mark.parametrize("topo", ALL_GENERATED, ids=lambda t: t.name)
def test_without_daemonless_hosts_the_overlay_is_the_topology(topo: Topology) -> None:
    assert overlay.mta_topology(topo, NodesSpec(all={"mode": "fragmenting"})) is topo
    # and contraction with every host a daemon is plain adjacency
    names = topo.node_names()
    contracted = overlay.contracted_neighbours(topo, names)
    assert {u: set(vs) for u, vs in contracted.items()} == {u: set(topo.neighbours(u)) for u in names}


def test_router_in_the_middle_is_contracted() -> None:
    topo = chain("n1", "r", "n2", delay=0.01)
    spec = nodes(r={"daemon": False})
    assert overlay.daemon_hosts(spec, topo.node_names()) == ["n1", "n2"]
    mta = overlay.mta_topology(topo, spec)
    assert mta.node_names() == ["n1", "n2"]
    assert mta.neighbours("n1") == ["n2"] and mta.neighbours("n2") == ["n1"]
    assert mta.links[0].a_to_b.delay == pytest.approx(0.02)       # both physical hops
    assert routing.next_hops(mta) == {"n1": {"n2": "n2"}, "n2": {"n1": "n1"}}


def test_daemon_hosts_end_a_contracted_path() -> None:
    # n1 - r1 - n2 - r2 - r3 - n3: n1 and n3 are not MTA neighbours (n2 is in the way)
    topo = chain("n1", "r1", "n2", "r2", "r3", "n3")
    spec = nodes(r1={"daemon": False}, r2={"daemon": False}, r3={"daemon": False})
    graph = overlay.mta_neighbours(topo, overlay.daemon_hosts(spec, topo.node_names()))
    assert graph == {"n1": ["n2"], "n2": ["n1", "n3"], "n3": ["n2"]}
    table = routing.next_hops(overlay.mta_topology(topo, spec))
    assert table["n1"]["n3"] == "n2" and routing.max_route_length(table) == 2


def test_all_off_but_some_re_enabled() -> None:
    topo = g.star(3)                  # hub + n1..n3
    spec = NodesSpec(all={"daemon": False}, per_node={f"n{i}": {"daemon": True} for i in (1, 2, 3)})
    mta = overlay.mta_topology(topo, spec)
    assert mta.node_names() == ["n1", "n2", "n3"]
    assert {u: sorted(mta.neighbours(u)) for u in mta.node_names()} == {
        "n1": ["n2", "n3"], "n2": ["n1", "n3"], "n3": ["n1", "n2"]}


def test_lan_of_routers() -> None:
    topo = g.star(4, lan=True)        # n1..n4 on one segment
    spec = nodes(n2={"daemon": False})
    mta = overlay.mta_topology(topo, spec)
    assert set(mta.node_names()) == {"n1", "n3", "n4"}
    assert set(mta.neighbours("n1")) == {"n3", "n4"}


def test_listed_neighbours_are_symmetric_and_replace_contraction() -> None:
    topo = chain("n1", "n2", "n3", "n4", "n5")
    spec = nodes(n1={"mta_neighbours": ["n5"]})
    graph = overlay.mta_neighbours(topo, topo.node_names(), overlay.listed_neighbours(spec))
    assert graph["n1"] == ["n5"]                  # only what it lists
    assert graph["n5"] == ["n1", "n4"]            # made symmetric; keeps its contracted n4
    assert graph["n2"] == ["n3"]                  # lost n1, which lists its own
    assert all(u in graph[v] for u in graph for v in graph[u])
    mta = overlay.mta_topology(topo, spec)
    table = routing.next_hops(mta)
    assert table["n1"] == {"n5": "n5", "n4": "n5", "n3": "n5", "n2": "n5"}


def test_listed_neighbour_weighs_the_physical_path_for_delay_routing() -> None:
    topo = chain("a", "b", "c", delay=0.05)
    spec = nodes(a={"mta_neighbours": ["c", "b"]})
    mta = overlay.mta_topology(topo, spec)
    ac = [l for l in mta.links if {l.a, l.b} == {"a", "c"}][0]
    assert ac.a_to_b.delay == pytest.approx(0.1) and ac.b_to_a.delay == pytest.approx(0.1)
    assert routing.next_hops(mta, "delay")["a"]["c"] == "c"       # a tie on delay: fewer MTA hops wins


def test_delay_policy_over_contracted_paths() -> None:
    # n1 reaches n3 through router r (2 x 10 ms) or through daemon n2 (2 x 100 ms)
    topo = Topology("tri", [Node("n1"), Node("n2"), Node("n3"), Node("r")], [
        Link("n1", "n2", Direction(delay=0.1), Direction(delay=0.1)),
        Link("n2", "n3", Direction(delay=0.1), Direction(delay=0.1)),
        Link("n1", "r", Direction(delay=0.01), Direction(delay=0.01)),
        Link("r", "n3", Direction(delay=0.01), Direction(delay=0.01))])
    mta = overlay.mta_topology(topo, nodes(r={"daemon": False}))
    assert routing.next_hops(mta, "delay")["n1"]["n3"] == "n3"
    assert routing.next_hops(mta, "shortest")["n1"]["n3"] == "n3"


def test_first_unreachable() -> None:
    assert overlay.first_unreachable({"a": ["b"], "b": ["a"]}) is None
    assert overlay.first_unreachable({"a": ["b"], "b": ["a"], "c": []}) == ("a", "c")
    assert overlay.first_unreachable({}) is None


def test_testbed_keys_are_not_node_settings() -> None:
    assert overlay.without_testbed_keys({"daemon": True, "mta_neighbours": ["x"], "mode": "fragmenting"}) == {
        "mode": "fragmenting"}
