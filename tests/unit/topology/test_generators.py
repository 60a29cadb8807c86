from collections import Counter, deque

import pytest

from testbed.scenario import load_text
from testbed.topology import generators as g
from testbed.topology.model import Direction, Topology


def degrees(t: Topology) -> Counter:
    c = Counter({n: 0 for n in t.node_names()})
    for l in t.links:
        c[l.a] += 1
        c[l.b] += 1
    return c


def connected(t: Topology) -> bool:
    names = t.node_names()
    seen, q = {names[0]}, deque([names[0]])
    while q:
        for v in t.neighbours(q.popleft()):
            if v not in seen:
                seen.add(v)
                q.append(v)
    return len(seen) == len(names)


def check_names(t: Topology) -> None:
    names = t.node_names()
    assert len(set(names)) == len(names)
    assert all(1 <= len(n) <= 10 and all(c.isalnum() or c in "_-" for c in n) for n in names)
    assert len({frozenset(l.ends()) for l in t.links}) == len(t.links)      # no parallel links
    assert all(l.a != l.b for l in t.links)


def test_star_and_lan():
    t = g.star(5)
    check_names(t)
    assert len(t.nodes) == 6 and len(t.links) == 5 and degrees(t)["hub"] == 5
    lan = g.star(5, lan=True)
    assert len(lan.nodes) == 5 and not lan.links and lan.lans[0].members == ["n1", "n2", "n3", "n4", "n5"]
    assert sorted(lan.neighbours("n1")) == ["n2", "n3", "n4", "n5"]


@pytest.mark.parametrize("n", [3, 4, 20])
def test_ring(n):
    t = g.ring(n)
    check_names(t)
    assert len(t.nodes) == n and len(t.links) == n
    assert set(degrees(t).values()) == {2} and connected(t)
    order = g.ring(nodes=["x", "y", "z", "w"])
    assert [l.name for l in order.links] == ["x-y", "y-z", "z-w", "w-x"]


def test_linear():
    t = g.linear(5)
    check_names(t)
    d = degrees(t)
    assert len(t.links) == 4 and d["n1"] == 1 and d["n5"] == 1 and all(d[f"n{i}"] == 2 for i in (2, 3, 4))


def test_grid():
    t = g.grid(3, 4)
    check_names(t)
    d = degrees(t)
    assert len(t.nodes) == 12 and len(t.links) == 3 * 3 + 2 * 4
    assert Counter(d.values()) == {2: 4, 3: 6, 4: 2}       # corners, edges, inner


@pytest.mark.parametrize("depth,fanout", [(1, 3), (2, 2), (3, 3)])
def test_tree(depth, fanout):
    t = g.tree(depth, fanout)
    check_names(t)
    n = sum(fanout ** i for i in range(depth + 1))
    assert len(t.nodes) == n and len(t.links) == n - 1 and connected(t)


@pytest.mark.parametrize("inter", ["mesh", "ring"])
def test_clusters(inter):
    k, n, gw = 4, 3, 2
    t = g.clusters(k, n, gw, inter)
    check_names(t)
    assert len(t.nodes) == k * (n + gw) and connected(t)
    intra = k * (gw * (gw - 1) // 2 + n * gw)
    between = gw * (k * (k - 1) // 2 if inter == "mesh" else k)
    assert len(t.links) == intra + between
    d = degrees(t)
    assert all(d[f"c{i}n{j}"] == gw for i in range(1, k + 1) for j in range(1, n + 1))


def test_cdnnet15():
    t = g.cdnnet15()
    check_names(t)
    assert len(t.nodes) == 15 and len(t.links) == 29 and connected(t) and min(degrees(t).values()) >= 2
    assert {n.attrs["region"] for n in t.nodes} == {"west", "prairies", "ontario", "quebec", "atlantic"}
    assert all(n.attrs["city"] for n in t.nodes)


def test_intercontinental6_delays():
    t = g.intercontinental6(Direction(rate=1e6))
    check_names(t)
    assert sorted(t.node_names()) == ["cgl1", "cgl2", "cgl3", "england", "korea", "sandiego"]
    table8 = {("cgl1", "korea"): 102, ("cgl1", "cgl3"): 1.2, ("cgl1", "england"): 52, ("cgl2", "korea"): 99,
              ("cgl2", "sandiego"): 30, ("cgl3", "sandiego"): 29, ("cgl3", "england"): 50}
    assert len(t.links) == 7
    for (a, b), cost_ms in table8.items():
        link = t.link(a, b)
        # Table 8 costs read as one-way latencies (see the generator's comment), in seconds
        assert link.a_to_b.delay == pytest.approx(cost_ms / 1000) and link.b_to_a.delay == pytest.approx(cost_ms / 1000)
        assert link.a_to_b.rate == 1e6


def test_from_scenario_applies_defaults_and_overrides():
    s = load_text("""
name: t
topology: {generator: ring, params: {n: 4}}
link_defaults: {delay: 10ms, rate: 1Mbit}
links:
  - {a: n2, b: n1, a_to_b: {delay: 30ms}}
""")
    t = g.from_scenario(s)
    l12 = t.link("n1", "n2")
    assert (l12.a, l12.b) == ("n1", "n2")
    assert l12.b_to_a.delay == 0.03 and l12.a_to_b.delay == 0.01     # override was written n2 -> n1
    assert t.link("n3", "n4").a_to_b.delay == 0.01 and t.link("n3", "n4").a_to_b.rate == 1e6


def test_deterministic():
    assert g.cdnnet15() == g.cdnnet15() and g.clusters(3, 2, 2, "ring") == g.clusters(3, 2, 2, "ring")


def test_param_errors():
    with pytest.raises(g.ParamError) as e:
        g.generate("grid", {"rows": 30, "cols": 30}, [], [], Direction(), "x")
    assert e.value.param == "rows" and "at most" in str(e.value)
    with pytest.raises(g.ParamError):
        g.generate("nope", {}, [], [], Direction(), "x")
