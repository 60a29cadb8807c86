"""Dynamic routing's account of one repetition: how the tables moved, and whether they were right.

Read from the run directory alone: the nodes' routes.jsonl (one line per change of a table), their
metrics.jsonl (the link monitor's costs), events.jsonl (the link changes as applied, the workload's end) and
topology.json (the links' delays at the end of the run). "Right" is Dijkstra on the configured costs: a
link's cost is the mean of its two one-way delays in ms (what half a probe's round trip measures), a link
taken down has none, and every neighbour on an equally cheap path counts as a right next hop.

The window is the workload's (its end is the "workload_end" event; its length the scenario's duration at
its time scale), so the start-up's first tables are not counted as moves.

- moves            next-hop changes of every (node, destination) inside the window
- moves_per_hour   moves per model hour of the window
- table_match      share of (node, destination) whose next hop was a right one at the checkpoints: just
                   before each link change inside the window (changes applied together count once), and at
                   its end (the tables of Gunduz 2006
                   Tables 3-5 are read at the end of each phase)
- better_share     share of the window during which a route was on a right next hop, over the routes
                   whose right next hop changed in the window (a flapping link's better path); null when
                   none changed
- modal_match      share of routes whose most-held next hop in the window is a right one on the costs'
                   time-weighted means (Gunduz Tables 6-7: are the modal routes Dijkstra's?)
- cost_error_max   the settled link costs' worst relative error against the configured cost, over links of
                   10 ms and more (a link of 1 ms is one or two quanta whatever happens)
- pairs            per (node, dst): moves, moves_per_hour, share, modal next hop, the right ones
- tables           per checkpoint and (node, dst): next hop and cost against Dijkstra's
- links            per (node, neighbour) and phase: the settled cost (median of the monitor's costs over the
                   phase's second half) against the configured one
"""
from __future__ import annotations

import heapq
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.natural import natural_key
from testbed.accounting.records import RecordReader

KEY = "routing"
TIE = 1e-6                 # ms: costs closer than this are equal (sums of floats)
TOGETHER = 0.5             # s: link changes closer than this are one change (faults given the same time)
ACCURATE_FROM = 10.0       # ms: links at least this slow count in cost_error_max
DIRECTIONS = ("a_to_b", "b_to_a")
NOT_MOVES = ("static",)    # a table set through the Control service is not routing's decision

Graph = dict[str, dict[str, float]]


@dataclass(frozen=True)
class Link:
    name: str
    a: str
    b: str


@dataclass
class CostTimeline:
    """The configured graph over time: (ts, graph) steps, the first at -inf."""
    steps: list[tuple[float, Graph]]

    def at(self, ts: float) -> Graph:
        graph = self.steps[0][1]
        for when, g in self.steps:
            if when > ts:
                break
            graph = g
        return graph

    def changes(self) -> list[float]:
        return [ts for ts, _ in self.steps[1:]]

    def phases(self) -> list[float]:
        """Where phases start: the link changes, those applied together (faults at the same time, a few ms
        apart) counted once, at the first of them."""
        out: list[float] = []
        for ts in self.changes():
            if not out or ts - last > TOGETHER:
                out.append(ts)
            last = ts
        return out


# ---- Dijkstra --------------------------------------------------------------------------------------------

