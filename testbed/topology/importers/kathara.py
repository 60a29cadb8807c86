"""Generator `kathara`: the machines and collision domains of a Kathará lab (`lab.conf`) as a wanbed topology.

`lab.conf` lines `machine[N]=domain` put interface N of a machine on a collision
domain (`machine[N]="domain/mac"` names a MAC address too, ignored here). A
domain with two machines becomes a point-to-point link, a larger one a LAN
segment; a domain with one machine leads nowhere and is left out. Other
machine options (`machine[image]=...`, `machine[mem]=...`) and `LAB_*` lines do
not change the network and are ignored (one warning). Kathará has no link
impairment, so the scenario's `link_defaults` and `links:` shape the links.

Addresses and routes come from wanbed's address plan, not from the lab's
startup files. A domain named after its two machines, `a-b`, gives the link
that orientation (what `testbed export --to kathara` writes), so a round trip
keeps each link's a_to_b / b_to_a; otherwise the first machine listed is `a`.
"""
from __future__ import annotations

import re
from pathlib import Path

from testbed.topology.importers import Imported, ImportedLink, ImportFailed, check_name, warn_once

PARAM = "lab"
_LINE = re.compile(r"\s*([^\s\[\]=]+)\[([^\]]+)\]\s*=\s*(.*?)\s*")
_LAB_OPTION = re.compile(r"\s*LAB_[A-Z_]+\s*=.*")

_cache: dict[tuple[object, ...], Imported] = {}


def load(path: str) -> Imported:
    """The lab's topology; `path` is the lab.conf file or the lab's folder."""
    p = Path(path)
    if p.is_dir():
        p = p / "lab.conf"
    try:
        st = p.stat()
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        raise ImportFailed(PARAM, f"{path}: no such Kathará lab (expected a lab.conf file or a lab folder)") \
            from None
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _cache:
        _cache[key] = parse(text, p.name)
    imported = _cache[key]
    if imported.warnings:
        warn_once(key[:1], f"{p}: ignored (no effect in wanbed): {', '.join(imported.warnings)}")
    return imported


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse(text: str, source: str = "lab.conf") -> Imported:
    out = Imported()
    domains: dict[str, list[str]] = {}
    interfaces: dict[tuple[str, int], int] = {}        # (machine, interface number) -> line
    ignored: list[str] = []
    seen_machines: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0] if not raw.lstrip().startswith("#") else ""
        if not line.strip() or _LAB_OPTION.fullmatch(line):
            continue
        where = f"{source}:{number}"
        m = _LINE.fullmatch(line)
        if not m:
            raise ImportFailed(PARAM, f"{where}: expected machine[N]=collision_domain, got {raw.strip()!r}")
        machine, key, value = m.group(1), m.group(2).strip(), _unquote(m.group(3))
        check_name(PARAM, where, machine)
        if machine not in seen_machines:
            seen_machines.append(machine)
        if not key.isdigit():
            ignored.append(f"{machine}[{key}] (line {number})")
            continue
        if (machine, int(key)) in interfaces:
            raise ImportFailed(PARAM, f"{where}: {machine}[{key}] is given twice "
                                      f"(first at line {interfaces[(machine, int(key))]})")
        interfaces[(machine, int(key))] = number
        domain = value.split("/", 1)[0].strip()
        if not domain:
            raise ImportFailed(PARAM, f"{where}: {machine}[{key}] names no collision domain")
        members = domains.setdefault(domain, [])
        if machine in members:
            raise ImportFailed(PARAM, f"{where}: {machine} is on collision domain {domain!r} twice")
        members.append(machine)
    if not seen_machines:
        raise ImportFailed(PARAM, f"{source}: no machines (expected lines like pc1[0]=A)")
    out.nodes = [(m, True) for m in seen_machines]
    pairs: dict[frozenset[str], str] = {}
    for domain, members in domains.items():
        if len(members) == 1:
            ignored.append(f"collision domain {domain} (only {members[0]} is on it)")
        elif len(members) == 2:
            a, b = members
            if domain == f"{b}-{a}":
                a, b = b, a
            pair = frozenset(members)
            if pair in pairs:
                raise ImportFailed(PARAM, f"{source}: collision domains {pairs[pair]!r} and {domain!r} both join "
                                          f"{a} and {b}; wanbed has one link per pair of hosts")
            pairs[pair] = domain
            out.links.append(ImportedLink(a, b))
        else:
            out.lans.append((domain, list(members)))
    link_names = {f"{l.a}-{l.b}" for l in out.links}
    for name, _ in out.lans:
        if name in link_names:
            raise ImportFailed(PARAM, f"{source}: collision domain {name!r} (a LAN) has the name of a link")
    out.warnings = ignored
    return out
