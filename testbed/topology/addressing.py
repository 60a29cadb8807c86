"""The address plan: interfaces, addresses and kernel routes for a Topology.

- every point-to-point link gets its own /30 from the data pool (end a = first
  host address, end b = second); every LAN one subnet just large enough;
- interfaces inside a host are eth1, eth2, ... in topology order (links first,
  then LANs); eth0 is the management interface, its address taken from the
  management pool after the pool's first host address, which belongs to the
  management bridge in the root namespace;
- every host has a stable /32 loopback from the loopback pool (put on `lo`);
- kernel routes: shortest paths by hop count over the data segments (ties go
  to the neighbour reached first in BFS order, i.e. topology order), to every
  other host's loopback and to every segment subnet the host is not on.
"""
from __future__ import annotations

import ipaddress
from collections import deque

from node.errors import UserError
from testbed.topology.model import AddressPlan, Interface, Route, Topology

Net = ipaddress.IPv4Network


def _pool(text: str, label: str) -> Net:
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise UserError(f"the {label} pool {text!r} is not an IPv4 network like \"10.200.0.0/16\".") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise UserError(f"the {label} pool {text!r} must be IPv4.")
    return net


class _Allocator:
    """Aligned blocks from a pool, in order."""

    def __init__(self, pool: Net, label: str) -> None:
        self.pool, self.label, self.cursor = pool, label, int(pool.network_address)

    def take(self, prefix: int) -> Net:
        size = 1 << (32 - prefix)
        start = (self.cursor + size - 1) // size * size
        if start + size > int(self.pool.broadcast_address) + 1:
            raise UserError(f"the {self.label} pool {self.pool} is too small for this topology.")
        self.cursor = start + size
        return ipaddress.ip_network(f"{ipaddress.ip_address(start)}/{prefix}")


def plan(topology: Topology, data_pool: str = "10.200.0.0/16", loopback_pool: str = "10.202.0.0/16",
         mgmt_pool: str = "10.201.0.0/16") -> AddressPlan:
    pools = {"data": _pool(data_pool, "data"), "loopback": _pool(loopback_pool, "loopback"),
             "management": _pool(mgmt_pool, "management")}
    labels = list(pools)
    for i, x in enumerate(labels):
        for y in labels[i + 1:]:
            if pools[x].overlaps(pools[y]):
                raise UserError(f"the {x} pool {pools[x]} overlaps the {y} pool {pools[y]}; pools must be disjoint.")
    names = topology.node_names()
    mgmt = pools["management"]
    if mgmt.num_addresses - 3 < len(names):
        raise UserError(f"the management pool {mgmt} is too small for {len(names)} hosts.")
    if pools["loopback"].num_addresses - 2 < len(names):
        raise UserError(f"the loopback pool {pools['loopback']} is too small for {len(names)} hosts.")

    result = AddressPlan(mgmt_subnet=str(mgmt))
    mgmt_hosts = mgmt.hosts()
    next(mgmt_hosts)                       # the management bridge's own address
    loop_hosts = pools["loopback"].hosts()
    for n in names:
        addr = str(next(mgmt_hosts))
        result.mgmt_address[n] = addr
        result.interfaces[n] = [Interface(n, "eth0", f"{addr}/{mgmt.prefixlen}", "mgmt")]
        result.loopback[n] = str(next(loop_hosts))

    # segments: (name, members, subnet); an address per member
    alloc = _Allocator(pools["data"], "data")
    segments: list[tuple[str, list[str], Net]] = []
    for link in topology.links:
        segments.append((link.name, [link.a, link.b], alloc.take(30)))
    for lan in topology.lans:
        prefix = 30
        while (1 << (32 - prefix)) - 2 < len(lan.members):
            prefix -= 1
        segments.append((lan.name, list(lan.members), alloc.take(prefix)))
    address: dict[tuple[str, str], tuple[str, str]] = {}     # (node, segment) -> (ifname, ip)
    for seg, members, net in segments:
        for member, ip in zip(members, net.hosts()):
            ifname = f"eth{len(result.interfaces[member])}"
            result.interfaces[member].append(Interface(member, ifname, f"{ip}/{net.prefixlen}", seg))
            address[(member, seg)] = (ifname, str(ip))

    adjacency: dict[str, list[tuple[str, str]]] = {n: [] for n in names}
    for seg, members, _ in segments:
        for u in members:
            adjacency[u] += [(v, seg) for v in members if v != u]

    order = {n: i for i, n in enumerate(names)}
    loop_cidr = {n: f"{result.loopback[n]}/32" for n in names}
    segment_cidr = [(seg, members, str(net)) for seg, members, net in segments]
    for src in names:
        first_hop: dict[str, tuple[str, str]] = {}    # destination -> (neighbour, segment)
        hops = {src: 0}
        queue = deque([src])
        while queue:
            u = queue.popleft()
            for v, seg in adjacency[u]:
                if v not in hops:
                    hops[v] = hops[u] + 1
                    first_hop[v] = (v, seg) if u == src else first_hop[u]
                    queue.append(v)

        def route(destination: str, towards: str) -> Route:
            nbr, seg = first_hop[towards]
            return Route(destination, address[(nbr, seg)][1], address[(src, seg)][0])

        routes = [route(loop_cidr[dst], dst) for dst in names if dst in first_hop]
        for seg, members, net_text in segment_cidr:
            if src in members:
                continue
            nearest = min((m for m in members if m in first_hop), default=None,
                          key=lambda m: (hops[m], order[m]))
            if nearest is not None:
                routes.append(route(net_text, nearest))
        result.routes[src] = routes
    return result

