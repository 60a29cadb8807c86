"""Docker fixtures: an engine (started here when none answers, stopped by its pid) and the node image."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import docker_engine, image


@pytest.fixture(scope="session")
def engine() -> Iterator[str]:
    """DOCKER_HOST of an answering engine; one started here is stopped and its state removed at the end."""
    if os.geteuid() != 0:
        pytest.skip("the Docker runtime tests need root (dockerd, named netns)")
    if shutil.which("dockerd") is None and shutil.which("docker") is None:
        pytest.skip("docker.io is not installed (make setup installs it)")
    previous = os.environ.get("DOCKER_HOST")
    started: docker_engine.StartedEngine | None = None
    if not docker_engine.engine_answers():
        # Short root: containerd sockets live under the exec root (108-byte unix path limit).
        root = Path(tempfile.mkdtemp(prefix="tb-dockerd-", dir="/tmp"))
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


@pytest.fixture(scope="session")
def node_image(engine: str) -> image.BuildResult:
    """The node image built once per session through the offline path (no registry here or in CI)."""
    return image.build(image.BuildOptions(mode="offline"), progress=lambda s: print(s, flush=True))
