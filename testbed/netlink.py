"""Single netlink changes and queries at run time, through pyroute2: no `ip` process, no text parsing.

Every call names the network namespace it works in: a name under /run/netns, the pid of a
process inside it, or None for the machine's own namespace. The netlink socket is opened by
a short-lived thread that setns()es into the namespace (a socket stays in the namespace it was
made in), so opening one costs a thread instead of the fork pyroute2's `IPRoute(netns=...)` does.

Bulk set-up stays on `ip -batch` (testbed/network.py, testbed/runtime/netns.py): at 100 hosts
one `ip -n NS -batch` per host, in parallel, configures 3 addresses + 280 routes each in 0.6 s,
pyroute2 from this one Python process in 12.7 s (bench/bench_network.py, `--only netlink`).
A single change is faster here than starting `ip` (1.8 ms against 2.4 ms).
"""
from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyroute2 import IPRoute, NetlinkError
from pyroute2 import netns as pyroute2_netns

Netns = str | int | None        # a /run/netns name, a pid inside the namespace, or None (the machine's own)

IFF_UP = 0x1
RT_TABLE_MAIN = 254
RTPROT_KERNEL = 2
RTN_MULTICAST = 5
RTNH_F_ONLINK = 4
SCOPE_LINK = 253


@dataclass(frozen=True)
class Link:
    name: str
    index: int
    mtu: int
    up: bool                    # administratively up (IFF_UP), whatever the carrier says


@dataclass(frozen=True)
class Address:
    ifname: str
    family: int
    local: str
    prefixlen: int
    peer: str | None = None     # the other end of a point-to-point address
    scope: int = 0


@dataclass(frozen=True)
class Route:
    """A route of the main table as the kernel reports it; `ifname`s instead of indexes, so it can be
    added again in another namespace where the same interfaces have other indexes."""

    family: int
    dst: str | None             # None: the default route
    dst_len: int
    gateway: str | None = None
    ifname: str | None = None
    proto: int = 0
    scope: int = 0
    type: int = 1
    priority: int | None = None
    prefsrc: str | None = None
    onlink: bool = False
    multipath: tuple[tuple[str | None, str | None], ...] = ()     # (gateway, ifname) per next hop
    metrics: dict[str, int] = field(default_factory=dict, compare=False, hash=False)

    def __str__(self) -> str:
        dst = f"{self.dst}/{self.dst_len}" if self.dst else "default"
        return dst + (f" via {self.gateway}" if self.gateway else "") + (f" dev {self.ifname}" if self.ifname else "")


def _nsfd(ns: str | int) -> int:
    path = f"/proc/{ns}/ns/net" if isinstance(ns, int) else f"/run/netns/{ns}"
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise RuntimeError(f"no network namespace {ns!r} ({path} does not exist)") from None


def _socket_in(ns: str | int) -> int:
    """A NETLINK_ROUTE socket made inside `ns` by a thread that setns()es there and ends; returns its fd."""
    nsfd = _nsfd(ns)
    out: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            pyroute2_netns.setns(nsfd, flags=0)      # flags=0: never create a namespace that is not there
            out.append(socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE).detach())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    try:
        t = threading.Thread(target=work, name="netlink-setns")
        t.start()
        t.join()
    finally:
        os.close(nsfd)
    if errors:
        raise errors[0]
    return out[0]


# ifname -> ifindex per open session: a lookup is a netlink round trip, as costly as the change itself
_indexes: dict[int, dict[str, int]] = {}


@contextmanager
def session(ns: Netns = None) -> Iterator[IPRoute]:
    """An IPRoute bound to one namespace for several calls; use it from the thread that opened it."""
    # groups=0: a query socket must not subscribe to every link/address/route event of the namespace
    ipr = IPRoute(groups=0) if ns is None else IPRoute(fileno=_socket_in(ns), groups=0)
    _indexes[id(ipr)] = {}
    try:
        yield ipr
    finally:
        _indexes.pop(id(ipr), None)
        ipr.close()


