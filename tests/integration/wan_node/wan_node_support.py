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
def wan_with_daemons(text: str) -> Iterator[tuple[Network, NodeDaemons]]:
    """Build the scenario's network, start a node daemon in every host, wait for sessions; tear all down."""
    scenario = load_text(text, "wan_node.yaml")
    # Not pytest's tmp_path: a concurrent pytest session may prune it under running daemons.
    run_dir = Path(tempfile.mkdtemp(prefix="wanbed-wan-node-"))
    net = Network.from_scenario(scenario, run_dir=run_dir, handle_signals=False)
    daemons: NodeDaemons | None = None
    try:
        net.start()
        configs = nodeconfig.node_configs(scenario, net, run_dir)
        tokens = nodeconfig.client_tokens(configs, nodeconfig.add_security(scenario, configs, run_dir))
        paths = nodeconfig.write_configs(configs, run_dir)
        daemons = NodeDaemons(net, paths, tokens=tokens)
        daemons.start_all()
        daemons.wait_healthy(60)
        missing = daemons.wait_sessions(30)
        assert not missing, f"sessions of {missing} did not come up"
        yield net, daemons
    finally:
        if daemons is not None:
            daemons.stop_all()
        net.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
