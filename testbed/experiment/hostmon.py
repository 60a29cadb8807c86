"""Host load during a run: host.jsonl, and the saturation verdict read from it.

Emulation results are only trustworthy when the machine kept up: a host that
was CPU-saturated delays frames and timers by its own scheduling, not by the
emulated WAN. HostMonitor samples /proc every `interval` seconds in a thread
and appends one "host" record (node/schema.py) per sample; `saturation`
applies the saturation rule of the experiments: saturated when the CPU was above 90% for more than 10%
of the samples (strictly more in both places: exactly 90% or exactly 10% is
not saturated), or when the hypervisor took more than 10% of the CPU (steal time) in more than 10% of
the samples: on a virtual machine whose host is busy, every process here (the link emulator, the
daemons) is descheduled for milliseconds at a time while our own CPU use stays low, and link delays
and timers stretch just as on a saturated host. Each record carries the `machine` it was sampled on (the local
host name unless the caller names the machine); on several machines
`saturation_per_machine` judges each machine's samples apart, and any saturated
machine flags the repetition.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from testbed.experiment.sampler import Sampler

log = logging.getLogger(__name__)

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuTimes:
    busy: int       # clock ticks not idle (steal included: time this machine wanted and did not get)
    total: int      # all clock ticks
    steal: int = 0  # clock ticks the hypervisor gave to another guest while this one was runnable


def read_cpu_times(proc: Path = PROC) -> CpuTimes:
    """Whole-machine CPU ticks from the aggregate "cpu" line of /proc/stat."""
    with open(proc / "stat") as f:
        for line in f:
            if line.startswith("cpu "):
                values = [int(x) for x in line.split()[1:]]
                # user nice system idle iowait irq softirq steal (guest times are already in user/nice)
                idle = values[3] + (values[4] if len(values) > 4 else 0)
                total = sum(values[:8])
                return CpuTimes(busy=total - idle, total=total, steal=values[7] if len(values) > 7 else 0)
    raise OSError("no aggregate cpu line in /proc/stat")


def read_mem_percent(proc: Path = PROC) -> float:
    """Memory in use (MemTotal - MemAvailable) as a percentage of MemTotal."""
    info: dict[str, int] = {}
    with open(proc / "meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                info[key] = int(parts[0])
    total = info.get("MemTotal", 0)
    if total <= 0:
        return 0.0
    available = info.get("MemAvailable", info.get("MemFree", 0))
    return 100.0 * (total - available) / total


def read_process_ticks(pid: int, proc: Path = PROC) -> int | None:
    """utime + stime of a process in clock ticks; None when it is gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = text[text.rfind(")") + 2:].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15
    return int(fields[11]) + int(fields[12])


def local_machine() -> str:
    """The machine name records carry when no placement names one: this machine's host name."""
    return socket.gethostname() or "local"


class HostMonitor(Sampler):
    """Append a "host" record to `path` every `interval` seconds until stop()."""
    thread_name = "hostmon"

    def __init__(self, path: Path, pids: Callable[[], dict[str, int]], interval: float = 1.0,
                 machine: str | None = None) -> None:
        super().__init__(path, interval)
        self.machine = machine or local_machine()
        self.pids = pids
        self._clock_ticks = os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        try:
            cpu_prev = read_cpu_times()
            out = open(self.path, "a")
        except (OSError, ValueError) as exc:
            # a monitor that cannot work must not take the run down; the summary then shows 0 samples
            log.warning("host monitor not running: %s", exc)
            return
        procs_prev = self._proc_ticks()
        wall_prev = time.monotonic()
        with out:
            while not self._stop.wait(self.interval):
                try:
                    cpu = read_cpu_times()
                    procs = self._proc_ticks()
                    wall = time.monotonic()
                    record = self._record(cpu_prev, cpu, procs_prev, procs, wall - wall_prev)
                    cpu_prev, procs_prev, wall_prev = cpu, procs, wall
                except (OSError, ValueError, IndexError) as exc:
                    log.warning("host monitor: cannot sample /proc: %s", exc)
                    continue
                out.write(json.dumps(record) + "\n")
                out.flush()
                self.samples += 1

    def _proc_ticks(self) -> dict[str, int]:
        try:
            pids = dict(self.pids())
        except Exception as exc:  # noqa: BLE001 - the caller's view of its daemons must not stop sampling
            log.warning("host monitor: cannot list daemon pids: %s", exc)
            return {}
        out: dict[str, int] = {}
        for name, pid in pids.items():
            if not isinstance(pid, int) or pid <= 0:
                continue
            ticks = read_process_ticks(pid)
            if ticks is not None:
                out[name] = ticks
        return out

    def _record(self, cpu0: CpuTimes, cpu1: CpuTimes, p0: dict[str, int], p1: dict[str, int],
                seconds: float) -> dict[str, Any]:
        total = cpu1.total - cpu0.total
        busy = cpu1.busy - cpu0.busy
        cpu_percent = 100.0 * busy / total if total > 0 else 0.0
        steal_percent = 100.0 * (cpu1.steal - cpu0.steal) / total if total > 0 else 0.0
        # per process: percent of ONE cpu over the interval (may exceed 100 for a multi-threaded process)
        procs = {name: round(100.0 * (ticks - p0[name]) / self._clock_ticks / seconds, 2)
                 for name, ticks in p1.items() if name in p0 and seconds > 0}
        return {"ts": time.time(), "node": "testbed", "machine": self.machine,
                "cpu_percent": round(min(100.0, max(0.0, cpu_percent)), 2),
                "steal_percent": round(min(100.0, max(0.0, steal_percent)), 2),
                "mem_percent": round(read_mem_percent(), 2), "procs": procs, "cpus": os.cpu_count() or 1}


