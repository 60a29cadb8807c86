"""The report's Routing section: route changes per node, measured vs configured link latency,
convergence after link changes, and delivery delay per routing policy of a sweep.

Sources (docs/run-directory.md): `nodes/<node>/routes.jsonl` (one line per change of a node's table),
the `routing` key of `nodes/<node>/metrics.jsonl` (the link monitor's estimates per neighbour),
`events.jsonl` (link changes as applied) and `topology.json` (the links' configured delays).

All but the per-policy delays are read here, on the driver, file by file: route lines are few, and of
the metrics only the lines carrying a `routing` key are parsed. The per-policy delays need every
delivery, so they are aggregated with Spark from the report's table of unique deliveries.

Times in the tables are seconds since the run's start: its first node record (the first metrics line
of any node, or the first route change), else its first event.
"""
from __future__ import annotations

import html
import json
import math
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pandas as pd

from node import schema
from node.errors import UserError

from ..layout import Run
from .base import Page, RunData, Section, empty_table

REASONS = ("initial", "cost", "switch", "withdrawn", "unreachable", "static")
TIMELINE_ROWS = 50              # route changes shown per node and run (the last ones)
CONVERGENCE_WINDOW = 60.0       # seconds after a link change in which route changes count towards it
NETWORK_EVENTS = ("link_set", "link_down", "link_up", "partition", "heal")
POLICY_KEYS = ("routing.policy", "routing")     # sweep keys that choose the routing policy
DIRECTIONS = ("a_to_b", "b_to_a")
STATIC_NOTE = ("No routing records (nodes/*/routes.jsonl, or a routing key in metrics.jsonl) in these runs: "
               "they used static routing.")
NO_SWEEP_NOTE = ("Skipped: the runs are not a sweep whose grid varies routing or routing.policy, so there is "
                 "no dynamic vs static comparison on the same conditions.")

COUNT_COLUMNS = ["cell", "rep", "node", "mode", "changes", *REASONS, "other", "first_s", "last_s",
                 "metrics_changes", "not_shown"]
TIMELINE_COLUMNS = ["cell", "rep", "node", "t_s", "dst", "next_hop", "cost", "reason"]
LATENCY_COLUMNS = ["cell", "rep", "node", "neighbour", "link", "phase", "from_s", "to_s", "samples",
                   "measured_ms", "measured_sd_ms", "loss", "configured_ms", "oneway_ms", "diff_ms", "diff_pct"]
CONVERGENCE_COLUMNS = ["cell", "rep", "t_s", "event", "target", "change", "window_s", "route_changes",
                       "next_hop_changes", "nodes", "convergence_s", "settled_s", "result"]
POLICY_COLUMNS = ["setting", "policy", "runs", "messages", "mean_delay_s", "p50_delay_s", "p95_delay_s"]


@dataclass
class RoutingTables:
    """What the Routing section shows; `present` is False when no run has routing records."""
    present: bool = False
    changes: pd.DataFrame = field(default_factory=lambda: empty_table(COUNT_COLUMNS))
    timeline: pd.DataFrame = field(default_factory=lambda: empty_table(TIMELINE_COLUMNS))
    latency: pd.DataFrame = field(default_factory=lambda: empty_table(LATENCY_COLUMNS))
    convergence: pd.DataFrame = field(default_factory=lambda: empty_table(CONVERGENCE_COLUMNS))
    policy_delay: pd.DataFrame = field(default_factory=lambda: empty_table(POLICY_COLUMNS))
    policy_note: str = NO_SWEEP_NOTE

    def named(self) -> dict[str, pd.DataFrame]:
        """The tables under the names the report writes them as (CSV and Parquet)."""
        return {"routing_changes": self.changes, "routing_timeline": self.timeline,
                "routing_latency": self.latency, "routing_convergence": self.convergence,
                "routing_policy_delay": self.policy_delay}


# ---- reading ---------------------------------------------------------------------------------------------

