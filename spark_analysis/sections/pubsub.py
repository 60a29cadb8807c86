"""The report's Publish/subscribe section: delivery latency per topic, fan-out efficiency against the
minimum tree, and losses and duplicates per subscription kind (durable, non-durable).

Sources (docs/run-directory.md, record kinds in node/schema.py):
- `nodes/<node>/publications.jsonl` ("publication"): every publication accepted at a node, with the
  subscriptions expected to receive it (`expected`, `expected_durable`) and their nodes (`targets`);
- `subscribers/<node>/<name>/receipts.jsonl` ("receipt"): the first arrival of each publication at a
  subscriber client, with its latency;
- `subscribers/<node>/<name>/subscriber.json`: the client's counts (duplicates, redelivered, dropped, streams);
- the `broker` key of `nodes/<node>/metrics.jsonl`: cumulative counters since the daemon (re)started;
- `topology.json` (the links, for the minimum tree) and `events.jsonl` (`restart` events).

Publications, receipts and the metrics' broker counters are read with Spark (each publication and receipt
line checked against node/schema.py first; the metrics lines are checked by records.read in the report's
reading step); the small files (subscriber.json, topology.json, events.jsonl) and the minimum trees, one per
distinct (origin, targets) pair, are handled on the driver in plain Python.

A run without publications and subscriber clients has no pub/sub section: the report is unchanged.
"""
from __future__ import annotations

import html
import json
import math
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pandas as pd

from node.errors import UserError

from ..layout import Run
from .base import Page, RunData, Section, empty_table
from .routing import read_events

DURABLE, LIVE = "durable", "non-durable"
KINDS = (DURABLE, LIVE)
QUANTILES = (0.5, 0.9, 0.99)
MAX_CURVES = 12                 # CDF curves per cell figure (the series with most receipts)
TREE_BUDGET = 200_000           # search steps per minimum tree before it falls back to a greedy choice
COUNTERS = ("copies_out_bytes", "live_out_bytes", "copies_out", "live_out")

LATENCY_COLUMNS = ["cell", "topic", "kind", "runs", "receipts", "p50_ms", "p90_ms", "p99_ms", "max_ms"]
CDF_COLUMNS = ["cell", "topic", "kind", "series", "q", "latency_ms"]
FANOUT_COLUMNS = ["cell", "rep", "publications", "receipts", "link_bytes", "min_bytes", "ratio", "copies",
                  "min_copies", "copy_ratio", "bytes_per_receipt", "min_bytes_per_receipt", "restarts",
                  "unreachable_targets"]
LOSS_COLUMNS = ["cell", "rep", "kind", "subscriptions", "expected", "received", "unexpected", "missing",
                "duplicates", "redelivered", "dropped", "deliveries", "streams", "checker_late", "checker_lost",
                "verdict"]
ABSENT_NOTE = "no pub/sub records (nodes/*/publications.jsonl, subscribers/*/*/) in these runs."


@dataclass
class PubSubTables:
    """What the Publish/subscribe section shows; `present` is False when no run has pub/sub records."""
    present: bool = False
    latency: pd.DataFrame = field(default_factory=lambda: empty_table(LATENCY_COLUMNS))
    cdf: pd.DataFrame = field(default_factory=lambda: empty_table(CDF_COLUMNS))
    fanout: pd.DataFrame = field(default_factory=lambda: empty_table(FANOUT_COLUMNS))
    losses: pd.DataFrame = field(default_factory=lambda: empty_table(LOSS_COLUMNS))
    notes: list[str] = field(default_factory=list)

    def named(self) -> dict[str, pd.DataFrame]:
        """The tables under the names the report writes them as (CSV and Parquet)."""
        return {"pubsub_latency": self.latency, "pubsub_latency_cdf": self.cdf, "pubsub_fanout": self.fanout,
                "pubsub_losses": self.losses}


# ---- finding the files -----------------------------------------------------------------------------------

def _nonempty(paths: Iterable[Any]) -> list[Any]:
    return [p for p in paths if p.is_file() and p.stat().st_size > 0]


def publication_files(run: Run) -> list[Any]:
    return _nonempty(run.files("publications.jsonl"))


def subscriber_dirs(run: Run) -> list[Any]:
    """subscribers/<node>/<name>/ of every subscriber client of a run."""
    base = run.path / "subscribers"
    if not base.is_dir():
        return []
    return sorted(d for d in base.glob("*/*") if d.is_dir())


