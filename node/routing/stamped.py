"""UDP datagrams read with the time the kernel received them.

A time taken when the event loop gets round to a datagram includes however long the loop was busy (or the
process was not scheduled); the kernel's receive stamp (SO_TIMESTAMPNS, CLOCK_REALTIME, one per datagram in
recvmsg's ancillary data) does not. asyncio's datagram transport drops ancillary data, so the socket is read
here from a loop reader instead.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Callable

# Linux's value (asm-generic; Python does not export it); SCM_TIMESTAMPNS, the ancillary type, is the same number.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")      # struct timespec: tv_sec, tv_nsec (native longs)
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)
BURST = 64        # datagrams read per wake-up at most: a flood must not hold the loop (the reader fires again)


def enable_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp every datagram `sock` receives; False where it cannot."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def kernel_stamp(ancdata: list[tuple[int, int, bytes]]) -> float | None:
    """The receive time (time.time() scale, seconds) in recvmsg's ancillary data, None when there is none."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec + nsec / 1e9
    return None


class StampedReader:
    """Reads a non-blocking UDP socket from the running loop, handing each datagram on with its receive time
    (the kernel's stamp; time.time() at reading only if the kernel gave none). `close` closes the socket too."""

    def __init__(self, sock: socket.socket, bufsize: int, on_datagram: Callable[[bytes, tuple, float], None],
                 on_error: Callable[[OSError], None]) -> None:
        self.sock = sock
        self.bufsize = bufsize
        self.on_datagram = on_datagram
        self.on_error = on_error
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._ready)

    def close(self) -> None:
        if self._loop is not None and self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
        self._loop = None
        self.sock.close()

    def _ready(self) -> None:
        for _ in range(BURST):
            try:
                data, ancdata, _flags, addr = self.sock.recvmsg(self.bufsize, _ANCILLARY)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:       # e.g. an ICMP error queued on the socket: reported, the socket lives on
                self.on_error(exc)
                return
            stamp = kernel_stamp(ancdata)
            self.on_datagram(data, addr, time.time() if stamp is None else stamp)
