"""A 1 MB message over 3 and 5 hops of the emulated WAN (wire shaper: delay d, rate B), both modes.

Expected end-to-end delay for M bytes over H hops with fragment size F:
  fragmenting      M/B + (H-1)·F/B + H·d     (fragments pipeline through the hops)
  non-fragmenting  H·M/B + H·d               (every hop stores the whole message first)
Tolerances come from the configuration: bytes on the wire per payload byte
(frame header per fragment or chunk, TCP/IP headers), the batch a hop stores
before forwarding (batch.min_bytes or target_delay·B), the commit window per
hop, and the TCP handshake-free but ack-clocked start (a few RTTs of 2·d).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from testbed.experiment.daemons import NodeDaemons
from wan_node_support import daemons_on, wan_network

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
pytestmark = [pytest.mark.alone, pytest.mark.root, pytest.mark.timeout(240)]

RATE_MBIT = 8.0
B = RATE_MBIT * 1e6 / 8          # bytes per second
D = 0.020                        # one-way delay per link, seconds
M = 1_000_000
F = 1000
CHUNK = 65536
FRAME_HEADER = 90                # Fragment fields besides the data
TCPIP = 1 + 66 / 1448            # Ethernet+IP+TCP headers per full segment (the emulator's rate counts them)
COMMIT = 0.002
TARGET = 0.01
MIN_BATCH = 16384
BATCH_BYTES = max(MIN_BATCH, B * TARGET)

HOPS = (3, 5)
# One linear network of max(HOPS) + 1 hosts for every test: a message to n{H+1} crosses H links of it.
NETWORK = """
topology: {{generator: linear, params: {{n: {n}}}}}
shaper: wire
link_defaults: {{delay: {d}s, rate: {rate}Mbit, queue: 2000}}
""".format(n=max(HOPS) + 1, d=D, rate=RATE_MBIT)
NODES = """
nodes:
  all:
    mode: {mode}
    fragment_size: {f}
    wire_chunk: {chunk}
    batch: {{commit_window: {commit}, min_bytes: {min_batch}, target_delay: {target}}}
    session: {{keepalive: 0.3, hold_time: 1.5, backoff_min: 0.05, backoff_max: 0.5}}
"""

MODES = ("fragmenting", "non-fragmenting")


def one_message_delay(daemons: NodeDaemons, records: Path, hops: int) -> float:
    """Delay of one M-byte message from n1 to n{hops+1}, sent when the network is idle."""
    last = f"n{hops + 1}"
    with daemons.client("n1") as c:
        r = c.send([last], size=M)
        assert r.accepted
    deadline = time.monotonic() + 60
    with daemons.client(last) as c:
        while c.stats()["delivered"] < 1:
            assert time.monotonic() < deadline, "the message did not arrive within 60 s"
            time.sleep(0.05)
    [d] = [json.loads(x) for x in (records / "nodes" / last / "deliveries.jsonl").read_text().splitlines()]
    assert d["msg_id"] == r.msg_id and d["hops"] == hops and d["size"] == M
    return d["deliver_ts"] - d["submit_ts"]


@pytest.fixture(scope="module")
def delays() -> dict[tuple[int, str], float]:
    """(hops, mode) -> the measured delay: one network, one daemon set per mode (the daemons' start, not the
    network's build, is what costs), every hop count's message in turn on it (each to its own last node)."""
    out: dict[tuple[int, str], float] = {}
    with wan_network(NETWORK) as net:
        for mode in MODES:
            text = NETWORK + NODES.format(mode=mode, f=F, chunk=CHUNK, commit=COMMIT, min_batch=MIN_BATCH,
                                          target=TARGET)
            with daemons_on(net, text, mode) as daemons:
                for hops in HOPS:
                    out[hops, mode] = one_message_delay(daemons, net.run_dir / mode, hops)
    return out


@pytest.mark.parametrize("hops", HOPS)
def test_delay_close_to_the_bounds_in_both_modes(delays: dict[tuple[int, str], float], hops: int) -> None:
    frag, whole = delays[hops, "fragmenting"], delays[hops, "non-fragmenting"]
    bound_frag = M / B + (hops - 1) * F / B + hops * D
    bound_whole = hops * M / B + hops * D
    wire_frag = (1 + FRAME_HEADER / F) * TCPIP
    wire_whole = (1 + FRAME_HEADER / CHUNK) * TCPIP
    # each later hop waits for a whole batch; commits per hop; TCP slow start costs a few RTTs per hop
    slack = 0.3 + hops * 10 * COMMIT + (hops - 1) * 2 * BATCH_BYTES / B + hops * 4 * 2 * D
    print(f"H={hops}: fragmenting {frag:.3f} s (bound {bound_frag:.3f}), "
          f"non-fragmenting {whole:.3f} s (bound {bound_whole:.3f})")
    # nothing beats the wire: the link rate and the propagation delay
    assert frag >= 0.95 * (M / B + hops * D)
    assert whole >= 0.95 * bound_whole
    # close to the bounds: inflated by the wire overhead, 25% for processing, plus the fixed slack
    assert frag <= bound_frag * wire_frag * 1.25 + slack
    assert whole <= bound_whole * wire_whole * 1.25 + slack
    assert frag < whole
