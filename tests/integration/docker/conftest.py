"""Docker fixtures: an engine (started here when none answers, stopped by its pid) and the node image.

An engine started here keeps its images in a lasting cache directory (IMAGE_CACHE, default
/var/cache/wanbed/test-dockerd), so a second test session on the same machine finds the node image
(or at least the debootstrap base) and needs seconds instead of minutes. Only images live there:
every container of a test is removed by the test, and the engine is stopped at the end of the
session. When another session holds the cache, this one uses a throw-away data root.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from testbed import docker_engine, image

IMAGE_CACHE = Path(os.environ.get("WANBED_DOCKER_CACHE", "/var/cache/wanbed/test-dockerd"))


def _lock_cache() -> IO[str] | None:
    """The cache's lock, held for the session; None when another engine uses the cache."""
    try:
        IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
        f = open(IMAGE_CACHE / ".lock", "a")
    except OSError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


@pytest.fixture(scope="session")
def engine() -> Iterator[str]:
    """DOCKER_HOST of an answering engine; one started here is stopped and its state removed at the end."""
    if os.geteuid() != 0:
        pytest.skip("the Docker runtime tests need root (dockerd, named netns)")
    if shutil.which("dockerd") is None and shutil.which("docker") is None:
        pytest.skip("docker.io is not installed (make setup installs it)")
    previous = os.environ.get("DOCKER_HOST")
    started: docker_engine.StartedEngine | None = None
    lock: IO[str] | None = None
    if not docker_engine.engine_answers():
        # Short root: containerd sockets live under the exec root (108-byte unix path limit).
        root = Path(tempfile.mkdtemp(prefix="tb-dockerd-", dir="/tmp"))
        lock = _lock_cache()
        try:
            started = docker_engine.start_engine(root, data_root=IMAGE_CACHE / "data" if lock else None)
        except RuntimeError:
            if lock is None:
                raise
            # A damaged cache must not fail the suite: start afresh without it.
            lock.close()
            lock = None
            started = docker_engine.start_engine(root)
        os.environ["DOCKER_HOST"] = started.host
    try:
        yield os.environ.get("DOCKER_HOST", "")
    finally:
        if started is not None:
            started.stop()
            shutil.rmtree(started.root, ignore_errors=True)
            if previous is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = previous
        if lock is not None:
            lock.close()


@pytest.fixture(scope="session")
def node_image(engine: str) -> image.BuildResult:
    """The node image built once per session through the offline path (no registry here or in CI)."""
    return image.build(image.BuildOptions(mode="offline"), progress=lambda s: print(s, flush=True))
