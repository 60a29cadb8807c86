"""Helpers shared by the integration tests: polling that fails loudly, and the evidence that a crash hit
data in flight (`from tests.integration.support import ...`).

A crash test proves nothing about durability unless the crash caught data on its way: pieces a
neighbour had sent but not yet seen acknowledged (it must send them again: `retransmissions` in its
NeighbourStats, node/peer.py), pieces the receiver stored twice (`duplicates_in`), or pieces in the
killed node's own spool (the "recovered N pieces" line it logs when it starts again, node/mta.py).
"""
from __future__ import annotations

import math
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable

RECOVERED = re.compile(r"recovered (\d+) pieces \((\d+) queued, (\d+) partial messages, (\d+) held, (\d+) orphans\)")


def binomial_interval(n: int, p: float, z: float = 4.0) -> tuple[float, float]:
    """Counts of n Bernoulli(p) trials a correct shaper stays within: n p +- z sd. At z = 4 a correct
    shaper fails about once in 16 000 runs (a 99% interval failed one CI run in a hundred per test),
    while double the rate (or loss in both directions) still lands outside at the n the tests use."""
    sd = math.sqrt(n * p * (1 - p))
    return n * p - z * sd, n * p + z * sd


def wait_until(pred: Callable[[], object], timeout: float, step: float = 0.1, what: str = "the condition") -> object:
    """Poll pred until it is truthy and return that value; after `timeout` seconds raise an
    AssertionError naming `what` was awaited and pred's last value (a timeout is a failure, never a value)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last value: {v!r}")
        time.sleep(step)


def signal_and_wait(proc: Any, sig: int, timeout: float) -> int:
    """Send `sig` to a child process (a subprocess.Popen) and wait for its end; its status. A child still
    running after `timeout` s fails the test with what the kernel says of it (state, signal dispositions,
    where each thread waits), then is killed: a signal that was ignored or never acted on shows there."""
    proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except Exception:
        evidence = process_evidence(proc.pid)
        proc.kill()
        proc.wait()
        raise AssertionError(f"process {proc.pid} still running {timeout:g} s after signal {sig}:\n{evidence}") \
            from None


def process_evidence(pid: int) -> str:
    """State, signal masks and per-thread wait channels of a live process, for a failure message."""
    base = Path(f"/proc/{pid}")
    try:
        status = [ln for ln in (base / "status").read_text().splitlines()
                  if ln.split(":")[0] in ("State", "Threads", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")]
        threads = [f"thread {t.name} {(t / 'comm').read_text().strip()}: {(t / 'wchan').read_text().strip()}"
                   for t in sorted((base / "task").iterdir(), key=lambda t: int(t.name))]
    except OSError as exc:
        return f"(cannot read {base}: {exc})"
    return "\n".join(status + threads)


def recoveries(node_log: Path) -> list[dict[str, int]]:
    """What a node found in its spool at each start, in order (the first start normally finds nothing):
    pieces, queued (for a next hop), partial (messages being reassembled here), held, orphans."""
    if not node_log.exists():
        return []
    keys = ("pieces", "queued", "partial", "held", "orphans")
    return [dict(zip(keys, map(int, m.groups()))) for m in RECOVERED.finditer(node_log.read_text(errors="replace"))]


def sends(link: dict[str, Any]) -> int:
    """Send events of one neighbour link so far, from its stats (node/peer.py NeighbourStats.snapshot).

    A piece sent is in flight until acknowledged (frags_out, counted on the ack), handed back when the
    session ends (retransmissions) or refused (refused_out, deferred_out); inflight is the rest. The sum
    only grows, so a rise between two readings means that pieces were sent in between.
    """
    return (link["frags_out"] + link["inflight"] + link["retransmissions"] + link["refused_out"]
            + link.get("deferred_out", 0))


def rss_bytes(pid: int) -> int:
    """A process's resident memory now (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP took effect): state T in /proc/<pid>/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def kill_with_pieces_in_flight(net: Any, victim: str, upstream: str, submit: Callable[[], None],
                               hold_time: float) -> int:
    """kill -9 `victim` (a testbed.localnet.LocalNet node) at a moment when its neighbour `upstream`
    provably has pieces in flight to it; returns how many pieces `upstream` had to send again.

    The victim is frozen first (SIGSTOP, waited for: it can neither store nor acknowledge anything
    now), then `submit()` adds a message whose route crosses upstream -> victim, so upstream has
    something to send even if other traffic has ended. Once upstream's send count (`sends`) rises
    above its value read after the freeze, those pieces cannot be acknowledged before the kill: the
    kill ends the session with them unacknowledged and upstream hands them back
    (`retransmissions`). Bounds: a silent peer is declared dead after hold_time, after which upstream
    stops sending to it, so it sends within hold_time or never; and it notices the kill (a reset, or
    at the latest the hold time) within hold_time.
    """
    def link() -> dict[str, Any]:
        with net.client(upstream) as c:
            return c.stats()["neighbours"][victim]

    proc = net.nodes[victim].proc
    proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: stopped(proc.pid), 5.0, 0.005, what=f"{victim} (pid {proc.pid}) to stop")
        start = link()
        submit()
        wait_until(lambda: sends(link()) > sends(start), 2 * hold_time, 0.01,
                   what=f"{upstream} to send pieces to the frozen {victim}")
    finally:
        net.kill(victim)                       # SIGKILL ends a stopped process as well
    after = wait_until(lambda: (lambda n: n if n > start["retransmissions"] else 0)(link()["retransmissions"]),
                       2 * hold_time, 0.05, what=f"{upstream} to take back what was in flight to the killed {victim}")
    return after - start["retransmissions"]


def skip_while_a_network_is_up(within: float = 60.0) -> None:
    """Skip the calling test if a `testbed up` network is still running after `within` seconds.

    A test of `up`, `clean` or the dashboard must not touch a user's network. One that the suite itself
    brought up (another test's, tearing down on another worker) is gone within seconds, so wait for it
    rather than skip: a skip here would silently drop the test from the run."""
    from testbed import netstate
    deadline = time.monotonic() + within
    while (runs := netstate.running()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if runs:
        import pytest
        pytest.skip("a `testbed up` network is running on this machine (" + ", ".join(r.run_id for r in runs)
                    + "); not touching it")
