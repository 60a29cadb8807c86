"""`testbed run`: a scenario (or a sweep over it) into run directories.

    out/experiment.json          the cells, their overrides, reps, seeds, status per rep
    out/runner.log               one line per rep started, skipped, finished (also read by tests)
    out/<cell>/<rep>/            one run directory per repetition (written by cell.run_cell)

The runner owns the loop, not the run: it loads the scenario once per rep with
the cell's overrides and a derived seed, hands it to `cell.run_cell`, and keeps
experiment.json current after every change so an interrupted or crashed sweep
can be resumed (`--resume` skips reps whose `.complete` marker exists).
Ctrl-C sets the stop event the running cell watches; the cell tears down and
the runner marks the experiment incomplete and exits 130.
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import subprocess
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

import yaml

from node import clockmodel
from node.errors import UserError
from spark_analysis.render import console_table
from testbed.experiment import cell as cell_runner, hostmon, sweep
from testbed.experiment.summary import check as summary_problems
from testbed.experiment.progress import Progress, ProgressLog
from testbed.scenario import loader
from testbed.scenario.spec import Scenario
from testbed.subsystems import SUBSYSTEMS

log = logging.getLogger(__name__)

COMPLETE_MARKER = ".complete"
EXPERIMENT_FILE = "experiment.json"
RUNNER_LOG = "runner.log"
PROGRESS_FILE = "progress.jsonl"
EXIT_OK = 0
EXIT_PROBLEMS = 1        # a rep failed, stayed incomplete, or failed the loss checker (lost/duplicated/too late)
EXIT_INTERRUPTED = 130

RunCell = Callable[[Scenario, Path, Progress, threading.Event], Any]
EnsureImage = Callable[[Progress], None]


@dataclass
class RepPlan:
    """One repetition of one cell: where it runs and with which seed."""

    cell: sweep.Cell
    rep: int
    seed: int
    dir: Path
    scenario: Scenario
    status: str = "pending"          # pending | running | complete | incomplete | interrupted | failed | skipped
    reason: str = ""
    wall_s: float | None = None
    commit: str | None = None        # the checkout's short commit (+ "-dirty") the rep ran at
    summary: dict[str, Any] = field(default_factory=dict)


# ---- loading ------------------------------------------------------------------------------

def _pinned(sets: list[str], grid: dict[str, list[Any]]) -> dict[str, Any]:
    """Swept keys the user fixed with --set: the sweep keeps only that value (so one cell can be run alone)."""
    out: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if sep and key.strip() in grid:
            try:
                out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                continue        # the loader has already reported bad values
    return out


def plan(path: str, out: Path, reps: int | None, quick: bool, sets: list[str]) -> tuple[Scenario, list[RepPlan]]:
    """Validate the scenario and every cell of its sweep before anything is built."""
    base = loader.load(path, overrides=sets, quick=quick)
    if reps is not None and reps < 1:
        raise UserError(f"--reps must be at least 1, got {reps}.")
    n_reps = reps if reps is not None else base.sweep.reps
    pinned = _pinned(sets, base.sweep.grid)
    if pinned:
        for key, value in pinned.items():
            base.sweep.grid[key] = [value]
    # the user's --set values for swept keys are already applied; cells must not undo them
    plain_sets = [s for s in sets if s.partition("=")[0].strip() not in pinned]
    plans: list[RepPlan] = []
    for cell in sweep.expand(base):
        overrides = sweep.set_arguments(cell.overrides)
        for rep in range(1, n_reps + 1):
            seed = sweep.rep_seed(base, cell, rep)
            scenario = loader.load(path, overrides=[*plain_sets, *overrides, f"seed={seed}"], quick=quick)
            plans.append(RepPlan(cell=cell, rep=rep, seed=seed, dir=out / cell.name / str(rep), scenario=scenario))
        check_node_settings(plans[-1].scenario)      # the reps of a cell differ only in their seed
    if not plans:
        raise UserError("every point of the sweep is excluded (sweep.exclude) once the --set values pin the grid.")
    return base, plans


def check_node_settings(scenario: Scenario) -> None:
    """Validate every node's settings (`nodes:` and --set nodes.*) with the node's own config loader now,
    with placeholder addresses: a bad mode or buffer count is one error before anything is built, not a
    failure in the middle of a sweep. The error names the scenario key that set the bad value and its line, as
    the loader's own errors do. The cell validates again with the real addresses."""
    from testbed.experiment import timescale
    from testbed.experiment.nodeconfig import merged_config, setting_at_fault
    from testbed.scenario.checks import ScenarioError, path_text
    from testbed.topology import generators

    wall = timescale.to_wall(scenario)
    topo = generators.from_scenario(wall)
    for name in topo.node_names():
        wiring = {"name": name, "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001",
                  "neighbours": {peer: "127.0.0.1:7000" for peer in topo.neighbours(name)},
                  "records_dir": "/nonexistent"}
        try:
            merged_config(wall, name, wiring)
        except UserError:
            fault = setting_at_fault(wall, name, wiring)
            if fault is None:
                raise
            path, why = fault
            detail = f"{path_text(path)}: {why}"
            raise ScenarioError(f"{scenario.where(path)} {detail}", detail) from None


