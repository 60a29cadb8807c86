"""Removing what the testbed created: one run's resources, or everything a crashed run left behind.

A resource is ours when its name starts with the testbed prefix followed by a
run id (registry.run_id_of); it belongs to a run only when that run id is the
whole id asked for (registry.owns: run "3f" is not a prefix of run "3f9a1c").
`clean()` removes the resources of run ids that are not registered or whose
owner process is dead, and never those of a live run. Processes are ended only by pid: processes still inside one of our dead
namespaces, and pids a run recorded in its registry state (an emulator) that
started after the run did (so a recycled pid is never hit).
"""
from __future__ import annotations

import logging
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from testbed import PREFIX, registry
from testbed.runtime.netns import list_netns, netns_pids, run_ip, terminate_pids

log = logging.getLogger(__name__)

IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")


SYS_NET = "/sys/class/net"


def root_links() -> list[str]:
    """Interface names in the machine's own namespace: the entries of sysfs's net class (each interface a
    directory; bonding's control file is not one). A netlink dump would do the same, but its library costs half
    a second of CPU to import, at every teardown."""
    with os.scandir(SYS_NET) as entries:
        return sorted(e.name for e in entries if e.is_dir())


def _iptables_chains(tool: str, table: str) -> list[str]:
    try:
        out = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, timeout=20).stdout
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return []
    return [line.split()[1] for line in out.splitlines() if line.startswith("-N ") and len(line.split()) > 1]


def _all_iptables_chains() -> dict[tuple[str, str], list[str]]:
    """(tool, table) -> its chains, for every tool and table; the listings run side by side (each is a process
    of its own, which may wait for the xtables lock)."""
    keys = [(tool, table) for tool in IPTABLES for table in TABLES]
    with ThreadPoolExecutor(len(keys)) as pool:
        return dict(zip(keys, pool.map(lambda key: _iptables_chains(*key), keys)))


def _remove_chain(tool: str, table: str, chain: str) -> None:
    out = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("-A ") and re.search(rf"-j {re.escape(chain)}(\s|$)", line):
            subprocess.run([tool, "-w", "-t", table, "-D", *line.split()[1:]], capture_output=True)
    subprocess.run([tool, "-w", "-t", table, "-F", chain], capture_output=True)
    subprocess.run([tool, "-w", "-t", table, "-X", chain], capture_output=True)


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def process_start(pid: int) -> float | None:
    """Start time of a process in Unix seconds, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def _recorded_pids(state: Any) -> list[int]:
    """Every integer under a key named pid/pids/*_pid anywhere in a run's registry state."""
    found: list[int] = []
    if isinstance(state, dict):
        for k, v in state.items():
            if isinstance(k, str) and (k in ("pid", "pids") or k.endswith("_pid") or k.endswith("_pids")):
                vals = v if isinstance(v, list) else [v]
                found += [x for x in vals if isinstance(x, int) and x > 1]
            else:
                found += _recorded_pids(v)
    elif isinstance(state, list):
        for v in state:
            found += _recorded_pids(v)
    return found


def remove_run_resources(run_id: str, record: registry.RunRecord | None = None) -> list[str]:
    """Remove everything named for exactly this run id. Returns what was removed, one description each."""
    prefix = registry.prefix(run_id)
    removed: list[str] = []
    record = record or registry.load(run_id)
    if record is not None:
        pids = [p for p in _recorded_pids(record.state) if p != os.getpid() and p != record.owner_pid]
        # Only processes that started after the run registered: a recycled pid belongs to someone else.
        pids = [p for p in pids if (t := process_start(p)) is not None and t >= record.started - 1.0]
        if pids:
            terminate_pids(pids, grace=2.0)
            removed += [f"process {p}" for p in pids]
    namespaces = [n for n in list_netns() if registry.owns(run_id, n)]
    for ns in namespaces:
        pids = [p for p in netns_pids(ns) if p != os.getpid()]
        if pids:
            terminate_pids(pids, grace=2.0)
            removed += [f"process {p} (in {ns})" for p in pids]
    if namespaces:
        run_ip([], batch="".join(f"netns del {n}\n" for n in namespaces), check=False)
        removed += [f"namespace {n}" for n in namespaces]
    links = [l for l in root_links() if registry.owns(run_id, l)]
    if links:
        # Deleting one end of a veth removes its peer: later lines may fail harmlessly (-force goes on).
        run_ip([], batch="".join(f"link del {l}\n" for l in links), check=False)
        removed += [f"interface {l}" for l in links]
    for (tool, table), chains in _all_iptables_chains().items():
        for chain in chains:
            if registry.owns(run_id, chain):
                _remove_chain(tool, table, chain)
                removed.append(f"{tool} chain {table}/{chain}")
    lock = registry.REGISTRY_DIR / f"{prefix}.lock"
    if lock.exists():
        lock.unlink(missing_ok=True)
    return removed


def resource_run_ids() -> set[str]:
    """Run ids that own at least one namespace, interface, iptables chain or registry record."""
    names: list[str] = list_netns() + root_links()
    for chains in _all_iptables_chains().values():
        names += chains
    ids = {rid for n in names if (rid := registry.run_id_of(n)) is not None}
    ids |= {r.run_id for r in registry.all_runs()}
    if registry.REGISTRY_DIR.is_dir():
        ids |= {rid for p in registry.REGISTRY_DIR.glob(f"{PREFIX}*") if (rid := registry.run_id_of(p.name))}
    return ids


def clean(only: Iterable[str] | None = None, unreachable: list[str] | None = None) -> list[str]:
    """Remove the resources of every run that is not live. Live runs are never touched.
    Docker engines that do not answer are appended to `unreachable` (one description each)."""
    removed: list[str] = []
    # Read before the loop below removes the records: a dead run's engines on other machines are known only here.
    records = registry.all_runs()
    for rid in sorted(set(only) if only is not None else resource_run_ids()):
        if registry.is_live(rid):
            continue
        record = registry.load(rid)
        removed += remove_run_resources(rid, record)
        if record is not None or (registry.REGISTRY_DIR / f"{registry.prefix(rid)}.json").exists():
            registry.unregister(rid)
            removed.append(f"registry record {registry.prefix(rid)}")
        for stray in (sorted(p for p in registry.REGISTRY_DIR.glob(f"{registry.prefix(rid)}*")
                             if registry.owns(rid, p.name)) if registry.REGISTRY_DIR.is_dir() else []):
            stray.unlink(missing_ok=True)
            removed.append(f"state file {stray.name}")
    # Containers of the Docker runtime (hosts, agents) carry their run id in a label; an engine that is not
    # running has none.
    from testbed.runtime.docker import clean_orphans, recorded_engines
    if only is None:
        report = clean_orphans(registry.is_live, recorded_engines(records))
    else:
        # Only the named runs, on every engine they recorded (a run that recorded none made no container).
        chosen = {rid for rid in only if not registry.is_live(rid)}
        engines = recorded_engines([r for r in records if r.run_id in chosen])
        if not engines:
            return removed
        report = clean_orphans(lambda run: run not in chosen, engines)
    removed += report.removed
    if unreachable is not None:
        unreachable += [f"the Docker engine of machine {e.name} at {e.address()}" for e in report.unreachable]
    return removed
