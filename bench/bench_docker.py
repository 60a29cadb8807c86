"""Start-up time of 20 hosts: docker runtime (containers + named netns attach) vs netns runtime.

Needs root and a Docker engine (DOCKER_HOST, or one is started here and stopped by its pid).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from testbed import docker_engine, image, registry
from testbed.runtime.docker import DockerRuntime
from testbed.runtime.netns import NetnsRuntime

HOSTS = 20


def timed_startup(make) -> tuple[float, float]:
    run_id = registry.new_run_id()
    registry.register(run_id, "bench-docker")
    rt = make(run_id)
    try:
        t0 = time.monotonic()
        rt.add_hosts([f"h{i}" for i in range(HOSTS)])
        up = time.monotonic() - t0
        t1 = time.monotonic()
    finally:
        rt.close()
        registry.unregister(run_id)
    return up, time.monotonic() - t1


def main() -> None:
    started = None
    if not docker_engine.engine_answers():
        started = docker_engine.start_engine(Path(tempfile.mkdtemp(prefix="tb-dockerd-", dir="/tmp")))
        os.environ["DOCKER_HOST"] = started.host
    try:
        img = image.build(image.BuildOptions(mode="offline"), progress=lambda s: None).image
        d_up, d_down = timed_startup(lambda rid: DockerRuntime(rid, image=img))
        n_up, n_down = timed_startup(lambda rid: NetnsRuntime(rid))
        print(f"docker startup {HOSTS} hosts: measured {d_up:.2f} s (teardown {d_down:.2f} s)")
        print(f"netns startup {HOSTS} hosts: measured {n_up:.2f} s (teardown {n_down:.2f} s)")
        print(f"docker/netns startup ratio {d_up / max(n_up, 1e-6):.1f}")
    finally:
        if started is not None:
            started.stop()
            shutil.rmtree(started.root, ignore_errors=True)


if __name__ == "__main__":
    main()