# ---- experiment.json ------------------------------------------------------------------------

def _cell_params(p: RepPlan) -> dict[str, Any]:
    """What the analysis groups by: the cell's overrides plus the mode and fragment size in force."""
    params = dict(p.cell.overrides)
    settings = p.scenario.nodes.all
    params.setdefault("nodes.all.mode", settings.get("mode", "fragmenting"))
    params.setdefault("nodes.all.fragment_size", settings.get("fragment_size", 1000))
    return params


def _experiment_doc(base: Scenario, path: str, plans: list[RepPlan], status: str, started: float,
                    quick: bool, sets: list[str]) -> dict[str, Any]:
    cells: dict[str, dict[str, Any]] = {}
    for p in plans:
        c = cells.setdefault(p.cell.name, {"id": p.cell.name, "name": p.cell.name, "overrides": p.cell.overrides,
                                           "params": _cell_params(p), "reps": []})
        entry: dict[str, Any] = {"rep": p.rep, "dir": f"{p.cell.name}/{p.rep}", "seed": p.seed, "status": p.status}
        if p.reason:
            entry["reason"] = p.reason
        if p.wall_s is not None:
            entry["wall_s"] = round(p.wall_s, 3)
        if p.commit:
            entry["commit"] = p.commit
        c["reps"].append(entry)
    return {"scenario": base.name, "source": str(path), "quick": quick, "sets": loader.hide_secret_sets(sets), "seed": base.seed,
            "time_scale": base.time_scale, "reps": max((p.rep for p in plans), default=0), "status": status,
            "started": started, "updated": time.time(), "cells": list(cells.values()),
            "provenance": _provenance(base, sets, plans, started)}


def _git_commit(short: bool = False) -> str | None:
    """The checkout's commit (with "-dirty" when it has changes); None outside a git checkout."""
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", *(["--short"] if short else []), "HEAD"],
                              capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _shaper_backend(choice: str) -> str:
    """The scenario's shaper; "auto" is not probed here (the probe builds a namespace, too much for every
    write of this file): each run's log names the backend it got."""
    return "auto (netem when the kernel has it, else wire)" if choice == "auto" else choice


