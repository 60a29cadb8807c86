"""`testbed export --to kathara DIR`: a Kathará lab folder for the scenario's network.

`lab.conf` puts every machine's interfaces on collision domains: a link is a
domain named after the link (`a-b`, which the `kathara` generator reads back in
that orientation), a LAN segment a domain named after the LAN. Each machine's
`<machine>.startup` sets wanbed's addresses (its loopback on `lo`), kernel
routes and IP forwarding, and shapes what the machine sends on each link with
`tc qdisc add dev ethN root netem ...`, which is how Kathará labs impair links
(and what the `kathara` generator reads back; values written to parse back to
exactly the same numbers); a half-duplex link is refused (netem has no shared
medium). wanbed's eth0 is its management interface, so
wanbed's eth1 is the lab's eth0.
"""
from __future__ import annotations

from pathlib import Path

from testbed.topology.exporters import ExportRefused, Network
from testbed.topology.exporters.mininet import duration, percent
from testbed.topology.model import Direction


def _lab_ifname(ifname: str) -> str:
    return f"eth{int(ifname[3:]) - 1}"


def files(net: Network) -> dict[str, str]:
    """File name -> text of the lab folder."""
    topo, plan = net.topology, net.plan
    links = {l.name: l for l in topo.links}
    conf = [f'LAB_DESCRIPTION="wanbed scenario {net.name} (testbed export --to kathara)"', ""]
    out: dict[str, str] = {}
    for node in topo.node_names():
        startup = [f"# {node}: addresses, routes and link shaping from wanbed"
                   f"{' (a host without a node daemon: a plain IP router)' if node in net.daemonless else ''}",
                   "sysctl -qw net.ipv4.ip_forward=1",
                   f"ip addr add {plan.loopback[node]}/32 dev lo"]
        for iface in plan.interfaces.get(node, []):
            if iface.link == "mgmt":
                continue
            dev = _lab_ifname(iface.ifname)
            conf.append(f'{node}[{dev[3:]}]="{iface.link}"')
            startup.append(f"ip addr add {iface.address} dev {dev}")
            startup.append(f"ip link set {dev} up")
            link = links.get(iface.link)
            if link is not None:
                sent = link.a_to_b if node == link.a else link.b_to_a
                startup += _shaping(dev, sent, link.name)
        for route in plan.routes.get(node, []):
            startup.append(f"ip route add {route.destination} via {route.via} dev {_lab_ifname(route.dev)}")
        conf.append("")
        out[f"{node}.startup"] = "\n".join(startup) + "\n"
    out["lab.conf"] = "\n".join(conf)
    return out


def _shaping(dev: str, d: Direction, link: str) -> list[str]:
    if d.duplex == "half":
        raise ExportRefused(f"link {link}: netem shapes each direction on its own (no duplex: half); set duplex "
                            f"to full to export it.")
    if d == Direction(queue=d.queue):
        return []         # unimpaired (a queue length alone matters only behind a rate limit)
    if d.reorder:
        raise ExportRefused(f"link {link}: netem has no form of wanbed's reorder; set reorder to false to export it.")
    return [f"tc qdisc add dev {dev} root netem {netem_text(d)}"]


def netem_text(d: Direction) -> str:
    """tc-netem(8) arguments for one direction (read back by importers/kathara.py)."""
    args = [f"limit {d.queue}"]
    if d.delay or d.jitter:
        args.append(f"delay {duration(d.delay)}" + (f" {duration(d.jitter)}" if d.jitter else ""))
    if d.gilbert is not None:
        g = d.gilbert     # gemodel p r 1-h 1-k: 1-h / 1-k are the loss probabilities in the bad / good state
        args.append(f"loss gemodel {percent(g.p)}% {percent(g.r)}% {percent(g.loss_bad)}% {percent(g.loss_good)}%")
    elif d.loss:
        args.append(f"loss random {percent(d.loss)}%")
    if d.duplicate:
        args.append(f"duplicate {percent(d.duplicate)}%")
    if d.rate is not None:
        args.append(f"rate {int(d.rate) if d.rate == int(d.rate) else repr(d.rate)}bit")
    return " ".join(args)


def write(net: Network, folder: str | Path) -> list[Path]:
    """Write the lab into `folder` (created; existing lab files are not overwritten)."""
    root = Path(folder)
    content = files(net)
    if root.exists() and not root.is_dir():
        raise ExportRefused(f"{root} exists and is not a folder.")
    clash = [name for name in content if (root / name).exists()]
    if clash:
        raise ExportRefused(f"{root} already holds {clash[0]}; export into an empty or new folder.")
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in content.items():
        (root / name).write_text(text, encoding="utf-8")
        written.append(root / name)
    return written
