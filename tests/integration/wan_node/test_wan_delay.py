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

import contextlib
import json
import time
from pathlib import Path
from typing import Iterator

import pytest

from testbed.experiment.daemons import NodeDaemons
from testbed.network import Network
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


class DaemonSets:
    """The module's network and one daemon set on it at a time, of one mode; another mode's set is started when
    asked for (after the running one stops): records under a folder of their own."""

    def __init__(self, net: Network, stack: contextlib.ExitStack) -> None:
        self.net, self._stack = net, stack
        self.mode: str | None = None
        self._started = 0
        self._current: tuple[NodeDaemons, Path] | None = None

    def get(self, mode: str) -> tuple[NodeDaemons, Path]:
        if mode != self.mode or self._current is None:
            self._stack.close()
            self.mode, self._current, self._started = None, None, self._started + 1
            text = NETWORK + NODES.format(mode=mode, f=F, chunk=CHUNK, commit=COMMIT, min_batch=MIN_BATCH,
                                          target=TARGET)
            folder = f"{self._started}-{mode}"
            self._current = (self._stack.enter_context(daemons_on(self.net, text, folder)), self.net.run_dir / folder)
            self.mode = mode
        return self._current


@pytest.fixture(scope="module")
def daemons() -> Iterator[DaemonSets]:
    with wan_network(NETWORK) as net, contextlib.ExitStack() as stack:
        yield DaemonSets(net, stack)


def one_message_delay(daemons: DaemonSets, hops: int, mode: str) -> float:
    nodes, records = daemons.get(mode)
    last = f"n{hops + 1}"
    with nodes.client(last) as c:
        before = c.stats()["delivered"]
    with nodes.client("n1") as c:
        r = c.send([last], size=M)
        assert r.accepted
    deadline = time.monotonic() + 60
    with nodes.client(last) as c:
        while c.stats()["delivered"] <= before:
            assert time.monotonic() < deadline, "the message did not arrive within 60 s"
            time.sleep(0.05)
    lines = (records / "nodes" / last / "deliveries.jsonl").read_text().splitlines()
    [d] = [x for x in map(json.loads, lines) if x["msg_id"] == r.msg_id]
    assert d["hops"] == hops and d["size"] == M
    return d["deliver_ts"] - d["submit_ts"]


@pytest.mark.parametrize("hops", HOPS)
def test_delay_close_to_the_bounds_in_both_modes(daemons: DaemonSets, hops: int) -> None:
    # the mode whose daemons are running first: one daemon start fewer
    delay = {m: one_message_delay(daemons, hops, m) for m in sorted(MODES, key=lambda m: m != daemons.mode)}
    frag, whole = delay["fragmenting"], delay["non-fragmenting"]
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
