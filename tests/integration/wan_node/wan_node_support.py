"""Build a scenario's network with a node daemon in every host, for tests on the emulated WAN."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from testbed.experiment import nodeconfig
from testbed.experiment.daemons import NodeDaemons
from testbed.network import Network
from testbed.scenario.loader import load_text


@contextmanager
def wan_network(text: str) -> Iterator[Network]:
    """Build the scenario's network (no daemons); tear it down at the end."""
    scenario = load_text(text, "wan_node.yaml")
    # Not pytest's tmp_path: a concurrent pytest session may prune it under running daemons.
    run_dir = Path(tempfile.mkdtemp(prefix="wanbed-wan-node-"))
    net = Network.from_scenario(scenario, run_dir=run_dir, handle_signals=False)
    try:
        net.start()
        yield net
    finally:
        net.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@contextmanager
def daemons_on(net: Network, text: str, folder: str = "") -> Iterator[NodeDaemons]:
    """A node daemon in every host of `net`, configured by the scenario `text` (its nodes' settings; the
    topology must be the network's), with its records under net.run_dir/folder; waits for the sessions and
    stops the daemons at the end. One network can carry several such sets one after the other (tests that
    compare node settings on the same links build it once)."""
    scenario = load_text(text, "wan_node.yaml")
    rep_dir = net.run_dir / folder
    configs = nodeconfig.node_configs(scenario, net, rep_dir)
    tokens = nodeconfig.client_tokens(configs, nodeconfig.add_security(scenario, configs, rep_dir))
    daemons = NodeDaemons(net, nodeconfig.write_configs(configs, rep_dir), tokens=tokens)
    try:
        daemons.start_all()
        daemons.wait_healthy(60)
        missing = daemons.wait_sessions(30)
        assert not missing, f"sessions of {missing} did not come up"
        yield daemons
    finally:
        daemons.stop_all()


@contextmanager
def wan_with_daemons(text: str) -> Iterator[tuple[Network, NodeDaemons]]:
    """Build the scenario's network, start a node daemon in every host, wait for sessions; tear all down."""
    with wan_network(text) as net, daemons_on(net, text) as daemons:
        yield net, daemons
