"""Imported topologies brought up with the wire shaper: Mininet's example topologies and a Kathará lab, and a ping
across each measuring the configured delay. Needs root."""
from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from network_support import ping, rtt_avg_ms

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
pytestmark = [pytest.mark.alone,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, TAP devices"),
              pytest.mark.timeout(180)]

# the configured round trip plus at most this much per link crossed (userspace emulator, loaded 2-core machine)
SLACK_MS_PER_LINK = 3.0

MININET_FILE = '''\
from mininet.topo import Topo, LinearTopo
from mininet.topolib import TreeTopo


class Custom(Topo):
    """Two hosts behind two switches: a shaped access link each and a slower trunk."""

    def build(self):
        h1, h2 = self.addHost('h1'), self.addHost('h2')
        s1, s2 = self.addSwitch('s1'), self.addSwitch('s2')
        self.addLink(h1, s1, bw=100, delay='2ms')
        self.addLink(s1, s2, bw=20, delay='10ms', loss=1, max_queue_size=100)
        self.addLink(s2, h2, bw=100, delay='2ms', params1={'jitter': '1ms'})


topos = {'custom': Custom, 'linear': LinearTopo, 'tree': TreeTopo}
'''


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="wanbed-import-"))
    (path / "topos.py").write_text(MININET_FILE)
    (path / "lab").mkdir()
    (path / "lab" / "lab.conf").write_text(textwrap.dedent("""\
        pc1[0]="lan"
        pc2[0]="lan"
        r1[0]="lan"
        r1[1]="core"
        r2[0]="core"
        r2[1]="edge"
        srv[0]="edge"
        """))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def bring_up(folder: Path, topology: str, extra: str = ""):
    from testbed.network import Network
    from testbed.scenario import load
    scenario_path = folder / "s.yaml"
    scenario_path.write_text(f"name: imported\nshaper: wire\ntopology: {topology}\n{extra}")
    net = Network.from_scenario(load(scenario_path), run_dir=Path(tempfile.mkdtemp(prefix="run-", dir=folder)),
                                handle_signals=False)
    net.start()
    return net


def rtt_ms(net, src: str, dst: str, count: int = 5) -> float:
    """Average ping RTT between the hosts' loopbacks, after one ping resolving neighbours on the way."""
    s, d = net.data_address(src), net.data_address(dst)
    ping(net.host(src), d, src=s)
    r = ping(net.host(src), d, count=count, src=s)
    assert r.returncode == 0, r.stdout
    return rtt_avg_ms(r.stdout)


@pytest.mark.parametrize("topology, src, dst, links, one_way_ms", [
    # Mininet's LinearTopo: h1 - s1 - s2 - s3 - h3 (lopts: Mininet's default link options)
    ("{generator: mininet, params: {file: topos.py, class: linear, args: {k: 3, lopts: {delay: 4ms}}}}",
     "h1", "h3", 4, 4.0),
    # the package's TreeTopo, depth 2: h1 - s2 - s1 - s3 - h4
    ("{generator: mininet, params: {file: topos.py, class: tree, args: {depth: 2, fanout: 2, "
     "lopts: {delay: 3ms}}}}", "h1", "h4", 4, 3.0),
    # a custom class with bw, delay, loss (and jitter one way): 2 + 10 + 2 ms each way
    ("{generator: mininet, params: {file: topos.py, class: custom}}", "h1", "h2", 3, 14.0 / 3),
])
def test_mininet_topology_up_and_ping_measures_the_delay(folder: Path, topology: str, src: str, dst: str,
                                                         links: int, one_way_ms: float) -> None:
    net = bring_up(folder, topology)
    try:
        assert net.shaper_name == "wire"
        expected = 2 * links * one_way_ms
        rtt = rtt_ms(net, src, dst)
        # +-1 ms: the custom class's jitter (uniform, so the mean stays, but five samples may fall short of it)
        assert expected - 1.0 <= rtt <= expected + 2 * links * SLACK_MS_PER_LINK + 1.0, rtt
    finally:
        net.stop()


def test_kathara_lab_up_lan_and_links(folder: Path) -> None:
    net = bring_up(folder, "{generator: kathara, params: {lab: lab}}", "link_defaults: {delay: 5ms}\n")
    try:
        assert [(l.a, l.b) for l in net.topology.links] == [("r1", "r2"), ("r2", "srv")]
        assert [(x.name, x.members) for x in net.topology.lans] == [("lan", ["pc1", "pc2", "r1"])]
        assert rtt_ms(net, "pc1", "pc2", count=2) < 5.0                  # the LAN is not shaped
        expected = 2 * 2 * 5.0                                            # pc1 -> lan -> r1 -> r2 -> srv
        rtt = rtt_ms(net, "pc1", "srv")
        assert expected <= rtt <= expected + 2 * 2 * SLACK_MS_PER_LINK + 1.0, rtt
    finally:
        net.stop()
