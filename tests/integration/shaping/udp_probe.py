"""UDP probe helper run inside a namespace: `send HOST PORT N INTERVAL [SIZE]` or `recv PORT IDLE`.

Each probe carries its sequence number and send time (CLOCK_REALTIME, shared
by all namespaces of the machine), so the receiver gets one-way delays.
recv prints a JSON list of [seq, sent, received].
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # Linux value; not exported by Python 3.11


def send(host: str, port: int, n: int, interval: float, size: int = 64) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = b"\0" * max(0, size - 12)
    t_next = time.monotonic()
    for seq in range(n):
        try:
            s.sendto(struct.pack("!Id", seq, time.time()) + pad, (host, port))
        except OSError:
            pass        # local socket buffer full under overload tests
        if interval:
            t_next += interval
            if interval >= 0.005:
                time.sleep(max(0.0, t_next - time.monotonic()))
            while time.monotonic() < t_next:
                pass    # busy wait for short gaps: sleep granularity would distort the probe spacing
    s.close()


def recv(port: int, idle: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    # kernel receive timestamps: the receiver's own scheduling delay must not count as link delay
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind(("0.0.0.0", port))
    s.settimeout(30)
    print("ready", flush=True, file=sys.stderr)
    out = []
    while True:
        try:
            data, anc, _, _ = s.recvmsg(65536, 64)
        except socket.timeout:
            break
        now = time.time()
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", raw[:16])
                now = sec + nsec / 1e9
        seq, sent = struct.unpack_from("!Id", data)
        out.append([seq, sent, now])
        s.settimeout(idle)
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
             int(sys.argv[6]) if len(sys.argv) > 6 else 64)
    else:
        recv(int(sys.argv[2]), float(sys.argv[3]))
