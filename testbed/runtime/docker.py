"""The `docker` runtime: every host is a container from the node image.

Containers run with `--network none` and NET_ADMIN/NET_RAW (shaping inside,
tcpdump). The container's network namespace is attached under a NAMED netns
(`ip netns attach <prefix><runid>-<host> <pid>`), so the shaping, addressing and
capture layers create and move interfaces exactly as with the netns runtime.
The container's init (`sleep infinity`) holds the namespace; daemons are
started with `docker exec` through a tiny shell wrapper that records its pid
(then execs the program), so they can be signalled by pid and killing a daemon
never tears down the links.

Faults: kill -> `docker kill -s KILL` (the namespace dies with it, links vanish);
restart -> `docker start` + re-attach the named netns to the new pid; the
links must then be re-plumbed by the network layer (interfaces moved into a
namespace are destroyed with it, the kernel offers no way to keep them).
pause -> `docker pause` (cgroup freezer: processes stop, links stay).
"""
from __future__ import annotations

import logging
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from testbed import PREFIX, registry
from testbed.docker_engine import docker, require_engine
from testbed.errors import UserError
from testbed.runtime.base import Host, Process, Runtime
from testbed.runtime.netns import netns_exists, run_ip

log = logging.getLogger(__name__)

RUN_LABEL = "wanbed.run"
PREFIX_LABEL = "wanbed.prefix"
CONTAINER_WORKDIR = "/work"
PID_WAIT = 10.0       # seconds to wait for an exec'd process to record its pid


class DockerHost(Host):
    def __init__(self, name: str, container: str, workdir: Path) -> None:
        self.name = name
        self.container = container
        self.netns = container           # the named netns carries the container's name
        self.workdir = workdir
        self.processes: list[Process] = []

    def __repr__(self) -> str:
        return f"DockerHost({self.name!r}, container={self.container!r})"

    def init_pid(self) -> int:
        out = docker(["inspect", "--format", "{{.State.Pid}}", self.container]).stdout.strip()
        return int(out)

    def attach_netns(self) -> None:
        """(Re-)name the container's current network namespace; also lo up and forwarding on."""
        if netns_exists(self.netns):
            run_ip(["netns", "delete", self.netns], check=False)
        run_ip(["netns", "attach", self.netns, str(self.init_pid())])
        subprocess.run(["ip", "netns", "exec", self.netns, "sh", "-c",
                        "ip link set lo up && sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0"
                        " net.ipv4.conf.default.rp_filter=0"], check=True, capture_output=True)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        if not argv:
            raise UserError(f"empty command for process {name!r} on host {self.name!r}.")
        log_path = self.workdir / f"{name}.log"
        pidfile = f"{CONTAINER_WORKDIR}/.{name}.pid"
        env_args = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        # The wrapper writes its own pid (inside the container's pid namespace) and execs the program.
        cmd = ["docker", "exec", *env_args, self.container, "sh", "-c",
               f'echo $$ > {pidfile}; exec "$@"', "sh", *argv]
        with open(log_path, "ab") as logf:
            popen = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        host_pidfile = self.workdir / f".{name}.pid"
        deadline = time.monotonic() + PID_WAIT
        while not (host_pidfile.exists() and host_pidfile.read_text().strip()):
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"process {name!r} on {self.container} did not start (see {log_path})")
            time.sleep(0.05)
        pid = int(host_pidfile.read_text().strip())
        proc = Process(self.name, name, pid, list(argv), log_path, popen)
        self.processes.append(proc)
        return proc

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", self.container, *argv], capture_output=True, text=True,
                              timeout=timeout, check=check)

    def signal(self, process: Process, sig: int) -> None:
        """Signal by the pid the wrapper recorded (a pid in the container's pid namespace)."""
        docker(["exec", self.container, "kill", f"-{int(sig)}", str(process.pid)], check=False)

    # Faults that are container operations.
    def kill(self) -> None:
        docker(["kill", "-s", "KILL", self.container], check=False)

    def restart(self) -> None:
        """Start the container again and name its new namespace; links must be re-plumbed by the caller."""
        docker(["start", self.container])
        self.attach_netns()

    def pause(self) -> None:
        docker(["pause", self.container])

    def unpause(self) -> None:
        docker(["unpause", self.container])

    def state(self) -> str:
        """docker's status word: running, paused, exited ..."""
        res = docker(["inspect", "--format", "{{.State.Status}}", self.container], check=False)
        return res.stdout.strip() if res.returncode == 0 else "missing"


class DockerRuntime(Runtime):
    """Hosts as containers `<prefix><runid>-<host>`, labelled wanbed.run=<runid>, wanbed.prefix=tb."""

    name = "docker"

    def __init__(self, run_id: str, workdir: Path | None = None, image: str | None = None) -> None:
        require_engine()
        from testbed.image import IMAGE, ensure_image
        self.run_id = run_id
        self.prefix = registry.prefix(run_id)
        self.run_dir = workdir
        self.image = image or ensure_image(IMAGE)
        self._tmp: str | None = None
        self.hosts: dict[str, DockerHost] = {}

    def container_name(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def _workdir(self, host: str) -> Path:
        if self.run_dir is not None:
            return self.run_dir / "nodes" / host
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        return Path(self._tmp) / host

    def add_host(self, name: str) -> DockerHost:
        return self.add_hosts([name])[0]

    def add_hosts(self, names: list[str]) -> list[DockerHost]:
        made: list[DockerHost] = []
        for name in names:
            if name in self.hosts:
                raise UserError(f"host {name!r} exists twice.")
            host = DockerHost(name, self.container_name(name), self._workdir(name))
            self.hosts[name] = host      # recorded first, so a failure half-way is still torn down
            host.workdir.mkdir(parents=True, exist_ok=True)
            docker(["run", "-d", "--name", host.container, "--hostname", name, "--network", "none",
                    "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW",
                    "--label", f"{RUN_LABEL}={self.run_id}", "--label", f"{PREFIX_LABEL}={PREFIX}",
                    "-v", f"{host.workdir.resolve()}:{CONTAINER_WORKDIR}", self.image])
            made.append(host)
        for host in made:
            host.attach_netns()
        return made

    def remove_host(self, name: str) -> None:
        host = self.hosts.pop(name, None)
        if host is None:
            return
        _remove([host.container])

    def close(self) -> None:
        names = [h.container for h in self.hosts.values()]
        # Also whatever carries our run label but was not recorded (a failure half-way through add).
        names += [n for n, run in _labelled() if run == self.run_id and n not in names]
        _remove(names)
        self.hosts.clear()
        if self._tmp is not None:
            import shutil
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _remove(containers: list[str]) -> None:
    if containers:
        docker(["rm", "-f", "-v", *containers], check=False)
    for name in containers:
        if netns_exists(name):
            run_ip(["netns", "delete", name], check=False)


def _labelled() -> list[tuple[str, str]]:
    """(container name, run id) of every container carrying the testbed's labels."""
    res = docker(["ps", "-a", "--filter", f"label={PREFIX_LABEL}={PREFIX}",
                  "--format", '{{.Names}} {{.Label "' + RUN_LABEL + '"}}'], check=False)
    out = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], parts[1]))
    return out


def clean_orphans(is_live: Callable[[str], bool]) -> list[str]:
    """Remove containers (and their named netns) whose run id is not live; returns the names removed."""
    try:
        require_engine()
    except UserError:
        return []              # no engine, no containers
    dead = [name for name, run in _labelled() if not is_live(run)]
    _remove(dead)
    return dead