def receipt_files(run: Run) -> list[Any]:
    return _nonempty(d / "receipts.jsonl" for d in subscriber_dirs(run))


def has_records(run: Run) -> bool:
    """Whether a run published anything or ran subscriber clients."""
    return bool(publication_files(run) or subscriber_dirs(run))


def any_records(runs: list[Run]) -> bool:
    return any(has_records(r) for r in runs)


# ---- the minimum tree (plain Python: one per distinct origin and target set) --------------------------------

def read_links(run: Run) -> list[tuple[str, str]] | None:
    """(a, b) of every link of topology.json; None when the run has no topology.json."""
    path = run.path / "topology.json"
    if not path.is_file():
        return None
    try:
        topo = json.loads(path.read_text())
    except ValueError as e:
        raise UserError(f"{path} is not valid JSON ({e}).") from None
    links = topo.get("links") if isinstance(topo, dict) else None
    if not isinstance(links, list) or not all(isinstance(lk, dict) and isinstance(lk.get("a"), str)
                                              and isinstance(lk.get("b"), str) for lk in links):
        raise UserError(f"{path}: expected a 'links' list whose links have ends a and b.")
    return [(lk["a"], lk["b"]) for lk in links]


def mta_graph(links: Iterable[tuple[str, str]], daemons: set[str] | None = None) -> dict[str, set[str]]:
    """Adjacency of the brokers' graph: the topology's links, with the hosts that run no daemon (not in
    `daemons`; None = every host runs one) contracted: two daemon hosts joined by a path through
    daemon-less hosts only are neighbours, as the testbed makes them (testbed/topology/overlay.py)."""
    adj: dict[str, set[str]] = defaultdict(set)
    for a, b in links:
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    if not daemons or all(n in daemons for n in adj):
        return {n: set(vs) for n, vs in adj.items()}
    out: dict[str, set[str]] = {n: set() for n in adj if n in daemons}
    for u in out:
        seen, stack = {u}, [u]
        while stack:
            for y in adj[stack.pop()]:
                if y in seen:
                    continue
                seen.add(y)
                if y in daemons:
                    out[u].add(y)
                else:
                    stack.append(y)
    return out


def _distances(adj: dict[str, set[str]], origin: str) -> dict[str, int]:
    dist = {origin: 0}
    queue = deque([origin])
    while queue:
        u = queue.popleft()
        for v in adj.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


@dataclass(frozen=True)
class Tree:
    links: int                   # links of the smallest union of shortest paths to the reachable targets
    unreachable: tuple[str, ...]  # targets with no path from the origin in the graph
    exact: bool = True           # False: the search ran out of budget and a greedy union was counted


def tree_links(adj: dict[str, set[str]], origin: str, targets: Iterable[str], budget: int = TREE_BUDGET) -> Tree:
    """The links of the minimum tree spanning the origin and its targets along shortest paths (hop count).

    Each target is reached along one of its shortest paths from the origin (what the brokers do with
    `routing: shortest`, whichever equal-length path a node's table chose); the tree is the union of those
    paths, and with several shortest paths the union with the fewest links is counted (so an ideal broker
    scores a ratio of 1). Every node of such a union but the origin has exactly one parent link, so its links
    are its nodes; the union is searched level by level from the deepest target: the nodes needed at a level
    must each have a parent at the level above, and every inclusion-minimal choice of those parents is tried
    (memoised by level and set). A target equal to the origin costs no link."""
    dist = _distances(adj, origin)
    targets = set(targets)
    unreachable = tuple(sorted(t for t in targets if t not in dist))
    reach = {t for t in targets if t in dist and t != origin}
    if not reach:
        return Tree(0, unreachable)
    level: dict[int, set[str]] = defaultdict(set)
    for t in reach:
        level[dist[t]].add(t)
    parents = {}

    def parents_of(v: str) -> frozenset[str]:
        if v not in parents:
            parents[v] = frozenset(u for u in adj.get(v, ()) if dist.get(u) == dist[v] - 1)
        return parents[v]

    steps = [0]
    memo: dict[tuple[int, frozenset[str]], int] = {}

    def covers(required: frozenset[str], free: set[str]) -> list[frozenset[str]]:
        """Inclusion-minimal sets of parents (level above) covering `required`; parents in `free` cost nothing."""
        need = frozenset(r for r in required if not parents_of(r) & free)
        found: set[frozenset[str]] = set()

        def rec(left: frozenset[str], chosen: frozenset[str]) -> None:
            steps[0] += 1
            if steps[0] > budget:
                raise _OutOfBudget
            if not left:
                found.add(chosen)
                return
            r = min(left, key=lambda v: (len(parents_of(v)), v))
            for p in sorted(parents_of(r)):
                rec(frozenset(x for x in left if p not in parents_of(x)), chosen | {p})

        rec(need, frozenset())
        return [c for c in found if not any(o < c for o in found)]

    def cost(d: int, required: frozenset[str]) -> int:
        """Nodes of levels 1..d in the smallest union, given the nodes required at level d."""
        if d == 1:
            return len(required)
        key = (d, required)
        if key not in memo:
            above = level.get(d - 1, set())
            memo[key] = len(required) + min(cost(d - 1, frozenset(above) | c) for c in covers(required, above))
        return memo[key]

    depth = max(level)
    try:
        return Tree(cost(depth, frozenset(level[depth])), unreachable)
    except _OutOfBudget:
        return Tree(_greedy(level, depth, parents_of), unreachable, exact=False)


