"""Finding, and for tests starting, a Docker engine.

Everything talks to the engine through the `docker` CLI; DOCKER_HOST in the
environment selects the engine (tests point it at a dockerd they started).
"""
from __future__ import annotations

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


def docker(args: list[str], check: bool = True, timeout: float = 120.0,
           input: str | bytes | None = None) -> subprocess.CompletedProcess:
    """Run `docker ARGS`; failures become RuntimeError carrying docker's message."""
    env = dict(os.environ, DOCKER_BUILDKIT="0")   # the legacy builder works with any engine version
    res = subprocess.run(["docker", *args], capture_output=True, text=input is None or isinstance(input, str),
                         input=input, timeout=timeout, env=env)
    if check and res.returncode != 0:
        err = res.stderr if isinstance(res.stderr, str) else res.stderr.decode(errors="replace")
        raise RuntimeError(f"docker {' '.join(args[:3])} failed: {err.strip()}")
    return res


def engine_answers(timeout: float = 10.0) -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return docker(["version", "--format", "{{.Server.Version}}"], check=False, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def require_engine() -> None:
    """Raise a one-sentence UserError unless a Docker engine answers."""
    if shutil.which("docker") is None:
        raise UserError(f"the docker CLI is not installed (apt-get install docker.io); then {START_HINT}.")
    if not engine_answers():
        raise UserError(f"no Docker engine answers; {START_HINT}.")


@dataclass
class StartedEngine:
    """A dockerd this process started; stopped only through its own pid."""

    pid: int
    root: Path
    host: str          # value for DOCKER_HOST
    log_path: Path

    def stop(self, grace: float = 20.0) -> None:
        if registry.pid_alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while registry.pid_alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if registry.pid_alive(self.pid):
                os.kill(self.pid, signal.SIGKILL)
        try:
            os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pass


def start_engine(root: Path, ready_timeout: float = 60.0, data_root: Path | None = None) -> StartedEngine:
    """Start dockerd with its own exec root and socket under `root`; images under `data_root`
    (default root/data; a lasting data root keeps the built images across test sessions).

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
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    engine = StartedEngine(proc.pid, root, f"unix://{sock}", log_path)
    deadline = time.monotonic() + ready_timeout
    env_before = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = engine.host
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError("dockerd exited at start: " + " | ".join(tail))
            if engine_answers(timeout=5):
                return engine
            time.sleep(0.5)
    finally:
        if env_before is None:
            del os.environ["DOCKER_HOST"]
        else:
            os.environ["DOCKER_HOST"] = env_before
    engine.stop()
    raise RuntimeError(f"dockerd did not answer within {ready_timeout:.0f} s (log: {log_path})")
