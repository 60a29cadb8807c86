"""The `docker` runtime: every host is a container from the node image.

Containers run with `--network none` and NET_ADMIN/NET_RAW (for the tools run
as root inside: ip, tc, tcpdump, ping), `--security-opt no-new-privileges`
(no setuid/file-capability gain inside), and pids and memory limits (a runaway
daemon or fork bomb stays in its container: CONTAINER_PIDS_LIMIT and
CONTAINER_MEMORY, or WANBED_DOCKER_PIDS_LIMIT / WANBED_DOCKER_MEMORY).
The container's network namespace is attached under a NAMED netns (`ip netns attach <prefix><runid>-<host> <pid>`),
so the shaping, addressing and capture layers create and move interfaces
exactly as with the netns runtime. The container's init (`sleep infinity`, as
root: see _run_container) holds the container; daemons are started with
`docker exec -u wanbed` through a tiny shell wrapper that records its pid (then
execs the program), so they can be signalled by pid and killing a daemon never
tears down the links.

Containers are started concurrently (one `docker run` per host from a small
thread pool) and their namespaces attached with one `ip -batch`.

Faults that are container operations:
- kill -> `docker kill -s KILL`. The named netns is a bind mount, so the
  namespace (links, addresses, routes) outlives the container's processes,
  just as the netns runtime's namespace outlives a killed daemon.
- restart -> the container starts again with a NEW network namespace (the
  engine makes one per start). restart() moves every interface of the old
  namespace into the new one and restores what a move drops (addresses, routes,
  iptables rules such as a partition's, lo addresses), then renames the named
  netns. TAP file descriptors held by the wire emulator survive a move, so
  shaping, counters and pcaps go on.
- pause -> `docker pause` (cgroup freezer: processes stop, links stay).

Several engines: each host's container lives on its machine's engine (a
{host: Engine} mapping; hosts not in it use the runtime's default engine).
Every `docker` command of a host goes to that host's engine, the node image is
loaded onto every engine that lacks it, and the engines a run uses are written
to its registry record before any container exists, so `testbed clean` finds
them after a crash.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyroute2 import NetlinkError

from testbed import PREFIX, netlink, registry
from testbed.docker_engine import LOCAL, Engine, docker, require_engine
from node.errors import UserError
from testbed.runtime.base import Host, Process, Runtime
from testbed.runtime.netns import configure_in_thread, netns_exists, run_ip, sysctl_script

log = logging.getLogger(__name__)

RUN_LABEL = "wanbed.run"
PREFIX_LABEL = "wanbed.prefix"
ENGINES_KEY = "docker_engines"    # registry state: {machine name: engine address} of every engine a run used
CONTAINER_WORKDIR = "/work"
PID_WAIT = 10.0       # seconds to wait for an exec'd process to record its pid
START_WORKERS = 8     # concurrent `docker run`s: the engine serialises some work, more threads gain nothing
OLD_NETNS_SUFFIX = ".old"   # '.' never occurs in a host name, so this cannot clash with another host's netns
# Per-container limits. Pids: threads count too (the daemon's gRPC pools serve up to 512 management RPCs),
# so the limit is far above a daemon's need and only stops a runaway fork. Memory: the daemon may hold a few
# messages of up to 64 MiB (node LimitsConfig.max_message_size) besides Python; a cap, not a reservation.
CONTAINER_PIDS_LIMIT = 4096
CONTAINER_MEMORY = "2g"
_MEMORY_RE = re.compile(r"[1-9][0-9]*[bkmg]?")


def container_limits() -> tuple[int, str]:
    """(pids limit, memory limit) for new containers: the defaults, or WANBED_DOCKER_PIDS_LIMIT/_MEMORY."""
    pids_text = os.environ.get("WANBED_DOCKER_PIDS_LIMIT", str(CONTAINER_PIDS_LIMIT)).strip()
    memory = os.environ.get("WANBED_DOCKER_MEMORY", CONTAINER_MEMORY).strip().lower()
    if not pids_text.isdigit() or int(pids_text) < 16:
        raise UserError(f"WANBED_DOCKER_PIDS_LIMIT={pids_text!r}: expected a whole number of at least 16.")
    if not _MEMORY_RE.fullmatch(memory) or _memory_bytes(memory) < 64 << 20:
        raise UserError(f"WANBED_DOCKER_MEMORY={memory!r}: expected a size of at least 64m such as 512m or 2g.")
    return int(pids_text), memory


def _memory_bytes(memory: str) -> int:
    unit = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(memory[:-1]) * unit[memory[-1]] if memory[-1] in unit else int(memory)


@dataclass
class ReplumbReport:
    """What DockerHost.restart() carried over from the old namespace into the new one."""

    host: str
    interfaces: list[str] = field(default_factory=list)
    addresses: int = 0
    routes: int = 0
    iptables: bool = False
    seconds: float = 0.0


class DockerHost(Host):
    def __init__(self, name: str, container: str, workdir: Path, user: str = "", engine: Engine = LOCAL) -> None:
        self.name = name
        self.engine = engine             # the engine (machine) this host's container lives on
        self.container = container
        self.netns = container           # the named netns carries the container's name
        self.workdir = workdir
        self.user = user                 # who runs daemons ("" = the image's default user)
        self.processes: list[Process] = []
        self.sysctls: dict[str, str] = {}  # the scenario's extra sysctls, set again in a restarted namespace

    def __repr__(self) -> str:
        return f"DockerHost({self.name!r}, container={self.container!r}, engine={self.engine.name!r})"

    def init_pid(self) -> int:
        out = docker(["inspect", "--format", "{{.State.Pid}}", self.container], engine=self.engine).stdout.strip()
        pid = int(out)
        if pid <= 0:
            raise RuntimeError(f"container {self.container} is not running")
        return pid

    def attach_netns(self) -> None:
        """(Re-)name the container's current network namespace; also lo up and forwarding on."""
        if netns_exists(self.netns):
            run_ip(["netns", "delete", self.netns], check=False)
        run_ip(["netns", "attach", self.netns, str(self.init_pid())])
        _configure_namespaces([self.netns], self.sysctls)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              user: str | None = None) -> Process:
        """Start `argv` in the container as the non-root node user (user="root" for tools that need it)."""
        if not argv:
            raise UserError(f"empty command for process {name!r} on host {self.name!r}.")
        if not name or "/" in name or name.startswith("."):
            raise UserError(f"process name {name!r} must be a plain file name.")
        self.workdir.mkdir(parents=True, exist_ok=True)
        log_path = self.workdir / f"{name}.log"
        host_pidfile = self.workdir / f".{name}.pid"
        host_pidfile.unlink(missing_ok=True)       # a restarted daemon must not be mistaken for the old one
        pidfile = f"{CONTAINER_WORKDIR}/.{name}.pid"
        env_args = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        who = self.user if user is None else user
        user_args = ["-u", who] if who else []
        # The wrapper writes its own pid (inside the container's pid namespace) and execs the program.
        cmd = ["docker", "exec", *user_args, *env_args, self.container, "sh", "-c",
               f'echo $$ > {pidfile}; exec "$@"', "sh", *argv]
        with open(log_path, "ab") as logf:
            # A session of its own: Ctrl-C reaches the testbed, which stops daemons in order.
            popen = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=self.engine.env())
        deadline = time.monotonic() + PID_WAIT
        while not (host_pidfile.exists() and host_pidfile.read_text().strip()):
            if popen.poll() is not None or time.monotonic() > deadline:
                if popen.poll() is None:
                    popen.kill()
                    popen.wait()
                tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"process {name!r} on {self.container} did not start: {' | '.join(tail)}")
            time.sleep(0.02)
        pid = int(host_pidfile.read_text().strip())
        proc = Process(self.name, name, pid, list(argv), log_path, popen)
        self.processes.append(proc)
        return proc

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess:
        """Run a tool to completion in the container, as root (ip, tc, tcpdump, ping need it)."""
        if not argv:
            raise UserError(f"no command given to run in host {self.name}.")
        return subprocess.run(["docker", "exec", "-u", "root", self.container, *argv], capture_output=True,
                              text=True, timeout=timeout, check=check, env=self.engine.env())

    def signal(self, process: Process, sig: int) -> None:
        """Signal by the pid the wrapper recorded (a pid in the container's pid namespace)."""
        if process.popen is not None and process.popen.poll() is not None:
            return      # already exited: the pid may belong to another process now
        docker(["exec", "-u", "root", self.container, "kill", f"-{int(sig)}", str(process.pid)], check=False,
               engine=self.engine)

    def host_pid(self, process: Process) -> int | None:
        """The machine-wide pid of a process started here (for /proc based monitors), or None if gone."""
        try:
            init = self.init_pid()
            ns = os.readlink(f"/proc/{init}/ns/pid")
        except (RuntimeError, OSError, ValueError):
            return None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                    continue
                with open(f"/proc/{entry}/status") as f:
                    for line in f:
                        if line.startswith("NSpid:"):
                            if int(line.split()[-1]) == process.pid:
                                return int(entry)
                            break
            except (OSError, ValueError):
                continue
        return None

    # ---- faults that are container operations ------------------------------------------

    def kill(self) -> None:
        """SIGKILL every process of the container; its namespace (links) stays, held by the named netns."""
        docker(["kill", "-s", "KILL", self.container], check=False, engine=self.engine)
        self._wait_state(("exited", "dead", "missing"))

    def restart(self) -> ReplumbReport:
        """Start the container again and re-plumb its links, addresses and routes into the new namespace.

        The container is killed first if it still runs. Daemons are not started again: that is the
        caller's (the fault timeline starts the node daemon with the same config and spool).
        """
        t0 = time.monotonic()
        if self.state() in ("running", "paused", "restarting"):
            if self.state() == "paused":
                self.unpause()
            self.kill()
        old = self.netns + OLD_NETNS_SUFFIX
        if netns_exists(old):           # left by a restart that failed half-way
            run_ip(["netns", "delete", old], check=False)
        kept = False
        if netns_exists(self.netns):
            # A second name for the old namespace: it keeps the links alive while we move them.
            Path(f"/run/netns/{old}").touch()
            res = subprocess.run(["mount", "--bind", f"/run/netns/{self.netns}", f"/run/netns/{old}"],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                Path(f"/run/netns/{old}").unlink(missing_ok=True)
                raise RuntimeError(f"keeping the namespace of {self.container}: {res.stderr.strip()}")
            kept = True
        try:
            res = docker(["start", self.container], check=False, engine=self.engine)
            if res.returncode != 0:
                why = " ".join(res.stderr.split()) or "docker start failed"
                raise UserError(f"cannot restart container {self.container}: {why}.")
            self.attach_netns()
            report = ReplumbReport(self.name)
            if kept:
                _move_namespace(old, self.netns, report)
        finally:
            if kept:
                run_ip(["netns", "delete", old], check=False)
        self.processes.clear()
        report.seconds = time.monotonic() - t0
        log.info("restarted %s: moved %s, %d addresses, %d routes in %.2f s", self.container,
                 ",".join(report.interfaces), report.addresses, report.routes, report.seconds)
        return report

    def pause(self) -> None:
        docker(["pause", self.container], engine=self.engine)

    def unpause(self) -> None:
        docker(["unpause", self.container], engine=self.engine)

    def state(self) -> str:
        """docker's status word: running, paused, exited ... or missing."""
        res = docker(["inspect", "--format", "{{.State.Status}}", self.container], check=False, engine=self.engine)
        return res.stdout.strip() if res.returncode == 0 else "missing"

    def _wait_state(self, states: tuple[str, ...], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.state() not in states:
            if time.monotonic() > deadline:
                raise RuntimeError(f"container {self.container} did not reach {'/'.join(states)}")
            time.sleep(0.05)


def _restorable(route: netlink.Route) -> bool:
    """Routes the kernel made with an address or link (proto kernel, IPv6 link-local and multicast) come
    back by themselves once the addresses are in place; everything else has to be added again."""
    return (route.proto != netlink.RTPROT_KERNEL and route.type != netlink.RTN_MULTICAST
            and not (route.dst or "").startswith(("fe80:", "ff00:")))


def _move_namespace(old: str, new: str, report: ReplumbReport) -> None:
    """Move every interface of netns `old` into `new` and restore addresses, routes, iptables rules.

    Netlink through pyroute2 (testbed/netlink.py): a handful of requests per host, no `ip` processes.
    """
    with netlink.session(old) as src:
        links = [l for l in netlink.links(ipr=src) if l.name != "lo"]
        addrs = [a for a in netlink.addresses(ipr=src)
                 if a.scope != netlink.SCOPE_LINK and a.local not in ("127.0.0.1", "::1")]
        routes = [r for fam in (socket.AF_INET, socket.AF_INET6) for r in netlink.routes(family=fam, ipr=src)
                  if _restorable(r)]
        saved = subprocess.run(["ip", "netns", "exec", old, "iptables-save"], capture_output=True, text=True)
        _all_or_raise(f"moving interfaces of {old} to {new}",
                      [(l.name, lambda l=l: netlink.move_link(l.name, new, ipr=src)) for l in links])
    report.interfaces = [l.name for l in links]
    with netlink.session(new) as dst:
        # A move leaves an interface down and without addresses: MTU, addresses, then up.
        steps = [(f"mtu {l.name}", lambda l=l: netlink.set_mtu(l.name, l.mtu, ipr=dst)) for l in links if l.mtu]
        steps += [(f"address {a.local} on {a.ifname}",
                   lambda a=a: netlink.add_address(a.ifname, a.local if a.peer else f"{a.local}/{a.prefixlen}",
                                                   peer=f"{a.peer}/{a.prefixlen}" if a.peer else None, ipr=dst))
                  for a in addrs]
        steps += [(f"up {l.name}", lambda l=l: netlink.set_link_up(l.name, ipr=dst)) for l in links if l.up]
        report.addresses = len(addrs)
        _all_or_raise(f"restoring interfaces in {new}", steps)
        # Routes after the addresses and links they depend on; one failure must not stop the others.
        failed = []
        for r in routes:
            try:
                netlink.add_route(r, ipr=dst)
            except (NetlinkError, RuntimeError, OSError) as exc:
                failed.append(f"{r}: {exc}")
        if failed:
            log.warning("restoring routes in %s: %s", new, "; ".join(failed))
    report.routes = len(routes)
    if saved.returncode == 0 and _has_rules(saved.stdout):
        subprocess.run(["ip", "netns", "exec", new, "iptables-restore", "-w"], input=saved.stdout,
                       capture_output=True, text=True, check=True)
        report.iptables = True


def _all_or_raise(what: str, steps: list[tuple[str, Callable[[], None]]]) -> None:
    """Run every step even when one fails (as `ip -force -batch` did), then raise naming the failures."""
    errors = []
    for name, step in steps:
        try:
            step()
        except (NetlinkError, RuntimeError, OSError) as exc:
            errors.append(f"{name}: {exc}")
    if errors:
        raise RuntimeError(f"{what} failed: " + "; ".join(errors))


def _has_rules(iptables_save: str) -> bool:
    """True when the dump holds a rule or a user chain (not just empty built-in tables)."""
    for line in iptables_save.splitlines():
        if line.startswith("-A ") or (line.startswith(":") and line.split()[0][1:] not in
                                      ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING")):
            return True
    return False


class DockerRuntime(Runtime):
    """Hosts as containers `<prefix><runid>-<host>`, labelled wanbed.run=<runid>, wanbed.prefix=tb."""

    name = "docker"

    def __init__(self, run_id: str, workdir: Path | None = None, image: str | None = None,
                 workers: int = START_WORKERS, engines: dict[str, Engine] | None = None,
                 default_engine: Engine = LOCAL) -> None:
        """`engines` maps host names to the engine of their machine; other hosts go to `default_engine`."""
        from testbed.image import IMAGE, NODE_UID, NODE_USER, distribute_image, ensure_image
        self.run_id = run_id
        self.prefix = registry.prefix(run_id)
        self.run_dir = workdir
        self.default_engine = default_engine
        self.placement: dict[str, Engine] = dict(engines or {})
        self.engines: list[Engine] = _distinct([default_engine, *self.placement.values()])
        for engine in self.engines:
            require_engine(engine)
        self._own_record = False
        self._record_engines()
        try:
            self.image = image or ensure_image(IMAGE, engine=default_engine)
            distribute_image(self.image, self.engines)
        except BaseException:
            if self._own_record:          # refused before any container: nothing for clean to find
                registry.unregister(self.run_id)
            raise
        self.user = NODE_USER
        self.uid = NODE_UID
        self.workers = max(1, workers)
        self.pids_limit, self.memory = container_limits()
        self._tmp: str | None = None
        self.hosts: dict[str, DockerHost] = {}
        self.sysctls: dict[str, str] = {}

    def container_name(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def engine_of(self, host: str) -> Engine:
        return self.placement.get(host, self.default_engine)

    def _record_engines(self) -> None:
        """Write every engine of this run to its registry record (made here when the run has none), so that
        `testbed clean` reaches them even if this process is killed before it removes its containers."""
        record = registry.load(self.run_id)
        if record is None:
            record = registry.register(self.run_id, "docker")
            self._own_record = True
        known = record.state.setdefault(ENGINES_KEY, {})
        known.update({e.name: e.address() for e in self.engines})
        registry.save(record)

    def _workdir(self, host: str) -> Path:
        if self.run_dir is not None:
            return self.run_dir / "nodes" / host
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        return Path(self._tmp) / host

    def add_host(self, name: str) -> DockerHost:
        return self.add_hosts([name])[0]

    def _run_container(self, host: DockerHost) -> None:
        # --no-healthcheck: the testbed asks each daemon's Health over gRPC; the image's Docker check
        # would start a Python interpreter in every container every 10 s, CPU the emulation needs.
        docker(["run", "-d", "--name", host.container, "--hostname", host.name, "--network", "none",
                "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", "--no-healthcheck",
                "--security-opt", "no-new-privileges", "--pids-limit", str(self.pids_limit),
                # Under no-new-privileges Docker gives `docker exec -u root` (the tools: ip, tc, kill ...)
                # the capabilities of the container's user: the init (`sleep infinity`) is root so they keep
                # theirs; daemons still run as the node user (`exec -u wanbed`, CapEff 0).
                "--user", "0:0",
                "--memory", self.memory,
                "--label", f"{RUN_LABEL}={self.run_id}", "--label", f"{PREFIX_LABEL}={PREFIX}",
                "-v", f"{host.workdir.resolve()}:{CONTAINER_WORKDIR}", self.image], engine=host.engine)

    def add_hosts(self, names: list[str]) -> list[DockerHost]:
        """Create many hosts: concurrent `docker run`s, one `ip -batch` to name their namespaces."""
        made: list[DockerHost] = []
        for name in names:
            if name in self.hosts or names.count(name) > 1:
                raise UserError(f"host {name!r} exists twice.")
        for name in names:
            host = DockerHost(name, self.container_name(name), self._workdir(name), user=self.user,
                              engine=self.engine_of(name))
            host.sysctls = dict(self.sysctls)
            self.hosts[name] = host      # recorded first, so a failure half-way is still torn down
            host.workdir.mkdir(parents=True, exist_ok=True)
            # The daemon runs as the image's non-root user and writes its records and spool here.
            os.chown(host.workdir, self.uid, self.uid)
            made.append(host)
        if not made:
            return made
        with ThreadPoolExecutor(max_workers=min(self.workers, len(made)), thread_name_prefix="docker-run") as pool:
            results = list(pool.map(_capture_error(self._run_container), made))
        errors = [f"{h.name}: {e}" for h, e in zip(made, results) if e is not None]
        if errors:
            raise RuntimeError("starting containers failed: " + "; ".join(errors[:3]))
        fmt = "{{.Name}} {{.State.Pid}}"
        pids: dict[str, int] = {}
        for engine in _distinct([h.engine for h in made]):
            out = docker(["inspect", "--format", fmt, *[h.container for h in made if h.engine == engine]],
                         engine=engine).stdout
            pids.update({line.split()[0].lstrip("/"): int(line.split()[1]) for line in out.splitlines()
                         if line.strip()})
        run_ip([], batch="".join(f"netns attach {h.netns} {pids[h.container]}\n" for h in made))
        _configure_namespaces([h.netns for h in made], self.sysctls)
        return made

    def remove_host(self, name: str) -> None:
        host = self.hosts.pop(name, None)
        if host is None:
            return
        _remove([host.container], host.engine)

    def close(self) -> None:
        for engine in self.engines:
            names = [h.container for h in self.hosts.values() if h.engine == engine]
            # Also whatever carries our run label but was not recorded (a failure half-way through add).
            try:
                names += [n for n, run in _labelled(engine) if run == self.run_id and n not in names]
            except (RuntimeError, subprocess.TimeoutExpired):
                log.warning("listing containers of run %s on %s failed; removing the recorded ones",
                            self.run_id, engine)
            _remove(names, engine)
        self.hosts.clear()
        if self._own_record:
            registry.unregister(self.run_id)
            self._own_record = False
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _configure_namespaces(namespaces: list[str], sysctls: dict[str, str]) -> None:
    """lo up, forwarding and the scenario's sysctls: in-process (one setns() thread), else `ip netns exec`."""
    try:
        configure_in_thread(namespaces, sysctls)
    except OSError as exc:
        log.info("in-process namespace set-up failed (%s); falling back to ip netns exec", exc)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", sysctl_script(sysctls)],
                           check=True, capture_output=True)


def _capture_error(fn: Callable[[DockerHost], None]) -> Callable[[DockerHost], Exception | None]:
    def wrapped(host: DockerHost) -> Exception | None:
        try:
            fn(host)
            return None
        except Exception as exc:  # noqa: BLE001 - reported together after every thread finished
            return exc
    return wrapped


def _distinct(engines: list[Engine]) -> list[Engine]:
    """The engines in order, each once (two names for one address are still two machines)."""
    return list(dict.fromkeys(engines))


def _remove(containers: list[str], engine: Engine = LOCAL) -> None:
    if containers:
        docker(["rm", "-f", "-v", *containers], check=False, engine=engine)
    for name in containers:
        for ns in (name, name + OLD_NETNS_SUFFIX):
            if netns_exists(ns):
                run_ip(["netns", "delete", ns], check=False)


def _labelled(engine: Engine = LOCAL, kind: str = "ps") -> list[tuple[str, str]]:
    """(name, run id) of every container (kind "ps") or network ("network") carrying the testbed's labels."""
    listing, name = (["ps", "-a"], "{{.Names}}") if kind == "ps" else (["network", "ls"], "{{.Name}}")
    res = docker([*listing, "--filter", f"label={PREFIX_LABEL}={PREFIX}",
                  "--format", name + ' {{.Label "' + RUN_LABEL + '"}}'], check=False, engine=engine)
    out = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], parts[1]))
    return out