def _index(ipr: IPRoute, ifname: str) -> int:
    cache = _indexes.get(id(ipr))
    if cache is not None and ifname in cache:
        return cache[ifname]
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise RuntimeError(f"no interface {ifname!r}")
    if cache is not None:
        cache[ifname] = found[0]
    return found[0]


def _forget(ipr: IPRoute, ifname: str) -> None:
    _indexes.get(id(ipr), {}).pop(ifname, None)


# ---- queries ---------------------------------------------------------------------------------

def links(ns: Netns = None, ipr: IPRoute | None = None) -> list[Link]:
    """Every interface of the namespace, `lo` included."""
    if ipr is None:
        with session(ns) as own:
            return links(ipr=own)
    out = [Link(m.get_attr("IFLA_IFNAME"), m["index"], m.get_attr("IFLA_MTU") or 0, bool(m["flags"] & IFF_UP))
           for m in ipr.link("dump")]
    if id(ipr) in _indexes:
        _indexes[id(ipr)] = {l.name: l.index for l in out}
    return out


def interface_names(prefix: str = "", ns: Netns = None) -> list[str]:
    """Names of the interfaces that start with `prefix` (all of them for "")."""
    return [l.name for l in links(ns) if l.name.startswith(prefix)]


def addresses(ns: Netns = None, ipr: IPRoute | None = None) -> list[Address]:
    if ipr is None:
        with session(ns) as own:
            return addresses(ipr=own)
    names = {l.index: l.name for l in links(ipr=ipr)}
    out = []
    for m in ipr.addr("dump"):
        local, address = m.get_attr("IFA_LOCAL"), m.get_attr("IFA_ADDRESS")
        # IPv4 reports the own address as IFA_LOCAL and the peer (or itself) as IFA_ADDRESS
        peer = address if local is not None and address not in (None, local) else None
        out.append(Address(names.get(m["index"], ""), m["family"], local or address, m["prefixlen"], peer,
                           m["scope"]))
    return out


def routes(ns: Netns = None, family: int = socket.AF_INET, ipr: IPRoute | None = None) -> list[Route]:
    """The main table's routes of one address family (what `ip route show` lists)."""
    if ipr is None:
        with session(ns) as own:
            return routes(family=family, ipr=own)
    names = {l.index: l.name for l in links(ipr=ipr)}
    out = []
    for m in ipr.route("dump", family=family):
        if (m.get_attr("RTA_TABLE") or m["table"]) != RT_TABLE_MAIN:
            continue
        hops = tuple((h.get_attr("RTA_GATEWAY"), names.get(h["oif"])) for h in m.get_attr("RTA_MULTIPATH") or [])
        metrics = m.get_attr("RTA_METRICS")
        out.append(Route(
            family=m["family"], dst=m.get_attr("RTA_DST"), dst_len=m["dst_len"], gateway=m.get_attr("RTA_GATEWAY"),
            ifname=names.get(m.get_attr("RTA_OIF")), proto=m["proto"], scope=m["scope"], type=m["type"],
            priority=m.get_attr("RTA_PRIORITY"), prefsrc=m.get_attr("RTA_PREFSRC"),
            onlink=bool(m["flags"] & RTNH_F_ONLINK), multipath=hops,
            metrics={k: v for k, v in (metrics["attrs"] if metrics else [])}))
    return out


# ---- single changes --------------------------------------------------------------------------

def set_link_up(ifname: str, up: bool = True, ns: Netns = None, ipr: IPRoute | None = None) -> None:
    if ipr is None:
        with session(ns) as own:
            return set_link_up(ifname, up, ipr=own)
    ipr.link("set", index=_index(ipr, ifname), state="up" if up else "down")


def set_mtu(ifname: str, mtu: int, ns: Netns = None, ipr: IPRoute | None = None) -> None:
    if ipr is None:
        with session(ns) as own:
            return set_mtu(ifname, mtu, ipr=own)
    ipr.link("set", index=_index(ipr, ifname), mtu=mtu)


