"""Engine roots a killed test session left under /tmp: swept when their dockerd is gone, kept while it runs."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import docker_engine


def mounted(point: Path) -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == str(point) for line in f)


def test_dead_engines_roots_are_unmounted_and_removed_live_and_starting_ones_kept(tmp_path: Path) -> None:
    dead = tmp_path / "tb-m1-dead"
    (dead / "x" / "netns").mkdir(parents=True)
    (dead / "dockerd.pid").write_text("999999999\n")           # no such process
    live = tmp_path / "tb-m2-live"
    live.mkdir()
    # a process whose command line names its root, as dockerd's --exec-root does
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(live)])
    (live / "dockerd.pid").write_text(f"{proc.pid}\n")
    reused = tmp_path / "tb-m2-reused"
    reused.mkdir()
    (reused / "dockerd.pid").write_text(f"{os.getpid()}\n")    # alive, but not that root's dockerd
    starting = tmp_path / "tb-m1-starting"
    starting.mkdir()                                           # no pid file yet, just made
    old = tmp_path / "tb-m1-never-started"
    old.mkdir()
    stale = time.time() - docker_engine.STARTING_GRACE_S - 10
    os.utime(old, (stale, stale))
    other = tmp_path / "tb-dockerd-other"                      # another prefix: not ours to sweep
    other.mkdir()
    mount = os.geteuid() == 0
    if mount:
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(dead / "x" / "netns")], check=True)
    try:
        removed = docker_engine.sweep_stale_roots(tmp_path, ("tb-m1-", "tb-m2-"))
    finally:
        proc.kill()
        proc.wait()
        if mount and mounted(dead / "x" / "netns"):
            subprocess.run(["umount", str(dead / "x" / "netns")])
            pytest.fail("the dead engine's mount was left in place")
    assert sorted(p.name for p in removed) == ["tb-m1-dead", "tb-m1-never-started", "tb-m2-reused"]
    assert not dead.exists() and not old.exists() and not reused.exists()
    assert live.exists() and starting.exists() and other.exists()
