"""What `security: {tls: true, auth: true}` costs on emulated links: plain against secure, same network.

Two figures, each measured with security off and on, on the wire emulator (rate and delay; testbed/shaping):
- 1 kB durable messages per second over one hop: n1's spool is pre-loaded with N messages for n2 before the
  daemons start (the same spool operations a submission uses, as in bench_node.py); the rate is taken from
  n2's deliveries (first to last), so it covers TLS on the Link stream and the hop's durable stores.
- the end-to-end delay of one 10 MB message over 3 hops (fragmenting, F = 1000), submitted through the
  Submit RPC (with the admin token when auth is on).
Each line prints `measured (secure) / plain = ratio`; a ratio near 1 means security costs little there.
`--small` runs both at a small size (to check the script; not for the record).
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_node import preload_spool  # noqa: E402
from testbed.experiment import nodeconfig  # noqa: E402
from testbed.experiment.daemons import NodeDaemons  # noqa: E402
from testbed.network import Network  # noqa: E402
from testbed.scenario.loader import load_text  # noqa: E402

RATE_MBIT, DELAY = 50.0, 0.020
SCENARIO = """
name: bench-security
topology: {{generator: linear, params: {{n: {n}}}}}
shaper: wire
link_defaults: {{delay: {d}s, rate: {rate}Mbit, queue: 4000}}
security: {{tls: {secure}, auth: {secure}}}
nodes:
  all:
    mode: fragmenting
    fragment_size: 1000
    metrics_interval: 5.0
"""


@contextlib.contextmanager
def _chain(nodes: int, secure: bool, preload: int = 0) -> Iterator[tuple[Network, NodeDaemons, Path]]:
    """A chain on the wire emulator with a daemon per host (security as asked), torn down afterwards."""
    text = SCENARIO.format(n=nodes, d=DELAY, rate=RATE_MBIT, secure=str(secure).lower())
    scenario = load_text(text, "bench_security.yaml")
    run_dir = Path(tempfile.mkdtemp(prefix="bench_security_"))
    net = Network.from_scenario(scenario, run_dir=run_dir, handle_signals=False)
    daemons: NodeDaemons | None = None
    try:
        net.start()
        configs = nodeconfig.node_configs(scenario, net, run_dir)
        tokens = nodeconfig.client_tokens(configs, nodeconfig.add_security(scenario, configs, run_dir))
        paths = nodeconfig.write_configs(configs, run_dir)
        if preload:
            preload_spool(run_dir / "nodes" / "n1" / "spool.db", preload, f"n{nodes}")
        daemons = NodeDaemons(net, paths, tokens=tokens)
        daemons.start_all()
        daemons.wait_healthy(60)
        yield net, daemons, run_dir
    finally:
        if daemons is not None:
            daemons.stop_all()
        net.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def _deliveries(run_dir: Path, node: str) -> list[dict]:
    import json
    f = run_dir / "nodes" / node / "deliveries.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []


def hop_rate(secure: bool, n: int) -> float:
    """1 kB durable messages per second over one emulated hop, from a pre-loaded spool."""
    with _chain(2, secure, preload=n) as (_net, daemons, run_dir):
        deadline = time.monotonic() + 300
        with daemons.client("n2") as c:
            while c.stats()["delivered"] < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {c.stats()['delivered']} of {n} delivered in 300 s")
                time.sleep(0.2)
        ts = sorted(d["deliver_ts"] for d in _deliveries(run_dir, "n2"))
        return (len(ts) - 1) / (ts[-1] - ts[0])


def big_delay(secure: bool, size: int, hops: int = 3) -> float:
    """End-to-end delay of one `size` byte message over `hops` emulated links."""
    last = f"n{hops + 1}"
    with _chain(hops + 1, secure) as (_net, daemons, run_dir):
        missing = daemons.wait_sessions(30)
        assert not missing, f"sessions of {missing} did not come up"
        with daemons.client("n1") as c:
            assert c.send([last], size=size).accepted
        deadline = time.monotonic() + 300
        with daemons.client(last) as c:
            while c.stats()["delivered"] < 1:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {size} byte message did not arrive within 300 s")
                time.sleep(0.05)
        d = _deliveries(run_dir, last)[0]
        return d["deliver_ts"] - d["submit_ts"]


def main() -> int:
    small = "--small" in sys.argv[1:]
    n, size = (2_000, 1_000_000) if small else (30_000, 10_000_000)
    link = f"{RATE_MBIT:g} Mbit/s, {DELAY * 1000:g} ms wire"
    plain, secure = hop_rate(False, n), hop_rate(True, n)
    print(f"security hop 1kB durable msgs/s ({link}, N={n}): measured {secure:,.0f}/s with tls+auth / plain "
          f"{plain:,.0f}/s = ratio {secure / plain:.2f}")
    plain, secure = big_delay(False, size), big_delay(True, size)
    print(f"security {size / 1e6:g}MB over 3x({link}) delay: measured {secure:.3f} s with tls+auth / plain "
          f"{plain:.3f} s = ratio {secure / plain:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
