"""Helpers of the shaping tests: a two-namespace rig around one shaped link, UDP/ping probes."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from testbed.shaping.base import Shaper

PROBE = str(Path(__file__).with_name("udp_probe.py"))
A_IP, B_IP = "10.77.0.1", "10.77.0.2"


def _run(args: list[str], check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=timeout)


@dataclass
class LinkRig:
    shaper: Shaper
    run_id: str
    ns_a: str
    ns_b: str
    workdir: Path
    link_id: str = "ab"

    def ping(self, count: int, interval: float = 0.05, src: str = "a", wait: float = 2) -> list[float]:
        ns, dst = (self.ns_a, B_IP) if src == "a" else (self.ns_b, A_IP)
        r = _run(["ip", "netns", "exec", ns, "ping", "-n", "-c", str(count), "-i", str(interval), "-W", str(wait),
                  dst], check=False)
        return [float(w.split("=")[1]) for w in r.stdout.split() if w.startswith("time=")]

    def probe(self, n: int, interval: float, src: str = "a", size: int = 64, idle: float = 1.0,
              port: int = 5599) -> list[list[float]]:
        """UDP probes from src to the other end; returns [seq, sent, received] per received probe."""
        (s_ns, r_ns, dst) = (self.ns_a, self.ns_b, B_IP) if src == "a" else (self.ns_b, self.ns_a, A_IP)
        rx = subprocess.Popen(["ip", "netns", "exec", r_ns, sys.executable, PROBE, "recv", str(port), str(idle)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert rx.stderr is not None
            rx.stderr.readline()        # "ready"
            _run(["ip", "netns", "exec", s_ns, sys.executable, PROBE, "send", dst, str(port), str(n), str(interval),
                  str(size)])
            out, _ = rx.communicate(timeout=60)
        finally:
            if rx.poll() is None:
                rx.kill()
                rx.wait()
        return json.loads(out)