class _OutOfBudget(Exception):
    pass


def _greedy(level: dict[int, set[str]], depth: int, parents_of: Callable[[str], frozenset[str]]) -> int:
    """An upper bound: per level, parents chosen greedily (most required nodes covered first)."""
    required = set(level[depth])
    total = 0
    for d in range(depth, 0, -1):
        total += len(required)
        if d == 1:
            break
        above = set(level.get(d - 1, set()))
        left = {r for r in required if not parents_of(r) & above}
        while left:
            best = max(sorted({p for r in left for p in parents_of(r)}),
                       key=lambda p: sum(1 for r in left if p in parents_of(r)))
            above.add(best)
            left = {r for r in left if best not in parents_of(r)}
        required = above
    return total


# ---- small per-run files (driver) -------------------------------------------------------------------------

def read_subscriber(path: Any) -> dict:
    """subscriber.json of one client ({} when absent)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise UserError(f"{path} is not valid JSON ({e}).") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object.")
    return data


def restart_times(run: Run) -> dict[str, list[float]]:
    """node -> times of its `restart` events (events.jsonl; checked against node/schema.py)."""
    out: dict[str, list[float]] = defaultdict(list)
    for ev in read_events(run):
        if ev.get("event") != "restart":
            continue
        targets = ev["target"] if isinstance(ev["target"], list) else [ev["target"]]
        for t in targets:
            if isinstance(t, str):
                out[t].append(float(ev["ts"]))
    return dict(out)


def _count(v: Any) -> int | None:
    """A count from JSON or a table cell; None when it is not a number (absent, null, NaN)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _int(v: Any) -> int:
    c = _count(v)
    return 0 if c is None else c


def client_counts(run: Run) -> dict[str, dict[str, int]]:
    """kind -> summed subscriber.json counts of the run's clients (and how many clients)."""
    out: dict[str, dict[str, int]] = {k: defaultdict(int) for k in KINDS}
    for d in subscriber_dirs(run):
        info = read_subscriber(d / "subscriber.json")
        durable = info.get("durable")
        if durable is None:        # no subscriber.json: the kind from the receipts, when they say
            durable = _receipt_kind(d / "receipts.jsonl")
        if durable is None:
            continue
        c = out[DURABLE if durable else LIVE]
        c["subscriptions"] += 1
        for k in ("duplicates", "redelivered", "dropped", "deliveries", "streams"):
            c[k] += _int(info.get(k))
    return {k: dict(v) for k, v in out.items()}


def _receipt_kind(path: Any) -> bool | None:
    if not path.is_file():
        return None
    with path.open("r", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    rec = json.loads(line)
                except ValueError:
                    return None
                return rec.get("durable") if isinstance(rec, dict) and isinstance(rec.get("durable"), bool) else None
    return None


def checker_counts(run: Run) -> tuple[Any, Any]:
    """(late, lost) durable receipts by the loss checker (summary.json "pubsub"), None when not there."""
    account = run.summary.get("pubsub") if isinstance(run.summary, dict) else None
    total = account.get("total") if isinstance(account, dict) else None
    if not isinstance(total, dict):
        return None, None
    return total.get("late_durable"), total.get("lost_durable")


# ---- Spark: reading -------------------------------------------------------------------------------------

def _schemas():
    from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, LongType, StringType, StructField,
                                   StructType)
    strings = ArrayType(StringType())
    publication = StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()), StructField("pub_id", StringType()),
        StructField("topic", StringType()), StructField("size", LongType()), StructField("expected", strings),
        StructField("expected_durable", strings), StructField("targets", strings)])
    receipt = StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()),
        StructField("subscription", StringType()), StructField("durable", BooleanType()),
        StructField("pub_id", StringType()), StructField("topic", StringType()), StructField("origin", StringType()),
        StructField("publish_ts", DoubleType()), StructField("latency", DoubleType()),
        StructField("size", LongType()), StructField("hops", LongType())])
    metrics = StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()),
        StructField("broker", StructType([StructField(c, LongType()) for c in COUNTERS]))])
    return {"publication": publication, "receipt": receipt, "metrics": metrics}


