"""Run ids and the registry of live runs on this machine.

Every run registers its id here *before* it creates anything, with the pid of
the process that owns it. `testbed clean` then removes exactly the resources
whose run id is unregistered or whose owner is dead, and never those of a live
run (another shell's `testbed up`, a test running in parallel).

Names: every namespace, interface, container and state file starts with
PREFIX + run id (e.g. "tb3f9a1c"). Linux limits interface names to 15
characters, so run ids are 6 hex digits, leaving 7 for the rest.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed import PREFIX

REGISTRY_DIR = Path(os.environ.get("WANBED_REGISTRY", "/run/wanbed"))
RUN_ID_LEN = 6
# The files a run keeps in REGISTRY_DIR, after its prefix: record (and its temp), lock, network state, wire socket.
RUN_FILE_SUFFIXES = (".json", ".tmp", ".lock", ".state.json", "-wire.sock")


@dataclass
class RunRecord:
    run_id: str
    kind: str                 # "network", "test", "experiment" ...
    owner_pid: int
    started: float = field(default_factory=time.time)
    # Free-form state a component needs to reattach or tear down (pids, link ids, paths).
    state: dict = field(default_factory=dict)


def new_run_id() -> str:
    return secrets.token_hex(RUN_ID_LEN // 2)


def prefix(run_id: str) -> str:
    """The name prefix of everything belonging to this run."""
    return f"{PREFIX}{run_id}"


def _path(run_id: str) -> Path:
    return REGISTRY_DIR / f"{prefix(run_id)}.json"


def register(run_id: str, kind: str, owner_pid: int | None = None, state: dict | None = None) -> RunRecord:
    record = RunRecord(run_id, kind, owner_pid if owner_pid is not None else os.getpid(), state=state or {})
    save(record)
    return record


def save(record: RunRecord) -> None:
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    tmp = _path(record.run_id).with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(record), indent=1))
    tmp.replace(_path(record.run_id))   # atomic: readers never see half a record


def load(run_id: str) -> RunRecord | None:
    try:
        return RunRecord(**json.loads(_path(run_id).read_text()))
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


def unregister(run_id: str) -> None:
    _path(run_id).unlink(missing_ok=True)


def all_runs() -> list[RunRecord]:
    if not REGISTRY_DIR.is_dir():
        return []
    out = []
    for p in sorted(REGISTRY_DIR.glob(f"{PREFIX}*.json")):
        rec = load(p.stem[len(PREFIX):])
        if rec is not None:
            out.append(rec)
    return out


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_live(run_id: str) -> bool:
    """True when the run is registered and its owner process still exists."""
    rec = load(run_id)
    return rec is not None and pid_alive(rec.owner_pid)


def is_run_id(text: str) -> bool:
    """True for a whole run id as new_run_id() makes them: RUN_ID_LEN lowercase hex digits."""
    return len(text) == RUN_ID_LEN and all(c in "0123456789abcdef" for c in text)


def run_id_of(name: str) -> str | None:
    """The run id inside a resource name made by the testbed, or None if the name is not ours."""
    if not name.startswith(PREFIX) or len(name) < len(PREFIX) + RUN_ID_LEN:
        return None
    candidate = name[len(PREFIX):len(PREFIX) + RUN_ID_LEN]
    return candidate if is_run_id(candidate) else None


def owns(run_id: str, name: str) -> bool:
    """True when the resource (or registry file) `name` belongs to exactly this run.

    Names carry no separator after the run id (`tb3f9a1cm0`, `tb3f9a1cn1`), so a prefix test would
    give run "3f" every resource of "3f9a1c": the run id is read at its fixed length and compared
    whole. Besides, a file named exactly for the run (`<prefix>.json`, `.lock`, ...) is its own even
    for an id of another form (a hand-made registry record)."""
    if run_id_of(name) == run_id:
        return True
    pre = prefix(run_id)
    return any(name == pre + suffix for suffix in RUN_FILE_SUFFIXES)
