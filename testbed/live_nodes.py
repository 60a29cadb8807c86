"""Node daemons on a live `testbed up` network, so `testbed send`, `mailbox` and `link` work by hand.

`testbed up` builds the network (the supervisor holds it), then calls `start`:
the node configs are written and the daemons started and health-checked by the
same code `testbed run` uses (testbed.experiment.nodeconfig and .daemons), and
each daemon's machine-wide pid is recorded in the run's registry state under
`nodes`. The daemons outlive the `up` command (each runs in a session of its
own); `testbed down` calls `stop`, which ends them by those pids (SIGTERM, then
SIGKILL after the daemons' flush grace), and `remove_records` unless `--keep`.
After a crash, `testbed clean` ends them too: it kills every `pid` a run
recorded (and everything left in the run's namespaces).

Records (node.yaml, node.log, daemon.log, spool, *.jsonl) go where `testbed run`
puts them: `<run dir>/nodes/<host>/` (the host's own directory, which the
docker runtime mounts into the container).
"""
from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.errors import UserError
from testbed import netstate, registry
from testbed.cleanup import process_start
from testbed.runtime.netns import terminate_pids

if TYPE_CHECKING:
    from testbed.scenario.spec import Scenario

# What starts and stops daemons (the node's subsystems, gRPC, pyroute2: seconds of CPU) is imported by the
# functions that do it: `send`, `queue` and `trace` only read the recorded daemons.

STATE_KEY = "nodes"          # where the run's registry state keeps the live daemons
START_TIME_SLACK = 1.0       # seconds: a pid whose process started at another time was recycled


@dataclass
class LiveDaemon:
    host: str
    pid: int                 # machine-wide pid (`testbed clean` ends every recorded "pid")
    started: float           # the process's start time (Unix seconds), to recognise a recycled pid


