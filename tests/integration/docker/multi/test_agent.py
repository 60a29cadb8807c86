"""The per-machine agent on two engines: it names the host containers' namespaces by pid, applies `ip` batches
and sysctls in them, puts and removes a partition chain, and runs its machine's half of the wire emulator: a link
between a host on m1 and a host on m2 is split over the two agents' halves, joined over the machines' network,
keeps its configured delay, and is captured as one file of both directions."""
from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest

from testbed import image, registry
from testbed.agent.controller import Agent, AgentError, split_shaper, split_shaper_from_state
from testbed.runtime.docker import DockerRuntime, run_containers
from testbed.shaping.base import LinkEnd
from testbed.topology.model import Direction

from .conftest import Machines

pytestmark = [pytest.mark.xdist_group("docker-multi"), pytest.mark.timeout(300)]

DELAY = 0.020       # s each way on the split link


def _rules(host) -> str:
    """`iptables -S` in the host container's namespace, entered by its init's pid on its own engine."""
    return subprocess.run(["nsenter", "-t", str(host.init_pid()), "-n", "iptables", "-w", "-S"],
                          capture_output=True, text=True, check=True).stdout


def _ipv4_sources(pcap: Path, every: bool = False) -> list[str]:
    """The IPv4 source of each frame of a nanosecond Ethernet pcap in time order (every: all frames, '' when not
    IPv4)."""
    raw = pcap.read_bytes()
    assert struct.unpack_from("<I", raw)[0] == 0xA1B23C4D and struct.unpack_from("<I", raw, 20)[0] == 1
    out, off, last = [], 24, 0.0
    while off + 16 <= len(raw):
        sec, ns, caplen, _ = struct.unpack_from("<IIII", raw, off)
        assert sec + ns * 1e-9 >= last
        last = sec + ns * 1e-9
        f = raw[off + 16:off + 16 + caplen]
        ip = ".".join(str(x) for x in f[26:30]) if len(f) >= 34 and f[12:14] == b"\x08\x00" else ""
        if ip or every:
            out.append(ip)
        off += 16 + caplen
    assert off == len(raw)
    return out


def test_agents_plumb_and_split_a_link_across_engines(machines: Machines, node_image: image.BuildResult,
                                                       tmp_path: Path) -> None:
    m1, m2 = machines.engines
    run_id = registry.new_run_id()
    rt = DockerRuntime(run_id, tmp_path, image=node_image.image, engines={"a": m1, "b": m2}, default_engine=m1)
    agents = {"m1": Agent(run_id, "m1", m1, node_image.image), "m2": Agent(run_id, "m2", m2, node_image.image)}
    shaper = None
    try:
        for agent in agents.values():
            assert agent.start()["tun"] is True
        a, b = rt.add_hosts(["a", "b"])
        # The agent containers carry the run's labels on their own engine: clean finds them with the hosts.
        assert sorted(run_containers(run_id, m1)) == sorted([a.container, agents["m1"].container])
        assert sorted(run_containers(run_id, m2)) == sorted([b.container, agents["m2"].container])
        for h, m in ((a, "m1"), (b, "m2")):
            agents[m].request([{"op": "attach", "netns": h.netns, "pid": h.init_pid()},
                               {"op": "sysctl", "netns": h.netns, "values": {"net.ipv4.conf.all.forwarding": "0"}}])
            value = subprocess.run(["ip", "netns", "exec", h.netns, "cat", "/proc/sys/net/ipv4/conf/all/forwarding"],
                                   capture_output=True, text=True, check=True).stdout.strip()
            assert value == "0"          # set by the agent, in that host's namespace only
        # A failing operation is one sentence naming the machine; the ones after it are not run.
        with pytest.raises(AgentError, match=r"agent of machine m2: ip: .*failed") as exc:
            agents["m2"].request([{"op": "ip", "netns": b.netns, "batch": "link set nosuchdev up\n"},
                                  {"op": "ip", "netns": b.netns, "batch": "link add wbnever type dummy\n"}])
        assert "\n" not in str(exc.value)
        assert "wbnever" not in subprocess.run(["ip", "-n", b.netns, "link"], capture_output=True, text=True).stdout

        shaper = split_shaper(run_id, tmp_path / "wire", agents, machines.addresses, {a.netns: "m1", b.netns: "m2"})
        d = Direction(delay=DELAY)
        pcap = tmp_path / "pcap" / "ab.pcap"
        shaper.add_link("ab", LinkEnd(a.netns, "eth-b"), LinkEnd(b.netns, "eth-a"), d, d, pcap=pcap)
        assert shaper.links["ab"].machines == ("m1", "m2")
        for h, m, dev, addr in ((a, "m1", "eth-b", "10.77.1.1/24"), (b, "m2", "eth-a", "10.77.1.2/24")):
            agents[m].request([{"op": "ip", "netns": h.netns, "batch": f"addr add {addr} dev {dev}\n"}])
        ping = a.run(["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.77.1.2"])
        assert ping.returncode == 0, ping.stdout + ping.stderr
        rtt = [float(x) for x in re.findall(r"time=([0-9.]+) ms", ping.stdout)]
        est = shaper.tunnel("m1", "m2")
        jitter = max(e.jitter for e in est.values())
        # the tunnel's delay is taken off at each sending half: the round trip stays 2 x the configured delay
        assert min(rtt) >= 2 * DELAY * 1e3 - 0.5
        assert sorted(rtt)[len(rtt) // 2] <= 2 * DELAY * 1e3 + max(5.0, 4 * jitter * 1e3)
        a_to_b, b_to_a = shaper.counters("ab")
        assert a_to_b.packets >= 5 and b_to_a.packets >= 5
        # A later process reaches the same halves through the agents (testbed up, then down).
        again = split_shaper_from_state(shaper.state())
        assert again.counters("ab")[0].packets >= a_to_b.packets
        # A partition made by m2's agent in b's namespace: the run's chain, then nothing once removed.
        chain = f"{registry.prefix(run_id)}-part"
        rules = f"*filter\n-A {chain} -s 10.77.1.1/32 -j DROP\n-A {chain} -d 10.77.1.1/32 -j DROP\nCOMMIT\n"
        agents["m2"].request([{"op": "chain", "netns": b.netns, "chain": chain, "rules": rules}])
        assert f"-N {chain}" in _rules(b)
        assert a.run(["ping", "-c", "1", "-W", "1", "10.77.1.2"]).returncode != 0
        agents["m2"].request([{"op": "chain", "netns": b.netns, "chain": chain, "rules": None}])
        assert chain not in _rules(b)
        assert a.run(["ping", "-c", "1", "-W", "2", "10.77.1.2"]).returncode == 0
        shaper.set_carrier("ab", False)
        assert a.run(["ping", "-c", "1", "-W", "1", "10.77.1.2"]).returncode != 0
        # The capture: each half wrote the direction it delivered inside its agent; closing the shaper copies
        # them out and merges them into the one file asked for: echo requests a -> b and replies b -> a.
        counted = shaper.counters("ab")
        shaper.close()
        assert sorted(p.name for p in pcap.parent.iterdir()) == ["ab.pcap"]
        sources = _ipv4_sources(pcap)
        assert sources.count("10.77.1.1") >= 6 and sources.count("10.77.1.2") >= 6, sources
        assert len(_ipv4_sources(pcap, every=True)) >= counted[0].packets + counted[1].packets
    finally:
        if shaper is not None:
            shaper.close()
        for agent in agents.values():
            agent.close()
        rt.close()
    assert run_containers(run_id, m1) == [] and run_containers(run_id, m2) == []
