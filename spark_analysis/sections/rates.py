"""The report's MQ rate control section: the MQ-on-MPLS-VPN study's four figures from real runs, and its
published statements beside our numbers.

Sources (docs/run-directory.md, record kinds in node/schema.py):
- `nodes/<node>/rates.jsonl` ("rate"): clients' periodic reports (weight, queue bytes, rate in force, bytes
  the root acknowledged so far) every T/2 and the rates they were given; the root's allocations and its queue (the
  consumer's mailbox) every T/2;
- `nodes/<client>/submissions.jsonl`: submissions refused with the reason "overflow" (a full client queue);
- summary.json (`rate_control`: the rule, the clients in order; time_scale, the workload window) and
  scenario.yaml (the warm-up and the burst period of the second client's generator).

Times are on the paper's clock: model seconds from the start of the warm-up (the paper's 0 - 300 s start).
Rates are model bit/s (the nodes ran in wall units: x time_scale). Both files are read with Spark (schema-
checked); the per-run series are small and are shaped on the driver.

A run without `rate_control` has no section: the report is unchanged.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd
import yaml

from ..layout import Run, RunTimeline
from .base import Page, RunData, Section, empty_table

MA_WIDTH = 60                    # the paper's moving-average width (root queue, Fig. 12), in samples
OVERFLOW = "overflow"            # node/rate/admission.py OVERFLOW (the refusal reason of a full client queue)
SERIES_COLUMNS = ["cell", "rep", "control", "t", "client", "queue_bytes", "rate_bps", "assigned_bps"]
OVERFLOW_COLUMNS = ["cell", "rep", "control", "client", "accepted", "overflowed", "overflowed_in_burst"]
STATEMENT_COLUMNS = ["statement (paper §4.4)", "paper", "ours", "holds"]
# per client and repetition from summary.json's rate account (testbed/accounting/rates.py): starved_s = model
# seconds with messages queued while the rate in force was below a tenth of R/N
STARVATION_COLUMNS = ["cell", "rep", "rule", "client", "starved_s", "overflowed", "max_queue_bytes"]
# the same per cell, rule and client over the repetitions: mean and 95% CI (t on raw values, cut at 0)
BY_RULE_COLUMNS = ["cell", "rule", "client", "n", "starved_s", "starved_s_ci_lo", "starved_s_ci_hi",
                   "overflowed", "overflowed_ci_lo", "overflowed_ci_hi"]
ABSENT_NOTE = "no rate control in these runs."


@dataclass
class RateTables:
    present: bool = False
    series: pd.DataFrame = field(default_factory=lambda: empty_table(SERIES_COLUMNS))      # per client report
    overflow_curve: pd.DataFrame = field(default_factory=lambda: empty_table(["cell", "rep", "control", "client", "t", "n"]))
    root: pd.DataFrame = field(default_factory=lambda: empty_table(["cell", "rep", "control", "t", "queue_bytes", "ma"]))
    overflow: pd.DataFrame = field(default_factory=lambda: empty_table(OVERFLOW_COLUMNS))
    statements: pd.DataFrame = field(default_factory=lambda: empty_table(STATEMENT_COLUMNS))
    starvation: pd.DataFrame = field(default_factory=lambda: empty_table(STARVATION_COLUMNS))
    by_rule: pd.DataFrame = field(default_factory=lambda: empty_table(BY_RULE_COLUMNS))
    burst: tuple[float, float] | None = None
    client2: str = ""
    # (cell, rep) -> (wall clock of the paper's 0, time_scale): where the run's phases go on the figures
    clocks: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def named(self) -> dict[str, pd.DataFrame]:
        return {"rate_overflow": self.overflow, "rate_statements": self.statements,
                "rate_client_series": self.series, "rate_root_queue": self.root,
                "rate_starvation": self.starvation, "rate_by_rule": self.by_rule}


# ---- per run facts ------------------------------------------------------------------------------------------

@dataclass
class RunClock:
    """How a run's wall timestamps map to the paper's clock, and what the run was."""
    t0: float                 # wall time of the paper's 0 (the start of the warm-up)
    scale: float              # time_scale: wall seconds per model second
    warmup: float             # model seconds
    clients: list[str]
    root: str
    control: bool
    burst: tuple[float, float] | None      # the second client's burst on the paper's clock

    def model(self, ts: float) -> float:
        return (ts - self.t0) / self.scale


def run_clock(run: Run) -> RunClock | None:
    s = run.summary if isinstance(run.summary, dict) else None
    rc = s.get("rate_control") if s else None
    if not isinstance(rc, dict):
        return None
    try:
        scenario = yaml.safe_load((run.path / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        scenario = {}
    warmup = float(((scenario.get("workload") or {}).get("warmup")) or 0.0)
    events = run.path / "events.jsonl"
    end = None
    try:
        for line in events.read_text().splitlines():
            if '"workload_end"' in line:
                end = float(json.loads(line)["ts"])
    except (OSError, KeyError, TypeError, ValueError):
        end = None
    scale = float(s.get("time_scale") or 1.0)
    wall = float(s.get("duration_wall_s") or 0.0)
    if end is None:
        return None
    clients = list((rc.get("clients") or {}).keys())
    second = clients[1] if len(clients) > 1 else (clients[0] if clients else "")
    burst = None
    for g in (scenario.get("workload") or {}).get("generators") or []:
        sched = ((g.get("interarrival") or {}).get("schedule")) or []
        if second in (g.get("nodes") or []) and sched:
            burst = (warmup + float(sched[0]["from"]), warmup + float(sched[0]["to"]))
    rc_spec = scenario.get("rate_control") or {}
    return RunClock(t0=end - wall - warmup * scale, scale=scale, warmup=warmup, clients=clients,
                    root=str(rc_spec.get("root") or (rc.get("root") or {}).get("node", "")),
                    control=rc.get("rule") != "fixed", burst=burst)


def has_records(run: Run) -> bool:
    return isinstance(run.summary, dict) and isinstance(run.summary.get("rate_control"), dict)


def any_records(runs: list[Run]) -> bool:
    return any(has_records(r) for r in runs)


# ---- building the tables -----------------------------------------------------------------------------------------

def build(spark, runs: list[Run], submissions) -> RateTables:
    """`submissions`: the schema-checked submission records of the runs (spark_analysis.records.read)."""
    from pyspark.sql import functions as F

    from .. import records
    from ..compare import _to_pandas

    rt = RateTables()
    clocks = {(r.cell, r.rep): run_clock(r) for r in runs if has_records(r)}
    clocks = {k: v for k, v in clocks.items() if v is not None}
    if not clocks:
        rt.notes.append(ABSENT_NOTE)
        return rt
    rt.present = True
    rate = _to_pandas(records.read(spark, [r for r in runs if (r.cell, r.rep) in clocks], "rate")
                      .select("ts", "node", "event", "client", "weight", "rate_bps", "queue_bytes", "sent_bytes", "periodic",
                    "queue_mean_bytes",
                              "cell", "rep"))
    refused = _to_pandas(submissions.filter((~F.col("accepted")) & F.col("reason").startswith(OVERFLOW + ":"))
                         .select("ts", "node", "cell", "rep"))
    accepted = _to_pandas(submissions.filter(F.col("accepted")).groupBy("cell", "rep", "node").count())
    series, curves, roots, rows = [], [], [], []
    for (cell, rep), clk in sorted(clocks.items()):
        mine = rate[(rate["cell"] == cell) & (rate["rep"] == rep)]
        ctl = "with control" if clk.control else "without control"
        for c in clk.clients:
            rep_ = mine[(mine["node"] == c) & (mine["event"] == "report") & mine["periodic"].fillna(True)
                        .astype(bool)].sort_values("ts")
            if len(rep_):
                t = rep_["ts"].map(clk.model)
                sent = rep_["sent_bytes"].astype(float)
                dt = rep_["ts"].diff() / clk.scale
                # the sending rate: bytes the root acknowledged per model second between two reports; a
                # restarted client's counter starting again from 0 gives no sample
                sending = (sent.diff() * 8 / dt).where(sent.diff() >= 0)
                assigned = (mine[(mine["node"] == c) & (mine["event"].isin(["assigned", "fallback"]))]
                            .sort_values("ts"))
                given = pd.merge_asof(rep_[["ts"]], assigned[["ts", "rate_bps"]], on="ts")["rate_bps"] * clk.scale
                series.append(pd.DataFrame({"cell": cell, "rep": rep, "control": ctl, "t": t.values, "client": c,
                                            "queue_bytes": rep_["queue_bytes"].values,
                                            "rate_bps": sending.values, "assigned_bps": given.values}))
            over = refused[(refused["cell"] == cell) & (refused["rep"] == rep) & (refused["node"] == c)]
            ts = sorted(over["ts"].map(clk.model))
            curves.append(pd.DataFrame({"cell": cell, "rep": rep, "control": ctl, "client": c,
                                        "t": [0.0, *ts], "n": list(range(len(ts) + 1))}))
            acc = accepted[(accepted["cell"] == cell) & (accepted["rep"] == rep) & (accepted["node"] == c)]
            in_burst = sum(1 for x in ts if clk.burst and clk.burst[0] <= x <= clk.burst[1]) if clk.burst else None
            rows.append({"cell": cell, "rep": rep, "control": ctl, "client": c,
                         "accepted": int(acc["count"].sum()) if len(acc) else 0, "overflowed": len(ts),
                         "overflowed_in_burst": in_burst})
        q = mine[(mine["node"] == clk.root) & (mine["event"] == "queue")].sort_values("ts")
        if len(q):
            # the time average over each sample's T/2 where the run has it (an instantaneous sample aliases
            # against the consumer's removal period)
            level = q["queue_mean_bytes"].fillna(q["queue_bytes"]) if "queue_mean_bytes" in q else q["queue_bytes"]
            roots.append(pd.DataFrame({"cell": cell, "rep": rep, "control": ctl, "t": q["ts"].map(clk.model).values,
                                       "queue_bytes": q["queue_bytes"].values,
                                       "ma": level.astype(float).rolling(MA_WIDTH, min_periods=1).mean().values}))
        rt.clocks[(cell, rep)] = (clk.t0, clk.scale)
        rt.burst = rt.burst or clk.burst
        rt.client2 = rt.client2 or (clk.clients[1] if len(clk.clients) > 1 else clk.clients[0])
    rt.series = pd.concat(series, ignore_index=True) if series else rt.series
    rt.overflow_curve = pd.concat(curves, ignore_index=True) if curves else rt.overflow_curve
    rt.root = pd.concat(roots, ignore_index=True) if roots else rt.root
    rt.overflow = pd.DataFrame(rows, columns=OVERFLOW_COLUMNS)
    rt.statements = statements(rt)
    rt.starvation = starvation([r for r in runs if (r.cell, r.rep) in clocks])
    rt.by_rule = by_rule(rt.starvation)
    return rt


def starvation(runs: list[Run]) -> pd.DataFrame:
    """STARVATION_COLUMNS: one row per client and repetition, from each run's summary.json."""
    rows = []
    for r in sorted(runs, key=lambda r: (r.cell, r.rep)):
        rc = (r.summary or {}).get("rate_control") or {}
        for client, acc in (rc.get("clients") or {}).items():
            acc = acc if isinstance(acc, dict) else {}
            rows.append({"cell": r.cell, "rep": r.rep, "rule": rc.get("rule", ""), "client": client,
                         "starved_s": acc.get("starved_s"), "overflowed": acc.get("overflowed"),
                         "max_queue_bytes": acc.get("max_queue_bytes")})
    return pd.DataFrame(rows, columns=STARVATION_COLUMNS)