def _read(spark, runs: list[Run], files_of: Callable[[Run], list[Any]], kind: str, schema, check: bool = True):
    """One DataFrame of the files of every run, with cell and rep; None when there are none."""
    from pyspark.sql import functions as F

    from .. import clocks, records
    from ..records import check_file

    files = []
    for i, run in enumerate(runs):
        mine = files_of(run)
        if check:
            for p in mine:
                check_file(kind, p)
        files += [(p, i) for p in mine]
    if not files:
        return None
    df = records.scan(spark, runs, files, schema)       # all the runs' files in one scan
    if kind == "receipt":        # several machines: the latency on the controller's clock (machines.json)
        df = clocks.receipts_of_runs(df, {i: clocks.load(runs[i]) for _, i in files}, F.col(records.RUN))
    return records.with_run_columns(df, runs, ("cell", "rep"))


# ---- the three computations -----------------------------------------------------------------------------

def _kind_col(durable_col):
    from pyspark.sql import functions as F
    return F.when(durable_col, F.lit(DURABLE)).otherwise(F.lit(LIVE))


def unique_receipts(receipts):
    """One receipt per (run, subscription, publication), with its kind; latency in ms."""
    from pyspark.sql import functions as F
    return (receipts.dropDuplicates(["cell", "rep", "node", "subscription", "pub_id"])
            .withColumn("kind", _kind_col(F.col("durable")))
            .withColumn("latency_ms", F.col("latency") * 1000.0))


