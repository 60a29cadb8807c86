"""Our node daemons for bench/bench_pubsub.py: from this checkout or another revision, one of them profiled.

`BenchDaemons` starts the daemons as `testbed run` does (testbed.experiment.daemons.NodeDaemons), with the
root of the code they run first on PYTHONPATH: this checkout, or a `RevisionTree` (a `git worktree` of
another revision in a temp dir, its gRPC stubs generated there, removed by `close`), so `--before REV` runs
the pre-change code on the same network, interleaved with the current one. `profile` names a node whose
daemon runs under cProfile (`python -m cProfile -o FILE -m node ...`, the stats written when the daemon
ends on SIGTERM): a bench-only wrapper, so the node itself knows nothing of profiling. With py-spy
installed (`PySpy`), the running daemon is sampled instead, every thread, without a restart.
"""
from __future__ import annotations

import io
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from testbed.experiment.daemons import NodeDaemons

REPO = Path(__file__).resolve().parents[1]
TOP = 15                    # profile lines printed


CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_path(path: str) -> float:
    """CPU seconds (user + system) in a /proc stat file, 0 when it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return 0.0


class RevisionTree:
    """A detached `git worktree` of `rev` in a temp dir with its stubs generated; `close` removes it."""

    def __init__(self, rev: str) -> None:
        self.rev = rev
        got = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                             capture_output=True, text=True)
        if got.returncode != 0:
            raise ValueError(f"--before: {rev!r} is not a commit of {REPO}")
        self.commit = got.stdout.strip()
        self.tmp: Path | None = None
        self.root: Path | None = None

    def open(self) -> Path:
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-pubsub-before-"))
        self.root = self.tmp / "tree"
        _run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(self.root), self.commit])
        _run([sys.executable, "-m", "node.stubs", "generate"], cwd=self.root,
             env={**os.environ, "PYTHONPATH": str(self.root)})
        return self.root

    def close(self) -> None:
        if self.root is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.root)],
                           capture_output=True, text=True)
            subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True, text=True)
            self.root = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _run(argv: list[str], **kw: Any) -> None:
    got = subprocess.run(argv, capture_output=True, text=True, **kw)
    if got.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(got.stderr or got.stdout).strip()}")


class BenchDaemons(NodeDaemons):
    """NodeDaemons running the code under `code` (default: this checkout), `profile`: node -> cProfile file."""

    def __init__(self, network: Any, config_paths: dict[str, Path], code: Path | None = None,
                 name: str = "daemon") -> None:
        super().__init__(network, config_paths)
        self.code = code or REPO
        self.name = name                  # the process's name in its host (its log file <name>.log)
        self.profile: dict[str, Path] = {}

    def _argv(self, node: str) -> list[str]:
        argv = super()._argv(node)        # [python, -P, -m, node, --config, FILE]
        out = self.profile.get(node)
        if out is None:
            return argv
        return [argv[0], "-P", "-m", "cProfile", "-o", str(out), *argv[2:]]

    def start(self, node: str) -> None:
        proc = self.network.host(node).start(self.name, self._argv(node), env={"PYTHONPATH": str(self.code)})
        with self._lock:
            self.procs[node] = proc
            self.state[node] = "running"

    def stop(self, node: str, grace: float = 10.0) -> None:
        """SIGTERM one daemon and wait for it (a clean exit writes its profile)."""
        proc = self.procs.get(node)
        if proc is None or self.state.get(node) != "running":
            return
        self._signal(node, signal.SIGTERM)
        if proc.popen is not None:
            try:
                proc.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal(node, signal.SIGKILL)
                proc.popen.wait(timeout=5)
        self.state[node] = "stopped"


def cprofile_top(path: Path, n: int = TOP) -> list[str]:
    """The `n` functions with the most own time in a cProfile stats file, as pstats prints them."""
    buf = io.StringIO()
    stats = pstats.Stats(str(path), stream=buf)
    stats.sort_stats("tottime").print_stats(n)
    lines = buf.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    total = next((line.strip() for line in lines if "function calls" in line), "")
    return [total, *[line.rstrip() for line in lines[start:] if line.strip()][: n + 1]]


def pyspy_binary() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


class PySpy:
    """`py-spy record` on a running process until `stop`; raw (collapsed) stacks, aggregated by the frame that
    was running (own time)."""

    def __init__(self, binary: str, pid: int, out: Path) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([binary, "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
                                      "--threads", "--nonblocking", "--output", str(out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> list[str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)         # py-spy writes what it sampled on SIGINT
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        own: Counter[str] = Counter()
        try:
            for line in self.out.read_text(errors="replace").splitlines():
                stack, _, count = line.rpartition(" ")
                if stack and count.isdigit():
                    own[stack.split(";")[-1]] += int(count)
        except OSError:
            return ["(py-spy wrote nothing)"]
        total = sum(own.values()) or 1
        return [f"{total} samples; own share, frame"] + [f"{c / total:6.1%}  {frame}"
                                                          for frame, c in own.most_common(TOP)]
