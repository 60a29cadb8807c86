"""One run's containers on two engines (machines): placement per host, the image on each engine, the
bad-input sentences, and `testbed clean --run-id` and `testbed clean` reaching both engines (hosts and agents)
after the controller is killed with -9."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.errors import UserError
from testbed import docker_engine, image, registry
from testbed.agent.controller import agent_container
from testbed.docker_engine import Engine
from testbed.runtime.docker import ENGINES_KEY, DockerRuntime, run_containers
from testbed.runtime.netns import netns_exists

from .conftest import Machines

pytestmark = [pytest.mark.xdist_group("docker-multi"), pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[4]
NO_ENGINE = "unix:///nonexistent/wanbed-test/m9.sock"


def test_image_loaded_onto_each_engine_that_lacked_it(machines: Machines, node_image: image.BuildResult) -> None:
    assert machines.missing_before == ["m1", "m2"]          # the rig's engines start empty
    assert set(machines.loaded) == {"m1", "m2"}
    for e in machines.engines:
        assert image.image_label(node_image.image, image.HASH_LABEL, e) == node_image.content_hash
    # Present everywhere with the same content: nothing more to copy.
    assert image.distribute_image(node_image.image, [machines.source, *machines.engines]) == {}


def test_one_run_on_two_engines_and_restart_on_the_second(machines: Machines, node_image: image.BuildResult,
                                                           tmp_path: Path) -> None:
    m1, m2 = machines.engines
    run_id = registry.new_run_id()
    rt = DockerRuntime(run_id, tmp_path, image=node_image.image, engines={"a": m1, "b": m2}, default_engine=m1)
    try:
        assert registry.load(run_id).state[ENGINES_KEY] == {"m1": m1.host, "m2": m2.host}
        a, b = rt.add_hosts(["a", "b"])
        assert run_containers(run_id, m1) == [a.container] and run_containers(run_id, m2) == [b.container]
        assert run_containers(run_id, machines.source) == []
        for h in (a, b):
            mode = docker_engine.docker(["inspect", "--format", "{{.HostConfig.NetworkMode}}", h.container],
                                        engine=h.engine).stdout.strip()
            assert mode == "none"
        # A link between the two hosts' namespaces; b restarts on its own engine and keeps the link.
        va, vb = f"{rt.prefix}a", f"{rt.prefix}b"
        subprocess.run(["ip", "link", "add", va, "netns", a.netns, "type", "veth", "peer", "name", vb,
                        "netns", b.netns], check=True)
        for h, dev, addr in ((a, va, "10.77.0.1/24"), (b, vb, "10.77.0.2/24")):
            subprocess.run(["ip", "-n", h.netns, "addr", "add", addr, "dev", dev], check=True)
            subprocess.run(["ip", "-n", h.netns, "link", "set", dev, "up"], check=True)
        pid_before = b.init_pid()
        b.kill()
        report = b.restart()
        assert b.init_pid() != pid_before and vb in report.interfaces
        assert a.run(["ping", "-c", "1", "-W", "2", "10.77.0.2"]).returncode == 0
    finally:
        rt.close()
    assert run_containers(run_id, m1) == [] and run_containers(run_id, m2) == []
    assert registry.load(run_id) is None            # the record the runtime made for itself is gone


def test_bad_engines_are_one_sentence_naming_the_machine(machines: Machines, node_image: image.BuildResult,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    m1 = machines.engines[0]
    run_id = registry.new_run_id()
    with pytest.raises(UserError) as exc:
        DockerRuntime(run_id, image=node_image.image, engines={"a": Engine("m9", NO_ENGINE)})
    assert "machine m9" in str(exc.value) and "does not answer" in str(exc.value) and "\n" not in str(exc.value)
    assert registry.load(run_id) is None            # refused before anything was recorded or created

    with pytest.raises(UserError) as exc:
        image.distribute_image(f"{image.IMAGE}-absent", [m1])
    msg = str(exc.value)
    assert "machine m1" in msg and "an engine without the node image: build or load it" in msg
    assert "docker load" in msg and "\n" not in msg

    # The engine here speaks 1.41; a testbed needing more must refuse it by name.
    monkeypatch.setattr(docker_engine, "MIN_API_VERSION", (1, 99))
    with pytest.raises(UserError) as exc:
        docker_engine.require_engine(m1)
    assert "machine m1" in str(exc.value) and "1.99" in str(exc.value)


def test_api_versions() -> None:
    assert docker_engine.api_supported("1.41") and docker_engine.api_supported("1.43")
    assert docker_engine.api_supported("2.0")
    assert not docker_engine.api_supported("1.40") and not docker_engine.api_supported("junk")


CONTROLLER = """
import sys, time
from pathlib import Path
from testbed.agent.controller import Agent
from testbed.docker_engine import Engine
from testbed.runtime.docker import DockerRuntime
run_ids, workdir, image, m1, m2 = sys.argv[1:6]
for run_id in run_ids.split(","):
    rt = DockerRuntime(run_id, Path(workdir) / run_id, image=image,
                       engines={"a": Engine("m1", m1), "b": Engine("m2", m2)})
    rt.add_hosts(["a", "b"])
    for name, address in (("m1", m1), ("m2", m2)):
        Agent(run_id, name, Engine(name, address), image).start()