def latency_tables(receipts) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(p50/p90/p99/max per cell, topic and kind, receipts of the repetitions pooled; the CDF points)."""
    from pyspark.sql import functions as F

    from ..compare import CDF_POINTS

    agg = (receipts.groupBy("cell", "topic", "kind")
           .agg(F.countDistinct("rep").alias("runs"), F.count(F.lit(1)).alias("receipts"),
                F.percentile_approx("latency_ms", list(QUANTILES), 10000).alias("qs"),
                F.max("latency_ms").alias("max_ms"),
                F.percentile_approx("latency_ms", CDF_POINTS, 10000).alias("cdf"))
           .collect())
    rows, cdf = [], []
    both = defaultdict(set)
    for r in agg:
        both[(r["cell"], r["topic"])].add(r["kind"])
    for r in sorted(agg, key=lambda r: (r["cell"], r["topic"], r["kind"])):
        qs = list(r["qs"] or [math.nan] * len(QUANTILES))
        rows.append({"cell": r["cell"], "topic": r["topic"], "kind": r["kind"], "runs": r["runs"],
                     "receipts": r["receipts"], "p50_ms": qs[0], "p90_ms": qs[1], "p99_ms": qs[2],
                     "max_ms": r["max_ms"]})
        series = r["topic"] if len(both[(r["cell"], r["topic"])]) < 2 else f"{r['topic']} ({r['kind']})"
        cdf += [{"cell": r["cell"], "topic": r["topic"], "kind": r["kind"], "series": series, "q": q,
                 "latency_ms": v} for q, v in zip(CDF_POINTS, r["cdf"] or [])]
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS), pd.DataFrame(cdf, columns=CDF_COLUMNS)


def loss_counts(pubs, receipts) -> dict[tuple[str, str, str], dict[str, int]]:
    """(cell, rep, kind) -> expected, received, unexpected, missing: expected (publication, subscription)
    pairs (kind: durable when in expected_durable) against the unique receipts (kind: the receipt's)."""
    from pyspark.sql import functions as F

    keys = ["cell", "rep", "pub_id", "sub"]
    parts = []
    if pubs is not None:
        parts.append(pubs.select("cell", "rep", "pub_id", F.explode("expected").alias("sub"), "expected_durable")
                     .select("cell", "rep", "pub_id", "sub",
                             _kind_col(F.array_contains("expected_durable", F.col("sub"))).alias("pair_kind"),
                             F.lit(True).alias("is_expected")))
    if receipts is not None:
        got = receipts.select("cell", "rep", "pub_id", F.concat_ws("/", "node", "subscription").alias("sub"),
                              F.col("kind").alias("receipt_kind"), F.lit(True).alias("is_received"))
        parts = [parts[0].join(got, keys, "full")] if parts else [got]
    if not parts:
        return {}
    df = parts[0]
    for c in ("pair_kind", "receipt_kind"):
        if c not in df.columns:
            df = df.withColumn(c, F.lit(None).cast("string"))
    for c in ("is_expected", "is_received"):
        if c not in df.columns:
            df = df.withColumn(c, F.lit(None).cast("boolean"))
    e, r = F.coalesce("is_expected", F.lit(False)), F.coalesce("is_received", F.lit(False))
    agg = (df.withColumn("kind", F.coalesce("pair_kind", "receipt_kind"))
           .groupBy("cell", "rep", "kind")
           .agg(F.sum(e.cast("long")).alias("expected"), F.sum(r.cast("long")).alias("received"),
                F.sum((r & ~e).cast("long")).alias("unexpected"), F.sum((e & ~r).cast("long")).alias("missing"))
           .collect())
    return {(x["cell"], x["rep"], x["kind"]): {k: int(x[k] or 0) for k in ("expected", "received", "unexpected",
                                                                         "missing")} for x in agg}


def counter_growth(spark, metrics,
                   restarts: dict[tuple[str, str], dict[str, list[float]]]) -> dict[tuple[str, str], dict]:
    """(cell, rep) -> the broker counters' growth over the run summed over nodes, and the restarts seen.

    The counters are cumulative since the daemon started. A node's lines are split into process lifetimes
    at a `restart` event for it (events.jsonl) or wherever a counter went down; the growth is the sum over
    lifetimes of each one's last value (the first line of a lifetime counts whole: its counters started at 0)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType, StringType, StructField, StructType

    m = metrics.where(F.col("broker").isNotNull()).select(
        "cell", "rep", "node", "ts", *[F.coalesce(F.col(f"broker.{c}"), F.lit(0)).alias(c) for c in COUNTERS])
    rows = [(cell, rep, node, sorted(ts)) for (cell, rep), nodes in restarts.items() for node, ts in nodes.items()]
    if rows:
        schema = StructType([StructField("cell", StringType()), StructField("rep", StringType()),
                             StructField("node", StringType()), StructField("restarts", ArrayType(DoubleType()))])
        ev = spark.createDataFrame(rows, schema)
        m = m.join(F.broadcast(ev), ["cell", "rep", "node"], "left")
        m = m.withColumn("life", F.coalesce(F.size(F.filter("restarts", lambda x: x <= F.col("ts"))), F.lit(0)))
    else:
        m = m.withColumn("life", F.lit(0))
    w = Window.partitionBy("cell", "rep", "node").orderBy("ts")
    first = F.lag("ts").over(w).isNull()
    dropped = F.lit(False)
    for c in COUNTERS:
        dropped = dropped | (F.col(c) < F.lag(c).over(w))
    m = m.select("*", first.alias("first"),
                 (first | (F.col("life") != F.lag("life").over(w)) | dropped).alias("new_life"),
                 *[F.when(first | (F.col("life") != F.lag("life").over(w)) | dropped, F.col(c))
                   .otherwise(F.col(c) - F.lag(c).over(w)).alias(f"d_{c}") for c in COUNTERS])
    agg = (m.groupBy("cell", "rep")
           .agg(*[F.sum(f"d_{c}").alias(c) for c in COUNTERS],
                F.sum((F.col("new_life") & ~F.col("first")).cast("long")).alias("restarts"))
           .collect())
    return {(r["cell"], r["rep"]): {**{c: int(r[c] or 0) for c in COUNTERS}, "restarts": int(r["restarts"] or 0)}
            for r in agg}


def fanout_minimum(run: Run, groups: list[tuple[str, list[str], int, int]]) -> tuple[int | None, int | None, int, int]:
    """(minimum bytes, minimum copies, unreachable targets, inexact trees) of one run's publications, given
    per (origin, targets): count and bytes. None without topology.json."""
    links = read_links(run)
    if links is None:
        return None, None, 0, 0
    nodes_dir = run.path / "nodes"
    daemons = {p.name for p in nodes_dir.iterdir() if p.is_dir()} if nodes_dir.is_dir() else set()
    adj = mta_graph(links, daemons or None)
    min_bytes = min_copies = unreachable = inexact = 0
    for origin, targets, count, size in groups:
        tree = tree_links(adj, origin, targets)
        min_bytes += tree.links * size
        min_copies += tree.links * count
        unreachable += len(tree.unreachable) * count
        inexact += not tree.exact
    return min_bytes, min_copies, unreachable, inexact


def _ratio(a: Any, b: Any) -> float:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else math.nan


def build(spark, runs: list[Run]) -> PubSubTables:
    """The section's tables from the run directories (only runs with pub/sub records take part)."""
    from pyspark.sql import functions as F

    runs = [r for r in runs if has_records(r)]
    if not runs:
        return PubSubTables()
    schemas = _schemas()
    pubs = _read(spark, runs, publication_files, "publication", schemas["publication"])
    receipts = _read(spark, runs, receipt_files, "receipt", schemas["receipt"])
    uniq = unique_receipts(receipts) if receipts is not None else None
    out = PubSubTables(present=True)
    if uniq is not None:
        out.latency, out.cdf = latency_tables(uniq)
    losses = loss_counts(pubs, uniq)

    groups: dict[tuple[str, str], list[tuple[str, list[str], int, int]]] = defaultdict(list)
    published: dict[tuple[str, str], int] = defaultdict(int)
    if pubs is not None:
        for r in (pubs.groupBy("cell", "rep", "node", F.array_sort("targets").alias("targets"))
                  .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("bytes")).collect()):
            groups[(r["cell"], r["rep"])].append((r["node"], list(r["targets"] or []), int(r["n"]),
                                                  int(r["bytes"] or 0)))
            published[(r["cell"], r["rep"])] += int(r["n"])
    restarts = {(r.cell, r.rep): restart_times(r) for r in runs}
    metrics = _read(spark, runs, lambda r: _nonempty(r.files("metrics.jsonl")), "metrics", schemas["metrics"],
                    check=False)
    growth = counter_growth(spark, metrics, restarts) if metrics is not None else {}

    fan, loss_rows, inexact_total = [], [], 0
    for run in runs:
        key = (run.cell, run.rep)
        receipts_n = sum(v["received"] for (c, rp, _), v in losses.items() if (c, rp) == key)
        min_bytes, min_copies, unreachable, inexact = fanout_minimum(run, groups.get(key, []))
        inexact_total += inexact
        g = growth.get(key)
        link_bytes = g["copies_out_bytes"] + g["live_out_bytes"] if g else None
        copies = g["copies_out"] + g["live_out"] if g else None
        fan.append({"cell": run.cell, "rep": run.rep, "publications": published.get(key, 0), "receipts": receipts_n,
                    "link_bytes": link_bytes, "min_bytes": min_bytes, "ratio": _ratio(link_bytes, min_bytes),
                    "copies": copies, "min_copies": min_copies, "copy_ratio": _ratio(copies, min_copies),
                    "bytes_per_receipt": _ratio(link_bytes, receipts_n),
                    "min_bytes_per_receipt": _ratio(min_bytes, receipts_n),
                    "restarts": g["restarts"] if g else None, "unreachable_targets": unreachable})
        clients = client_counts(run)
        late, lost = checker_counts(run)
        for kind in KINDS:
            n = losses.get((run.cell, run.rep, kind), {})
            c = clients.get(kind, {})
            if not n and not c:
                continue
            row = {"cell": run.cell, "rep": run.rep, "kind": kind, "subscriptions": c.get("subscriptions", 0),
                   **{k: n.get(k, 0) for k in ("expected", "received", "unexpected", "missing")},
                   **{k: c.get(k, 0) for k in ("duplicates", "redelivered", "dropped", "deliveries", "streams")},
                   "checker_late": late if kind == DURABLE else None,
                   "checker_lost": lost if kind == DURABLE else None}
            row["verdict"] = verdict(row)
            loss_rows.append(row)
        if min_bytes is None:
            out.notes.append(f"{run.cell}/{run.rep}: no topology.json, so no minimum tree.")
        if g is None:
            out.notes.append(f"{run.cell}/{run.rep}: no broker counters in metrics.jsonl, so no bytes on links.")
        if unreachable:
            out.notes.append(f"{run.cell}/{run.rep}: {unreachable} (publication, target) pairs have no path in "
                             "topology.json and count no link in the minimum.")
    if inexact_total:
        out.notes.append(f"{inexact_total} minimum trees were too large to search exhaustively: a greedy union of "
                         "shortest paths was counted (an upper bound on the minimum).")
    out.fanout = pd.DataFrame(fan, columns=FANOUT_COLUMNS)
    out.losses = pd.DataFrame(loss_rows, columns=LOSS_COLUMNS)
    return out


