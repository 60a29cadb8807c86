import ipaddress

import pytest

from node.errors import UserError
from testbed.topology import addressing, generators as g
from testbed.topology.model import AddressPlan, Topology

TOPOLOGIES = [g.linear(5), g.ring(7), g.star(4), g.star(4, lan=True), g.grid(3, 3), g.tree(2, 3),
              g.clusters(3, 2, 2, "ring"), g.cdnnet15(), g.intercontinental6()]


def forward(plan: AddressPlan, src: str, dst_ip: str) -> list[str]:
    """Follow the kernel routes hop by hop (longest prefix match) until a host owns dst_ip."""
    owner = {}
    for n, ifs in plan.interfaces.items():
        for i in ifs:
            owner[i.address.split("/")[0]] = n
    for n, a in plan.loopback.items():
        owner[a] = n
    path, here = [src], src
    target = ipaddress.ip_address(dst_ip)
    for _ in range(64):
        if owner.get(dst_ip) == here:
            return path
        # directly connected subnets first, then routes; longest prefix wins
        cands = []
        for i in plan.interfaces[here]:
            if i.link != "mgmt" and target in ipaddress.ip_interface(i.address).network:
                cands.append((ipaddress.ip_interface(i.address).network.prefixlen, dst_ip, i.ifname))
        for r in plan.routes[here]:
            if target in ipaddress.ip_network(r.destination):
                cands.append((ipaddress.ip_network(r.destination).prefixlen, r.via, r.dev))
        assert cands, f"{here} has no route to {dst_ip}"
        _, via, dev = max(cands, key=lambda c: c[0])
        iface = next(i for i in plan.interfaces[here] if i.ifname == dev)
        assert ipaddress.ip_address(via) in ipaddress.ip_interface(iface.address).network, "gateway not on dev"
        here = owner[via]
        path.append(here)
    raise AssertionError(f"forwarding loop from {src} to {dst_ip}: {path}")


@pytest.mark.parametrize("topo", TOPOLOGIES, ids=lambda t: t.name + str(len(t.nodes)))
def test_plan(topo: Topology):
    plan = addressing.plan(topo)
    addrs = [i.address.split("/")[0] for ifs in plan.interfaces.values() for i in ifs] + list(plan.loopback.values())
    assert len(addrs) == len(set(addrs))
    assert "10.201.0.1" not in addrs                        # the management bridge's address
    for n in topo.node_names():
        names = [i.ifname for i in plan.interfaces[n]]
        assert names == [f"eth{k}" for k in range(len(names))] and plan.interfaces[n][0].link == "mgmt"
        assert ipaddress.ip_address(plan.loopback[n]) in ipaddress.ip_network("10.202.0.0/16")
    for link in topo.links:
        ends = [i for n in link.ends() for i in plan.interfaces[n] if i.link == link.name]
        assert len(ends) == 2
        nets = {ipaddress.ip_interface(i.address).network for i in ends}
        assert len(nets) == 1 and next(iter(nets)).prefixlen == 30
    for lan in topo.lans:
        ends = [i for n in lan.members for i in plan.interfaces[n] if i.link == lan.name]
        assert len({ipaddress.ip_interface(i.address).network for i in ends}) == 1 and len(ends) == len(lan.members)
    for src in topo.node_names():
        for dst in topo.node_names():
            path = forward(plan, src, plan.loopback[dst])
            assert path[-1] == dst
        # every data address is reachable too (routes to non-attached subnets)
        for dst in topo.node_names():
            for i in plan.interfaces[dst][1:]:
                assert forward(plan, src, i.address.split("/")[0])[-1] == dst


def test_shortest_paths_by_hops():
    plan = addressing.plan(g.ring(8))
    assert len(forward(plan, "n1", plan.loopback["n5"])) - 1 == 4
    assert len(forward(plan, "n1", plan.loopback["n8"])) - 1 == 1


def test_deterministic():
    assert addressing.plan(g.cdnnet15()) == addressing.plan(g.cdnnet15())


def test_pool_errors():
    with pytest.raises(UserError, match="overlaps"):
        addressing.plan(g.linear(3), "10.0.0.0/8", "10.202.0.0/16", "10.201.0.0/16")
    with pytest.raises(UserError, match="not an IPv4 network"):
        addressing.plan(g.linear(3), "bogus")
    with pytest.raises(UserError, match="too small"):
        addressing.plan(g.linear(5), "10.200.0.0/29")