def _lines(path: Any) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-blank lines of a file."""
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield lineno, line


def _json(path: Any, lineno: int, line: str) -> dict:
    try:
        record = json.loads(line)
    except ValueError as e:
        raise UserError(f"{path}:{lineno}: not valid JSON ({e}).") from None
    if not isinstance(record, dict):
        raise UserError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}.")
    return record


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def route_problems(record: dict) -> list[str]:
    """What is wrong with one routes.jsonl record (node/schema.py's `route` kind)."""
    return schema.validate("route", record)


@dataclass
class RouteChange:
    ts: float
    node: str
    dst: str
    next_hop: str
    cost: float             # math.inf for a null (infinite) cost
    reason: str


def read_routes(path: Any) -> list[RouteChange]:
    """The route changes of one routes.jsonl; a bad line is a UserError naming the file and line."""
    out = []
    for lineno, line in _lines(path):
        rec = _json(path, lineno, line)
        problems = route_problems(rec)
        if problems:
            raise UserError(f"{path}:{lineno}: route record is not valid: {'; '.join(problems)}.")
        cost = math.inf if rec["cost"] is None else float(rec["cost"])
        out.append(RouteChange(float(rec["ts"]), rec["node"], rec["dst"], rec["next_hop"], cost, rec["reason"]))
    return out


def read_events(run: Run) -> list[dict]:
    """events.jsonl of a run (empty when absent), in time order."""
    path = run.path / "events.jsonl"
    if not path.is_file():
        return []
    out = []
    for lineno, line in _lines(path):
        rec = _json(path, lineno, line)
        problems = schema.validate("event", rec)
        if problems:
            raise UserError(f"{path}:{lineno}: event record does not match node/schema.py: {'; '.join(problems)}.")
        out.append(rec)
    return sorted(out, key=lambda r: r["ts"])


@dataclass(frozen=True)
class LinkDelays:
    """A link of topology.json: its ends and each direction's one-way delay (seconds) at the end of the run."""
    name: str
    a: str
    b: str
    final: dict[str, float | None]


def read_topology(run: Run) -> dict[str, LinkDelays]:
    """Link name -> LinkDelays from topology.json (empty when absent)."""
    path = run.path / "topology.json"
    if not path.is_file():
        return {}
    try:
        topo = json.loads(path.read_text())
    except ValueError as e:
        raise UserError(f"{path} is not valid JSON ({e}).") from None
    links = topo.get("links") if isinstance(topo, dict) else None
    if not isinstance(links, list):
        raise UserError(f"{path}: expected a 'links' list.")
    out = {}
    for lk in links:
        if not isinstance(lk, dict) or not all(isinstance(lk.get(k), str) for k in ("name", "a", "b")):
            raise UserError(f"{path}: every link needs a name and ends a and b.")
        final = {d: _delay((lk.get(d) or {}).get("delay")) for d in DIRECTIONS}
        out[lk["name"]] = LinkDelays(lk["name"], lk["a"], lk["b"], final)
    return out


def _delay(v: Any) -> float | None:
    return float(v) if _is_number(v) else None


# ---- configured delays over time -------------------------------------------------------------------------

def delay_changes(events: list[dict]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(link, direction) -> [(ts, new one-way delay in s)] from the link_set events that set a delay.

    `direction` is relative to the link's own ends (as the scenario's faults give it); `both` or none
    sets both directions. An event's `before` (testbed runs record it) gives the delay until the first
    change, as a step at -inf."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for ev in events:
        if ev.get("event") != "link_set" or not _is_number(ev.get("delay")) or not isinstance(ev.get("target"), str):
            continue
        direction = ev.get("direction") or "both"
        before = ev.get("before") if isinstance(ev.get("before"), dict) else {}
        for d in DIRECTIONS:
            if direction in ("both", d):
                steps = out.setdefault((ev["target"], d), [])
                was = before.get(d, {}).get("delay") if isinstance(before.get(d), dict) else None
                if not steps and _is_number(was):
                    steps.append((-math.inf, float(was)))
                steps.append((float(ev["ts"]), float(ev["delay"])))
    return out


def configured_delay(link: LinkDelays, direction: str, changes: dict[tuple[str, str], list[tuple[float, float]]],
                     at: float) -> float | None:
    """The one-way delay (s) of a link direction in force at time `at`.

    topology.json holds the state at the end of the run (the testbed rewrites it after each change), so a
    direction whose delay was never changed has that delay throughout; one that was changed has the
    value of its latest change at or before `at`, and before its first change the `before` value of that
    change's event, or None for runs that did not record it."""
    steps = changes.get((link.name, direction), [])
    if not steps:
        return link.final[direction]
    before = [v for ts, v in steps if ts <= at]
    return before[-1] if before else None


def phase_bounds(events: list[dict]) -> list[float]:
    """The times that split a run into latency phases: every link_set event."""
    return sorted(float(ev["ts"]) for ev in events if ev.get("event") == "link_set")


def find_link(links: dict[str, LinkDelays], node: str, neighbour: str) -> tuple[LinkDelays, str, str] | None:
    """The link joining node and neighbour, with the direction node -> neighbour and the reverse one."""
    for lk in links.values():
        if (lk.a, lk.b) == (node, neighbour):
            return lk, "a_to_b", "b_to_a"
        if (lk.a, lk.b) == (neighbour, node):
            return lk, "b_to_a", "a_to_b"
    return None


# ---- the link monitor's estimates ------------------------------------------------------------------------

@dataclass
class Acc:
    """Running sums of one neighbour's latency estimates in one phase."""
    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    loss: float = 0.0

    def add(self, latency_ms: float, loss: float) -> None:
        self.n += 1
        self.total += latency_ms
        self.squares += latency_ms * latency_ms
        self.loss += loss

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def sd(self) -> float:
        if self.n < 2:
            return math.nan
        return math.sqrt(max(0.0, (self.squares - self.total * self.total / self.n) / (self.n - 1)))


@dataclass
class NodeMetrics:
    """What one node's metrics.jsonl says about routing."""
    first_ts: float | None = None
    mode: str = ""
    changes: int | None = None                          # the last `routing.changes` seen
    links: dict[tuple[str, int], Acc] = field(default_factory=dict)   # (neighbour, phase) -> estimates
    routing_lines: int = 0


def _usable(link: Any) -> bool:
    """A neighbour's estimate counts when the link is up and at least one probe was answered."""
    return (isinstance(link, dict) and link.get("up") is not False and link.get("probed") is not False
            and _is_number(link.get("probes_answered")) and link["probes_answered"] > 0
            and _is_number(link.get("latency_ms")))


def scan_metrics(path: Any, bounds: list[float]) -> NodeMetrics:
    """The routing part of one metrics.jsonl; only lines mentioning "routing" are parsed past the first."""
    out = NodeMetrics()
    for lineno, line in _lines(path):
        if out.first_ts is not None and '"routing"' not in line:
            continue
        rec = _json(path, lineno, line)
        if out.first_ts is None and _is_number(rec.get("ts")):
            out.first_ts = float(rec["ts"])
        if "routing" in rec:
            _add_routing(out, rec, bounds, f"{path}:{lineno}")
    return out


def _add_routing(out: NodeMetrics, rec: dict, bounds: list[float], where: str) -> None:
    routing, links = rec["routing"], None
    if isinstance(routing, dict):
        links = routing.get("links", {})
    if not isinstance(links, dict) or not _is_number(rec.get("ts")):
        raise UserError(f"{where}: 'routing' must be an object whose 'links' maps neighbours to objects.")
    out.routing_lines += 1
    out.mode = str(routing.get("mode") or out.mode)
    if _is_number(routing.get("changes")):
        out.changes = int(routing["changes"])
    phase = bisect_right(bounds, float(rec["ts"]))
    for neighbour, link in links.items():
        if _usable(link):
            loss = float(link["loss"]) if _is_number(link.get("loss")) else 0.0
            out.links.setdefault((neighbour, phase), Acc()).add(float(link["latency_ms"]), loss)


# ---- one run ---------------------------------------------------------------------------------------------

@dataclass
class RunRouting:
    """Everything the section needs from one run."""
    run: Run
    routes: dict[str, list[RouteChange]]
    metrics: dict[str, NodeMetrics]
    events: list[dict]
    links: dict[str, LinkDelays]
    bounds: list[float]

    @property
    def present(self) -> bool:
        return any(self.routes.values()) or any(m.routing_lines for m in self.metrics.values())

    @property
    def t0(self) -> float:
        starts = [m.first_ts for m in self.metrics.values() if m.first_ts is not None]
        starts += [r[0].ts for r in self.routes.values() if r]
        if not starts:
            starts = [float(ev["ts"]) for ev in self.events[:1]]
        return min(starts) if starts else 0.0


def read_run(run: Run) -> RunRouting:
    events = read_events(run)
    bounds = phase_bounds(events)
    routes: dict[str, list[RouteChange]] = {}
    for path in run.files("routes.jsonl"):
        changes = read_routes(path)
        for c in changes:
            routes.setdefault(c.node, []).append(c)
    for changes in routes.values():
        changes.sort(key=lambda c: c.ts)
    metrics = {path.parent.name: scan_metrics(path, bounds) for path in run.files("metrics.jsonl")}
    links = read_topology(run) if any(m.links for m in metrics.values()) else {}
    return RunRouting(run, routes, metrics, events, links, bounds)


# ---- the tables ------------------------------------------------------------------------------------------

def _rel(ts: float | None, t0: float) -> float:
    return math.nan if ts is None else round(ts - t0, 3)


def change_rows(rr: RunRouting, cap: int = TIMELINE_ROWS) -> tuple[list[dict], list[dict]]:
    """(per node: changes by reason, per node: its last `cap` changes)."""
    t0, counts, timeline = rr.t0, [], []
    for node in sorted(set(rr.routes) | {n for n, m in rr.metrics.items() if m.routing_lines}):
        changes = rr.routes.get(node, [])
        by_reason = {r: sum(1 for c in changes if c.reason == r) for r in REASONS}
        m = rr.metrics.get(node, NodeMetrics())
        counts.append({"cell": rr.run.cell, "rep": rr.run.rep, "node": node, "mode": m.mode or "",
                       "changes": len(changes), **by_reason, "other": len(changes) - sum(by_reason.values()),
                       "first_s": _rel(changes[0].ts, t0) if changes else math.nan,
                       "last_s": _rel(changes[-1].ts, t0) if changes else math.nan,
                       "metrics_changes": m.changes, "not_shown": max(0, len(changes) - cap)})
        timeline += [{"cell": rr.run.cell, "rep": rr.run.rep, "node": node, "t_s": _rel(c.ts, t0), "dst": c.dst,
                      "next_hop": c.next_hop, "cost": c.cost, "reason": c.reason} for c in deque(changes, cap)]
    return counts, timeline


def latency_rows(rr: RunRouting) -> list[dict]:
    """Per node, neighbour and phase: mean measured latency vs the configured delay.

    The monitor's latency is half the probe round trip, so it is compared with the mean of the two
    directions' configured delays (`configured_ms`); `oneway_ms` is the node -> neighbour direction alone."""
    t0, rows = rr.t0, []
    changes = delay_changes(rr.events)
    for node in sorted(rr.metrics):
        for (neighbour, phase), acc in sorted(rr.metrics[node].links.items()):
            start = rr.bounds[phase - 1] if phase > 0 else -math.inf
            there, back, name = _configured(rr.links, changes, node, neighbour, start)
            configured = (there + back) / 2 * 1000.0 if there is not None and back is not None else math.nan
            diff = acc.mean - configured
            rows.append({"cell": rr.run.cell, "rep": rr.run.rep, "node": node, "neighbour": neighbour,
                         "link": name, "phase": phase, "from_s": _rel(start, t0) if phase > 0 else 0.0,
                         "to_s": _rel(rr.bounds[phase], t0) if phase < len(rr.bounds) else math.nan,
                         "samples": acc.n, "measured_ms": acc.mean, "measured_sd_ms": acc.sd,
                         "loss": acc.loss / acc.n, "configured_ms": configured,
                         "oneway_ms": there * 1000.0 if there is not None else math.nan, "diff_ms": diff,
                         "diff_pct": diff / configured * 100.0 if configured else math.nan})
    return rows


def _configured(links: dict[str, LinkDelays], changes: dict, node: str, neighbour: str,
                at: float) -> tuple[float | None, float | None, str]:
    """(node -> neighbour delay, neighbour -> node delay, link name) in force at `at`; Nones off-topology."""
    found = find_link(links, node, neighbour)
    if found is None:
        return None, None, ""
    link, there, back = found
    return configured_delay(link, there, changes, at), configured_delay(link, back, changes, at), link.name


def convergence_rows(rr: RunRouting, window: float = CONVERGENCE_WINDOW) -> list[dict]:
    """Per link change: the time from the event to the last change of a next hop at any node before the next
    link change or `window` seconds, whichever comes first (`convergence_s`), and to the last change of any
    kind (`settled_s`: path costs still moving as the monitor's average follows the link). Cost-only lines
    are left out of convergence: a link near a quantum boundary keeps nudging costs long after the routes
    have moved; `static` table loads are not routing events at all."""
    t0 = rr.t0
    changes = sorted((c.ts, c.node, c.reason != "cost") for cs in rr.routes.values() for c in cs
                     if c.reason != "static")
    times = [ts for ts, _, _ in changes]
    network = [ev for ev in rr.events if ev.get("event") in NETWORK_EVENTS]
    rows = []
    for i, ev in enumerate(network):
        ts = float(ev["ts"])
        end = min(ts + window, float(network[i + 1]["ts"])) if i + 1 < len(network) else ts + window
        inside = changes[bisect_left(times, ts):bisect_left(times, end)]
        moves = [c for c in inside if c[2]]
        rows.append({"cell": rr.run.cell, "rep": rr.run.rep, "t_s": _rel(ts, t0), "event": ev["event"],
                     "target": _target(ev.get("target")), "change": _params(ev), "window_s": round(end - ts, 3),
                     "route_changes": len(inside), "next_hop_changes": len(moves),
                     "nodes": len({n for _, n, _ in moves}),
                     "convergence_s": round(moves[-1][0] - ts, 3) if moves else math.nan,
                     "settled_s": round(inside[-1][0] - ts, 3) if inside else math.nan,
                     "result": "converged" if moves else ("costs only" if inside else "no change")})
    return rows


def _target(target: Any) -> str:
    if isinstance(target, list):
        return " | ".join(",".join(map(str, side)) if isinstance(side, list) else str(side) for side in target)
    return str(target)


def _params(ev: dict) -> str:
    """The changed parameters of an event as `key=value` words (delays in ms)."""
    words = []
    for k, v in ev.items():
        if k in ("ts", "node", "event", "target", "before"):
            continue
        words.append(f"{k}={v * 1000:g}ms" if k in ("delay", "jitter") and _is_number(v) else f"{k}={v}")
    return " ".join(words)


def build(runs: list[Run]) -> RoutingTables:
    """The section's tables from the run directories (policy delays apart: see policy_delays)."""
    counts, timeline, latency, convergence, present = [], [], [], [], False
    for run in runs:
        rr = read_run(run)
        if not rr.present:
            continue
        present = True
        c, t = change_rows(rr)
        counts += c
        timeline += t
        latency += latency_rows(rr)
        convergence += convergence_rows(rr)
    return RoutingTables(present, pd.DataFrame(counts, columns=COUNT_COLUMNS),
                         pd.DataFrame(timeline, columns=TIMELINE_COLUMNS),
                         pd.DataFrame(latency, columns=LATENCY_COLUMNS),
                         pd.DataFrame(convergence, columns=CONVERGENCE_COLUMNS))


# ---- delivery delay per routing policy -------------------------------------------------------------------

def _policy(params: dict) -> str | None:
    for key in POLICY_KEYS:
        value = params.get(key)
        if isinstance(value, dict):
            value = value.get("policy")
        if value is not None:
            return str(value)
    return None


def _setting(params: dict) -> str:
    """The cell's parameters other than the routing policy, as a label ("all" when none)."""
    rest = {k: v for k, v in params.items() if k not in POLICY_KEYS}
    return ",".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(rest.items())) or "all"


