"""The Network API on real namespaces: reachability, management network, link changes, partitions, events."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from network_support import HAVE_PLANNER, HAVE_SHAPER, grid, linear, ping, ring, rtt_avg_ms
from node.schema import validate
from node.errors import UserError

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, veth, iptables"),
              pytest.mark.timeout(120)]

needs_shaper = pytest.mark.skipif(not HAVE_SHAPER, reason="the link shaper (testbed.shaping.make_shaper) has not landed")

# Tolerance for delay checks: the configured delay plus at most this much (userspace emulator
# scheduling and namespace hops on a loaded 2-core machine); never less than configured.
DELAY_SLACK_MS_PER_HOP = 3.0


def reach_all(net, src: str, addrs: list[str]) -> list[str]:
    """Addresses src cannot ping (one shell in the host, one probe each)."""
    script = "for a in " + " ".join(addrs) + "; do ping -n -q -c1 -W1 $a >/dev/null 2>&1 || echo $a; done"
    return net.host(src).run(["sh", "-c", script], timeout=60).stdout.split()


def test_every_host_reaches_every_loopback_and_mgmt_from_root(make_net) -> None:
    net = make_net(grid(2, 3))
    names = list(net.hosts)
    for src in names:
        others = [net.data_address(n) for n in names if n != src]
        assert reach_all(net, src, others) == [], f"{src} cannot reach some loopbacks"
    for n in names:
        r = subprocess.run(["ping", "-n", "-q", "-c1", "-W2", net.mgmt_address(n)], capture_output=True, text=True)
        assert r.returncode == 0, f"management address of {n} unreachable from the root namespace"
    # management interface is eth0 inside, and forwarding is on
    h = net.host(names[0])
    assert net.mgmt_address(names[0]) in h.run(["ip", "-4", "addr", "show", "eth0"]).stdout
    assert h.run(["sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "1"
    topo = json.loads((net.run_dir / "topology.json").read_text())
    assert {h["name"] for h in topo["hosts"]} == set(names)
    assert len(topo["links"]) == 7 and topo["run_id"] == net.run_id and topo["runtime"] == "netns"
    assert all(l["state"] == "up" and "delay" in l["a_to_b"] for l in topo["links"])


def test_partition_of_non_adjacent_sets_and_heal(make_net) -> None:
    net = make_net(linear(5))
    d = {n: net.data_address(n) for n in net.hosts}
    assert ping(net.host("n2"), net.link_address("n3", "n2")).returncode == 0
    assert ping(net.host("n1"), d["n5"], src=d["n1"]).returncode == 0      # loopback to loopback, 4 hops
    with pytest.raises(UserError):
        net.link_address("n1", "n3")
    net.partition(["n1", "n2"], ["n4", "n5"])
    assert reach_all(net, "n1", [d["n4"], d["n5"]]) == [d["n4"], d["n5"]], "traffic crossed the partition"
    assert reach_all(net, "n5", [d["n1"], d["n2"]]) == [d["n1"], d["n2"]]
    assert reach_all(net, "n1", [d["n2"], d["n3"]]) == [], "traffic within a side / to the middle was blocked"
    assert reach_all(net, "n4", [d["n5"], d["n3"]]) == []
    assert reach_all(net, "n3", [d["n1"], d["n5"]]) == []
    # management network is never partitioned
    r = net.host("n1").run(["ping", "-n", "-q", "-c1", "-W1", net.mgmt_address("n5")])
    assert r.returncode == 0
    net.heal()
    assert reach_all(net, "n1", [d["n4"], d["n5"]]) == []
    chain = f"tb{net.run_id}-part"
    assert chain not in net.host("n1").run(["iptables", "-S"]).stdout
    with pytest.raises(UserError):
        net.partition(["n1"], ["n1", "n2"])
    with pytest.raises(UserError):
        net.partition(["n1"], ["nope"])


def test_link_down_up_and_set_link_and_events(make_net) -> None:
    net = make_net(ring(4))
    d5 = net.data_address("n3")
    assert ping(net.host("n1"), d5).returncode == 0
    # ring: n1 reaches n3 over n2 or n4; cut both n1 links -> unreachable, restore -> reachable
    net.link_down("n1", "n2")
    net.link_down("n4", "n1")
    assert ping(net.host("n1"), d5, timeout=1).returncode != 0
    net.link_up("n1", "n2")
    net.link_up("n1", "n4")
    assert ping(net.host("n1"), d5).returncode == 0
    net.set_link("n2", "n1", delay=0.005, loss=0.0, direction="a_to_b")
    link = net.topology.link("n1", "n2")
    assert link.b_to_a.delay == 0.005 and link.a_to_b.delay == 0.0     # a_to_b as named by the caller
    for bad in (dict(delay=-1), dict(loss=2), dict(bogus=1), {}):
        with pytest.raises(UserError):
            net.set_link("n1", "n2", **bad)
    with pytest.raises(UserError):
        net.set_link("n1", "n3", delay=0.01)            # not adjacent
    with pytest.raises(UserError):
        net.set_link("n1", "n2", delay=0.01, direction="sideways")
    net.partition(["n1"], ["n3"])
    net.heal()
    lines = [json.loads(x) for x in (net.run_dir / "events.jsonl").read_text().splitlines()]
    assert [l["event"] for l in lines] == ["link_down", "link_down", "link_up", "link_up", "link_set", "partition",
                                           "heal"]
    for l in lines:
        assert validate("event", l) == [], l
    assert lines[4]["target"] == "n1-n2" and lines[4]["delay"] == 0.005
    topo = json.loads((net.run_dir / "topology.json").read_text())
    l12 = [l for l in topo["links"] if l["name"] == "n1-n2"][0]
    assert l12["b_to_a"]["delay"] == 0.005


def test_pool_overlapping_an_existing_route_is_refused(make_net) -> None:
    net = make_net(linear(2))
    from network_support import hand_plan
    from testbed.network import Network
    topo = linear(2)
    clash = Network(topo, hand_plan(topo, net.plan.mgmt_subnet), shaper=net.shaper, kind="test",
                    pools=("10.200.0.0/16", "10.202.0.0/16", net.plan.mgmt_subnet))
    with pytest.raises(UserError, match="overlaps"):
        clash.start()
    from network_support import ours_left
    assert ours_left(clash.run_id) == []


def test_processes_in_hosts_are_tracked_and_stopped(make_net) -> None:
    net = make_net(linear(2))
    h = net.host("n2")
    proc = h.start("sleeper", ["sleep", "300"])
    assert os.path.exists(f"/proc/{proc.pid}")
    assert proc.log.parent == h.workdir and proc.log.exists()
    # it really runs inside the namespace, not in ours (after `ip netns exec` has setns()ed and exec()ed)
    deadline = time.monotonic() + 5
    while os.readlink(f"/proc/{proc.pid}/ns/net") == os.readlink(f"/proc/{os.getpid()}/ns/net"):
        assert time.monotonic() < deadline, "the process never entered its host's namespace"
        time.sleep(0.02)
    ns_pids = subprocess.run(["ip", "netns", "pids", h.netns], capture_output=True, text=True).stdout.split()
    assert str(proc.pid) in ns_pids
    out = h.run(["sh", "-c", "echo hi; exit 3"])
    assert out.returncode == 3 and out.stdout.strip() == "hi"
    net.stop()
    assert not os.path.exists(f"/proc/{proc.pid}") or open(f"/proc/{proc.pid}/stat").read().split()[2] == "Z"


@needs_shaper
def test_multihop_linear_summed_delay(make_net) -> None:
    per_link_ms = 10.0
    net = make_net(linear(5, delay=per_link_ms / 1000), shaper="auto")
    # one ping first: neighbour resolution (ARP) on each not yet used link would add a link round trip
    ping(net.host("n1"), net.data_address("n5"), count=1, src=net.data_address("n1"))
    r = ping(net.host("n1"), net.data_address("n5"), count=5, src=net.data_address("n1"))   # loopback to loopback
    assert r.returncode == 0, r.stdout
    rtt = rtt_avg_ms(r.stdout)
    expected = 2 * 4 * per_link_ms          # four links, both directions
    assert expected <= rtt <= expected + 2 * 4 * DELAY_SLACK_MS_PER_HOP, r.stdout
    # management network unimpaired: far below even one link's delay
    m = subprocess.run(["ping", "-n", "-q", "-c3", "-i0.2", net.mgmt_address("n5")], capture_output=True, text=True)
    assert rtt_avg_ms(m.stdout) < per_link_ms
    net.set_link("n1", "n2", delay=0.03)
    rtt2 = rtt_avg_ms(ping(net.host("n1"), net.data_address("n5"), count=3).stdout)
    assert rtt2 >= expected + 2 * (30 - per_link_ms)


def test_lan_segment_hosts_reach_each_other(make_net) -> None:
    from network_support import star_lan
    net = make_net(star_lan(4))
    names = list(net.hosts)
    lan_addr = {n: [i.address.split("/")[0] for i in net.plan.interfaces[n] if i.link == "lan0"][0] for n in names}
    for src in names:
        assert reach_all(net, src, [lan_addr[n] for n in names if n != src] +
                         [net.data_address(n) for n in names if n != src]) == []
    lan_ns = f"tb{net.run_id}.lan0"
    assert lan_ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    net.stop()
    assert lan_ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@needs_shaper
@pytest.mark.skipif(not HAVE_PLANNER, reason="the address planner (testbed.topology.addressing) has not landed")
def test_real_planner_and_shaper_ring_reachability(make_net) -> None:
    """The production path: address plan from testbed.topology.addressing, links from the real shaper."""
    net = make_net(ring(5), shaper="auto", real_plan=True)
    names = list(net.hosts)
    for src in names:
        assert reach_all(net, src, [net.data_address(n) for n in names if n != src]) == [], src
    for n in names:
        r = subprocess.run(["ping", "-n", "-q", "-c1", "-W2", net.mgmt_address(n)], capture_output=True, text=True)
        assert r.returncode == 0, f"management address of {n} unreachable from the root namespace"
    net.link_down("n1", "n2")
    # the ring routes are static shortest paths: n1 -> n2 goes over the downed link and must fail now
    assert ping(net.host("n1"), net.link_address("n2", "n1")).returncode != 0
    net.link_up("n1", "n2")
    assert ping(net.host("n1"), net.link_address("n2", "n1"), count=3).returncode == 0
    topo = json.loads((net.run_dir / "topology.json").read_text())
    assert topo["shaper"] == net.shaper_name and topo["shaper"] != "veth-test"


def test_bad_input_is_one_user_error(make_net) -> None:
    from testbed.network import Network
    from testbed.topology.model import Link, Node, Topology
    with pytest.raises(UserError, match="itself"):
        Network(Topology("t", nodes=[Node("a")], links=[Link("a", "a")]))
    with pytest.raises(UserError, match="unknown node"):
        Network(Topology("t", nodes=[Node("a")], links=[Link("a", "b")]))
    with pytest.raises(UserError, match="runtime"):
        Network(linear(2), runtime="vm", run_dir=None).start()
    net = make_net(linear(2))
    for kw in ({"loss": 1.5}, {"delay": -1.0}, {"rate": 0}, {"colour": 1}, {}):
        with pytest.raises(UserError):
            net.set_link("n1", "n2", **kw)
    with pytest.raises(UserError, match="direction"):
        net.set_link("n1", "n2", delay=0.01, direction="sideways")
    with pytest.raises(UserError):
        net.partition(["n1"], [])
    with pytest.raises(UserError):
        net.host("n9")


def test_sysctls_are_set_in_every_host_and_not_on_the_machine(make_net) -> None:
    def value(argv_prefix: list[str]) -> str:
        return subprocess.run(argv_prefix + ["sysctl", "-n", "net.ipv4.tcp_slow_start_after_idle"],
                              capture_output=True, text=True, check=True).stdout.strip()
    before = value([])
    flipped = "0" if before == "1" else "1"
    net = make_net(linear(2), sysctls={"net.ipv4.tcp_slow_start_after_idle": int(flipped)})
    for h in ("n1", "n2"):
        assert net.host(h).run(["sysctl", "-n", "net.ipv4.tcp_slow_start_after_idle"]).stdout.strip() == flipped
    assert value([]) == before
    with pytest.raises(UserError, match="cannot set sysctl net.ipv4.no_such_knob"):
        make_net(linear(2), sysctls={"net.ipv4.no_such_knob": 1})
    with pytest.raises(UserError, match="only network-namespace sysctls"):
        make_net(linear(2), sysctls={"vm.swappiness": 1}, start=False)