def by_rule(per_rep: pd.DataFrame) -> pd.DataFrame:
    """BY_RULE_COLUMNS: each cell's clients over its repetitions (a run from before starved_s has none)."""
    from ..stats import ci95

    rows = []
    for (cell, rule, client), g in per_rep.groupby(["cell", "rule", "client"], sort=True):
        row: dict[str, Any] = {"cell": cell, "rule": rule, "client": client, "n": len(g)}
        for col in ("starved_s", "overflowed"):
            iv = ci95(pd.to_numeric(g[col], errors="coerce").tolist(), nonnegative=True)
            row.update({col: iv.mean, f"{col}_ci_lo": iv.lo, f"{col}_ci_hi": iv.hi})
        rows.append(row)
    return pd.DataFrame(rows, columns=BY_RULE_COLUMNS)


def _mean(df: pd.DataFrame, col: str) -> float | None:
    v = pd.to_numeric(df[col], errors="coerce").dropna()
    return float(v.mean()) if len(v) else None


def statements(rt: RateTables) -> pd.DataFrame:
    """The paper's published statements (it gives no numbers) beside ours, from the pooled runs."""
    c2, burst = rt.client2, rt.burst
    s, of = rt.series, rt.overflow
    rows: list[dict[str, Any]] = []

    def add(text: str, paper: str, ours: str, holds: bool | None) -> None:
        rows.append({"statement (paper §4.4)": text, "paper": paper, "ours": ours,
                     "holds": "n/a" if holds is None else ("yes" if holds else "NO")})

    off, on = of[of["control"] == "without control"], of[of["control"] == "with control"]
    off2 = off[off["client"] == c2]
    if len(off2):
        n, nb = int(off2["overflowed"].sum()), off2["overflowed_in_burst"].dropna().sum()
        add(f"Without control, {c2} overflows during the burst", "yes (Fig. 9); no count published "
            "(a fluid estimate gives about 8.8e3 over an 1800 s burst)",
            f"{n} overflowed over {len(off2)} run(s), {int(nb)} of them in the burst", n > 0)
    if len(on):
        n = int(on["overflowed"].sum())
        add("With control, no client overflows", "none (Fig. 9)", f"{n} overflowed over {on['rep'].nunique()} run(s)",
            n == 0)
    if burst and len(s):
        inb = s[(s["client"] == c2) & (s["t"] >= burst[0]) & (s["t"] <= burst[1])]
        qon, qoff = _mean(inb[inb["control"] == "with control"], "queue_bytes"), \
            _mean(inb[inb["control"] == "without control"], "queue_bytes")
        if qon is not None and qoff is not None:
            add(f"{c2}'s queue is smaller with control (during the burst)", "yes (Fig. 10; without control it "
                "stays at the full 1 MB)", f"mean {qon / 1e3:.0f} kB with, {qoff / 1e3:.0f} kB without", qon < qoff)
        on2 = s[(s["client"] == c2) & (s["control"] == "with control")]
        rin = _mean(on2[(on2["t"] >= burst[0]) & (on2["t"] <= burst[1])], "rate_bps")
        rout = _mean(on2[(on2["t"] < burst[0]) | (on2["t"] > burst[1])], "rate_bps")
        if rin is not None and rout is not None:
            add(f"With control, {c2} sends faster during the burst than outside it", "yes (Fig. 11)",
                f"{rin / 1e3:.0f} kbit/s in the burst, {rout / 1e3:.0f} kbit/s outside", rin > rout)
    if len(rt.root):
        m_on = _mean(rt.root[rt.root["control"] == "with control"], "ma")
        m_off = _mean(rt.root[rt.root["control"] == "without control"], "ma")
        if m_on is not None and m_off is not None:
            add("The root queue's moving average (width 60) is larger with control", "yes (Fig. 12)",
                f"mean {m_on / 1e3:.1f} kB with, {m_off / 1e3:.1f} kB without", m_on > m_off)
    return pd.DataFrame(rows, columns=STATEMENT_COLUMNS)