def run_containers(run_id: str, engine: Engine = LOCAL) -> list[str]:
    """Names of the containers (any state) on `engine` labelled with this run id."""
    return [n for n, run in _labelled(engine) if run == run_id]


def recorded_engines(records: list[registry.RunRecord]) -> list[Engine]:
    """The engines these runs wrote to their records (see DockerRuntime._record_engines)."""
    found: dict[str, Engine] = {}
    for record in records:
        known = record.state.get(ENGINES_KEY) if isinstance(record.state, dict) else None
        if isinstance(known, dict):
            for name, address in known.items():
                if isinstance(name, str) and isinstance(address, str) and address:
                    found.setdefault(address, Engine(name, address))
    return list(found.values())


@dataclass
class OrphanReport:
    removed: list[str] = field(default_factory=list)       # "container X on machine M", "network ..."
    unreachable: list[Engine] = field(default_factory=list)


def clean_orphans(is_live: Callable[[str], bool], engines: list[Engine] | None = None) -> OrphanReport:
    """On the environment's engine and every engine in `engines`: remove the containers (and their named netns)
    and networks whose run id is not live. An engine that does not answer is reported, not waited for."""
    report = OrphanReport()
    local = LOCAL.address()
    targets = [LOCAL] + [e for e in _distinct(engines or []) if e.address() != local]
    for engine in targets:
        try:
            require_engine(engine)
        except UserError:
            if engine is not LOCAL:      # no local engine: no local containers
                report.unreachable.append(engine)
            continue
        where = "" if engine is LOCAL else f" on machine {engine.name}"
        dead = [name for name, run in _labelled(engine) if not is_live(run)]
        _remove(dead, engine)
        report.removed += [f"container {name}{where}" for name in dead]
        nets = [name for name, run in _labelled(engine, "network") if not is_live(run)]
        if nets:
            docker(["network", "rm", *nets], check=False, engine=engine)
        report.removed += [f"network {name}{where}" for name in nets]
    return report