@dataclass
class LiveNodes:
    """The daemons of one live network, as recorded in its registry state."""

    run_dir: str
    daemons: list[LiveDaemon] = field(default_factory=list)
    without_daemon: list[str] = field(default_factory=list)      # plain IP routers (nodes.<host>.daemon: false)
    sessions_missing: list[str] = field(default_factory=list)    # hosts with a neighbour session not up at start

    @property
    def records_dir(self) -> Path:
        return Path(self.run_dir) / "nodes"

    def to_state(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "LiveNodes":
        return cls(run_dir=state.get("run_dir", ""),
                   daemons=[LiveDaemon(**d) for d in state.get("daemons", [])],
                   without_daemon=list(state.get("without_daemon", [])),
                   sessions_missing=list(state.get("sessions_missing", [])))


def check(scenario: Scenario) -> None:
    """Validate the node settings before anything is built (the check `testbed run` makes): an error names the
    scenario file, line and key that set the bad value."""
    from testbed.experiment.runner import check_node_settings
    check_node_settings(scenario)


def start(record: registry.RunRecord, scenario: Scenario) -> LiveNodes:
    """Write the node configs, start a daemon on every daemon host and wait until all are healthy.

    `scenario` is the one the network was built from (model units). On any failure the daemons
    already started are stopped again before the error propagates.
    """
    from testbed.experiment import nodeconfig, timescale
    from testbed.experiment.cell import HEALTH_TIMEOUT, SESSION_TIMEOUT
    from testbed.experiment.daemons import NodeDaemons
    from testbed.network import Network
    net = Network.attach(record.run_id)
    run_dir = Path(record.state["run_dir"])
    runtime = record.state.get("runtime") or scenario.runtime
    # `up --runtime` may differ from the file; the records directory depends on it.
    wall = timescale.to_wall(dataclasses.replace(scenario, runtime=runtime))
    configs = nodeconfig.node_configs(wall, net, run_dir)
    tokens = nodeconfig.client_tokens(configs, nodeconfig.add_security(wall, configs, run_dir))
    paths = nodeconfig.write_configs(configs, run_dir)
    daemons = NodeDaemons(net, paths, docker=runtime == "docker", tokens=tokens)
    live = LiveNodes(run_dir=str(run_dir),
                     without_daemon=[n for n in net.topology.node_names() if n not in paths])
    try:
        daemons.start_all()
        live.daemons = _recorded(daemons.pids())
        _save(record.run_id, live)       # recorded before the wait: `down` or `clean` can end them from now on
        daemons.wait_healthy(HEALTH_TIMEOUT)
        live.sessions_missing = daemons.wait_sessions(SESSION_TIMEOUT)
        _save(record.run_id, live)
    except BaseException:
        daemons.stop_all()                # our own children: stopped through the objects that started them
        _save_quietly(record.run_id, None)
        raise
    return live


def _recorded(pids: dict[str, int]) -> list[LiveDaemon]:
    return [LiveDaemon(host, pid, process_start(pid) or 0.0) for host, pid in pids.items()]


def _save(run_id: str, live: LiveNodes | None) -> None:
    with netstate.locked(run_id):
        rec = registry.load(run_id)
        if rec is None:
            raise UserError(f"network {run_id} went away while its node daemons were starting.")
        if live is None:
            rec.state.pop(STATE_KEY, None)
        else:
            from testbed.experiment import nodeconfig
            rec.state[STATE_KEY] = live.to_state()
            rec.state["mgmt_port"] = nodeconfig.MGMT_PORT
        registry.save(rec)


def recorded(record: registry.RunRecord) -> LiveNodes | None:
    """The live daemons a run recorded, or None when `up` started none (--no-nodes)."""
    state = record.state.get(STATE_KEY)
    return LiveNodes.from_state(state) if isinstance(state, dict) else None


def stop(run_id: str) -> LiveNodes | None:
    """End the run's daemons by their recorded pids (SIGTERM, SIGKILL after TERM_GRACE); returns what was recorded."""
    rec = registry.load(run_id)
    live = recorded(rec) if rec is not None else None
    if live is None:
        return None
    pids = [d.pid for d in live.daemons if _same_process(d)]
    if pids:
        from testbed.experiment.daemons import TERM_GRACE
        terminate_pids(pids, grace=TERM_GRACE)
    _save_quietly(run_id, None)
    return live


def _save_quietly(run_id: str, live: LiveNodes | None) -> None:
    try:
        _save(run_id, live)
    except UserError:
        pass         # the network is already gone: nothing left to update


def _same_process(d: LiveDaemon) -> bool:
    started = process_start(d.pid)
    return started is not None and abs(started - d.started) <= START_TIME_SLACK


def remove_records(live: LiveNodes) -> list[Path]:
    """Delete the daemons' records (`<run dir>/nodes/<host>/`) and the empty directories of daemon-less hosts."""
    removed: list[Path] = []
    for d in live.daemons:
        path = live.records_dir / d.host
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    for host in live.without_daemon:
        path = live.records_dir / host
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    if live.records_dir.is_dir() and not any(live.records_dir.iterdir()):
        live.records_dir.rmdir()
    from testbed.secrets import SECRETS_DIR
    secrets_dir = Path(live.run_dir) / SECRETS_DIR      # the CA key and the tokens are of no use after `down`
    if secrets_dir.is_dir():
        shutil.rmtree(secrets_dir, ignore_errors=True)
        removed.append(secrets_dir)
    return removed


def daemon_problem(node: str) -> str | None:
    """Why the running network's `node` has no daemon to talk to, or None when it has one (for send/mailbox)."""
    try:
        rec = netstate.current()
    except UserError:
        return None
    live = recorded(rec)
    if live is None:
        return f"network {rec.run_id} was started without node daemons (testbed up --no-nodes)"
    if node in live.without_daemon:
        names = ", ".join(d.host for d in live.daemons)
        return f"{node} runs no node daemon (nodes.{node}.daemon: false); hosts with one: {names}"
    return None
