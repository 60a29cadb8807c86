"""One repetition of one cell: from an empty machine to a complete run directory.

build network -> write node configs -> start daemons -> wait healthy -> host
monitor -> the subsystems' clients -> warm-up -> workload + fault timeline for
the duration -> drain (spools empty, the subsystems' clients served) -> stop the
clients and daemons -> tear down -> loss check -> summary.json (and `.complete`
when it all ran). The subsystems come from their registry (testbed/subsystems/).

Teardown always happens (finally). A stop request (Ctrl-C in the runner) ends
the current phase promptly; what was collected stays and the summary says the
run is incomplete. The scenario given is in model units; everything that is
scheduled is converted once with timescale.to_wall.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from node.errors import UserError
from testbed import accounting
from testbed.accounting import stall
from testbed.clockoffset import Estimate
from testbed.experiment import nodeconfig, summary, timescale, workload
from testbed.experiment.busy import BusyLoad
from testbed.experiment.daemons import NodeDaemons
from testbed.experiment.driver import WorkloadDriver
from testbed.experiment.faults import Timeline
from testbed.experiment.hostmon import HostMonitor
from testbed.experiment.linkmon import LinkMonitor
from testbed.experiment.machines import write_machines
from testbed.experiment.progress import Progress
from testbed.experiment.record_failures import RecordFailures
from testbed.network import Network
from testbed.scenario.loader import dump_resolved
from testbed.scenario.spec import Scenario
from testbed.subsystems import SUBSYSTEMS, Clients, RunContext

log = logging.getLogger(__name__)

HEALTH_TIMEOUT = 60.0     # wall seconds for every daemon to answer Health (Python start-up on a loaded host)
SESSION_TIMEOUT = 30.0    # wall seconds for neighbour sessions to come up before the workload starts
TICK = 1.0                # wall seconds between progress updates
CONFIRM = 0.3             # wall seconds between a drain round that found every spool empty and the one confirming it
DRAIN_POLL = 0.25         # wall seconds between drain rounds while something is held: the drain ends soon after
COMPLETE_MARKER = ".complete"


@dataclass
class CellResult:
    complete: bool
    reason: str
    summary: dict = field(default_factory=dict)
    verdict: accounting.Verdict | None = None      # the loss checker's, made after teardown


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM while tearing down (main thread only): half a teardown leaves leftovers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, lambda *_: log.warning("still tearing down; please wait"))
           for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


class _Stopped(Exception):
    """The stop event was set: unwind to teardown."""


def run_cell(scenario: Scenario, rep_dir: Path, progress: Progress, stop: threading.Event) -> CellResult:
    """Run one repetition into rep_dir (see the module docstring)."""
    rep_dir = Path(rep_dir)
    rep_dir.mkdir(parents=True, exist_ok=True)
    (rep_dir / COMPLETE_MARKER).unlink(missing_ok=True)
    run = _CellRun(scenario, rep_dir, progress, stop)
    return run.run()


class _CellRun:
    def __init__(self, scenario: Scenario, rep_dir: Path, progress: Progress, stop: threading.Event) -> None:
        self.model = scenario
        self.wall = timescale.to_wall(scenario)
        self.rep_dir = rep_dir
        self.progress = progress
        self.stop = stop
        self.cell = rep_dir.parent.name
        try:
            self.rep = int(rep_dir.name)
        except ValueError:
            self.rep = 1
        self.network: Network | None = None
        self.daemons: NodeDaemons | None = None
        self.hostmon: HostMonitor | None = None
        self.busy: BusyLoad | None = None
        self.linkmon: LinkMonitor | None = None
        self.driver: WorkloadDriver | None = None
        self.timeline: Timeline | None = None
        self.clients: list[Clients] = []        # the subsystems' clients, in registry order
        self.drain: dict[str, Any] | None = None
        self.delivered = 0
        # when the nodes' delivered total last changed (monotonic): the drain stops once the network is stalled
        self.last_delivery: float | None = None
        self._last_total = -1
        self.record_failures = RecordFailures()     # what the nodes' Stats say about their failed record writes
        # machine -> (start, end) clock estimates (testbed/clockservice.py), filled when the rep's hosts run on
        # several machines; machines.json is written from them before the summary (one machine: nothing)
        self.clock_estimates: dict[str, tuple[Estimate, Estimate]] = {}
        self.clock_start: dict[str, Estimate] = {}
        self.clock_problem = ""          # why the clocks could not be measured (flags the rep)

    def phase(self, name: str) -> None:
        log.info("%s rep %d: %s", self.cell, self.rep, name)
        self.progress.phase(self.cell, self.rep, name)
        if self.stop.is_set():
            raise _Stopped()

    def run(self) -> CellResult:
        complete, reason = False, ""
        error: BaseException | None = None
        try:
            self._run()
            complete = not self.stop.is_set()
            reason = "" if complete else "interrupted"
        except _Stopped:
            reason = "interrupted"
        except UserError as exc:
            reason = str(exc).splitlines()[0]
            error = exc
        except Exception as exc:  # noqa: BLE001 - recorded in the summary, then re-raised
            reason = f"internal error: {exc!r}"
            error = exc
        finally:
            self._teardown()
        if self.stop.is_set() and not reason:
            complete, reason = False, "interrupted"
        write_machines(self.rep_dir, self.clock_estimates, self.clock_problem)
        # Only now: the daemons are stopped, so every spool file holds what its node held at the end.
        verdict = accounting.check_run(self.rep_dir, SUBSYSTEMS)
        result = summary.write_summary(self.rep_dir, self.model, complete=complete, reason=reason, drain=self.drain,
                                       verdict=verdict)
        self._announce(verdict, result)
        if complete:
            (self.rep_dir / COMPLETE_MARKER).write_text(f"{time.time()}\n")
        if error is not None:
            raise error
        return CellResult(complete, reason, result, verdict)

    def _announce(self, verdict: accounting.Verdict, result: dict) -> None:
        """The checker's verdict on the console (and in runner.log through the progress display), then each
        subsystem's lines about its part of the summary `result`."""
        stalled = result.get("stall")
        try:
            line = accounting.verdict_line(accounting.label(self.rep_dir), verdict, self.model.max_late)
            # a deadlock holds its copies (late), it loses none: the verdict says stalled
            self.progress.event(f"{line} — STALLED" if stalled and stalled.get("stalled") else line)
            if stalled and stalled.get("stalled"):
                self.progress.event(f"  {stall.text(stalled)}")
            for line in accounting.verdict_details(verdict):
                self.progress.event(f"  {line}")
            for sub in SUBSYSTEMS:
                for line in sub.console(result):
                    self.progress.event(f"  {line}")
        except Exception:  # noqa: BLE001 - a broken console must not lose the run's summary
            log.exception("cannot show the loss checker's verdict")

    # ---- the phases ----------------------------------------------------------------------

    def _run(self) -> None:
        wall = self.wall
        (self.rep_dir / "scenario.yaml").write_text(dump_resolved(self.model))
        self.phase("building")
        # Signals belong to the runner (it sets `stop`); the network must not install its own.
        self.network = Network.from_scenario(wall, run_dir=self.rep_dir, kind="run", handle_signals=False)
        self.network.start()
        self._measure_clocks(start=True)
        configs = nodeconfig.node_configs(wall, self.network, self.rep_dir)
        run_secrets = nodeconfig.add_security(wall, configs, self.rep_dir)
        tokens = nodeconfig.client_tokens(configs, run_secrets)
        paths = nodeconfig.write_configs(configs, self.rep_dir)
        # Daemon-less hosts (plain IP routers) neither submit nor receive.
        schedule = workload.schedule(self.model, nodeconfig.daemon_hosts(wall, self.network))

        self.phase("starting")
        self.daemons = NodeDaemons(self.network, paths, docker=wall.runtime == "docker", tokens=tokens)
        self.daemons.start_all()
        self.daemons.wait_healthy(HEALTH_TIMEOUT, self.stop)
        missing = self.daemons.wait_sessions(SESSION_TIMEOUT, self.stop)
        if missing:
            self.progress.event(f"neighbour sessions of {', '.join(missing)} not all up after "
                                f"{SESSION_TIMEOUT:.0f} s; starting anyway")
        if wall.hosts.busy:
            self.busy = BusyLoad(self.network, nodeconfig.daemon_hosts(wall, self.network), wall.hosts.busy,
                                 docker=wall.runtime == "docker")
            self.busy.start()
        self.hostmon = HostMonitor(self.rep_dir / "host.jsonl", self.daemons.pids)
        self.hostmon.start()
        self.linkmon = self.network.link_monitor(self.rep_dir / "links.jsonl")
        self.linkmon.start()
        ctx = RunContext(self.rep_dir, address=lambda n: nodeconfig.mgmt_target(self.network, n),
                         reachable=self.daemons.reachable, tokens=tokens,
                         client=lambda n: self.daemons.client(n, timeout=5.0),
                         user_access=run_secrets.access if run_secrets.auth else None,
                         run_id=self.network.run_id)
        for sub in SUBSYSTEMS:
            clients = sub.clients(wall, ctx)
            if clients is None:
                continue
            self.clients.append(clients)
            for line in clients.start(SESSION_TIMEOUT, self.stop):
                self.progress.event(line)

        if wall.workload.warmup > 0:
            self.phase("warmup")
            self._wait(wall.workload.warmup)

        self.phase("workload")
        self.driver = WorkloadDriver(self.network, schedule, self.model.time_scale, self.rep_dir,
                                     address=lambda n: nodeconfig.mgmt_target(self.network, n),
                                     reachable=self.daemons.reachable, tokens=tokens,
                                     user_tokens=run_secrets.access if run_secrets.auth else None)
        self.timeline = Timeline(self.network, self.daemons, wall.faults, on_event=self.progress.event,
                                 clients=self.clients)
        t0 = time.monotonic()
        self.last_delivery = t0
        self.driver.start(t0)
        self.timeline.start(t0)
        try:
            self._wait(wall.duration, t0)
        finally:
            self.driver.stop()
            self.timeline.stop()
        self.network.record_event("workload_end", "all", **self.driver.counters())

        self.phase("drain")
        self.drain = self._drain(wall.workload.drain, wall.workload.stall_after)
        if self.drain.get("stalled"):
            self.progress.event(f"drain ended after {self.drain['seconds']:.1f} s: STALLED, nothing delivered for "
                                f"{wall.workload.stall_after:.1f} wall s while messages are held")
        elif not self.drain["empty"]:
            self.progress.event(f"drain ended after {self.drain['seconds']:.1f} s with messages still held: "
                                f"{self.drain['remaining']}")
        self.phase("collect")

    def _wait(self, seconds: float, t0: float | None = None) -> None:
        """Sleep `seconds` of wall time from t0, ticking progress; a stop request cuts it short."""
        t0 = time.monotonic() if t0 is None else t0
        last_poll = 0.0
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= seconds:
                break
            if time.monotonic() - last_poll >= 2 * TICK:
                self._poll_delivered()
                last_poll = time.monotonic()
            submitted = self.driver.submitted if self.driver else 0
            self.progress.tick(elapsed, seconds, submitted, self.delivered)
            if self.stop.wait(min(TICK, seconds - elapsed)):
                raise _Stopped()

    def _poll_delivered(self) -> None:
        assert self.daemons is not None
        total = 0
        for n in self.daemons.config_paths:
            if not self.daemons.reachable(n):
                continue
            try:
                st = self.daemons.stats(n, timeout=2.0)
                self._saw_stats(n, st)
                total += int(st.get("delivered", 0))
            except UserError:
                pass
        self._saw_delivered(total)

    def _saw_delivered(self, total: int) -> None:
        if total != self._last_total:
            self._last_total = total
            self.last_delivery = time.monotonic()
        self.delivered = max(self.delivered, total)

    def _drain(self, bound: float, stall_after: float = float("inf")) -> dict[str, Any]:
        """Poll every node until all spools are empty, `bound` wall seconds passed, or nothing was delivered
        for `stall_after` wall seconds while messages are held (stalled: waiting longer changes nothing).

        The nodes are asked one after the other, so a message can move from a node not asked yet to one
        asked already and be seen nowhere. "Empty" therefore counts only when a second round, a moment
        later, is empty too and no node's traffic counters moved in between."""
        assert self.daemons is not None
        t0 = time.monotonic()
        remaining: dict[str, Any] = {}
        stalled = False
        seen_empty: int | None = None        # the traffic counters of the last round that found nothing
        last_tick: float | None = None
        while True:
            remaining = {}
            delivered = 0
            activity = 0
            for n in self.daemons.config_paths:
                if not self.daemons.reachable(n):
                    remaining[n] = f"daemon {self.daemons.state.get(n)}"
                    continue
                try:
                    st = self.daemons.stats(n, timeout=5.0)
                except UserError as exc:
                    remaining[n] = f"unreachable: {exc}"
                    continue
                self._saw_stats(n, st)
                delivered += int(st.get("delivered", 0))
                activity += _activity(st)
                held = int(st.get("spool_messages", 0)) + sum(sub.held(st) for sub in SUBSYSTEMS)
                # Fragments sent but not yet acknowledged belong to no queued message: still in flight.
                if held or int(st.get("spool_fragments", 0)):
                    remaining[n] = max(held, 1)
            if not remaining:
                # what the nodes still hold for the subsystems' clients: they are still reading it
                for clients in self.clients:
                    remaining.update(clients.backlog())
            elapsed = time.monotonic() - t0
            submitted = self.driver.submitted if self.driver else 0
            self._saw_delivered(delivered)
            stalled = bool(remaining) and self.last_delivery is not None and \
                time.monotonic() - self.last_delivery >= stall_after
            done = (not remaining and seen_empty == activity) or elapsed >= bound or stalled
            # rounds come every DRAIN_POLL, progress lines (and progress.jsonl) still once a TICK
            if done or last_tick is None or time.monotonic() - last_tick >= TICK:
                self.progress.tick(elapsed, bound, submitted, self.delivered)
                last_tick = time.monotonic()
            if done:
                break
            seen_empty = activity if not remaining else None
            pause = CONFIRM if not remaining else DRAIN_POLL
            if self.stop.wait(max(0.0, min(pause, bound - elapsed))):
                raise _Stopped()
        in_flight = sum(v for v in remaining.values() if isinstance(v, int))
        return {"empty": not remaining, "remaining": remaining, "in_flight": in_flight,
                "seconds": round(time.monotonic() - t0, 3), "bound": bound, "stalled": stalled}

    def _saw_stats(self, node: str, stats: dict[str, Any]) -> None:
        assert self.daemons is not None
        self.record_failures.saw(node, self.daemons.procs.get(node), stats)

    def _record_failures(self) -> None:
        """Ask every running daemon once more, then put the nodes' failed record writes in events.jsonl (the
        loss checker fails the repetition on any)."""
        if self.daemons is None or self.network is None:
            return
        for n in self.daemons.config_paths:
            if not self.daemons.reachable(n):
                continue
            try:
                self._saw_stats(n, self.daemons.stats(n, timeout=2.0))
            except UserError as exc:
                log.warning("cannot ask %s for its failed record writes: %s", n, exc)
        self.network.record_event("records_failed", "all", counts=self.record_failures.counts())

    def _measure_clocks(self, start: bool) -> None:
        """Each machine's clock at the start of the rep (after the network is built) and at its end (before the
        agents go): machines.json is written from the pairs. One machine: nothing. A machine that does not answer
        flags the rep (`problem` in machines.json) rather than failing it: its records are complete."""
        if self.network is None or (not start and not self.clock_start) or self.clock_problem:
            return
        try:
            now = self.network.measure_clocks()
        except UserError as exc:
            self.clock_problem = f"{exc}".rstrip(".") + f" (at the {'start' if start else 'end'} of the rep)"
            self.progress.event(f"clocks not measured: {self.clock_problem}")
            return
        if start:
            self.clock_start = now
        else:
            self.clock_estimates = {m: (self.clock_start[m], now[m]) for m in self.clock_start if m in now}

    def _teardown(self) -> None:
        """Stop everything this cell started, in order; never raises, and a further Ctrl-C cannot cut it short."""
        with _signals_held():
            self._teardown_steps()

    def _teardown_steps(self) -> None:
        try:
            self.progress.phase(self.cell, self.rep, "teardown")
        except Exception:  # noqa: BLE001 - a broken console must not block teardown
            pass
        steps: list[tuple[str, Callable[[], Any]]] = [("driver", lambda: self.driver and self.driver.stop())]
        steps += [(clients.name, clients.stop) for clients in self.clients]
        steps += [("fault timeline", lambda: self.timeline and self.timeline.stop()),
                  ("host monitor", lambda: self.hostmon and self.hostmon.stop()),
                  ("link monitor", lambda: self.linkmon and self.linkmon.stop()),
                  ("busy processes", lambda: self.busy and self.busy.stop()),
                  ("count of failed record writes", self._record_failures),
                  ("clock measurement", lambda: self._measure_clocks(start=False)),
                  ("daemons", lambda: self.daemons and self.daemons.stop_all()),
                  ("network", lambda: self.network and self.network.stop())]
        for what, fn in steps:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001
                log.warning("teardown of the %s failed: %s", what, exc)


def _activity(stats: dict[str, Any]) -> int:
    """A number that grows whenever the node moves anything (frames in or out, deliveries, what its subsystems
    move)."""
    n = int(stats.get("delivered", 0))
    for link in (stats.get("neighbours") or {}).values():
        n += int(link.get("frags_in", 0)) + int(link.get("frags_out", 0)) + int(link.get("retransmissions", 0))
    return n + sum(sub.activity(stats) for sub in SUBSYSTEMS)