def verdict(row: dict) -> str:
    """FAIL when a durable receipt is missing or any subscription got a real duplicate (the loss checker's
    late/lost split of the missing durable receipts beside it, when summary.json has it)."""
    bad = []
    if row["kind"] == DURABLE and row["missing"] > 0:
        late, lost = _count(row.get("checker_late")), _count(row.get("checker_lost"))
        known = late is not None and lost is not None
        bad.append(f"{row['missing']} durable missing" + (f" (checker: {late} late, {lost} lost)" if known else ""))
    if row["duplicates"] > 0:
        bad.append(f"{row['duplicates']} duplicates")
    if bad:
        return "FAIL: " + ", ".join(bad)
    if row["missing"] > 0:
        return "missing allowed (at most once)"
    return "ok"


# ---- figures and HTML ---------------------------------------------------------------------------------

def cdf_figure(cdf: pd.DataFrame, cell: str, max_curves: int = MAX_CURVES):
    """The latency CDF of one cell: one curve per topic (per topic and kind when a topic has both)."""
    from ..plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    shown = list(dict.fromkeys(cdf["series"]))[:max_curves]     # in the order given
    for series in shown:
        g = cdf[cdf["series"] == series].sort_values("q")
        ax.plot(g["latency_ms"], g["q"], label=series, linewidth=1.2)
    positive = cdf.loc[cdf["series"].isin(shown) & (cdf["latency_ms"] > 0), "latency_ms"]
    if len(positive) and positive.max() > 100 * positive.min():
        ax.set_xscale("log")        # live receipts in ms beside durable ones held through a cut for seconds
    ax.set_xlabel("delivery latency (ms), publish to subscriber client")
    ax.set_ylabel("fraction of receipts")
    ax.set_title(f"Pub/sub latency CDF: {cell} (repetitions pooled)")
    ax.grid(alpha=0.3)
    if shown:
        ax.legend(fontsize="x-small")
    return fig


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80] or "cell"


