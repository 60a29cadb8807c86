"""Pipelining over rate-limited links: the fragmenting engine beats store-and-forward of whole messages.

Every node runs in its own network namespace; neighbours are joined by veth
pairs shaped with TBF at B bytes/s (this kernel has no netem, so the link delay
d is ~0 and the H·d terms vanish). For a message of M bytes over H hops:
  fragmenting      ~ M/B + (H-1)·F/B        (fragments pipeline through the hops)
  non-fragmenting  ~ H·M/B                  (each hop stores the whole message first)
Both measured delays are checked against these bounds with tolerances derived
from the configuration (wire overhead per frame, TCP/IP headers, commit
windows), and against each other.
"""
from __future__ import annotations

import os
import shutil
import time

import pytest

from testbed.localnet import NetnsLinks
from nodenet_support import wait_until

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
pytestmark = [pytest.mark.alone, pytest.mark.root, pytest.mark.timeout(180),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces and tc"),
              pytest.mark.skipif(shutil.which("tc") is None, reason="needs tc (iproute2)")]

RATE_MBIT = 8.0
B = RATE_MBIT * 1e6 / 8          # bytes per second
M = 1_000_000                    # message size
H = 3                            # hops
F = 1000                         # fragment size
CHUNK = 65536                    # wire chunk in non-fragmenting mode
FRAME_HEADER = 90                # bytes of Fragment fields besides the data (msg id, offsets, recipients, times)
TCPIP = 1 + 66 / 1448            # Ethernet+IP+TCP headers per full segment (TBF counts them)
COMMIT = 0.002                   # batch.commit_window
TARGET = 0.01                    # batch.target_delay: a gRPC message carries ~this many seconds of the link
MIN_BATCH = 16384                # batch.min_bytes
BATCH_BYTES = max(MIN_BATCH, B * TARGET)   # a hop stores (then forwards) a whole gRPC message of frames


def _delay(localnet, mode: str) -> float:
    net = localnet(hops=H, mode=mode, fragment_size=F, wire_chunk=CHUNK, netns=NetnsLinks(RATE_MBIT),
                   batch={"commit_window": COMMIT, "min_bytes": MIN_BATCH, "target_delay": TARGET})
    names = list(net.nodes)

    def all_up() -> bool:
        for n in names:
            with net.client(n) as c:
                if not all(v["up"] for v in c.stats()["neighbours"].values()):
                    return False
        return True

    assert wait_until(all_up, 20, what="every neighbour session up"), "sessions did not come up"
    with net.client("n1") as c:
        r = c.send([f"n{H + 1}"], size=M)
        assert r.accepted
    last = f"n{H + 1}"
    with net.client(last) as c:
        assert wait_until(lambda: c.stats()["delivered"] == 1, 60, 0.05, what=f"the message delivered at {last}")
    d = net.records(last, "delivery")[0]
    assert d["hops"] == H and d["size"] == M
    return d["deliver_ts"] - d["submit_ts"]


def test_fragmenting_pipelines_and_non_fragmenting_stores_whole(localnet) -> None:
    frag = _delay(localnet, "fragmenting")
    whole = _delay(localnet, "non-fragmenting")
    bound_frag = M / B + (H - 1) * F / B
    bound_whole = H * M / B
    wire_frag = (1 + FRAME_HEADER / F) * TCPIP           # bytes on the wire per payload byte
    wire_whole = (1 + FRAME_HEADER / CHUNK) * TCPIP
    # batching: each later hop waits for a whole batch (not one fragment); plus a few commits per hop
    slack = 0.3 + H * 10 * COMMIT + (H - 1) * 2 * BATCH_BYTES / B
    print(f"fragmenting {frag:.3f} s (bound {bound_frag:.3f}), non-fragmenting {whole:.3f} s (bound {bound_whole:.3f})")
    # lower bounds: nothing beats the link rate (TBF burst allows a little: 10%)
    assert frag >= 0.9 * bound_frag
    assert whole >= 0.9 * bound_whole
    # upper bounds: the bound inflated by the wire overhead, 25% for processing, plus fixed slack
    assert frag <= bound_frag * wire_frag * 1.25 + slack
    assert whole <= bound_whole * wire_whole * 1.25 + slack
    # and the point of fragmenting: close to one transmission time instead of H of them
    assert frag < 0.6 * whole