def _provenance(base: Scenario, sets: list[str], plans: list[RepPlan], started: float) -> dict[str, Any]:
    """What made these runs, for the report: software, command line (secret --set values hidden), the
    resolved scenario, seeds, shaper and host."""
    from testbed import __version__
    hidden = dict(zip(sets, loader.hide_secret_sets(sets)))

    def shown(arg: str) -> str:
        if arg.startswith("--set="):
            return "--set=" + hidden.get(arg[len("--set="):], arg[len("--set="):])
        return hidden.get(arg, arg)
    return {"wanbed_version": __version__, "git_commit": _git_commit(), "command": [shown(a) for a in sys.argv],
            "scenario": loader.hide_secrets(loader.to_plain(base)),
            "seeds": sorted({p.seed for p in plans}), "shaper": _shaper_backend(base.shaper),
            "kernel": platform.release(), "host_cpus": os.cpu_count(),
            "date": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(timespec="seconds")}


def _same_seed(p: RepPlan) -> bool:
    """A complete rep is kept on --resume only if it ran with the seed planned now (sweep.seeds or the
    scenario's seed may have changed since); a rep without a readable seed is kept, as before."""
    seed = _read_summary(p.dir).get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed != p.seed:
        log.info("rep %s/%d ran with seed %d, planned now %d: it runs again", p.cell.name, p.rep, seed, p.seed)
        return False
    return True


def _earlier_commits(out: Path) -> dict[str, str]:
    """rep dir -> the commit it ran at, from the experiment.json a resumed run finds (a skipped rep keeps it)."""
    try:
        doc = json.loads((out / EXPERIMENT_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(rep.get("dir")): str(rep["commit"])
            for cell in (doc.get("cells", []) if isinstance(doc, dict) else []) if isinstance(cell, dict)
            for rep in cell.get("reps", []) if isinstance(rep, dict) and rep.get("commit")}


def _earlier_wall_times(out: Path) -> dict[str, float]:
    """rep dir -> wall seconds, from the experiment.json a resumed run finds (a skipped rep keeps its time)."""
    try:
        doc = json.loads((out / EXPERIMENT_FILE).read_text())
    except (OSError, ValueError):
        return {}
    walls: dict[str, float] = {}
    for cell in doc.get("cells", []) if isinstance(doc, dict) else []:
        for rep in cell.get("reps", []) if isinstance(cell, dict) else []:
            if isinstance(rep, dict) and isinstance(rep.get("wall_s"), (int, float)):
                walls[str(rep.get("dir"))] = float(rep["wall_s"])
    return walls


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)    # atomic: a reader (or a crash) never sees half a file


# ---- output folder --------------------------------------------------------------------------

