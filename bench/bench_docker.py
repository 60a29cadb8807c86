"""Docker runtime benchmarks (needs root and a Docker engine: DOCKER_HOST, or one is started here).

1. Start-up of 20 hosts: docker with serial `docker run`s (workers=1, the old behaviour), docker with
   concurrent starts (the default), and the netns runtime, measured back to back under the same load.
2. Container restart with re-plumbing (links, addresses, routes) of the middle host of a 3-host line.
3. With --quickstart: the quickstart scenario's quick variant on docker and on netns (delivered, mean
   delay per mode), to show the two runtimes give comparable figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed import docker_engine, image, registry  # noqa: E402
from testbed.network import Network  # noqa: E402
from testbed.runtime.base import Runtime  # noqa: E402
from testbed.runtime.docker import DockerRuntime  # noqa: E402
from testbed.runtime.netns import NetnsRuntime  # noqa: E402
from testbed.topology.generators import linear, ring  # noqa: E402
from testbed.topology.model import Direction  # noqa: E402

HOSTS = 20
REPEATS = 2
RESTARTS = 3


def timed_startup(make: Callable[[str], Runtime]) -> tuple[float, float]:
    run_id = registry.new_run_id()
    registry.register(run_id, "bench-docker")
    rt = make(run_id)
    try:
        t0 = time.monotonic()
        rt.add_hosts([f"h{i}" for i in range(HOSTS)])  # type: ignore[attr-defined]
        up = time.monotonic() - t0
        t1 = time.monotonic()
    finally:
        rt.close()
        registry.unregister(run_id)
    return up, time.monotonic() - t1


def best(make: Callable[[str], Runtime]) -> tuple[float, float]:
    """Best of REPEATS (other work on the machine only ever adds time)."""
    runs = [timed_startup(make) for _ in range(REPEATS)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def network_startup(runtime: str | Runtime, run_id: str) -> tuple[float, float]:
    """A whole 20-host ring (hosts, management network, wire-shaped links, addresses, routes)."""
    net = Network(ring(HOSTS, defaults=Direction(delay=0.005)), runtime=runtime, shaper="wire", run_id=run_id,
                  handle_signals=False)
    t0 = time.monotonic()
    net.start()
    up = time.monotonic() - t0
    t1 = time.monotonic()
    net.stop()
    return up, time.monotonic() - t1


def restart_times(img: str) -> list[float]:
    run_id = registry.new_run_id()
    net = Network(linear(3, defaults=Direction(delay=0.005)), runtime=DockerRuntime(run_id, image=img),
                  shaper="wire", run_id=run_id, handle_signals=False)
    out = []
    with net:
        host = net.host("n2")
        for _ in range(RESTARTS):
            out.append(host.restart().seconds)  # type: ignore[attr-defined]
        res = net.host("n1").run(["ping", "-n", "-c", "2", "-W", "2", net.data_address("n3")])
        if res.returncode != 0:
            raise RuntimeError("n1 cannot reach n3 through the restarted n2")
    return out


def quickstart(runtime: str, out: Path) -> dict[str, dict]:
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "testbed", "run", "scenarios/quickstart.yaml", "--quick", "--set",
                    f"runtime={runtime}", "--out", str(out)], cwd=REPO, check=True, capture_output=True, timeout=900)
    res = {}
    for p in sorted(out.glob("*/*/summary.json")):
        s = json.loads(p.read_text())
        res[s["mode"]] = s
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quickstart", action="store_true", help="also compare the quickstart quick run")
    args = ap.parse_args()
    started = None
    if not docker_engine.engine_answers():
        started = docker_engine.start_engine(Path(tempfile.mkdtemp(prefix="tb-dockerd-", dir="/tmp")))
        os.environ["DOCKER_HOST"] = started.host
    try:
        img = image.build(image.BuildOptions(mode="offline"), progress=lambda s: None).image
        load = os.getloadavg()[0]        # before our own containers add to it
        s_up, s_down = best(lambda rid: DockerRuntime(rid, image=img, workers=1))
        p_up, p_down = best(lambda rid: DockerRuntime(rid, image=img))
        n_up, n_down = best(lambda rid: NetnsRuntime(rid))
        print(f"docker startup {HOSTS} hosts serial: measured {s_up:.2f} s (teardown {s_down:.2f} s)")
        print(f"docker startup {HOSTS} hosts parallel: measured {p_up:.2f} s (teardown {p_down:.2f} s)")
        print(f"netns startup {HOSTS} hosts: measured {n_up:.2f} s (teardown {n_down:.2f} s)")
        print(f"docker parallel/serial startup ratio {p_up / max(s_up, 1e-6):.2f}")
        print(f"docker/netns startup ratio {p_up / max(n_up, 1e-6):.1f} (load average {load:.1f} before, "
              f"{os.cpu_count()} cores)")
        rid = registry.new_run_id()
        w_up, w_down = network_startup(DockerRuntime(rid, image=img), rid)
        n_up2, n_down2 = network_startup("netns", registry.new_run_id())
        print(f"docker network {HOSTS}-host ring up: measured {w_up:.2f} s (down {w_down:.2f} s)")
        print(f"netns network {HOSTS}-host ring up: measured {n_up2:.2f} s (down {n_down2:.2f} s)")
        rs = restart_times(img)
        print(f"docker restart + re-plumb (2 links + mgmt): measured median {statistics.median(rs):.2f} s "
              f"(max {max(rs):.2f} s over {len(rs)})")
        if args.quickstart:
            tmp = Path(tempfile.mkdtemp(prefix="tb-bench-qs-"))
            try:
                d, n = quickstart("docker", tmp / "docker"), quickstart("netns", tmp / "netns")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            for mode in sorted(d):
                dd, nn = d[mode], n.get(mode, {})
                dm = dd["delay"]["overall"]["mean_wall_s"]
                nm = (nn.get("delay") or {}).get("overall", {}).get("mean_wall_s")
                print(f"quickstart {mode}: docker delivered {dd['delivered']}/{dd['accepted']} lost {dd['lost']} "
                      f"dup {dd['duplicates']}, netns delivered {nn.get('delivered')}/{nn.get('accepted')}; "
                      f"mean delay docker {dm:.3f} s / netns {nm:.3f} s = ratio {dm / nm:.2f}")
    finally:
        if started is not None:
            started.stop()
            shutil.rmtree(started.root, ignore_errors=True)


if __name__ == "__main__":
    main()
