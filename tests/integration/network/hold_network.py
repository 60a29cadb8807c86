"""Helper process for cleanup tests: holds a 3-host network (and a sleeper inside a host) until signalled.

Prints one JSON line {"run_id": ..., "pid": <sleeper pid>} once the network is up.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from network_support import VethShaper, free_mgmt_subnet, hand_plan, linear  # noqa: E402
from testbed.network import Network  # noqa: E402


class SlowShaper(VethShaper):
    """Takes its time per link, so a signal can arrive in the middle of start()."""

    def add_link(self, *args, **kw) -> None:
        super().add_link(*args, **kw)
        time.sleep(0.5)


def main() -> None:
    slow = "--slow" in sys.argv
    topo = linear(6 if slow else 3)
    mgmt = free_mgmt_subnet()
    net = Network(topo, hand_plan(topo, mgmt), shaper=SlowShaper() if slow else VethShaper(),
                  run_dir=Path(sys.argv[1]), kind="test", pools=("10.200.0.0/16", "10.202.0.0/16", mgmt))
    if slow:
        print(json.dumps({"run_id": net.run_id, "starting": True}), flush=True)
    net.start()
    net.partition(["n1"], ["n3"])      # iptables chains inside hosts must go with the teardown too
    proc = net.host("n2").start("sleeper", ["sleep", "600"])
    print(json.dumps({"run_id": net.run_id, "pid": proc.pid}), flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
