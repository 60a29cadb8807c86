"""The saved network state round-trips, and clean() finds recorded pids (logic only; no root needed)."""
from __future__ import annotations

from network_support import hand_plan, star_lan
from testbed import cleanup, netstate
from testbed.topology.model import Direction, GilbertElliott


def test_topology_and_plan_round_trip() -> None:
    topo = star_lan(3)
    topo.links[0].a_to_b = Direction(delay=0.01, jitter=0.002, gilbert=GilbertElliott(0.1, 0.5), rate=1e6)
    topo.links[1].up = False
    back = netstate.topology_from_dict(netstate.topology_to_dict(topo))
    assert back == topo
    plan = hand_plan(topo, "10.250.1.0/24")
    assert netstate.plan_from_dict(netstate.plan_to_dict(plan)) == plan


def test_recorded_pids_are_found_anywhere_in_the_state() -> None:
    state = {"run_dir": "/x", "shaper_state": {"emulator_pid": 4242, "links": [{"pid": 4343}, {"pids": [4444, 1]}]},
             "count": 7}
    assert sorted(cleanup._recorded_pids(state)) == [4242, 4343, 4444]
