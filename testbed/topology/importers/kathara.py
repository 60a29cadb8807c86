"""Generator `kathara`: the machines and collision domains of a Kathará lab (`lab.conf`) as a wanbed topology.

`lab.conf` lines `machine[N]=domain` put interface N of a machine on a collision
domain (`machine[N]="domain/mac"` names a MAC address too, ignored here). A
domain with two machines becomes a point-to-point link, a larger one a LAN
segment; a domain with one machine leads nowhere and is left out. Other
machine options (`machine[image]=...`, `machine[mem]=...`) and `LAB_*` lines do
not change the network and are ignored (one warning). Kathará has no link
impairment, so the scenario's `link_defaults` and `links:` shape the links.

Kathará has no link impairment of its own; labs impair links with netem in the
machines' startup files, and those lines are read: `tc qdisc add|replace dev ethN
root netem ...` in `<machine>.startup` sets what the machine sends on the link
of its interface N (limit, delay [jitter], loss [random] P% or loss gemodel,
duplicate, rate; other netem options are one error naming the line). The
scenario's `link_defaults` give every field such a line does not set, and its
`links:` apply on top as for any generator. Addresses and routes come from
wanbed's address plan; the rest of the startup files is not read.

A domain named after its two machines, `a-b`, gives the link that orientation
(what `testbed export --to kathara` writes), so a round trip keeps each link's
a_to_b / b_to_a; otherwise the first machine listed is `a`.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from testbed import units
from testbed.topology.model import GilbertElliott
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
    startups = {f.name[:-len(".startup")]: f for f in sorted(p.parent.glob("*.startup"))}
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns,
           tuple((m, f.stat().st_size, f.stat().st_mtime_ns) for m, f in startups.items()))
    if key not in _cache:
        _cache[key] = parse(text, p.name, {m: f.read_text(encoding="utf-8", errors="replace")
                                           for m, f in startups.items()})
    imported = _cache[key]
    if imported.warnings:
        warn_once(key[:1], f"{p}: ignored (no effect in wanbed): {', '.join(imported.warnings)}")
    return imported


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse(text: str, source: str = "lab.conf", startups: dict[str, str] | None = None) -> Imported:
    """The lab from lab.conf's text and the machines' startup files (machine -> text)."""
    out = Imported()
    domains: dict[str, list[str]] = {}
    interfaces: dict[tuple[str, int], int] = {}        # (machine, interface number) -> line
    domain_of: dict[tuple[str, int], str] = {}         # (machine, interface number) -> collision domain
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
        domain_of[(machine, int(key))] = domain
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
    link_of = {domain: link for domain, link in zip(pairs.values(), out.links)}
    for machine, startup in (startups or {}).items():
        if machine in seen_machines:
            _read_shaping(machine, startup, domain_of, link_of, ignored)
    link_names = {f"{l.a}-{l.b}" for l in out.links}
    for name, _ in out.lans:
        if name in link_names:
            raise ImportFailed(PARAM, f"{source}: collision domain {name!r} (a LAN) has the name of a link")
    out.warnings = ignored
    return out


_TC = re.compile(r"\s*tc\s+qdisc\s+(?:add|replace|change)\s+dev\s+(\S+)\s+root\s+netem\b(.*)")


def _read_shaping(machine: str, startup: str, domain_of: dict[tuple[str, int], str],
                  link_of: dict[str, ImportedLink], ignored: list[str]) -> None:
    """netem lines of one machine's startup file -> the fields of the link directions it sends on."""
    for number, raw in enumerate(startup.splitlines(), start=1):
        m = _TC.match(raw.split("#", 1)[0])
        if not m:
            continue
        where = f"{machine}.startup:{number}"
        dev = m.group(1)
        index = int(dev[3:]) if re.fullmatch(r"eth[0-9]+", dev) else None
        domain = domain_of.get((machine, index)) if index is not None else None
        if domain is None:
            raise ImportFailed(PARAM, f"{where}: netem on {dev}, which lab.conf does not give {machine}")
        link = link_of.get(domain)
        if link is None:
            ignored.append(f"netem on {machine} {dev} (line {number}: collision domain {domain} is a LAN "
                           f"segment or leads nowhere, and LAN segments are not shaped)")
            continue
        fields = netem_fields(shlex.split(m.group(2)), where)
        (link.a_to_b if machine == link.a else link.b_to_a).update(fields)


def netem_fields(tokens: list[str], where: str) -> dict[str, Any]:
    """tc-netem(8) arguments -> Direction fields (base units)."""
    out: dict[str, Any] = {}
    i = 0

    def take(what: str) -> str:
        nonlocal i
        if i >= len(tokens):
            raise ImportFailed(PARAM, f"{where}: netem {what} needs a value")
        i += 1
        return tokens[i - 1]

    def percent(text: str) -> float:
        if not text.endswith("%"):
            raise ImportFailed(PARAM, f"{where}: expected a percentage like 1%, got {text!r}")
        return _unit(units.parse_percent, text, where)

    def more() -> bool:         # an optional value follows (a number, not the next keyword)
        return i < len(tokens) and bool(re.match(r"[0-9.]", tokens[i]))

    while i < len(tokens):
        word = take("option")
        if word == "limit":
            value = take("limit")
            if not value.isdigit() or int(value) < 1:
                raise ImportFailed(PARAM, f"{where}: netem limit expects a number of packets, got {value!r}")
            out["queue"] = int(value)
        elif word == "delay":
            out["delay"] = _unit(units.parse_duration, take("delay"), where)
            if more():
                out["jitter"] = _unit(units.parse_duration, take("jitter"), where)
            if more():
                raise ImportFailed(PARAM, f"{where}: netem delay correlation ({tokens[i]}) is not supported")
        elif word == "loss":
            kind = tokens[i] if i < len(tokens) else ""
            if kind == "gemodel":
                i += 1
                values = [percent(take("gemodel p"))]
                while more() and len(values) < 4:
                    values.append(percent(take("gemodel")))
                if len(values) < 2:
                    raise ImportFailed(PARAM, f"{where}: netem loss gemodel needs at least p and r")
                p, r, bad, good = (values + [1.0, 0.0][len(values) - 2:])[:4]
                out["gilbert"] = GilbertElliott(p, r, loss_good=good, loss_bad=bad)
            else:
                if kind == "random":
                    i += 1
                out["loss"] = percent(take("loss"))
                out["gilbert"] = None
                if more():
                    raise ImportFailed(PARAM, f"{where}: netem loss correlation ({tokens[i]}) is not supported")
        elif word == "duplicate":
            out["duplicate"] = percent(take("duplicate"))
        elif word == "rate":
            out["rate"] = _unit(units.parse_rate, take("rate"), where)
        else:
            raise ImportFailed(PARAM, f"{where}: netem option {word!r} is not supported "
                                      f"(wanbed reads limit, delay, loss, duplicate, rate)")
    return out


def _unit(parse: Any, text: str, where: str) -> Any:
    try:
        return parse(text)
    except units.UnitError as e:
        raise ImportFailed(PARAM, f"{where}: {e}") from None