def move_link(ifname: str, to: str | int, ns: Netns = None, ipr: IPRoute | None = None) -> None:
    """Move an interface into namespace `to` (name or pid); it arrives down and without addresses."""
    if ipr is None:
        with session(ns) as own:
            return move_link(ifname, to, ipr=own)
    fd = _nsfd(to)
    try:
        ipr.link("set", index=_index(ipr, ifname), net_ns_fd=fd)
    finally:
        os.close(fd)
        _forget(ipr, ifname)


def delete_link(ifname: str, ns: Netns = None, ipr: IPRoute | None = None) -> bool:
    """Delete an interface; False when it is already gone (deleting one end of a veth removes the other)."""
    if ipr is None:
        with session(ns) as own:
            return delete_link(ifname, ipr=own)
    found = ipr.link_lookup(ifname=ifname)
    _forget(ipr, ifname)
    if not found:
        return False
    try:
        ipr.link("del", index=found[0])
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return False
        raise
    return True


def add_address(ifname: str, cidr: str, ns: Netns = None, peer: str | None = None,
                ipr: IPRoute | None = None) -> None:
    """Add `cidr` ("10.0.0.1/30") to an interface. With `peer` ("10.0.0.2/32") a point-to-point address:
    as in `ip addr add LOCAL peer PEER/LEN`, the prefix length is the peer's."""
    if ipr is None:
        with session(ns) as own:
            return add_address(ifname, cidr, peer=peer, ipr=own)
    local, _, plen = cidr.partition("/")
    remote = None
    if peer:
        remote, _, plen = peer.partition("/")
    family = socket.AF_INET6 if ":" in local else socket.AF_INET
    prefixlen = int(plen) if plen else (128 if family == socket.AF_INET6 else 32)
    spec: dict[str, Any] = {"index": _index(ipr, ifname), "family": family, "prefixlen": prefixlen}
    spec.update({"local": local, "address": remote} if remote else {"address": local})
    ipr.addr("add", **spec)


def add_route(route: Route | str, ns: Netns = None, via: str | None = None, dev: str | None = None,
              ipr: IPRoute | None = None) -> None:
    """Add one route: a Route from routes() (as dumped elsewhere), or a destination ("10.0.0.0/24",
    "default") with `via` and/or `dev`. Interfaces are looked up by name in this namespace."""
    if ipr is None:
        with session(ns) as own:
            return add_route(route, via=via, dev=dev, ipr=own)
    if isinstance(route, str):
        dst, _, plen = route.partition("/")
        fam = socket.AF_INET6 if ":" in route or (via and ":" in via) else socket.AF_INET
        full = 128 if fam == socket.AF_INET6 else 32
        route = Route(fam, None if dst == "default" else dst, 0 if dst == "default" else int(plen or full),
                      gateway=via, ifname=dev, proto=3, scope=0 if via else SCOPE_LINK)   # as `ip route add`
    spec: dict[str, Any] = {"family": route.family, "dst_len": route.dst_len, "table": RT_TABLE_MAIN,
                            "proto": route.proto, "scope": route.scope, "type": route.type}
    if route.dst:
        spec["dst"] = route.dst
    if route.gateway:
        spec["gateway"] = route.gateway
    if route.ifname:
        spec["oif"] = _index(ipr, route.ifname)
    if route.priority is not None:
        spec["priority"] = route.priority
    if route.prefsrc:
        spec["prefsrc"] = route.prefsrc
    if route.onlink:
        spec["flags"] = RTNH_F_ONLINK
    if route.multipath:
        spec["multipath"] = [{k: v for k, v in (("gateway", gw), ("oif", _index(ipr, dev) if dev else None)) if v}
                             for gw, dev in route.multipath]
    if route.metrics:
        spec["metrics"] = dict(route.metrics)
    ipr.route("add", **spec)
