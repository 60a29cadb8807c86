"""Fig. 6.8 shape on the emulated WAN: small messages wait less when messages travel as fragments.

A 6-node bidirectional ring built by the testbed (namespaces, wire shaper with
real per-link delay D and rate B), a node daemon per host with resource
management on, and the same seeded Table 6.1 workload in both modes. On a slow
link a whole message of m fragments occupies the link for m*F/B seconds at
every hop; a single-fragment message queued behind it waits for that in the
non-fragmenting system, while the fragmenting system interleaves the
fragments of all messages (prioritised round robin), so the small one waits
for about one fragment time per message ahead of it. Every accepted message
must arrive exactly once in both modes, and the small-message mean delay must
be lower when fragmenting.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import pytest

from testbed.network import Network

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
pytestmark = [pytest.mark.alone, pytest.mark.root, pytest.mark.timeout(240)]

if os.geteuid() != 0:
    pytest.skip("needs root for network namespaces and TAP devices", allow_module_level=True)

# the WAN helpers (scenario -> network + a daemon per host) live with the wan_node tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "wan_node"))
from wan_node_support import daemons_on, wan_network  # noqa: E402
from resnet_support import submit_load  # noqa: E402

F = 1000
RATE_MBIT = 2.0                  # B = 250 kB/s: a 64 kB chunk takes ~0.26 s on a link, a fragment ~4 ms
D = 0.005
NAMES = [f"n{i}" for i in range(1, 7)]
PER_NODE = 20
GAP = 0.1

NETWORK = f"""
topology: {{generator: ring, params: {{n: 6}}}}
shaper: wire
link_defaults: {{delay: {D}s, rate: {RATE_MBIT}Mbit, queue: 2000}}
"""
NODES = f"""
nodes:
  all:
    mode: {{mode}}
    fragment_size: {F}
    session: {{keepalive: 0.3, hold_time: 1.5, backoff_min: 0.05, backoff_max: 0.5}}
    resources: {{stream_allocation: 8, input_pool: 1000, recipient_pool: 4000, removal_interval: 0.05,
                 rbsad: 0.2, rbsad_probability: 0.1}}
"""


def run(net: Network, mode: str) -> tuple[dict, dict]:
    """The workload on daemons of `mode` in the ring (each mode's daemons on the same network, one after the
    other, their records in a folder of their own): (accepted, delivered) by message id."""
    with daemons_on(net, NETWORK + NODES.replace("{mode}", mode), mode) as daemons:
        accepted = submit_load(daemons.client, NAMES, PER_NODE, GAP, F, "wan")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = 0
            for n in NAMES:
                with daemons.client(n) as c:
                    done += c.stats()["delivered"]
            if done >= len(accepted):
                break
            time.sleep(0.25)
        got: dict[str, dict] = {}
        for n in NAMES:
            f = net.run_dir / mode / "nodes" / n / "deliveries.jsonl"
            for line in f.read_text().splitlines() if f.exists() else []:
                d = json.loads(line)
                assert d["msg_id"] not in got, "a message was delivered twice"
                got[d["msg_id"]] = d
    return accepted, got


def test_small_messages_wait_less_when_fragmenting_on_slow_links() -> None:
    means: dict[str, float] = {}
    with wan_network(NETWORK) as net:        # one network, both modes' daemons in turn
        for mode in ("fragmenting", "non-fragmenting"):
            accepted, got = run(net, mode)
            assert set(got) == set(accepted), f"{mode}: {len(set(accepted) - set(got))} accepted messages missing"
            small = [d["deliver_ts"] - d["submit_ts"] for d in got.values() if d["size"] <= F]
            assert len(small) >= 20
            means[mode] = statistics.fmean(small)
    print(f"small-message mean delay on the WAN ring: {means}")
    assert means["fragmenting"] < means["non-fragmenting"], means