def policy_cells(runs: list[Run]) -> dict[str, tuple[str, str]]:
    """Cell -> (setting, policy) when the sweep's cells differ in the routing policy; empty otherwise."""
    cells = {r.cell: r.params for r in runs}
    policies = {c: _policy(p) for c, p in cells.items()}
    if len({p for p in policies.values() if p is not None}) < 2:
        return {}
    return {c: (_setting(cells[c]), p) for c, p in policies.items() if p is not None}


def policy_delays(uniq: Any, runs: list[Run]) -> tuple[pd.DataFrame, str]:
    """Mean, p50 and p95 delivery delay per setting and routing policy (deliveries pooled over the reps),
    from the unique deliveries (compare.unique_deliveries); an empty table and a note without such a sweep."""
    from pyspark.sql import functions as F

    cells = policy_cells(runs)
    if not cells:
        return empty_table(POLICY_COLUMNS), NO_SWEEP_NOTE
    spark = uniq.sparkSession
    table = spark.createDataFrame([(c, s, p) for c, (s, p) in sorted(cells.items())],
                                  "cell string, setting string, policy string")
    agg = (uniq.join(F.broadcast(table), "cell")
           .groupBy("setting", "policy")
           .agg(F.countDistinct("cell", "rep").alias("runs"), F.count(F.lit(1)).alias("messages"),
                F.avg("delay").alias("mean_delay_s"),
                F.percentile_approx("delay", [0.5, 0.95], 10000).alias("qs")))
    rows = [{"setting": r["setting"], "policy": r["policy"], "runs": r["runs"], "messages": r["messages"],
             "mean_delay_s": r["mean_delay_s"], "p50_delay_s": (r["qs"] or [None, None])[0],
             "p95_delay_s": (r["qs"] or [None, None])[1]} for r in agg.collect()]
    out = pd.DataFrame(rows, columns=POLICY_COLUMNS).sort_values(["setting", "policy"]).reset_index(drop=True)
    return out, ("Deliveries of every repetition pooled per setting (the other swept parameters) and policy; "
                 "delay in seconds from submission to the first delivery.")


