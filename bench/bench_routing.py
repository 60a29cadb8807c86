"""Routing stack benchmarks. Each prints `measured / bound = ratio`.

  compute      route computation after one link change on a grid of 100 and 400 nodes: the whole
               recomputation a node does (link-state map -> damping per link -> Dijkstra -> hysteresis).
               Bound: 10% of the default probe interval (100 ms): a node must not spend its time routing.
  probes       probe traffic per link: two real daemons on loopback with dynamic routing for 20 s at the
               default 1 s interval; UDP bytes both ways (payload + 28 bytes of IPv4/UDP header) per second,
               from the probes the monitors counted. Bound: 1 kB/s per link (the thesis calls it negligible).
  convergence  time from a link change to a's last next-hop change for b (cost-only lines aside: a 5 ms link
               near a quantum boundary nudges costs for a while), for probe intervals 0.1 .. 1 s: a triangle
               a-b-c (a-b 10 ms, a-c 20 ms, c-b 5 ms) on the wire shaper; four step changes of the a-b delay
               one after the other, large up (60 ms: a moves to via c), large down (10 ms: back to b), small up
               (30 ms: via c is 17% cheaper, past the hysteresis) and small down (10 ms), 3 runs per interval
               (n = 3 per step and interval; about 15 minutes in all). Per step: median and max over the runs;
               the max against the bound (window/2 + 2) probe intervals + flooding across the diameter (one
               hop here, its link delay) + 1 s. Needs root (namespaces).

  flap         the flapping-link drill's route moves without damping and with it (default and 4 s half-life),
               from a run of scenarios/drill-flap.yaml (about 7.5 minutes): bench_routing.py flap [RUN_DIR]
  detour       England -> Korea delay with static and dynamic routing while CGL1-Korea is degraded, from a run
               of scenarios/intercontinental.yaml (about 7 minutes): bench_routing.py detour [RUN_DIR]
  intervals    Table 10 beside the thesis' from a run of scenarios/gunduz-intervals.yaml (not part of the
               default set: the sweep takes about 20 minutes): bench_routing.py intervals [RUN_DIR]

    .venv/bin/python bench/bench_routing.py [compute|probes|convergence|intervals ...]
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from node.routing.config import DampingConfig  # noqa: E402
from node.routing.damping import FlapDamper  # noqa: E402
from node.routing.linkstate import Advert, LinkStateDB  # noqa: E402
from node.routing.selector import RouteSelector  # noqa: E402


def grid_adverts(rows: int, cols: int, cost_of) -> dict[str, dict[str, float]]:
    links: dict[str, dict[str, float]] = {}
    for r in range(rows):
        for c in range(cols):
            me = f"r{r}c{c}"
            for rr, cc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if 0 <= rr < rows and 0 <= cc < cols:
                    links.setdefault(me, {})[f"r{rr}c{cc}"] = cost_of(me, f"r{rr}c{cc}")
    return links


def recompute(db: LinkStateDB, damper: FlapDamper, sel: RouteSelector, now: float) -> int:
    """What DynamicTable.recompute does, without the records and callbacks."""
    graph = db.graph()
    eff: dict[str, dict[str, float]] = {}
    for u, vs in graph.items():
        for v, c in vs.items():
            eff.setdefault(u, {})[v] = damper.observe((u, v), c, now)
    return len(sel.update(eff))


def bench_compute() -> None:
    bound = 0.100
    for rows in (10, 20):
        n = rows * rows
        links = grid_adverts(rows, rows, lambda a, b: 10.0 + (hash((a, b)) % 7))
        db, damper, sel = LinkStateDB(900.0), FlapDamper(DampingConfig()), RouteSelector("r0c0", 0.1)
        for origin, ls in links.items():
            db.offer(Advert(origin, 1, 0.0, ls))
        recompute(db, damper, sel, 0.0)
        times = []
        for k in range(30):       # one link's cost changes per round, as after a published measurement
            a, b = f"r{k % rows}c{k % rows}", f"r{k % rows}c{(k % rows) + 1 if k % rows + 1 < rows else k % rows - 1}"
            adv = db.adverts[a]
            db.offer(Advert(a, adv.seq + 1, 0.0, {**adv.links, b: 10.0 + 5 * (k % 3)}))
            t0 = time.perf_counter()
            recompute(db, damper, sel, float(k))
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"route computation, {n}-node grid (median of 30 changes): {med * 1000:.1f} ms "
              f"(max {max(times) * 1000:.1f}) / {bound * 1000:.0f} ms = {med / bound:.2f}")


def bench_probes() -> None:
    from testbed.localnet import LocalNet
    names, edges = ["n1", "n2"], [("n1", "n2")]
    routing = {"mode": "dynamic", "nodes": names}
    secs, bound = 20.0, 1000.0
    with tempfile.TemporaryDirectory(prefix="bench_routing_") as tmp:
        with LocalNet.build(Path(tmp), names, edges, routing=routing, metrics_interval=1.0) as net:
            net.start()
            first = {}
            for node in names:
                with net.client(node) as c:
                    first[node] = c.routes().links[0].probes_sent
            time.sleep(secs)
            with net.client("n1") as c:
                reply = c.routes()
            with net.client("n2") as c:
                reply2 = c.routes()
    sent = reply.links[0].probes_sent - first["n1"]
    sent2 = reply2.links[0].probes_sent - first["n2"]
    per_probe = 2 + 1 + 1 + 8 + 8 + 2 + 28      # header, the addressee's name (2 bytes here), IPv4 + UDP
    rate = (sent + sent2) * 2 * per_probe / secs       # requests and responses, both ends probing
    print(f"probe traffic per link at 1 s: {rate:.0f} B/s ({sent} probes from n1 in {secs:.0f} s) "
          f"/ {bound:.0f} B/s = {rate / bound:.2f}")


# The convergence bench's step changes of the a-b delay (ms), each with the next hop a must end on for b:
# large up, large down, small up, small down. Small: 10 -> 30 ms puts via c (25 ms) 17% below a-b, past the
# default hysteresis (10%).
CONVERGENCE_STEPS = ((60, "c", "large up"), (10, "b", "large down"), (30, "c", "small up"), (10, "b", "small down"))
CONVERGENCE_REPS = 3


def bench_convergence() -> None:
    intervals = [0.1, 0.25, 0.5, 1.0]
    window = 8
    out_root = Path(tempfile.mkdtemp(prefix="bench_conv_"))
    for interval in intervals:
        scen = out_root / f"conv-{interval}.yaml"
        first, spacing = 10.0 + 12 * interval, 12 * interval + 8
        faults = "\n".join(f"  - {{at: {first + i * spacing:g}s, action: link_set, target: a-b, "
                           f"params: {{delay: {step[0]}ms}}}}" for i, step in enumerate(CONVERGENCE_STEPS))
        scen.write_text(CONVERGENCE_SCENARIO.format(interval=interval, reps=CONVERGENCE_REPS, faults=faults,
                                                    duration=first + len(CONVERGENCE_STEPS) * spacing))
        out = out_root / f"run-{interval}"
        proc = subprocess.run([str(ROOT / ".venv/bin/testbed"), "run", str(scen), "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"convergence at {interval} s: run failed\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
            continue
        took: dict[str, list[float]] = {what: [] for _d, _h, what in CONVERGENCE_STEPS}
        missed: dict[str, int] = {what: 0 for _d, _h, what in CONVERGENCE_STEPS}
        for summary in sorted(out.glob("*/*/summary.json")):
            for what, seconds in _convergence_times(summary.parent).items():
                if seconds is None:
                    missed[what] += 1
                else:
                    took[what].append(seconds)
        bound = (window / 2 + 2) * interval + 0.060 + 1.0      # flooding: one hop, the slowest link (60 ms)
        for _delay, hop, what in CONVERGENCE_STEPS:
            t = took[what]
            if not t:
                print(f"convergence at probe interval {interval * 1000:.0f} ms, {what} (to via {hop}): no move seen "
                      f"in {missed[what]} reps / {bound:.2f} s")
                continue
            worst = max(t)
            print(f"convergence at probe interval {interval * 1000:.0f} ms, {what} (to via {hop}): "
                  f"n {len(t)}, median {statistics.median(t):.2f} s, max {worst:.2f} s"
                  f"{f' ({missed[what]} reps without the move)' if missed[what] else ''} "
                  f"/ {bound:.2f} s = {worst / bound:.2f}")


def _convergence_times(rep: Path) -> dict[str, float | None]:
    """Per step change of one run: seconds from the change to a's last next-hop change for b before the
    next change (cost-only lines aside), None when a did not end on the step's next hop."""
    events = [json.loads(line) for line in (rep / "events.jsonl").read_text().splitlines() if line.strip()]
    changes = sorted(e["ts"] for e in events if e.get("event") == "link_set")
    routes = [json.loads(line) for line in (rep / "nodes" / "a" / "routes.jsonl").read_text().splitlines()
              if line.strip()]
    to_b = [r for r in routes if r["dst"] == "b"]
    out: dict[str, float | None] = {}
    for i, (t_change, (_delay, hop, what)) in enumerate(zip(changes, CONVERGENCE_STEPS)):
        until = changes[i + 1] if i + 1 < len(changes) else math.inf
        moves = [r for r in to_b if t_change < r["ts"] < until and r["reason"] != "cost"]
        before = [r for r in to_b if r["ts"] < until]
        ended = before[-1]["next_hop"] if before else None
        out[what] = moves[-1]["ts"] - t_change if moves and ended == hop else None
    return out


