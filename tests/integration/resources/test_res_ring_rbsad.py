"""Both modes on a 6-host bidirectional ring with RBSAD > 0 (thesis 6.2, Fig. 6.8 shape).

Six real daemons on loopback, shortest-path routes, the same seeded workload in
each mode: every node submits messages to random other nodes with the sizes of
Table 6.1 (1 fragment 70 %, 2-30 fragments 20 %, 31-100 fragments 10 %), and the
next-to-last MTA holds a message for the recipient with probability 0.3 for
Normal(0.5 s). Every accepted message must be delivered exactly once in both
modes; small messages must see a lower mean delay when fragmenting (only the
unlucky message's request waits, the others pass it) than non-fragmenting
(the held message is first in line for the recipient; those behind it wait).
"""
from __future__ import annotations

import statistics

import pytest

from testbed.localnet import LocalNet
from resnet_support import delivered_ids, submit_load, watch_progress

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
pytestmark = pytest.mark.alone

F = 1000
NAMES = [f"n{i}" for i in range(1, 7)]
PER_NODE = 40
GAP = 0.04            # seconds between submissions of one node
RBSAD = {"rbsad": 0.5, "rbsad_probability": 0.3}
RESOURCES = {**RBSAD, "input_pool": 1000, "recipient_pool": 2000, "removal_interval": 0.05, "stream_allocation": 4}


def workload(net: LocalNet, seed: int) -> dict[str, dict]:
    return submit_load(net.client, NAMES, PER_NODE, GAP, F, str(seed))


def run_mode(ringnet, mode: str) -> tuple[dict, dict, LocalNet]:
    net = ringnet(6, mode=mode, fragment_size=F, resources=RESOURCES)
    accepted = workload(net, seed=6)
    verdict = watch_progress(net, accepted, quiet=10.0, limit=90.0)
    assert verdict == "done", f"{mode}: watchdog says {verdict}"
    return accepted, delivered_ids(net), net


@pytest.mark.timeout(200)
def test_both_modes_deliver_everything_and_fragmenting_is_faster_for_small_messages(ringnet) -> None:
    small_delay: dict[str, float] = {}
    for mode in ("fragmenting", "non-fragmenting"):
        accepted, got, net = run_mode(ringnet, mode)
        assert set(got) == set(accepted), f"{mode}: delivered set differs from the accepted set"
        for mid, d in got.items():
            assert d["mode"] == mode and d["size"] == accepted[mid]["size"] and d["dst"] == accepted[mid]["dst"]
        rbsad_delayed = 0
        for n in NAMES:
            with net.client(n) as c:
                res = c.stats()["resources"]
            rbsad_delayed += res["rbsad"]["delayed"]
            assert sum(res["buffers"]["usage"]) == 0, (mode, n, res["buffers"])
        assert rbsad_delayed > 0, f"{mode}: RBSAD never delayed anything"
        small = [d["deliver_ts"] - d["submit_ts"] for d in got.values() if d["size"] <= F]
        assert len(small) >= 50
        small_delay[mode] = statistics.fmean(small)
        net.close()
    print(f"small-message mean delay: {small_delay}")
    assert small_delay["fragmenting"] < small_delay["non-fragmenting"], small_delay
