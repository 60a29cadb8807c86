"""Docker fixtures: an engine (started here when none answers, stopped by its pid) and the node image.

An engine started here keeps its images in a lasting cache directory (IMAGE_CACHE, default
/var/cache/wanbed/test-dockerd), so a second test session on the same machine finds the node image
(or at least the debootstrap base) and needs seconds instead of minutes. Only images live there:
every container of a test is removed by the test, and the engine is stopped at the end of the
session. When another session holds the cache, this one uses a throw-away data root.

Under pytest-xdist the Docker tests form two groups, run by two workers at once: the single-engine tests
(`docker`) and the multi-engine rig's (`docker-multi`, multi/). They share ONE engine, that of the worker that
took the cache's lock first: it writes the engine's address with the session's run id (ENGINE_FILE), the other
worker uses that engine and holds USERS_FILE shared while it does, and the starting worker stops the engine only
once no other worker holds it. That wait is at the end of its session (pytest_sessionfinish), not in the fixture's
teardown: that runs inside the worker's last test, which may hold a turn or the `up` lock (tests/worker_turns.py)
the other worker's next test waits for. The node image is built under BUILD_LOCK, so the second worker finds it
built.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from testbed import docker_engine, image

IMAGE_CACHE = Path(os.environ.get("WANBED_DOCKER_CACHE", "/var/cache/wanbed/test-dockerd"))
ENGINE_FILE = IMAGE_CACHE / "engine"       # "<xdist run id> <DOCKER_HOST>" of the engine holding the cache
USERS_FILE = IMAGE_CACHE / ".users"        # held shared by the workers using another worker's engine
BUILD_LOCK = IMAGE_CACHE / ".build"        # held while a worker builds (or finds) the node image
# How long a worker waits for the session's other Docker worker to start the engine: dockerd answers within
# seconds here; past it the worker starts an engine of its own (a throw-away data root: the image is built again).
SHARED_ENGINE_WAIT_S = 60.0
# An engine (and the cache's lock) another worker may still use: stopped at the end of this worker's session.
LATE_STOP = pytest.StashKey[tuple[docker_engine.StartedEngine, IO[str]]]()


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


def _session_uid() -> str:
    """The xdist run id, the same in every worker of one session ("" without xdist: nothing to share)."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID", "")


def _lock_or_share(uid: str) -> tuple[IO[str] | None, tuple[str, IO[str]] | None]:
    """(the cache's lock, None) when this worker is to start the engine; (None, (DOCKER_HOST, hold)) when another
    worker of this session started it (keep the hold open while using the engine); (None, None) when neither
    happens in time (the worker then starts an engine of its own without the cache)."""
    deadline = time.monotonic() + SHARED_ENGINE_WAIT_S
    while True:
        lock = _lock_cache()
        if lock is not None or not uid:
            return lock, None
        try:
            users = open(USERS_FILE, "a")
        except OSError:
            return None, None
        # Shared before the address is read: the engine's owner removes the address, then waits for every
        # shared hold to end before it stops the engine.
        fcntl.flock(users, fcntl.LOCK_SH)
        with contextlib.suppress(OSError, ValueError):
            owner, host = ENGINE_FILE.read_text().split()
            if owner == uid and docker_engine.engine_answers(timeout=5, engine=docker_engine.Engine("shared", host)):
                return None, (host, users)
        users.close()
        if time.monotonic() > deadline:
            return None, None
        time.sleep(0.2)


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """DOCKER_HOST of an answering engine; one started here is stopped and its state removed at the end."""
    if os.geteuid() != 0:
        pytest.skip("the Docker runtime tests need root (dockerd, named netns)")
    if shutil.which("dockerd") is None and shutil.which("docker") is None:
        pytest.skip("docker.io is not installed (make setup installs it)")
    previous = os.environ.get("DOCKER_HOST")
    started: docker_engine.StartedEngine | None = None
    lock: IO[str] | None = None
    using: IO[str] | None = None           # the hold on another worker's engine
    uid = _session_uid()
    if not docker_engine.engine_answers():
        lock, shared = _lock_or_share(uid)
        if shared is not None:
            os.environ["DOCKER_HOST"], using = shared
        else:
            docker_engine.sweep_stale_roots(Path("/tmp"), ("tb-dockerd-",))     # a killed session's engine
            # Short root: containerd sockets live under the exec root (108-byte unix path limit).
            root = Path(tempfile.mkdtemp(prefix="tb-dockerd-", dir="/tmp"))
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
            if lock is not None and uid:
                ENGINE_FILE.write_text(f"{uid} {started.host}\n")
    try:
        yield os.environ.get("DOCKER_HOST", "")
    finally:
        if using is not None:
            using.close()
        if started is not None:
            if lock is not None and uid:
                ENGINE_FILE.unlink(missing_ok=True)      # no new user from now on
                request.config.stash[LATE_STOP] = (started, lock)
                lock = None
            else:
                _stop(started)
        if started is not None or using is not None:
            if previous is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = previous
        if lock is not None:
            lock.close()


def _stop(started: docker_engine.StartedEngine) -> None:
    started.stop()
    docker_engine.unmount_under(started.root)
    shutil.rmtree(started.root, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the engine this worker started once the other worker of the session no longer uses it."""
    late = session.config.stash.get(LATE_STOP, None)
    if late is None:
        return
    started, lock = late
    del session.config.stash[LATE_STOP]
    with open(USERS_FILE, "a") as users:
        fcntl.flock(users, fcntl.LOCK_EX)
        _stop(started)
    lock.close()


@pytest.fixture(scope="session")
def node_image(engine: str) -> image.BuildResult:
    """The node image built once per session through the offline path (no registry here or in CI). Under a lock:
    two workers on one engine must not build it at once (the second finds it built)."""
    with _build_lock():
        return image.build(image.BuildOptions(mode="offline"), progress=lambda s: print(s, flush=True))


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    try:
        f = open(BUILD_LOCK, "a")
    except OSError:           # no cache directory: no other worker shares an engine either
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