CONVERGENCE_SCENARIO = """\
name: bench-convergence
seed: 1
duration: {duration}s
time_scale: 1.0
topology:
  generator: explicit
  nodes: [a, b, c]
  links:
    - {{a: a, b: b, delay: 10ms}}
    - {{a: a, b: c, delay: 20ms}}
    - {{a: c, b: b, delay: 5ms}}
routing:
  policy: dynamic
  monitor: {{interval: {interval}s}}
capture: none
workload:
  warmup: 1s
  drain: 5s
  generators:
    - nodes: [a]
      interarrival: {{dist: constant, mean: 1s}}
      size: {{dist: fixed, bytes: 1000}}
      recipients: {{choice: fixed, nodes: [b]}}
faults:
{faults}
sweep:
  reps: {reps}
"""

THESIS_TABLE_10 = {0.05: ("4000+", "900+", "300+"), 0.1: ("2000+", "93", "20"), 0.25: ("900+", "24", "1"),
                   0.5: ("94", "23", "1"), 1.0: ("93", "23", "1"), 2.0: ("93", "23", "1"), 5.0: ("93", "23", "1"),
                   10.0: ("93", "23", "1")}
TABLE_10_LINKS = (("cgl1", "korea", 102.0), ("cgl2", "sandiego", 30.0), ("cgl1", "cgl3", 1.2))


