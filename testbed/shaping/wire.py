"""The `wire` shaper: drives the userspace emulator process (wire_emulator.py).

The emulator outlives the process that started it (`testbed up` returns to the
shell); state() records its pid and control socket so attach() in a later
process can change links. close() asks it to shut down, then kills it by pid;
its TAP devices vanish with its file descriptors either way.

`half` numbers one of several emulators of a run (one per machine of a network
split over machines, testbed/shaping/split.py): it keeps their control sockets
and temporary TAP names apart.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from testbed import pycmd, registry
from node.errors import UserError
from testbed.shaping.base import DirectionCounters, LinkEnd, Shaper, link_duplex
from testbed.topology.model import Direction

log = logging.getLogger(__name__)


def direction_to_wire(d: Direction) -> dict[str, Any]:
    out: dict[str, Any] = dict(delay=d.delay, jitter=d.jitter, loss=d.loss, duplicate=d.duplicate,
                               reorder=d.reorder, rate=d.rate, queue=d.queue)
    if d.gilbert is not None:
        out.update(ge_p=d.gilbert.p, ge_r=d.gilbert.r, ge_loss_good=d.gilbert.loss_good,
                   ge_loss_bad=d.gilbert.loss_bad)
    return out


class WireShaper(Shaper):
    name = "wire"

    def __init__(self, run_id: str, workdir: Path, state: dict[str, Any] | None = None,
                 half: int | None = None) -> None:
        self.run_id = run_id
        self.workdir = Path(workdir)
        self.half = half
        self.links: dict[str, dict[str, Any]] = {}
        self._conn: socket.socket | None = None
        self._buf = b""
        # one request at a time on the shared connection: the links sampler's thread calls beside the run's own
        self._lock = threading.Lock()
        self._closed = False
        if state is not None:
            self.pid = int(state["pid"])
            self.sock_path = state["socket"]
            self.half = state.get("half")
            self.links = dict(state.get("links", {}))
            return
        if not os.path.exists("/dev/net/tun"):
            raise UserError("the wire shaper needs TUN/TAP support, but /dev/net/tun does not exist (modprobe tun).")
        self.workdir.mkdir(parents=True, exist_ok=True)
        registry.REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        # a half's names stay within the run's prefix (testbed clean finds them) and the 15 characters of a TAP
        tag = registry.prefix(run_id) + (f"h{half}" if half is not None else "")
        self.sock_path = str(registry.REGISTRY_DIR / f"{tag}-wire.sock")
        logf = open(self.workdir / "wire.log", "ab")
        proc = subprocess.Popen(pycmd.module_argv("testbed.shaping.wire_emulator", "--socket", self.sock_path,
                                                  "--prefix", tag), stdout=logf, stderr=logf,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=pycmd.env())
        logf.close()
        self.pid = proc.pid
        self._proc = proc
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UserError(f"the wire emulator exited at start (see {self.workdir / 'wire.log'}).")
            try:
                self._call({"op": "ping"})
                return
            except OSError:
                time.sleep(0.02)
        self.close()
        raise UserError("the wire emulator did not answer on its control socket within 10 s.")

    # ---- control channel ---------------------------------------------
    def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self._call_locked(req)

    def _call_locked(self, req: dict[str, Any]) -> dict[str, Any]:
        if self._conn is None:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(10)
            try:
                c.connect(self.sock_path)
            except OSError:
                c.close()
                raise
            self._conn, self._buf = c, b""
        try:
            self._conn.sendall(json.dumps(req).encode() + b"\n")
            while b"\n" not in self._buf:
                data = self._conn.recv(65536)
                if not data:
                    raise ConnectionError("wire emulator closed the control connection")
                self._buf += data
        except OSError:
            self._conn.close()
            self._conn = None
            raise
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        """One control request; its answer, or a UserError with the emulator's reason."""
        return self._checked(req)

    def _checked(self, req: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = self._call(req)
        except OSError as e:
            raise UserError(f"the wire emulator of run {self.run_id} is not reachable ({e}).") from None
        if not resp.get("ok"):
            raise UserError(f"wire emulator: {resp.get('error')}.")
        return resp

    # ---- Shaper API --------------------------------------------------
    def add_link(self, link_id: str, a: LinkEnd, b: LinkEnd, a_to_b: Direction, b_to_a: Direction,
                 pcap: Path | None = None, snaplen: int = 128) -> None:
        for end in (a, b):
            if not end.ifname or len(end.ifname) > 15:
                raise UserError(f"interface name {end.ifname!r} must be 1 to 15 characters.")
        duplex = link_duplex(link_id, a_to_b, b_to_a)
        self._checked({"op": "add_link", "link_id": link_id, "a": dataclasses.asdict(a), "b": dataclasses.asdict(b),
                       "a_to_b": direction_to_wire(a_to_b), "b_to_a": direction_to_wire(b_to_a), "duplex": duplex,
                       "pcap": str(pcap) if pcap else None, "snaplen": snaplen})
        self.links[link_id] = {"a": dataclasses.asdict(a), "b": dataclasses.asdict(b),
                               "pcap": str(pcap) if pcap else None}

    def set_params(self, link_id: str, a_to_b: Direction | None, b_to_a: Direction | None) -> None:
        self._checked({"op": "set_params", "link_id": link_id,
                       "a_to_b": direction_to_wire(a_to_b) if a_to_b else None,
                       "b_to_a": direction_to_wire(b_to_a) if b_to_a else None})

    def set_carrier(self, link_id: str, up: bool) -> None:
        self._checked({"op": "set_carrier", "link_id": link_id, "up": up})

    def counters(self, link_id: str) -> tuple[DirectionCounters, DirectionCounters]:
        r = self._checked({"op": "counters", "link_id": link_id})
        return DirectionCounters(**r["a_to_b"]), DirectionCounters(**r["b_to_a"])

    def counters_all(self) -> dict[str, tuple[DirectionCounters, DirectionCounters]]:
        r = self._checked({"op": "counters_all"})
        return {lid: (DirectionCounters(**c["a_to_b"]), DirectionCounters(**c["b_to_a"]))
                for lid, c in r["links"].items()}

    def state(self) -> dict[str, Any]:
        return {"backend": "wire", "run_id": self.run_id, "workdir": str(self.workdir), "pid": self.pid,
                "socket": self.sock_path, "links": self.links, "half": self.half}

    def detach(self) -> None:
        """Drop the control connection, leaving the emulator running (for attach()ed users)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call({"op": "shutdown"})
        except (OSError, ValueError):
            pass
        self.detach()
        if not self._gone(3):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._gone(3)
        if os.path.exists(self.sock_path):
            os.unlink(self.sock_path)

    def _gone(self, timeout: float) -> bool:
        """Whether the emulator ended within `timeout` seconds (our own child: reaped the moment it ends)."""
        proc = getattr(self, "_proc", None)
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._alive():
            time.sleep(0.02)
        return not self._alive()

    def _alive(self) -> bool:
        proc = getattr(self, "_proc", None)
        if proc is not None:
            return proc.poll() is None          # reaps our own child
        return registry.pid_alive(self.pid)
