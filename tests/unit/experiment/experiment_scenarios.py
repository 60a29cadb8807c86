"""Small scenario builders shared by the experiment unit tests."""
from __future__ import annotations

from pathlib import Path

import yaml

from testbed.scenario.loader import load, load_text
from testbed.scenario.spec import Scenario


def ring_scenario(generators: list[dict], n: int = 5, duration: float = 3600.0, seed: int = 7,
                  extra: dict | None = None) -> Scenario:
    """A ring of n nodes (n1..nN) with the given workload generators, loaded through the real loader."""
    data: dict = {"name": "wl", "seed": seed, "duration": duration,
                  "topology": {"generator": "ring", "params": {"n": max(n, 3)}},   # a ring needs 3+
                  "workload": {"generators": generators}}
    data.update(extra or {})
    return load_text(yaml.safe_dump(data), "test.yaml")


def write_scenario(path: Path, data: dict) -> Scenario:
    path.write_text(yaml.safe_dump(data))
    return load(path)


def node_configs_of(text: str) -> dict[str, dict]:
    """The node configs the testbed would write for a scenario text (wall units; the network is never
    started: only its address plan is read)."""
    from testbed.experiment import nodeconfig, timescale
    from testbed.network import Network
    from testbed.topology import addressing, generators

    scenario = timescale.to_wall(load_text(text))
    topo = generators.from_scenario(scenario)
    return nodeconfig.node_configs(scenario, Network(topo, addressing.plan(topo)), Path("/nonexistent"))


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]
