"""The node image: builds offline, runs the daemon entry point, has a healthcheck, caches."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from testbed import image
from testbed.docker_engine import docker

# One Docker engine and image cache for the session: the Docker tests run on one worker.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[3]


def test_node_requirements_match_lock() -> None:
    """Every pin in the image's requirements equals the pin in requirements.lock."""
    def pins(path: Path) -> dict[str, str]:
        out = {}
        for line in path.read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
            if m:
                out[m.group(1).lower()] = m.group(2)
        return out
    node, lock = pins(image.NODE_REQUIREMENTS), pins(REPO / "requirements.lock")
    assert node, "no pins in the node requirements"
    for name, version in node.items():
        assert lock.get(name) == version, f"{name}: image {version} vs lock {lock.get(name)}"
    assert "pyspark" not in node


def test_source_only_packages_are_built_into_wheels() -> None:
    """A package the index has only as a source archive is built on the host, every other one downloaded as a
    wheel: each pin goes exactly one way, and no name in BUILT_HERE is stale."""
    downloaded, built = image.node_requirements()
    names = {p.split("==")[0].lower() for p in built}
    assert names == set(image.BUILT_HERE)
    assert not set(downloaded) & set(built)
    assert len(downloaded) + len(built) == len([l for l in image.NODE_REQUIREMENTS.read_text().splitlines()
                                                if l.strip() and not l.startswith("#")])


def test_image_builds_and_runs_node(node_image: image.BuildResult) -> None:
    assert node_image.mode in ("offline", "cache")
    res = docker(["run", "--rm", "--network", "none", node_image.image, "python", "-m", "node", "--help"])
    assert "--config" in res.stdout
    # The tools experiments use inside a host.
    res = docker(["run", "--rm", "--network", "none", node_image.image, "sh", "-c",
                  "command -v ip && command -v ping && command -v tcpdump && command -v iperf3"])
    assert res.stdout.count("/") >= 4


def test_image_metadata(node_image: image.BuildResult) -> None:
    cfg = json.loads(docker(["image", "inspect", "--format", "{{json .Config}}", node_image.image]).stdout)
    assert cfg["Healthcheck"]["Test"][0] in ("CMD", "CMD-SHELL")
    assert cfg["Labels"]["wanbed.version"] == image.__version__
    assert cfg["Labels"][image.HASH_LABEL] == image.content_hash()


def test_second_build_is_cache_hit(node_image: image.BuildResult) -> None:
    again = image.build(image.BuildOptions(mode="offline"), progress=lambda s: None)
    assert again.cached and again.mode == "cache"
    assert again.content_hash == node_image.content_hash