# ---- HTML ------------------------------------------------------------------------------------------------

def section_html(rt: RoutingTables | None, table: Callable[[pd.DataFrame, str], str]) -> str:
    """The section's body (after its heading); `table` renders a DataFrame with an HTML id."""
    if rt is None:
        return f"<p>{html.escape(STATIC_NOTE)}</p>"
    policy = (f"<h3>Delivery delay by routing policy</h3><p>{html.escape(rt.policy_note)}</p>"
              + (table(rt.policy_delay, "routing-policy-table") if len(rt.policy_delay) else ""))
    if not rt.present:
        return f"<p>{html.escape(STATIC_NOTE)}</p>" + (policy if len(rt.policy_delay) else "")
    cut = rt.changes[rt.changes["not_shown"] > 0] if len(rt.changes) else rt.changes
    cut_note = "".join(f"; {r.cell}/{r.rep} {r.node}: the first {r.not_shown} not shown" for r in cut.itertuples())
    return f"""<p>Route changes from <code>routes.jsonl</code> (reasons: initial, cost = same next hop at a new
cost, switch = a better path beyond the hysteresis, withdrawn = a link of the path went down, unreachable =
no path (cost inf, next hop kept), static = a table set through the Control service); times in seconds since
the run's first node record. <code>metrics_changes</code> is the node's own count of table changes.</p>
{table(rt.changes, "routing-changes-table")}
<h3>Route timeline (the last {TIMELINE_ROWS} changes per node)</h3>
<p>{html.escape(("Every change shown" if not len(cut) else "Cut" + cut_note) + ".")}</p>
{table(rt.timeline, "routing-timeline-table")}
<h3>Measured vs configured latency</h3>
<p>Per node, neighbour and phase (phases split at every <code>link_set</code> event): the mean of the link
monitor's latency estimates (half the probe round trip, samples while the link was up and answered), against
the configured delay: <code>configured_ms</code> is the mean of the link's two one-way delays (what half a
round trip sees), <code>oneway_ms</code> the node → neighbour delay. diff = measured − configured. The
estimate is a moving average, so a phase's first seconds still carry the previous delay. Before a
direction's first change its delay is the link_set event's <code>before</code> value (unknown, –, in runs
that did not record it).</p>
{table(rt.latency, "routing-latency-table")}
<h3>Convergence after link changes</h3>
<p>From each link change (link_set, link_down, link_up, partition, heal) to the last change of a next hop
at any node (<code>convergence_s</code>) and to the last change of any kind (<code>settled_s</code>: path costs
still following the monitor's moving average), before the next link change or {CONVERGENCE_WINDOW:g} s,
whichever comes first.</p>
{table(rt.convergence, "routing-convergence-table")}
{policy}"""


class RoutingSection(Section):
    name = anchor = link = "routing"
    step = "routing (routes.jsonl, link monitor, convergence)"

    def build(self, data: RunData) -> RoutingTables:
        rt = build(data.runs)
        rt.policy_delay, rt.policy_note = policy_delays(data.deliveries, data.runs)
        return rt

    def tables(self, built: RoutingTables | None) -> dict[str, pd.DataFrame]:
        return {} if built is None else built.named()

    def html(self, built: RoutingTables | None, page: Page) -> str:
        # always there: without routing records it says the runs used static routing
        return f'<h2 id="routing">Routing</h2>{section_html(built, page.table)}\n'


SECTION = RoutingSection()
