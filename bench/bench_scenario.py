"""Scenario loading, address planning and MTA routing on large topologies.

Prints `<what>: measured X s / bound Y s = ratio R`; the bound is the budget
`testbed run` can afford before building a network (it is not a pass/fail).
"""
from __future__ import annotations

import time

from testbed.scenario import dump_resolved, load_text
from testbed.topology import addressing, generators, routing

SCENARIO = """
name: bench
topology: {generator: grid, params: {rows: 10, cols: 10}}
link_defaults: {delay: 25ms, rate: 1Mbit}
links: [{a: r1c1, b: r1c2, delay: 80ms}]
faults: [{at: 10s, action: link_down, target: r2c2-r2c3}]
sweep: {grid: {link_defaults.delay: [1ms, 10ms, 100ms], nodes.all.rbsad: [1, 2, 4, 8]}, reps: 3}
"""


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def report(what: str, seconds: float, bound: float) -> None:
    print(f"{what}: measured {seconds:.3f} s / bound {bound:.3f} s = ratio {seconds / bound:.2f}")


def main() -> None:
    s, t = timed(lambda: load_text(SCENARIO))
    report("load 100-host scenario with 12-value sweep", t, 1.0)
    _, t = timed(lambda: load_text(dump_resolved(s)))
    report("dump_resolved + reload", t, 1.0)
    for topo in (generators.grid(10, 10), generators.grid(22, 22), generators.ring(500), generators.cdnnet15()):
        n = len(topo.nodes)
        plan, t = timed(lambda: addressing.plan(topo))
        routes = sum(len(r) for r in plan.routes.values())
        report(f"address plan {topo.name} {n} hosts ({routes} kernel routes)", t, 5.0)
        table, t = timed(lambda: routing.next_hops(topo, "shortest", 1))
        report(f"next_hops shortest {topo.name} {n} hosts", t, 2.0)
        length, t = timed(lambda: routing.max_route_length(table))
        report(f"max_route_length {topo.name} {n} hosts (= {length})", t, 2.0)


if __name__ == "__main__":
    main()