def distances(graph: Graph, dst: str) -> dict[str, float]:
    """Every node's cheapest cost to `dst` (links are symmetric in cost here, as the monitor measures)."""
    dist = {dst: 0.0}
    heap = [(0.0, dst)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist.get(u, math.inf):
            continue
        for v, c in graph.get(u, {}).items():
            nd = d + c
            if nd < dist.get(v, math.inf) - TIE:
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist


def right_hops(graph: Graph, node: str, dst: str, dist: dict[str, float] | None = None) -> tuple[set[str], float]:
    """The neighbours of `node` on a cheapest path to `dst`, and that path's cost (empty, inf: none)."""
    dist = distances(graph, dst) if dist is None else dist
    best = dist.get(node, math.inf)
    if not math.isfinite(best) or node == dst:
        return set(), best
    hops = {v for v, c in graph.get(node, {}).items() if c + dist.get(v, math.inf) <= best + TIE}
    return hops, best


# ---- reading ---------------------------------------------------------------------------------------------

def read_links(rep_dir: Path) -> tuple[dict[str, Link], dict[tuple[str, str], float]]:
    """The topology's links, and each direction's one-way delay in ms at the end of the run."""
    try:
        topo = json.loads((rep_dir / "topology.json").read_text())
    except (OSError, ValueError):
        return {}, {}
    links: dict[str, Link] = {}
    final: dict[tuple[str, str], float] = {}
    for lk in topo.get("links", []) if isinstance(topo, dict) else []:
        if not isinstance(lk, dict) or not all(isinstance(lk.get(k), str) for k in ("name", "a", "b")):
            continue
        links[lk["name"]] = Link(lk["name"], lk["a"], lk["b"])
        for d in DIRECTIONS:
            delay = (lk.get(d) or {}).get("delay")
            final[(lk["name"], d)] = float(delay) * 1000.0 if _number(delay) else 0.0
    return links, final


def cost_timeline(links: dict[str, Link], final: dict[tuple[str, str], float],
                  events: list[dict[str, Any]]) -> CostTimeline:
    """The configured graph at every link change (link_set of a delay, link_down, link_up).

    topology.json holds the delays at the end of the run; a direction changed during it had, before its
    first change, the `before` value that change's event recorded."""
    changes = sorted((e for e in events if e.get("event") in ("link_set", "link_down", "link_up")
                      and isinstance(e.get("target"), str) and e["target"] in links and _number(e.get("ts"))),
                     key=lambda e: float(e["ts"]))
    delay = dict(final)
    seen: set[tuple[str, str]] = set()
    for e in changes:          # roll back to the start: the first change's `before` of each direction
        if e["event"] != "link_set" or not _number(e.get("delay")):
            continue
        before = e.get("before") if isinstance(e.get("before"), dict) else {}
        for d in _directions(e):
            was = (before.get(d) or {}).get("delay") if isinstance(before.get(d), dict) else None
            if (e["target"], d) not in seen and _number(was):
                delay[(e["target"], d)] = float(was) * 1000.0
            seen.add((e["target"], d))
    down: set[str] = set()
    steps = [(-math.inf, _graph(links, delay, down))]
    for e in changes:
        if e["event"] == "link_set":
            if not _number(e.get("delay")):
                continue
            for d in _directions(e):
                delay[(e["target"], d)] = float(e["delay"]) * 1000.0
        elif e["event"] == "link_down":
            down.add(e["target"])
        else:
            down.discard(e["target"])
        steps.append((float(e["ts"]), _graph(links, delay, down)))
    return CostTimeline(steps)


def _directions(event: dict[str, Any]) -> tuple[str, ...]:
    direction = event.get("direction") or "both"
    return DIRECTIONS if direction == "both" else tuple(d for d in DIRECTIONS if d == direction)


def _graph(links: dict[str, Link], delay: dict[tuple[str, str], float], down: set[str]) -> Graph:
    graph: Graph = {}
    for lk in links.values():
        if lk.name in down:
            continue
        cost = (delay.get((lk.name, "a_to_b"), 0.0) + delay.get((lk.name, "b_to_a"), 0.0)) / 2
        graph.setdefault(lk.a, {})[lk.b] = cost
        graph.setdefault(lk.b, {})[lk.a] = cost
    return graph


def read_routes(rep_dir: Path, reader: RecordReader) -> dict[tuple[str, str], list[tuple[float, str, float]]]:
    """(node, dst) -> [(ts, next hop, cost)] in time order, from every node's routes.jsonl (static loads left
    out); cost inf for an unreachable destination."""
    out: dict[tuple[str, str], list[tuple[float, str, float]]] = defaultdict(list)
    nodes = rep_dir / "nodes"
    for path in sorted(nodes.glob("*/routes.jsonl")) if nodes.is_dir() else []:
        for rec in reader.records(path, "route"):
            if rec["reason"] in NOT_MOVES:
                continue
            cost = math.inf if rec["cost"] is None else float(rec["cost"])
            out[(rec["node"], rec["dst"])].append((float(rec["ts"]), rec["next_hop"], cost))
    for changes in out.values():
        changes.sort(key=lambda c: c[0])
    return dict(out)


def workload_window(events: list[dict[str, Any]], wall_duration: float) -> tuple[float, float] | None:
    ends = [float(e["ts"]) for e in events if e.get("event") == "workload_end" and _number(e.get("ts"))]
    if not ends or wall_duration <= 0:
        return None
    return ends[-1] - wall_duration, ends[-1]


# ---- the metrics -----------------------------------------------------------------------------------------

def hop_at(changes: list[tuple[float, str, float]], ts: float) -> tuple[str, float] | None:
    """The next hop and cost in force at `ts` (the last change at or before it); None before the first."""
    now = None
    for when, hop, cost in changes:
        if when > ts:
            break
        now = (hop, cost)
    return now


def moves_in(changes: list[tuple[float, str, float]], start: float, end: float) -> int:
    """Next-hop changes inside [start, end] (an unreachable line keeps its next hop: not a move)."""
    moves, hop = 0, None
    for when, nxt, _cost in changes:
        if start <= when <= end and hop is not None and nxt != hop:
            moves += 1
        hop = nxt
    return moves


def held(changes: list[tuple[float, str, float]], start: float, end: float) -> dict[str, float]:
    """Seconds each next hop was in force inside [start, end] (time before the first line is not counted)."""
    out: dict[str, float] = defaultdict(float)
    for i, (when, hop, _cost) in enumerate(changes):
        until = changes[i + 1][0] if i + 1 < len(changes) else end
        lo, hi = max(when, start), min(until, end)
        if hi > lo:
            out[hop] += hi - lo
    return dict(out)


def right_share(changes: list[tuple[float, str, float]], timeline: CostTimeline, node: str, dst: str,
                start: float, end: float) -> float | None:
    """Share of [start, end] the route spent on a right next hop of the configured graph in force."""
    cuts = sorted({start, end, *(t for t in timeline.changes() if start < t < end),
                   *(c[0] for c in changes if start < c[0] < end)})
    right = total = 0.0
    i, hop = 0, None            # one pass: a 30-minute run has thousands of cost lines per route
    rights: dict[int, set[str]] = {}
    for lo, hi in zip(cuts, cuts[1:]):
        while i < len(changes) and changes[i][0] <= lo:
            hop = changes[i][1]
            i += 1
        if hop is None:
            continue
        total += hi - lo
        graph = timeline.at(lo)
        if id(graph) not in rights:
            rights[id(graph)] = right_hops(graph, node, dst)[0]
        right += (hi - lo) if hop in rights[id(graph)] else 0.0
    return right / total if total > 0 else None


def mean_graph(timeline: CostTimeline, start: float, end: float) -> Graph:
    """Each link's configured cost weighted by the time it held inside [start, end] (down: not counted)."""
    cuts = sorted({start, end, *(t for t in timeline.changes() if start < t < end)})
    sums: dict[tuple[str, str], float] = defaultdict(float)
    spans: dict[tuple[str, str], float] = defaultdict(float)
    for lo, hi in zip(cuts, cuts[1:]):
        for u, vs in timeline.at(lo).items():
            for v, c in vs.items():
                sums[(u, v)] += c * (hi - lo)
                spans[(u, v)] += hi - lo
    graph: Graph = {}
    for (u, v), span in spans.items():
        if span > 0:
            graph.setdefault(u, {})[v] = sums[(u, v)] / span
    return graph


def settled_costs(rep_dir: Path, reader: RecordReader, bounds: list[float],
                  timeline: CostTimeline) -> list[dict[str, Any]]:
    """Per (node, neighbour) and phase (split at every link change): the median of the monitor's published
    cost over the phase's second half, against the configured cost of that phase."""
    rows: list[dict[str, Any]] = []
    nodes = rep_dir / "nodes"
    for path in sorted(nodes.glob("*/metrics.jsonl")) if nodes.is_dir() else []:
        node = path.parent.name
        samples: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
        for rec in reader.records(path, "metrics"):
            routing = rec.get("routing")
            links = routing.get("links") if isinstance(routing, dict) else None
            if not isinstance(links, dict):
                continue
            ts = float(rec["ts"])
            phase = sum(1 for b in bounds if b <= ts)
            for peer, link in links.items():
                if isinstance(link, dict) and _number(link.get("cost")) and link.get("up") is not False:
                    samples[(peer, phase)].append((ts, float(link["cost"])))
        for (peer, phase), pts in sorted(samples.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])):
            second = [c for _, c in pts[len(pts) // 2:]]
            configured = timeline.at(pts[-1][0]).get(node, {}).get(peer)
            settled = statistics.median(second)
            rows.append({"node": node, "neighbour": peer, "phase": phase, "samples": len(second),
                         "settled": round(settled, 3),
                         "configured_ms": round(configured, 3) if configured is not None else None,
                         "error": round(settled / configured - 1, 4) if configured else None})
    return rows


def account(rep_dir: Path, reader: RecordReader, wall_duration: float, time_scale: float) -> dict[str, Any] | None:
    """summary.json's `routing` (the module docstring); None when no node wrote a dynamic route."""
    rep_dir = Path(rep_dir)
    routes = read_routes(rep_dir, reader)
    if not routes:
        return None
    events = list(reader.records(rep_dir / "events.jsonl", "event"))
    links, final = read_links(rep_dir)
    timeline = cost_timeline(links, final, events)
    window = workload_window(events, wall_duration)
    if window is None:       # an interrupted run: from the first table to the last line
        stamps = [c[0] for cs in routes.values() for c in cs]
        window = (min(stamps), max(stamps))
    start, end = window
    hours = (end - start) / (time_scale if time_scale > 0 else 1.0) / 3600.0
    checkpoints = [t - TIE for t in timeline.phases() if start < t <= end] + [end]
    averaged = mean_graph(timeline, start, end)
    pairs: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
    total_moves = 0
    matched = checked = modal_right = 0
    shares: list[float] = []
    for (node, dst) in sorted(routes, key=lambda k: (natural_key(k[0]), natural_key(k[1]))):
        changes = routes[(node, dst)]
        moves = moves_in(changes, start, end)
        total_moves += moves
        during = held(changes, start, end)
        modal = max(sorted(during, key=natural_key), key=lambda h: during[h]) if during else None
        modal_hops, _ = right_hops(averaged, node, dst)
        modal_right += modal is not None and modal in modal_hops
        rights = [sorted(right_hops(timeline.at(t), node, dst)[0], key=natural_key) for t in [start, *checkpoints]]
        varies = len({tuple(r) for r in rights}) > 1
        share = right_share(changes, timeline, node, dst, start, end)
        if varies and share is not None:
            shares.append(share)
        pairs.append({"node": node, "dst": dst, "moves": moves,
                      "moves_per_hour": round(moves / hours, 3) if hours > 0 else None,
                      "right_share": round(share, 4) if share is not None else None, "varies": varies,
                      "modal": modal, "modal_right": sorted(modal_hops, key=natural_key)})
        for i, t in enumerate(checkpoints):
            now = hop_at(changes, t)
            hops, best = right_hops(timeline.at(t), node, dst)
            match = now is not None and now[0] in hops
            checked += 1
            matched += match
            tables.append({"checkpoint": i + 1, "node": node, "dst": dst,
                           "next_hop": now[0] if now else None,
                           "cost": _cost(now[1]) if now else None,
                           "right": sorted(hops, key=natural_key), "right_cost": _cost(best), "match": match})
    bounds = timeline.phases()
    link_rows = settled_costs(rep_dir, reader, bounds, timeline)
    errors = [abs(r["error"]) for r in link_rows
              if r["error"] is not None and (r["configured_ms"] or 0) >= ACCURATE_FROM]
    return {"window_s": round(end - start, 3), "checkpoints": len(checkpoints),
            "moves": total_moves, "moves_per_hour": round(total_moves / hours, 3) if hours > 0 else None,
            "table_match": round(matched / checked, 4) if checked else None,
            "better_share": round(statistics.mean(shares), 4) if shares else None,
            "modal_match": round(modal_right / len(pairs), 4) if pairs else None,
            "cost_error_max": round(max(errors), 4) if errors else None,
            "pairs": pairs, "tables": tables, "links": link_rows}


def _cost(value: float) -> float | None:
    return round(value, 3) if math.isfinite(value) else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
