"""A static SVG drawing of a run's topology (topology.json): hosts and links, each link labelled with its
emulated delay and rate; hosts without a node daemon (plain IP routers) drawn as squares.

The layout is deterministic and needs no graph library: a tree (a line, a star, a hierarchy) is drawn in
layers from its centre; any other graph on a circle in topology.json's host order.
"""
from __future__ import annotations

import math
from collections import deque
from html import escape
from typing import Any

WIDTH = 640                 # drawing width, px; the height follows the layout
MARGIN = 60                 # room for the labels around the outermost hosts
NODE_R = 13
HALO = ' stroke="#fff" stroke-width="3" paint-order="stroke"'     # text stays legible where a line crosses it


def _hosts_links(topo: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    hosts = [str(h["name"]) for h in topo.get("hosts", []) if isinstance(h, dict) and h.get("name") is not None]
    known = set(hosts)
    links = [lk for lk in topo.get("links", []) if isinstance(lk, dict)
             and str(lk.get("a")) in known and str(lk.get("b")) in known]
    return hosts, links


def _neighbours(hosts: list[str], links: list[dict[str, Any]]) -> dict[str, list[str]]:
    adj: dict[str, list[str]] = {h: [] for h in hosts}
    for lk in links:
        a, b = str(lk["a"]), str(lk["b"])
        adj[a].append(b)
        adj[b].append(a)
    return adj


def _depths(adj: dict[str, list[str]], root: str) -> dict[str, int]:
    depth = {root: 0}
    todo = deque([root])
    while todo:
        h = todo.popleft()
        for n in adj[h]:
            if n not in depth:
                depth[n] = depth[h] + 1
                todo.append(n)
    return depth


def layout(hosts: list[str], links: list[dict[str, Any]]) -> tuple[dict[str, tuple[float, float]], int]:
    """Host -> (x, y) in px, and the drawing's height."""
    if not hosts:
        return {}, 2 * MARGIN
    adj = _neighbours(hosts, links)
    tree = len(links) == len(hosts) - 1 and len(_depths(adj, hosts[0])) == len(hosts)
    if tree and len(hosts) > 2:
        # the centre (least eccentricity; topology order breaks ties) on top, each layer a row below it
        root = min(hosts, key=lambda h: max(_depths(adj, h).values()))
        depth = _depths(adj, root)
        rows: dict[int, list[str]] = {}
        for h in hosts:
            rows.setdefault(depth[h], []).append(h)
        step = 90
        height = 2 * MARGIN + step * (len(rows) - 1)
        pos = {}
        for d, row in rows.items():
            for i, h in enumerate(row):
                pos[h] = (MARGIN + (WIDTH - 2 * MARGIN) * (i + 0.5) / len(row), MARGIN + d * step)
        return pos, height
    # a circle, first host on top, clockwise
    r = min(WIDTH / 2 - MARGIN, 60 + 12 * len(hosts))
    height = int(2 * (r + MARGIN))
    centre = (WIDTH / 2, height / 2)
    return {h: (centre[0] + r * math.sin(2 * math.pi * i / len(hosts)),
                centre[1] - r * math.cos(2 * math.pi * i / len(hosts))) for i, h in enumerate(hosts)}, height


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _rate(bps: float | None) -> str:
    if bps is None or bps <= 0:
        return "unlimited"
    for unit, size in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= size:
            return f"{bps / size:.4g} {unit}"
    return f"{bps:.4g} bit/s"


def _direction(d: Any) -> str:
    d = d if isinstance(d, dict) else {}
    delay = _num(d.get("delay"))
    text = f"{delay * 1000:.4g} ms" if delay is not None else "? ms"
    text += f", {_rate(_num(d.get('rate')))}"
    loss = _num(d.get("loss"))
    return text + (f", loss {loss:.2%}" if loss else "")


def link_label(lk: dict[str, Any]) -> str:
    """The link's delay and rate as emulated; both directions, each named by its ends, when they differ (the
    label may be turned to stay upright, so an arrow alone could point the wrong way)."""
    there, back = _direction(lk.get("a_to_b")), _direction(lk.get("b_to_a"))
    a, b = lk.get("a"), lk.get("b")
    return there if there == back else f"{a}→{b} {there}; {b}→{a} {back}"


def topology_svg(topo: dict[str, Any], daemons: set[str] | None = None) -> str:
    """The drawing as an SVG document ("" without hosts). `daemons`: the hosts that ran a node daemon (None:
    not known, every host drawn as one). Every host and link is named: hosts by a label, links by their
    <title> (shown on hover) and a data attribute, with the delay and rate written along them."""
    hosts, links = _hosts_links(topo)
    if not hosts:
        return ""
    pos, height = layout(hosts, links)
    small = len(hosts) > 24     # many hosts: smaller labels, no link labels on the lines (they would overlap)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height + 24}" '
             f'viewBox="0 0 {WIDTH} {height + 24}" font-family="sans-serif" font-size="{9 if small else 11}">',
             f"<title>topology {escape(str(topo.get('topology', '')))}</title>"]
    for lk in links:
        (x1, y1), (x2, y2) = pos[str(lk["a"])], pos[str(lk["b"])]
        name, label = str(lk.get("name") or f"{lk['a']}-{lk['b']}"), link_label(lk)
        dash = ' stroke-dasharray="5,4"' if lk.get("state") == "down" else ""
        parts.append(f'<g class="link" data-link="{escape(name)}"><title>{escape(name)}: {escape(label)}'
                     f'{" (down at the end of the run)" if dash else ""}</title>'
                     f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#777" '
                     f'stroke-width="2"{dash}/>')
        if not small:
            angle = math.degrees(math.atan2(y2 - y1, x2 - x1))
            angle = angle - 180 if angle > 90 else angle + 180 if angle < -90 else angle   # never upside down
            mx, my = (x1 + x2) / 2, (y1 + y2) / 2
            parts.append(f'<text x="{mx:.1f}" y="{my - 4:.1f}" text-anchor="middle" fill="#555"{HALO} '
                         f'transform="rotate({angle:.1f} {mx:.1f} {my:.1f})">{escape(label)}</text>')
        parts.append("</g>")
    cx, cy = WIDTH / 2, height / 2
    for h in hosts:
        x, y = pos[h]
        # the name outside the drawing's centre, off the host's links (below a lone centre host)
        dx, dy = x - cx, y - cy
        norm = math.hypot(dx, dy)
        ux, uy = (dx / norm, dy / norm) if norm > 1 else (0.0, 1.0)
        lx, ly = x + ux * (NODE_R + 11), y + uy * (NODE_R + 11) + 4
        daemon = daemons is None or h in daemons
        shape = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{NODE_R}" fill="#4c78a8"/>' if daemon else
                 f'<rect x="{x - NODE_R:.1f}" y="{y - NODE_R:.1f}" width="{2 * NODE_R}" height="{2 * NODE_R}" '
                 f'fill="#fff" stroke="#555" stroke-width="2"/>')
        kind = "node daemon" if daemon else "no node daemon (plain IP router)"
        parts.append(f'<g class="host" data-host="{escape(h)}"><title>{escape(h)}: {kind}</title>{shape}'
                     f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="middle" font-weight="bold"{HALO}>'
                     f"{escape(h)}</text></g>")
    key = ('<circle cx="12" cy="{y}" r="6" fill="#4c78a8"/><text x="22" y="{t}">node daemon</text>'
           '<rect x="112" y="{r}" width="12" height="12" fill="#fff" stroke="#555"/>'
           '<text x="130" y="{t}">no daemon (IP router)</text>'
           '<line x1="270" y1="{y}" x2="300" y2="{y}" stroke="#777" stroke-width="2" stroke-dasharray="5,4"/>'
           '<text x="306" y="{t}">link down at the end</text>').format(y=height + 12, t=height + 16, r=height + 6)
    parts.append(f'<g class="key" font-size="10">{key}</g></svg>')
    return "".join(parts)