def bench_intervals(run_dir: str | None = None) -> None:
    """Table 10 from a run of scenarios/gunduz-intervals.yaml (RUN_DIR, or runs/gunduz-intervals):
    per probe interval, the cost each end settles on (median over the second half of the cell) for the
    thesis' three links, beside the configured one-way delay and the thesis' figures; the probe traffic per
    link; accuracy = |cost / configured delay - 1| over the links of 10 ms and more (the 1.2 ms CGL1-CGL3
    link is one or two quanta whatever happens) and |cost - delay| in ms over all seven. Bound: the settled
    costs within 10% of the configured delays at every interval >= 1 s (the thesis' "safe" range)."""
    root = Path(run_dir or ROOT / "runs" / "gunduz-intervals")
    cells = sorted(root.glob("*/1/summary.json"), key=lambda p: _interval_of(p.parent))
    if not cells:
        sys.exit(f"no runs of gunduz-intervals under {root} (testbed run scenarios/gunduz-intervals.yaml first)")
    print("interval | cgl1-korea (102) | cgl2-sandiego (30) | cgl1-cgl3 (1.2) | thesis Table 10 | "
          "worst error, links >= 10 ms | worst error, ms | probe B/s per link")
    for summary in cells:
        rep = summary.parent
        interval = _interval_of(rep)
        settled: dict[tuple[str, str], float] = {}
        probes: list[float] = []
        for mfile in sorted((rep / "nodes").glob("*/metrics.jsonl")):
            node = mfile.parent.name
            lines = [json.loads(x) for x in mfile.read_text().splitlines() if x.strip()]
            lines = [x for x in lines if "routing" in x]
            if len(lines) < 4:
                continue
            half = lines[len(lines) // 2:]
            span = half[-1]["ts"] - half[0]["ts"]
            for peer in half[-1]["routing"]["links"]:
                costs = [x["routing"]["links"][peer].get("cost") for x in half]
                costs = [c for c in costs if c is not None]
                if costs:
                    settled[(node, peer)] = statistics.median(costs)
                sent = [x["routing"]["links"][peer].get("probes_sent", 0) for x in half]
                if span > 0:
                    # request + response, and both ends probe: 4 datagrams per interval per link
                    probes.append((sent[-1] - sent[0]) / span * 4 * (2 + 1 + 1 + 8 + 8 + 5 + 28))
        delays = _configured_delays(rep)
        errs = [abs(c / delays[link] - 1) for link, c in settled.items() if delays.get(link, 0) >= 10]
        abs_errs = [abs(c - delays[link]) for link, c in settled.items() if link in delays]
        row = []
        for a, b, _d in TABLE_10_LINKS:
            both = [settled.get((a, b)), settled.get((b, a))]
            row.append("/".join(f"{c:g}" if c is not None else "-" for c in both))
        thesis = "/".join(THESIS_TABLE_10.get(interval, ("?", "?", "?")))
        worst = max(errs) if errs else math.nan
        worst_ms = max(abs_errs) if abs_errs else math.nan
        print(f"{interval * 1000:>6.0f} ms | {row[0]:>16} | {row[1]:>18} | {row[2]:>15} | {thesis:>15} | "
              f"{worst:>26.1%} | {worst_ms:>15.1f} | {statistics.mean(probes) if probes else 0:.0f}")
        if interval >= 1.0:
            print(f"    settled cost error at {interval:g} s: {worst:.3f} / 0.10 = {worst / 0.10:.2f}")


def _interval_of(rep: Path) -> float:
    cfg = (rep / "nodes" / "cgl1" / "node.yaml").read_text()
    import yaml
    return float(yaml.safe_load(cfg)["routing"].get("monitor", {}).get("interval", 1.0))


def _configured_delays(rep: Path) -> dict[tuple[str, str], float]:
    """(node, neighbour) -> one-way delay in ms from topology.json (the sweep changes no link)."""
    topo = json.loads((rep / "topology.json").read_text())
    out: dict[tuple[str, str], float] = {}
    for link in topo["links"]:
        out[(link["a"], link["b"])] = (link["a_to_b"].get("delay") or 0) * 1000
        out[(link["b"], link["a"])] = (link["b_to_a"].get("delay") or 0) * 1000
    return out


def bench_flap(run_dir: str | None = None) -> None:
    """The flapping-link drill from a run of scenarios/drill-flap.yaml (RUN_DIR, or runs/drill-flap): per cell
    (no damping; damping at the defaults; damping with a 4 s half-life) the link changes, n1's next-hop moves
    for n3 and every node's next-hop moves.
    Bound: with damping, n1's route to n3 moves at most once per four link changes."""
    root = Path(run_dir or ROOT / "runs" / "drill-flap")
    cells = sorted(root.glob("*/1/summary.json"))
    if not cells:
        sys.exit(f"no runs of drill-flap under {root} (testbed run scenarios/drill-flap.yaml first)")
    for summary in cells:
        rep = summary.parent
        events = [json.loads(x) for x in (rep / "events.jsonl").read_text().splitlines() if x.strip()]
        changes = sum(1 for e in events if e.get("event") == "link_set")
        first = min(e["ts"] for e in events if e.get("event") == "link_set")
        moves_n3, moves_all = 0, 0
        for rfile in sorted((rep / "nodes").glob("*/routes.jsonl")):
            for r in (json.loads(x) for x in rfile.read_text().splitlines() if x.strip()):
                if r["reason"] in ("cost", "initial", "static") or r["ts"] < first:     # start-up aside
                    continue
                moves_all += 1
                moves_n3 += rfile.parent.name == "n1" and r["dst"] == "n3"
        verdict = json.loads(summary.read_text())
        line = (f"{rep.parent.name}: {changes} link changes, n1->n3 next hop moved {moves_n3} times, "
                f"all nodes {moves_all}; lost {verdict.get('lost')}, duplicates {verdict.get('duplicates')}")
        if "true" in rep.parent.name:
            bound = changes / 4
            line += f"; n1->n3 moves {moves_n3} / {bound:g} = {moves_n3 / bound:.2f}"
        print(line)


def bench_detour(run_dir: str | None = None) -> None:
    """Delivery delay England -> Korea with the static least-delay table (policy delay) and with dynamic
    routing, from a run of scenarios/intercontinental.yaml (RUN_DIR, or runs/intercontinental): messages
    submitted while CGL1-Korea was degraded (306 ms, 2% loss), and all the others. Bound: dynamic's mean
    delay in the degraded phase at most the static table's (it should be well below: 208 ms of path
    instead of 153 + 204 ms extra and retransmissions)."""
    root = Path(run_dir or ROOT / "runs" / "intercontinental")
    cells = sorted(root.glob("*/*/summary.json"))
    if not cells:
        sys.exit(f"no runs of intercontinental under {root} (testbed run scenarios/intercontinental.yaml first)")
    phase: dict[str, dict[str, list[float]]] = {}
    for summary in cells:
        rep = summary.parent
        events = [json.loads(x) for x in (rep / "events.jsonl").read_text().splitlines() if x.strip()]
        degraded, restored = sorted(e["ts"] for e in events if e.get("event") == "link_set")[:2]
        rows = [json.loads(x) for x in (rep / "nodes" / "korea" / "deliveries.jsonl").read_text().splitlines()]
        for r in rows:
            if r["src"] != "england":
                continue
            which = "degraded" if degraded <= r["submit_ts"] < restored else "normal"
            phase.setdefault(rep.parent.name, {}).setdefault(which, []).append(r["delay"])
    means = {}
    for cell, by in sorted(phase.items()):
        for which in ("normal", "degraded"):
            d = sorted(by.get(which, []))
            if d:
                means[(cell, which)] = statistics.mean(d)
                print(f"{cell} England->Korea, {which}: {len(d)} messages, mean {statistics.mean(d) * 1000:.0f} ms, "
                      f"p50 {d[len(d) // 2] * 1000:.0f} ms, p95 {d[int(len(d) * 0.95)] * 1000:.0f} ms")
    dyn, stat = means.get(("policy-dynamic", "degraded")), means.get(("policy-delay", "degraded"))
    if dyn and stat:
        print(f"degraded phase mean delay, dynamic: {dyn * 1000:.0f} ms / static {stat * 1000:.0f} ms = {dyn / stat:.2f}")


BENCHES = {"compute": bench_compute, "probes": bench_probes, "convergence": bench_convergence,
           "intervals": bench_intervals, "flap": bench_flap, "detour": bench_detour}

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] in (["intervals"], ["flap"], ["detour"]) and len(args) == 2:
        BENCHES[args[0]](args[1])
        sys.exit(0)
    for name in args or ["compute", "probes", "convergence"]:
        if name not in BENCHES:
            sys.exit(f"unknown bench {name!r} (known: {', '.join(BENCHES)})")
        BENCHES[name]()
