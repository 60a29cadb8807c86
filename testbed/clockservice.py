"""The clock exchange over UDP: a tiny time service on each machine, and the controller's side that measures it.

The agent on a machine runs a ClockService; the controller calls `measure` at the
start and the end of a repetition (testbed/clockoffset.py turns the exchanges
into an offset, its uncertainty and the drift). One datagram each way:

    probe  (controller -> machine): MAGIC, seq, t0
    answer (machine -> controller): MAGIC, seq, t0, t1, t2

t0 is echoed so the controller needs no table of probes in flight; `seq` ties an
answer to its probe, so a late answer to an earlier probe is not taken for the
current one. UDP, not TCP: a retransmission or Nagle's delay would sit inside
one way of the round trip and make it asymmetric.

`offset` (the service's constructor argument) shifts the machine's clock: for
tests only, which need a known offset on one machine; production leaves it 0.
"""
from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from typing import Callable

from testbed.clockoffset import ClockError, Estimate, Exchange, estimate

log = logging.getLogger(__name__)

MAGIC = b"WBCK"
_PROBE = struct.Struct("!4sQd")          # magic, seq, t0
_ANSWER = struct.Struct("!4sQddd")       # magic, seq, t0, t1, t2
DEFAULT_EXCHANGES = 16
DEFAULT_TIMEOUT = 0.5                    # s to wait for one answer


class ClockService:
    """Answers clock probes on a UDP socket from a thread, until stop()."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, offset: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, port))
        self._sock.settimeout(0.2)       # how often the thread looks at the stop flag
        self._offset = offset
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.answered = 0

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return host, port

    def now(self) -> float:
        return self._clock() + self._offset

    def start(self) -> "ClockService":
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="clockservice", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        self._sock.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "ClockService":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(64)
            except socket.timeout:
                continue
            except OSError:
                return          # the socket was closed by stop()
            t1 = self.now()
            if len(data) != _PROBE.size:
                continue        # not a probe: a stray datagram is no reason to stop answering
            magic, seq, t0 = _PROBE.unpack(data)
            if magic != MAGIC:
                continue
            try:
                self._sock.sendto(_ANSWER.pack(MAGIC, seq, t0, t1, self.now()), peer)
                self.answered += 1
            except OSError as exc:
                log.warning("clock service: cannot answer %s: %s", peer, exc)


def exchanges(address: tuple[str, int], count: int = DEFAULT_EXCHANGES, *, timeout: float = DEFAULT_TIMEOUT,
              clock: Callable[[], float] = time.time) -> list[Exchange]:
    """`count` probes to the service at `address`, one at a time; the answered ones as Exchanges."""
    if count < 1:
        raise ClockError(f"a clock measurement needs at least 1 exchange, got {count}.")
    out: list[Exchange] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        for seq in range(count):
            t0 = clock()
            try:
                sock.send(_PROBE.pack(MAGIC, seq, t0))
            except OSError as exc:
                raise ClockError(f"cannot reach the clock service at {address[0]}:{address[1]} ({exc}).") from None
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    data = sock.recv(64)
                except (socket.timeout, ConnectionRefusedError):
                    break       # this probe is lost (or nothing listens): the next one may get through
                t3 = clock()
                if len(data) != _ANSWER.size:
                    continue
                magic, got, e0, t1, t2 = _ANSWER.unpack(data)
                if magic == MAGIC and got == seq and e0 == t0:
                    out.append(Exchange(t0, t1, t2, t3))
                    break
    return out


def measure(address: tuple[str, int], count: int = DEFAULT_EXCHANGES, *, timeout: float = DEFAULT_TIMEOUT,
            machine: str = "") -> Estimate:
    """The machine's offset from `count` exchanges with its clock service (the minimum-round-trip one)."""
    got = exchanges(address, count, timeout=timeout)
    if not got:
        who = f"machine {machine}" if machine else "the machine"
        raise ClockError(f"{who} did not answer any of {count} clock probes at {address[0]}:{address[1]}.")
    return estimate(got)


def main(argv: list[str] | None = None) -> None:
    """`python -m testbed.clockservice --host ADDR [--port N] [--offset S] [--port-file F]`: serve until killed.
    The agent starts it detached; the bound port goes to --port-file (written whole, then renamed) so that the
    agent's request can answer with it."""
    import argparse
    import os
    import signal

    p = argparse.ArgumentParser(prog="python -m testbed.clockservice")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--offset", type=float, default=0.0, help="tests only: shift this machine's clock, s")
    p.add_argument("--port-file", default="")
    args = p.parse_args(argv)
    service = ClockService(args.host, args.port, offset=args.offset).start()
    if args.port_file:
        tmp = f"{args.port_file}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{service.address[1]}\n")
        os.replace(tmp, args.port_file)
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    while service.running:
        time.sleep(0.5)


if __name__ == "__main__":
    main()