# ---- figures and HTML ---------------------------------------------------------------------------------------------

def _finish(ax, burst: tuple[float, float] | None, ylabel: str, title: str) -> None:
    """The burst shaded, the axes labelled on the paper's clock."""
    if burst:
        ax.axvspan(burst[0], burst[1], color="orange", alpha=0.12, label="burst")
    ax.set_xlabel("time (model s, paper clock)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")


def figures(rt: RateTables, timelines: dict[tuple[str, str], RunTimeline] | None = None
            ) -> list[tuple[Any, str, str]]:
    """(figure, name, alt) of the paper's four figures; the runs' phases and faults marked on each when their
    timelines are given."""
    from ..plots import mark_runs, pyplot

    plt = pyplot()
    out = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for (ctl, client, cell, rep), g in rt.overflow_curve.groupby(["control", "client", "cell", "rep"], sort=True):
        g = g.sort_values("t")
        ax.step(g["t"], g["n"], where="post", label=f"{client}, {ctl} ({cell}/{rep})",
                linestyle="-" if ctl == "without control" else "--")
    mark_runs(ax, timelines, rt.clocks)
    _finish(ax, rt.burst, "overflowed messages (cumulative)", "Fig. 9: overflowed messages per client")
    out.append((fig, "rate_fig9_overflow", "cumulative overflowed messages per client"))

    c2 = rt.series[rt.series["client"] == rt.client2]
    for col, name, title, ylabel in (
            ("queue_bytes", "rate_fig10_queue", f"Fig. 10: {rt.client2}'s queue", "queue (kB)"),
            ("rate_bps", "rate_fig11_rate", f"Fig. 11: {rt.client2}'s sending rate", "rate (kbit/s)")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for (ctl, cell, rep), g in c2.groupby(["control", "cell", "rep"], sort=True):
            y = pd.to_numeric(g[col], errors="coerce") / 1e3
            if col == "rate_bps":
                # 10 reports = 5 T: the per-report rate is noisy, and the assigned one flips at every round
                y = y.rolling(10, min_periods=1).mean()
                if ctl == "with control":
                    given = pd.to_numeric(g["assigned_bps"], errors="coerce") / 1e3
                    ax.plot(g["t"], given.rolling(10, min_periods=1).mean(), linewidth=0.8, linestyle=":",
                            label=f"assigned rate, same smoothing ({cell}/{rep})")
            ax.plot(g["t"], y, label=f"{ctl} ({cell}/{rep})", linewidth=1)
        mark_runs(ax, timelines, rt.clocks)
        _finish(ax, rt.burst, ylabel, title)
        out.append((fig, name, title))

    fig, ax = plt.subplots(figsize=(7, 4))
    for (ctl, cell, rep), g in rt.root.groupby(["control", "cell", "rep"], sort=True):
        ax.plot(g["t"], g["ma"] / 1e3, label=f"{ctl} ({cell}/{rep})", linewidth=1)
    mark_runs(ax, timelines, rt.clocks)
    _finish(ax, rt.burst, f"root queue, moving average of {MA_WIDTH} samples (kB)",
            "Fig. 12: root queue (moving average)")
    out.append((fig, "rate_fig12_root_queue", "root queue moving average"))
    return out


def section_html(rt: RateTables | None, table: Callable[[pd.DataFrame, str], str],
                 figure: Callable[[Any, str, str], str] | None = None,
                 timelines: dict[tuple[str, str], RunTimeline] | None = None) -> str:
    """The section (heading included); "" when no run has rate control."""
    if rt is None or not rt.present:
        return ""
    imgs = "".join(figure(f, n, a) for f, n, a in figures(rt, timelines)) if figure is not None else ""
    burst = (f"{rt.burst[0]:g}-{rt.burst[1]:g} s" if rt.burst else "none found")
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in rt.notes)
    return f"""<h2 id="rates">MQ rate control</h2>
<p>Client queues forwarding to a root at rates the root assigns every T from the clients' queue occupancy
(deciles), against every client at R/N without control. From <code>nodes/*/rates.jsonl</code> (the clients'
reports every T/2, the rates they were given, the root's allocations and its queue every T/2) and the
clients' refused submissions (reason <code>overflow</code>: a full client queue). Times are model seconds
on the paper's clock (0 = start of the warm-up); rates are model bit/s of payload. The second client
({html.escape(rt.client2)}) is the paper's MQ2; its burst: {burst} (shaded). Its sending rate is what the
root acknowledged between two reports, smoothed over 10 reports; the root queue is the consumer's mailbox:
each sample is its time average over T/2 (an instantaneous one would alias against the consumer's removal
period, also 1 s), and the figure shows the moving average of {MA_WIDTH} samples as in the paper's Fig. 12.
The runs' phases (warm-up, workload, drain) are shaded and their faults dotted, on the same clock.</p>
{f"<ul>{notes}</ul>" if notes else ""}
<h3>The paper's statements beside ours</h3>
{table(rt.statements, "rate-statements-table")}
<h3>Overflow per client</h3>
{table(rt.overflow, "rate-overflow-table")}
<h3>Starvation per client and rule</h3>
<p>Model seconds each client had messages queued while the rate in force was below a tenth of R/N (rate 0
included), from its reports every T/2; and its overflow. Mean over the repetitions with its 95% CI.</p>
{table(rt.by_rule, "rate-by-rule-table")}
{imgs}
"""


class RateSection(Section):
    name = anchor = "rates"
    link = "rate control"
    step = "MQ rate control (rates.jsonl, overflowed submissions)"

    def wanted(self, runs: list[Run]) -> bool:
        return any_records(runs)

    def build(self, data: RunData) -> RateTables:
        return build(data.spark, data.runs, data.submissions)

    def tables(self, built: RateTables | None) -> dict[str, pd.DataFrame]:
        return built.named() if built is not None and built.present else {}

    def html(self, built: RateTables | None, page: Page) -> str:
        return section_html(built, page.table, page.figure, page.timelines)


SECTION = RateSection()
