"""Two namespaces joined by one shaped link, per test, for every available backend."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shaping_rig import A_IP, B_IP, LinkRig, _run
from testbed import registry
from testbed.shaping import make_shaper
from testbed.shaping.base import LinkEnd
from testbed.shaping.probe import netem_available
from testbed.topology.model import Direction


def backends() -> list[object]:
    return [pytest.param("wire", id="wire"),
            pytest.param("netem", id="netem", marks=pytest.mark.skipif(
                os.geteuid() != 0 or not netem_available(),
                reason="this kernel has no netem qdisc; the netem backend is untested on this machine"))]


@pytest.fixture(params=backends())
def rig_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    if os.geteuid() != 0:
        pytest.skip("link shaping tests need root (namespaces, TAP devices)")
    run_id = registry.new_run_id()
    registry.register(run_id, "test")
    pfx = registry.prefix(run_id)
    made: list[LinkRig] = []

    def make(a_to_b: Direction | None = None, b_to_a: Direction | None = None, pcap: Path | None = None) -> LinkRig:
        ns_a, ns_b = pfx + "a", pfx + "b"
        for ns in (ns_a, ns_b):
            _run(["ip", "netns", "add", ns])
        shaper, _ = make_shaper(request.param, run_id, tmp_path / "shaping")
        rig = LinkRig(shaper, run_id, ns_a, ns_b, tmp_path)
        made.append(rig)
        shaper.add_link(rig.link_id, LinkEnd(ns_a, "eth1"), LinkEnd(ns_b, "eth1"), a_to_b or Direction(),
                        b_to_a or Direction(), pcap=pcap)
        for ns, ip in ((ns_a, A_IP), (ns_b, B_IP)):
            _run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth1"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        return rig

    try:
        yield make
    finally:
        for rig in made:
            pid = getattr(rig.shaper, "pid", None)
            rig.shaper.close()
            for ns in (rig.ns_a, rig.ns_b):
                _run(["ip", "netns", "del", ns], check=False)
            if pid is not None:
                assert not registry.pid_alive(pid), "emulator process left behind"
        time.sleep(0.05)
        assert pfx not in _run(["ip", "netns", "list"]).stdout, "namespace left behind"
        assert pfx not in _run(["ip", "-o", "link"]).stdout, "interface left behind"
        registry.unregister(run_id)