def section_html(pt: PubSubTables | None, table: Callable[[pd.DataFrame, str], str],
                 figure: Callable[[Any, str, str], str] | None = None) -> str:
    """The section (heading included); "" when no run has pub/sub records, so reports without pub/sub stay
    as they were. `table` renders a DataFrame with an HTML id; `figure(fig, name, alt)` saves a matplotlib
    figure under `name` and returns its <img>."""
    if pt is None or not pt.present:
        return ""
    figs = []
    if figure is not None and len(pt.cdf):
        for cell, g in pt.cdf.groupby("cell", sort=True):
            # the series with most receipts first; at most MAX_CURVES drawn
            top = pt.latency[pt.latency["cell"] == cell].sort_values(["receipts", "topic"], ascending=[False, True])
            keys = list(zip(top["topic"], top["kind"]))
            order = {k: i for i, k in enumerate(keys)}
            g = g.assign(_o=[order.get(k, len(order)) for k in zip(g["topic"], g["kind"])])
            g = g[g["_o"] < MAX_CURVES].sort_values(["_o", "q"]).drop(columns="_o")
            figs.append(f"<h4>{html.escape(str(cell))}</h4>"
                        + figure(cdf_figure(g, str(cell)), f"pubsub_latency_{_slug(str(cell))}",
                                 f"pub/sub latency CDF {cell}"))
            if len(keys) > MAX_CURVES:
                figs.append(f"<p>{len(keys) - MAX_CURVES} more series in the table, not drawn.</p>")
    fails = pt.losses[pt.losses["verdict"].astype(str).str.startswith("FAIL")] if len(pt.losses) else pt.losses
    if len(fails):
        items = "; ".join(f"{r.cell}/{r.rep} {r.kind}: {r.verdict[len('FAIL: '):]}" for r in fails.itertuples())
        alarm = (f'<p class="pubsub-fail" style="color:#b00000;font-weight:bold">FAILURE: durable subscriptions '
                 f"must lose nothing and no subscription may get a duplicate: {html.escape(items)}.</p>")
    elif len(pt.losses):
        alarm = '<p class="pubsub-ok">No durable receipt missing, no duplicate.</p>'
    else:
        alarm = ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in pt.notes)
    return f"""<h2 id="pubsub">Publish/subscribe</h2>
<p>From <code>nodes/*/publications.jsonl</code> (what each publisher's node expected),
<code>subscribers/*/*/receipts.jsonl</code> and <code>subscriber.json</code> (what each subscriber client
got), the <code>broker</code> counters of <code>metrics.jsonl</code> and <code>topology.json</code>.
Durable = the subscription is durable (a publication for it is stored at every hop and must arrive exactly
once); non-durable = at most once.</p>
{f"<ul>{notes}</ul>" if notes else ""}
<h3>Delivery latency per topic</h3>
<p>Receipt latency: from publication at the origin to the subscriber client (first arrival of each
publication per subscription), receipts of all repetitions of a cell pooled; one curve per topic, per topic
and kind where a topic has both. Quantiles are Spark's percentile_approx (a receipt's own value).</p>
{"".join(figs)}
{table(pt.latency, "pubsub-latency-table")}
<h3>Fan-out efficiency</h3>
<p><em>Bytes on links</em> are the brokers' own counters summed over nodes: <code>copies_out_bytes</code>
(the stored publication copies handed to a next hop, each the serialized publication: payload plus its
header, id, topic and target list) plus <code>live_out_bytes</code> (the non-durable publication frames
sent), their growth over the run (a node's counters restart from 0 with its daemon: the last value of every
process lifetime is summed). Not counted: TCP/IP and gRPC framing, fragment headers, acknowledgements,
interest records, and retransmissions of a stored copy's fragments after a link cut (a stored copy is
counted once, when it is stored). The <em>minimum</em> is, per publication, its payload size times the links
of the smallest union of shortest paths (hop count) from its origin to its <code>targets</code> in
topology.json (hosts without a daemon contracted): one copy per link until the paths split.
ratio = link_bytes / min_bytes (1.0 = one copy per link; the copies' headers put it a little above 1, more
for small publications); copy_ratio = copies sent (copies_out + live_out) / links of the minimum trees, free
of the header bias; bytes_per_receipt = link_bytes / receipts. restarts = daemon restarts seen in the
counters.</p>
{table(pt.fanout, "pubsub-fanout-table")}
<h3>Losses and duplicates</h3>
<p>Per run and subscription kind: <code>expected</code> = (publication, subscription) pairs the publisher's
node expected (<code>expected</code>; durable when in <code>expected_durable</code>); <code>received</code> =
receipts (unique publications per subscription), <code>unexpected</code> of them for pairs no publication
expected (interest that reached the publisher later); <code>missing</code> = expected − received among the
expected pairs; from subscriber.json: <code>duplicates</code> = repeat arrivals the node did not flag (a real
duplicate), <code>redelivered</code> = repeats flagged as redelivered after a reconnect (expected, and
deduplicated by the client), <code>dropped</code> = publications a non-durable subscription's node dropped
for a slow client, <code>deliveries</code> = every arrival, <code>streams</code> = subscribes (reconnects + 1).
A durable receipt missing is a failure (durable must lose nothing); non-durable ones may be missing.
<code>checker_late</code>/<code>checker_lost</code>: the loss checker's split of the missing durable receipts
(summary.json: still held in a spool at teardown vs held nowhere), when the run has it.</p>
{alarm}
{table(pt.losses, "pubsub-losses-table")}
"""


class PubSubSection(Section):
    name = anchor = "pubsub"
    link = "pub/sub"
    step = "publish/subscribe (publications, receipts, broker counters)"
    alone = "publications"

    def has_records(self, runs: list[Run]) -> bool:
        return any_records(runs)

    def build(self, data: RunData) -> PubSubTables:
        return build(data.spark, data.runs)

    def tables(self, built: PubSubTables | None) -> dict[str, pd.DataFrame]:
        return built.named() if built is not None and built.present else {}

    def html(self, built: PubSubTables | None, page: Page) -> str:
        return section_html(built, page.table, page.figure)


SECTION = PubSubSection()