def _prepare_out(out: Path, base: Scenario, resume: bool) -> None:
    exp = out / EXPERIMENT_FILE
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory.")
    if resume:
        if exp.is_file():
            try:
                old = json.loads(exp.read_text())
            except ValueError:
                old = {}
            if old.get("scenario") not in (None, base.name):
                raise UserError(f"{out} holds experiment {old.get('scenario')!r}, not {base.name!r}; "
                                f"resume it with its own scenario or pick another --out.")
        out.mkdir(parents=True, exist_ok=True)
        return
    if out.is_dir() and any(out.iterdir()):
        if not exp.is_file():
            raise UserError(f"--out {out} is not empty and holds no experiment; pick another --out.")
        # a previous run of the same command: keep it, under a dated name beside the new one
        aside = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        n = 2
        while aside.exists():
            aside = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
            n += 1
        out.rename(aside)
        print(f"testbed run: moved the previous contents of {out} to {aside}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)


# ---- signals --------------------------------------------------------------------------------

class _StopOnSignal:
    """First Ctrl-C (or SIGTERM) asks the running cell to stop and tear down; a second one raises."""

    def __init__(self, stop: threading.Event, progress: Progress) -> None:
        self.stop = stop
        self.progress = progress
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt
        self.signum = signum
        self.stop.set()
        self.progress.event("interrupted: stopping the current run and tearing down (Ctrl-C again to force)")


# ---- docker image ---------------------------------------------------------------------------

def needs_docker(plans: list[RepPlan]) -> bool:
    """True when any rep runs its hosts as containers (scenario `runtime:`, --runtime or --set runtime=)."""
    return any(p.scenario.runtime == "docker" for p in plans if p.status != "skipped")


def ensure_node_image(progress: Progress) -> None:
    """Build the node image now, once, if it is missing or stale: otherwise the first cell's
    Network.start would build it inside the management lock, where a build of minutes looks like a hang."""
    from testbed import image
    from testbed.docker_engine import require_engine

    require_engine()
    if image.image_label(image.IMAGE, image.HASH_LABEL) != image.content_hash():
        progress.event(f"building node image {image.IMAGE} (node sources changed or image missing) ...")
        t0 = time.monotonic()
        image.ensure_image(image.IMAGE)
        progress.event(f"node image {image.IMAGE} built in {time.monotonic() - t0:.0f} s")


# ---- the loop -------------------------------------------------------------------------------

class _RunnerLog:
    """runner.log gets this module's INFO lines whatever the console's verbosity (-v) is."""

    def __init__(self, out: Path) -> None:
        self.handler = logging.FileHandler(out / RUNNER_LOG)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.handler.setLevel(logging.INFO)
        self._level, self._propagate = log.level, log.propagate

    def __enter__(self) -> "_RunnerLog":
        quiet = log.getEffectiveLevel() > logging.INFO
        log.addHandler(self.handler)
        if quiet:
            # INFO must reach the file, but not the console the user kept at WARNING: the file
            # handler takes everything, and only warnings go on to the root handlers
            log.setLevel(logging.INFO)
            log.propagate = False
            self._console = _WarningsUp()
            log.addHandler(self._console)
        return self

    def __exit__(self, *exc: Any) -> None:
        log.removeHandler(self.handler)
        if getattr(self, "_console", None) is not None:
            log.removeHandler(self._console)
        log.setLevel(self._level)
        log.propagate = self._propagate
        self.handler.close()


class _WarningsUp(logging.Handler):
    """Passes WARNING and above on to the root logger's handlers (the console)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        for h in logging.getLogger().handlers:
            if record.levelno >= h.level:
                h.handle(record)


def run_experiment(path: str, out: Path, reps: int | None, resume: bool, quick: bool, sets: list[str],
                   progress: Progress, *, run_cell: RunCell | None = None, stream: TextIO | None = None,
                   ensure_image: EnsureImage | None = None, rows: list[dict[str, str]] | None = None) -> int:
    """Run every cell and repetition of a scenario; returns the exit status (0, 1 problems, 130 interrupted).
    `rows`, when given, receives the closing table's rows (`testbed run --json`)."""
    out = Path(out)
    sets = list(sets or [])
    base, plans = plan(path, out, reps, quick, sets)
    if run_cell is None:
        if os.geteuid() != 0:
            raise UserError("testbed run must run as root to create network namespaces and interfaces.")
        run_cell = cell_runner.run_cell
    if ensure_image is None and needs_docker(plans):
        from testbed.docker_engine import require_engine
        require_engine()       # no engine: one error before the output folder is touched
    _prepare_out(out, base, resume)
    progress = ProgressLog(progress, out / PROGRESS_FILE)
    started = time.time()
    runner_log = _RunnerLog(out).__enter__()
    stop = threading.Event()
    status = "running"

    def save() -> None:
        _write_json(out / EXPERIMENT_FILE, _experiment_doc(base, path, plans, status, started, quick, sets))

    log.info("experiment %s: %d cell(s) x %d rep(s) from %s%s%s", base.name, len({p.cell.name for p in plans}),
             max(p.rep for p in plans), path, " (quick)" if quick else "", f" with --set {' '.join(sets)}" if sets else "")
    earlier = _earlier_wall_times(out) if resume else {}
    earlier_commits = _earlier_commits(out) if resume else {}
    try:
        with _StopOnSignal(stop, progress) as sig:
            for p in plans:
                if (p.dir / COMPLETE_MARKER).exists() and resume and _same_seed(p):
                    p.status, p.summary = "skipped", _read_summary(p.dir)
                    p.wall_s = earlier.get(f"{p.cell.name}/{p.rep}")     # keep what the rep took when it ran
                    p.commit = earlier_commits.get(f"{p.cell.name}/{p.rep}")
                    log.info("rep %s/%d skipped: already complete", p.cell.name, p.rep)
                    progress.event(f"{p.cell.name} rep {p.rep}: already complete, skipped")
                    continue
            save()
            progress.repetitions(sum(p.status != "skipped" for p in plans), len(plans))
            if needs_docker(plans):
                # once, before the first cell; a test passes its own (docker-free) stand-in
                (ensure_image or ensure_node_image)(progress)
            for p in plans:
                if p.status == "skipped":
                    continue
                if stop.is_set():
                    break
                if p.dir.exists():
                    # an incomplete earlier attempt: its records would mix with the new run's
                    log.info("rep %s/%d: clearing an incomplete earlier attempt", p.cell.name, p.rep)
                    shutil.rmtree(p.dir)
                p.dir.mkdir(parents=True)
                p.status = "running"
                p.commit = _git_commit(short=True)
                save()
                log.info("rep %s/%d started (seed %d)", p.cell.name, p.rep, p.seed)
                t0 = time.monotonic()
                try:
                    result = run_cell(p.scenario, p.dir, progress, stop)
                except UserError as exc:
                    p.status, p.reason, p.wall_s = "failed", str(exc), time.monotonic() - t0
                    log.info("rep %s/%d failed: %s", p.cell.name, p.rep, exc)
                    raise
                except Exception as exc:    # one broken rep must not lose a long sweep; record and go on
                    p.status, p.reason, p.wall_s = "failed", f"{type(exc).__name__}: {exc}", time.monotonic() - t0
                    log.exception("rep %s/%d failed", p.cell.name, p.rep)
                    progress.event(f"{p.cell.name} rep {p.rep} failed: {p.reason} (see {out / RUNNER_LOG})")
                    save()
                    continue
                p.wall_s = time.monotonic() - t0
                p.summary = dict(getattr(result, "summary", {}) or {})
                complete = bool(getattr(result, "complete", False))
                p.reason = str(getattr(result, "reason", "") or "")
                if complete and not stop.is_set():
                    p.status = "complete"
                else:
                    p.status = "interrupted" if stop.is_set() else "incomplete"
                log.info("rep %s/%d %s in %.1f s%s", p.cell.name, p.rep, p.status, p.wall_s,
                         f": {p.reason}" if p.reason else "")
                _report_saturation(p, progress)
                _report_clock(p, progress)
                save()
            if stop.is_set():
                status = "incomplete"
            else:
                status = "complete" if all(p.status in ("complete", "skipped") for p in plans) else "incomplete"
            save()
            signum = sig.signum
    except BaseException:
        status = "interrupted" if stop.is_set() else "failed"
        for p in plans:
            if p.status == "running":
                p.status = "interrupted" if stop.is_set() else "failed"
        save()
        log.info("experiment %s %s", base.name, status)
        runner_log.__exit__(None, None, None)
        raise
    log.info("experiment %s %s", base.name, status)
    runner_log.__exit__(None, None, None)
    finish = getattr(progress, "close", None)
    if callable(finish):
        finish()
    problems = print_table(plans, stream or sys.stdout)
    if rows is not None:
        rows.extend(table_rows(plans))
    if stop.is_set():
        print(f"testbed run: interrupted; {out / EXPERIMENT_FILE} marks the run incomplete "
              f"(continue with --resume)", file=stream or sys.stdout)
        return EXIT_INTERRUPTED if signum in (None, signal.SIGINT) else 128 + int(signum)
    return EXIT_PROBLEMS if problems else EXIT_OK


def _report_saturation(p: RepPlan, progress: Progress) -> None:
    """Say it on the console as soon as a rep ran on a saturated host, not only in the final table."""
    sat = p.summary.get("saturation")
    if not isinstance(sat, dict) or not sat.get("saturated"):
        return
    text = (f"{p.cell.name} rep {p.rep}: HOST SATURATED ({hostmon.saturation_text(sat)}): "
            f"the emulation results of this rep are not trustworthy")
    log.info("%s", text)        # runner.log; the console gets it through the progress display
    progress.event(text)


def _report_clock(p: RepPlan, progress: Progress) -> None:
    """Say it on the console as soon as a rep over several machines had clocks too uncertain to correct by."""
    text = clockmodel.problem_text(p.summary.get("clock"))
    if text:
        log.info("%s rep %s: %s", p.cell.name, p.rep, text)
        progress.event(f"{p.cell.name} rep {p.rep}: {text}")


def _read_summary(rep_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((rep_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


# ---- the final table -----------------------------------------------------------------------

def _num(summary: dict[str, Any], *keys: str) -> Any:
    value: Any = summary
    for k in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(k)
    return value


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _fails_check(summary: dict[str, Any]) -> bool:
    """The loss checker's verdict stored in the summary (lost, duplicates, or more late than max_late)."""
    if any(sub.fails(summary) for sub in SUBSYSTEMS):      # a subsystem's own invariant broken
        return True
    verdict = summary.get("accounting")
    if isinstance(verdict, dict) and isinstance(verdict.get("ok"), bool):
        return not verdict["ok"]
    return (summary.get("lost") or 0) > 0 or (summary.get("duplicates") or 0) > 0     # a summary without one


def table_rows(plans: list[RepPlan]) -> list[dict[str, str]]:
    rows = []
    for p in plans:
        s = p.summary or {}
        delay = s.get("delay") if isinstance(s.get("delay"), dict) else {}
        overall = delay.get("overall", {}) if isinstance(delay, dict) else {}
        thr = s.get("throughput") if isinstance(s.get("throughput"), dict) else {}
        sat = s.get("saturation") if isinstance(s.get("saturation"), dict) else {}
        rows.append({
            "cell": p.cell.name, "rep": str(p.rep), "status": p.status,
            "offered": _fmt(s.get("offered")), "accepted": _fmt(s.get("accepted")),
            "delivered": _fmt(s.get("delivered")), "lost": _fmt(s.get("lost")),
            "late": _fmt(s.get("late")), "dup": _fmt(s.get("duplicates")),
            "stalled": "STALLED" if s.get("stalled") else ("no" if "stalled" in s else "-"),
            "thr2+/h": _fmt(thr.get("per_model_hour") if thr else None),
            "thr2+B/s": _fmt(thr.get("model_bytes_per_s_2plus") if thr else None, 0),
            "delay_s": _fmt(overall.get("mean_model_s", overall.get("mean")) if isinstance(overall, dict) else None, 2),
            "cpu_max": _fmt(sat.get("max_cpu") if sat else None, 0),
            "wall_s": _fmt(p.wall_s, 0),
        })
    return rows


def print_table(plans: list[RepPlan], stream: TextIO) -> bool:
    """The headline figures of every rep, then the problems summary.check finds; True if any."""
    rows = table_rows(plans)
    cols = list(rows[0]) if rows else []
    if cols:
        console_table(cols, [[r[c] for c in cols] for r in rows], stream=stream)
    problems = False
    for p in plans:
        where = f"{p.cell.name}/{p.rep}"
        if p.status in ("failed", "incomplete"):
            problems = True
            print(f"problem: {where} {p.status}{': ' + p.reason if p.reason else ''}", file=stream)
        if p.status in ("complete", "skipped") and p.summary:
            for text in summary_problems(p.summary):
                print(f"warning: {where}: {text}", file=stream)
            if _fails_check(p.summary):
                problems = True
    return problems
