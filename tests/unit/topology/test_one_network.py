"""One scenario gives one network whatever the verb: `run`, `up` and `export` take their links from one function
(timescale.wall_topology), and the helper processes start from a directory that holds `testbed/` and `node/`."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed import cli, pycmd
from testbed.experiment import timescale
from testbed.experiment.daemons import NodeDaemons
from testbed.network import Network
from testbed.scenario import load
from testbed.topology import exporters
from testbed.topology.exporters import mininet
from testbed.topology.model import Topology

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
# the quickstart's links: 8000 bit/s in model units, time_scale 0.025 wall s per model s
QUICKSTART_WALL_RATE = 8000 / 0.025


def rates(topo: Topology) -> set[float | None]:
    return {d.rate for link in topo.links for d in (link.a_to_b, link.b_to_a)}


def test_run_up_and_export_take_their_links_from_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load(QUICKSTART)
    made: list[Topology] = []
    one_function = timescale.wall_topology

    def recorded(scenario):
        made.append(one_function(scenario))
        return made[-1]

    monkeypatch.setattr(timescale, "wall_topology", recorded)
    # `run`: the cell builds from its converted copy; `up`: the supervisor builds from the loaded scenario
    run_net = Network.from_scenario(timescale.to_wall(model), run_dir=None, handle_signals=False)
    up_net = Network.from_scenario(model, run_dir=None, handle_signals=False)
    exported = exporters.from_scenario(model)
    assert made == [run_net.topology, up_net.topology, exported.topology]
    assert rates(run_net.topology) == {QUICKSTART_WALL_RATE} == {320000.0}
    assert up_net.topology == run_net.topology == exported.topology
    script = mininet.export(exported)
    assert script.count("bw=0.32,") == len(exported.topology.links) == 6
    # --set reaches the same function: time_scale doubled, rates halved
    assert rates(one_function(load(QUICKSTART, overrides=["time_scale=0.05"]))) == {160000.0}


def test_up_takes_set_like_run() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["up", str(QUICKSTART), "--set", "time_scale=1", "--set", "link_defaults.delay=5ms"])
    assert args.set == ["time_scale=1", "link_defaults.delay=5ms"]
    assert parser.parse_args(["run", str(QUICKSTART), "--set", "time_scale=1"]).set == ["time_scale=1"]


def test_helper_processes_start_from_a_directory_holding_testbed_and_node(tmp_path: Path) -> None:
    for package in ("testbed", "node"):     # packages of that name, first on the path of `python -m` from here
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("raise ImportError('the caller directory shadowed the project')\n")
    daemon = NodeDaemons(None, {"n1": tmp_path / "n1.yaml"})._argv("n1")      # type: ignore[arg-type]
    # the supervisor and the wire emulator get pycmd.env(); a daemon inherits the environment as it is
    starts = [(pycmd.module_argv("testbed.netsupervisor", "--help"), pycmd.env()),
              (pycmd.module_argv("testbed.shaping.wire_emulator", "--help"), pycmd.env()),
              ([*daemon, "--help"], dict(os.environ))]
    for argv, env in starts:
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "usage:" in r.stdout, (argv, r.stderr[-2000:])


def test_pycmd_env_puts_the_running_code_first() -> None:
    env = pycmd.env({"PYTHONPATH": os.pathsep.join(["/elsewhere", str(pycmd.ROOT)])})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(pycmd.ROOT), "/elsewhere"]
    assert (pycmd.ROOT / "testbed" / "pycmd.py").is_file()