def _numbers(records: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in records
            if isinstance(r, dict) and isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]


def saturation(records: list[dict], threshold: float = 90.0, fraction: float = 0.10,
               steal_threshold: float = 10.0) -> dict:
    """Was the host CPU above `threshold` percent, or was more than `steal_threshold` percent of it stolen by the
    hypervisor, for more than `fraction` of the samples? `cause` names the rule(s) that tripped. Samples without
    `steal_percent` (runs recorded before it was sampled) count for the CPU rule only."""
    values = _numbers(records, "cpu_percent")
    above = sum(1 for v in values if v > threshold)
    share = above / len(values) if values else 0.0
    steals = _numbers(records, "steal_percent")
    stolen = sum(1 for v in steals if v > steal_threshold)
    stolen_share = stolen / len(steals) if steals else 0.0
    causes = [name for name, tripped in (("cpu", bool(values) and share > fraction),
                                         ("steal", bool(steals) and stolen_share > fraction)) if tripped]
    return {"saturated": bool(causes), "fraction_above": round(share, 4),
            "samples": len(values), "threshold": threshold, "fraction": fraction,
            "max_cpu": max(values) if values else None,
            "mean_cpu": round(sum(values) / len(values), 2) if values else None,
            "cause": " and ".join(causes) or None, "steal_threshold": steal_threshold,
            "fraction_stolen": round(stolen_share, 4), "max_steal": max(steals) if steals else None,
            "mean_steal": round(sum(steals) / len(steals), 2) if steals else None}


def saturation_text(sat: dict) -> str:
    """One clause naming what made a repetition's host saturated (for the console, the summary's problems)."""
    where = f" on machine {sat['machine']}" if sat.get("machine") else ""
    parts = []
    if sat.get("cause") is None or "cpu" in str(sat.get("cause")):
        parts.append(f"host CPU{where} above {sat.get('threshold')}% in "
                     f"{100 * float(sat.get('fraction_above') or 0):.0f}% of {sat.get('samples')} samples")
    if "steal" in str(sat.get("cause")):
        parts.append(f"the hypervisor took more than {sat.get('steal_threshold')}% of the CPU{where} (steal time) "
                     f"in {100 * float(sat.get('fraction_stolen') or 0):.0f}% of {sat.get('samples')} samples, "
                     f"up to {sat.get('max_steal')}%")
    return "; ".join(parts)


def saturation_per_machine(records: list[dict]) -> dict:
    """saturation() of every machine's samples apart (host.jsonl's `machine`): the repetition is saturated when
    any machine is. Records of one machine (or without the field) give exactly saturation()."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        name = r.get("machine") if isinstance(r, dict) else None
        groups.setdefault(name if isinstance(name, str) else "", []).append(r)
    overall = saturation(records)
    if len(groups) <= 1:
        return overall
    machines = {name: saturation(recs) for name, recs in sorted(groups.items())}
    worst = max(machines.items(), key=lambda kv: (kv[1]["saturated"], kv[1]["fraction_above"],
                                                   kv[1]["fraction_stolen"]))
    # the headline figures are the worst machine's, so the console sentence is about a machine that saturated
    return {**worst[1], "saturated": any(m["saturated"] for m in machines.values()), "machine": worst[0],
            "max_cpu": overall["max_cpu"], "mean_cpu": overall["mean_cpu"], "machines": machines}
