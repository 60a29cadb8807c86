"""Finding, and for tests starting, Docker engines.

Everything talks to an engine through the `docker` CLI. Which engine is a
value passed with each call (`Engine`: a machine name and a DOCKER_HOST
address), never the process-wide DOCKER_HOST: hosts start from a thread pool,
and one run may use several machines' engines. `Engine()` (no address) is the
engine the environment selects, as before.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import registry
from node.errors import UserError

log = logging.getLogger(__name__)

START_HINT = "start one with `dockerd &` or `systemctl start docker` (or point DOCKER_HOST at one)"
# The oldest engine API the testbed drives: Engine 20.10 (API 1.41) is where `--cap-add` works for services
# and cgroup v2 limits (--pids-limit, --memory) are honoured; it is what Debian's docker.io here has.
MIN_API_VERSION = (1, 41)


@dataclass(frozen=True)
class Engine:
    """One machine's Docker engine: its name (for messages and records) and its DOCKER_HOST address
    ("" = whatever the environment selects)."""

    name: str = "local"
    host: str = ""

    def env(self) -> dict[str, str]:
        """The environment of a `docker` command aimed at this engine."""
        env = dict(os.environ, DOCKER_BUILDKIT="0")   # the legacy builder works with any engine version
        if self.host:
            env["DOCKER_HOST"] = self.host
        return env

    def address(self) -> str:
        """The address as recorded: this engine's, else the environment's (or docker's default socket)."""
        return self.host or os.environ.get("DOCKER_HOST", "") or "unix:///var/run/docker.sock"

    def __str__(self) -> str:
        return f"machine {self.name} ({self.address()})"


LOCAL = Engine()


def docker(args: list[str], check: bool = True, timeout: float = 120.0,
           input: str | bytes | None = None, engine: Engine = LOCAL) -> subprocess.CompletedProcess:
    """Run `docker ARGS` on `engine`; failures become RuntimeError carrying docker's message."""
    res = subprocess.run(["docker", *args], capture_output=True, text=input is None or isinstance(input, str),
                         input=input, timeout=timeout, env=engine.env())
    if check and res.returncode != 0:
        err = res.stderr if isinstance(res.stderr, str) else res.stderr.decode(errors="replace")
        raise RuntimeError(f"docker {' '.join(args[:3])} on {engine.name} failed: {err.strip()}")
    return res


def server_api_version(engine: Engine = LOCAL, timeout: float = 10.0) -> str | None:
    """The engine's API version ("1.41"), or None when it does not answer."""
    if shutil.which("docker") is None:
        return None
    try:
        res = docker(["version", "--format", "{{.Server.APIVersion}}"], check=False, timeout=timeout, engine=engine)
    except subprocess.TimeoutExpired:
        return None
    return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else None


def engine_answers(timeout: float = 10.0, engine: Engine = LOCAL) -> bool:
    return server_api_version(engine, timeout) is not None


def api_supported(version: str) -> bool:
    """True when an API version string such as "1.41" is at least MIN_API_VERSION."""
    try:
        major, minor = (int(x) for x in version.strip().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= MIN_API_VERSION


def require_engine(engine: Engine = LOCAL) -> None:
    """Raise a one-sentence UserError unless the engine answers with an API version the testbed supports."""
    if shutil.which("docker") is None:
        raise UserError(f"the docker CLI is not installed (apt-get install docker.io); then {START_HINT}.")
    version = server_api_version(engine)
    if version is None:
        if engine.host:
            raise UserError(f"the Docker engine of machine {engine.name} at {engine.host} does not answer; "
                            "start it or correct its address.")
        raise UserError(f"no Docker engine answers; {START_HINT}.")
    if not api_supported(version):
        need = ".".join(map(str, MIN_API_VERSION))
        raise UserError(f"the Docker engine of machine {engine.name} speaks API {version}, older than the "
                        f"{need} the testbed needs (Docker Engine 20.10 or later); upgrade it.")


@dataclass
class StartedEngine:
    """A dockerd this process started; stopped only through its own pid."""

    pid: int
    root: Path
    host: str          # value for DOCKER_HOST
    log_path: Path
    name: str = "local"

    @property
    def engine(self) -> Engine:
        return Engine(self.name, self.host)

    def stop(self, grace: float = 20.0) -> None:
        if self._alive():
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            if self._alive():
                os.kill(self.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, 0)

    def _alive(self) -> bool:
        # Reap it when it was our child: an exited but unreaped dockerd still answers kill(pid, 0).
        try:
            if os.waitpid(self.pid, os.WNOHANG)[0] == self.pid:
                return False
        except ChildProcessError:
            pass
        return registry.pid_alive(self.pid)


def unmount_under(root: Path) -> None:
    """Unmount what a stopped dockerd left mounted under its root (the exec root's netns/default, which would
    keep the engine's network namespace alive and its directory from being removed), deepest first."""
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    for point in sorted((p for p in points if p.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True)


# A root without a pid file is being set up (mkdtemp, then dockerd writes its pid within seconds): left alone.
STARTING_GRACE_S = 300.0


def sweep_stale_roots(folder: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """Remove engine roots under `folder` named with one of `prefixes` whose dockerd is gone (a killed session's
    engines: their mounts and directories would stay until the next reboot). A root whose dockerd still runs,
    or that is still being set up, is kept. Returns the roots removed."""
    removed = []
    for root in sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(prefixes)):
        if _engine_runs(root):
            continue
        unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


def _engine_runs(root: Path) -> bool:
    try:
        pid = int((root / "dockerd.pid").read_text().strip())
    except FileNotFoundError:
        try:
            return time.time() - root.stat().st_mtime < STARTING_GRACE_S
        except FileNotFoundError:
            return True            # gone meanwhile: nothing to sweep
    except (OSError, ValueError):
        return False
    try:                           # the pid must still be that dockerd, not a reused number
        return str(root) in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False


def start_engine(root: Path, ready_timeout: float = 60.0, data_root: Path | None = None,
                 netns: str | None = None, name: str = "local") -> StartedEngine:
    """Start dockerd with its own exec root and socket under `root`; images under `data_root`
    (default root/data; a lasting data root keeps the built images across test sessions).
    With `netns`, dockerd runs in that named network namespace, as a machine of its own would
    (`nsenter --net`: `ip netns exec` would remount /sys and hide the cgroups from dockerd).

    No iptables and no default bridge: testbed containers run with `--network none`
    and get their links plumbed in from outside, so the engine needs no host networking.
    """
    if shutil.which("dockerd") is None:
        raise UserError("dockerd is not installed; install docker.io (apt-get install docker.io).")
    root.mkdir(parents=True, exist_ok=True)
    sock = root / "docker.sock"
    log_path = root / "dockerd.log"
    # exec-root must be short: containerd's socket path lives under it (108-byte limit).
    argv = ["dockerd", "--data-root", str(data_root or root / "data"), "--exec-root", str(root / "x"),
            "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{sock}",
            "--iptables=false", "--ip6tables=false", "--bridge=none"]
    if netns is not None:
        if shutil.which("nsenter") is None:
            raise UserError("starting dockerd in a network namespace needs nsenter (apt-get install util-linux).")
        argv = ["nsenter", f"--net=/run/netns/{netns}", *argv]
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    # nsenter execs dockerd, so the pid is dockerd's own.
    engine = StartedEngine(proc.pid, root, f"unix://{sock}", log_path, name)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-5:]
            raise RuntimeError("dockerd exited at start: " + " | ".join(tail))
        if engine_answers(timeout=5, engine=engine.engine):
            return engine
        time.sleep(0.5)
    engine.stop()
    raise RuntimeError(f"dockerd did not answer within {ready_timeout:.0f} s (log: {log_path})")
