"""The `netns` runtime: every host is a named Linux network namespace.

Namespace names are `<prefix><runid>-<host>` so `testbed clean` can tell whose
they are. Namespaces are created in batches (one `ip -batch` for all hosts)
because spawning one `ip` per host dominates set-up time at 100 hosts.
Processes are started through `ip netns exec`, which setns()es and then exec()s,
so the pid we get back is the pid of the program itself and can be signalled
directly; nothing is ever ended by name.
"""
from __future__ import annotations

import logging
import os
import shlex
import signal as signals
import subprocess
import tempfile
import time
from pathlib import Path

from testbed import registry
from node.errors import UserError
from testbed.runtime.base import Host, Process, Runtime

log = logging.getLogger(__name__)

TERM_GRACE = 3.0      # seconds a process gets between SIGTERM and SIGKILL


def run_ip(args: list[str], batch: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `ip ARGS` (with an optional -batch script on stdin); failures become RuntimeError with ip's message."""
    argv = ["ip", *args] + (["-force", "-batch", "-"] if batch is not None else [])
    res = subprocess.run(argv, input=batch, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {res.stderr.strip()}")
    return res


NETNS_DIR = "/run/netns"     # where `ip netns` keeps its named namespaces (one bind mount each)


def netns_exists(name: str) -> bool:
    return os.path.exists(f"{NETNS_DIR}/{name}")


def list_netns() -> list[str]:
    """The named namespaces: the entries of NETNS_DIR, which is what `ip netns list` reads (without a process)."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def netns_pids(name: str) -> list[int]:
    return netns_pids_of([name])[name]


def netns_pids_of(names: list[str]) -> dict[str, list[int]]:
    """name -> pids of the processes inside that named namespace, from one pass over /proc: a process is inside
    when its /proc/PID/ns/net is the namespace's file (same device and inode), the test `ip netns pids` makes
    for one namespace per run of it."""
    found: dict[str, list[int]] = {n: [] for n in names}
    wanted: dict[tuple[int, int], str] = {}
    for n in names:
        try:
            st = os.stat(f"{NETNS_DIR}/{n}")
        except OSError:
            continue
        wanted[(st.st_dev, st.st_ino)] = n
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:         # gone meanwhile, or a kernel thread
            continue
        n = wanted.get((st.st_dev, st.st_ino))
        if n is not None:
            found[n].append(int(entry.name))
    return found


def terminate_pids(pids: list[int], grace: float = TERM_GRACE) -> None:
    """SIGTERM every pid, wait up to `grace` seconds, SIGKILL whatever is left (by pid only)."""
    alive = [p for p in pids if registry.pid_alive(p)]
    for pid in alive:
        try:
            os.kill(pid, signals.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            _reap(pid)
        alive = [p for p in alive if _exists(p)]
        if alive:
            time.sleep(0.05)
    for pid in alive:
        try:
            os.kill(pid, signals.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(pid, block=True)


def _exists(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _reap(pid: int, block: bool = False) -> None:
    try:
        os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        pass


class NetnsHost(Host):
    def __init__(self, name: str, netns: str, workdir: Path) -> None:
        self.name = name
        self.netns = netns
        self.workdir = workdir
        self.processes: list[Process] = []

    def __repr__(self) -> str:
        return f"NetnsHost({self.name!r}, netns={self.netns!r})"

    def _argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        if not argv:
            raise UserError(f"no command given to start in host {self.name}.")
        self.workdir.mkdir(parents=True, exist_ok=True)
        logpath = self.workdir / f"{name}.log"
        with open(logpath, "ab") as logf:
            # A session of its own: Ctrl-C in the user's terminal reaches the testbed, which then
            # stops processes in order, instead of reaching every daemon at once.
            popen = subprocess.Popen(self._argv(argv), cwd=self.workdir, stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                     start_new_session=True)
        proc = Process(self.name, name, popen.pid, list(argv), logpath, popen)
        self.processes.append(proc)
        log.debug("started %s in %s: pid %d", argv, self.netns, popen.pid)
        return proc

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self._argv(argv), capture_output=True, text=True, timeout=timeout, check=check,
                                  cwd=self.workdir if self.workdir.is_dir() else None)
        except FileNotFoundError as exc:
            raise UserError(f"cannot run {argv[0]!r} in host {self.name}: {exc.strerror}.") from None

    def signal(self, process: Process, sig: int) -> None:
        if process.popen is not None and process.popen.poll() is not None:
            return      # already exited and reaped: the pid may belong to someone else now
        try:
            os.kill(process.pid, sig)
        except ProcessLookupError:
            pass

    def stop_processes(self) -> None:
        # Anything else still inside the namespace (a daemon's own children, a `testbed exec` left running)
        # was started by this run too: it would keep the namespace busy. _stop_processes ends those as well.
        _stop_processes([self])


class NetnsRuntime(Runtime):
    """Hosts as named network namespaces: `<prefix><runid>-<host>`."""

    name = "netns"

    def __init__(self, run_id: str, run_dir: Path | None = None) -> None:
        self.run_id = run_id
        self.prefix = registry.prefix(run_id)
        self.run_dir = run_dir
        self._tmp: str | None = None
        self.hosts: dict[str, NetnsHost] = {}
        self.sysctls: dict[str, str] = {}
        check_netns_support()

    def netns_name(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def _workdir(self, host: str) -> Path:
        if self.run_dir is not None:
            return self.run_dir / "nodes" / host
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        return Path(self._tmp) / host

    def add_host(self, name: str) -> NetnsHost:
        return self.add_hosts([name])[0]

    def add_hosts(self, names: list[str]) -> list[NetnsHost]:
        """Create many hosts: one `ip -batch` for the namespaces, one thread to configure them all."""
        made: list[NetnsHost] = []
        for name in names:
            if name in self.hosts:
                raise UserError(f"host {name!r} exists twice.")
            host = NetnsHost(name, self.netns_name(name), self._workdir(name))
            self.hosts[name] = host     # recorded first, so a failure half-way is still torn down
            made.append(host)
        run_ip([], batch="".join(f"netns add {h.netns}\n" for h in made))
        for h in made:
            h.workdir.mkdir(parents=True, exist_ok=True)
        try:
            configure_in_thread([h.netns for h in made], self.sysctls)
            return made
        except OSError as exc:
            log.info("in-process namespace set-up failed (%s); falling back to ip netns exec", exc)
        procs = []
        for h in made:
            # Forwarding on: hosts are routers in a routed lab. One process per host, run in parallel.
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", h.netns, "sh", "-c", sysctl_script(self.sysctls)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        errors = []
        for h, p in zip(made, procs):
            _, err = p.communicate()
            if p.returncode != 0:
                errors.append(f"{h.netns}: {err.strip()}")
        if errors:
            raise RuntimeError("setting up host namespaces failed: " + "; ".join(errors))
        return made

    def remove_host(self, name: str) -> None:
        host = self.hosts.pop(name, None)
        if host is None:
            return
        host.stop_processes()
        if netns_exists(host.netns):
            run_ip(["netns", "del", host.netns], check=False)

    def close(self) -> None:
        hosts = list(self.hosts.values())
        _stop_processes(hosts)
        existing = [h.netns for h in hosts if netns_exists(h.netns)]
        if existing:
            run_ip([], batch="".join(f"netns del {n}\n" for n in existing), check=False)
        for n in existing:
            if netns_exists(n):      # batch failed half-way: one by one
                run_ip(["netns", "del", n], check=False)
        self.hosts.clear()
        if self._tmp is not None:
            import shutil
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _stop_processes(hosts: list[NetnsHost]) -> None:
    """NetnsHost.stop_processes for many hosts at once: one grace period for all their processes, one pass over
    /proc for what else is left inside their namespaces."""
    terminate_pids([p.pid for h in hosts for p in h.processes if p.popen is None or p.popen.poll() is None])
    for h in hosts:
        for p in h.processes:
            if p.popen is not None:
                try:
                    p.popen.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
    inside = netns_pids_of([h.netns for h in hosts])
    terminate_pids([pid for pids in inside.values() for pid in pids], grace=1.0)
    for h in hosts:
        h.processes.clear()


SYSCTLS = {"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0"}
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def sysctl_script(extra: dict[str, str]) -> str:
    """The shell form of configure_in_thread (fallback when setns() from a thread is not possible)."""
    settings = {**SYSCTLS, **extra}
    # quoted: values may hold spaces (net.ipv4.tcp_rmem "4096 131072 6291456")
    return "ip link set lo up && sysctl -qw " + " ".join(shlex.quote(f"{k.replace('/', '.')}={v}")
                                                       for k, v in settings.items())


def configure_in_thread(namespaces: list[str], extra: dict[str, str] | None = None) -> None:
    """`lo` up, forwarding on and the scenario's `extra` sysctls in each namespace, from one short-lived
    thread that setns()es into each.

    Only that thread changes namespace (it then ends), and /proc/sys/net and new sockets follow the
    calling thread's namespace. Saves one `ip netns exec` process per host (~5-10 ms each).
    """
    import ctypes
    import fcntl
    import socket
    import struct
    import threading

    libc = ctypes.CDLL(None, use_errno=True)
    errors: list[OSError] = []
    user_errors: list[UserError] = []

    def work() -> None:
        try:
            for ns in namespaces:
                fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
                try:
                    if libc.setns(fd, _CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
                finally:
                    os.close(fd)
                for key, value in SYSCTLS.items():
                    with open(f"/proc/sys/{key}", "w") as f:
                        f.write(value)
                for key, value in (extra or {}).items():
                    try:
                        with open(f"/proc/sys/{key}", "w") as f:
                            f.write(value)
                    except OSError as exc:   # the user's setting, not the set-up mechanism: no fallback
                        user_errors.append(UserError(
                            f"cannot set sysctl {key.replace('/', '.')}={value} in host namespace {ns}: "
                            f"{exc.strerror or exc} (only network-namespace sysctls can be set per host)."))
                        return
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    flags = struct.unpack("16sh", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sh", b"lo", 0)))[1]
                    fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))
        except OSError as exc:
            errors.append(exc)

    t = threading.Thread(target=work, name="netns-setup")
    t.start()
    t.join()
    if user_errors:
        raise user_errors[0]
    if errors:
        raise errors[0]


def check_netns_support() -> None:
    if os.geteuid() != 0:
        raise UserError("the testbed must run as root to create network namespaces and interfaces.")
    if not os.path.exists("/proc/self/ns/net"):
        raise UserError("this kernel has no network namespace support (CONFIG_NET_NS).")