print("ready", flush=True)
time.sleep(600)
"""


def test_clean_after_kill_9_leaves_nothing_on_either_engine(machines: Machines, node_image: image.BuildResult,
                                                            tmp_path: Path) -> None:
    """Two runs, each with a host and an agent on both engines, whose controller is killed with -9: `clean
    --run-id` removes the one it names on both engines and leaves the other; plain `clean` then finds the other
    dead run by its record and removes it on both engines, naming an engine it cannot reach."""
    m1, m2 = machines.engines
    named, found = registry.new_run_id(), registry.new_run_id()
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, f"{named},{found}", str(tmp_path), node_image.image,
                            m1.host, m2.host], stdout=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    try:
        assert ctl.stdout is not None and ctl.stdout.readline().strip() == "ready"
    finally:
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()

    def left(run_id: str) -> dict[str, list[str]]:
        prefix = registry.prefix(run_id)
        return {"m1": [f"{prefix}-a", agent_container(run_id, "m1")],
                "m2": [f"{prefix}-b", agent_container(run_id, "m2")]}

    for run_id in (named, found):
        for m, engine in (("m1", m1), ("m2", m2)):
            assert sorted(run_containers(run_id, engine)) == sorted(left(run_id)[m])
    # `clean --run-id` (and `down` after a dead supervisor, which calls it) reaches every engine the run recorded.
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "testbed", "clean", "--run-id", named], capture_output=True,
                       text=True, cwd=REPO, timeout=180)
    assert r.returncode == 0, r.stderr
    for m, engine in (("m1", m1), ("m2", m2)):
        assert all(f"container {c} on machine {m}" in r.stdout for c in left(named)[m]), r.stdout
        assert run_containers(named, engine) == []
        assert sorted(run_containers(found, engine)) == sorted(left(found)[m])     # not the run it did not name
    prefix = registry.prefix(named)
    assert not netns_exists(f"{prefix}-a") and not netns_exists(f"{prefix}-b")
    assert registry.load(named) is None and registry.load(found) is not None
    print(f"clean --run-id of two engines: {time.monotonic() - t0:.1f} s")
    # Plain `clean`: the other dead run, found by its record, on both engines; and a dead run that used an engine
    # that is gone: clean says so and goes on.
    dead = registry.new_run_id()
    registry.register(dead, "test-docker", owner_pid=ctl.pid, state={ENGINES_KEY: {"m9": NO_ENGINE}})
    r = subprocess.run([sys.executable, "-m", "testbed", "clean"], capture_output=True, text=True, cwd=REPO,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    for m, engine in (("m1", m1), ("m2", m2)):
        assert all(f"container {c} on machine {m}" in r.stdout for c in left(found)[m]), r.stdout
        assert run_containers(found, engine) == []
    prefix = registry.prefix(found)
    assert not netns_exists(f"{prefix}-a") and not netns_exists(f"{prefix}-b")
    assert registry.load(found) is None
    assert "could not reach the Docker engine of machine m9" in r.stderr
    assert registry.load(dead) is None
