"""Network set-up and teardown time: a 20-host ring and a 100-host 10x10 grid (needs root).

Uses the real address planner and shaper when they are installed (shaper "auto"),
otherwise the test suite's hand-made plan and plain veth links, and says which.
Bounds: 20 hosts up in <= 5 s, 100 hosts up in <= 30 s.

`--only netlink` (or the default, after the set-up figures) compares the two ways
of talking netlink at 100 hosts: `ip` processes against pyroute2 from this
process (testbed/netlink.py). Measured 2026-11-23 on the 2-core machine with other
engineers' tests running, best of 3 (lower is better):

  configure 100 hosts, 3 addresses + 280 routes each: ip -batch 0.63 s, pyroute2 12.7 s
  one link down+up in each of 100 hosts (single calls): ip 0.48 s, pyroute2 0.35 s
  list 200 root interfaces by prefix:                  ip -o link 0.005 s, pyroute2 0.04 s
  delete 100 root veth pairs:                          ip -batch 1.61 s, pyroute2 1.65 s
  re-plumb one host (2 veth ends, 3 addresses, 280 routes, iptables-save): ip 0.06 s, pyroute2 0.20 s

Kept: bulk set-up (testbed/network.py, runtime namespace creation) and the
cleanup's bulk `link del` stay on `ip -batch`: one C process per host, all in
parallel, against pyroute2 encoding every request in this one Python process
(~0.4 ms each, 20x slower for 28 000 routes); deleting is kernel-bound either
way. Single changes and queries at run time use pyroute2: a single change is
faster than starting `ip`, and a listing or a dump comes back as data instead
of text to parse. The re-plumbing of a restarted container is pyroute2 too: it
costs 0.15 s more at 280 routes (next to a `docker start` of ~0.5 s), and its
routes go back exactly as dumped (protocol, scope, type, metrics) instead of
through `ip route show` text with state flags stripped.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration" / "network"))

from network_support import VethShaper, free_mgmt_subnet, grid, hand_plan, ring  # noqa: E402
from testbed import cleanup, netlink, registry  # noqa: E402
from testbed.network import Network  # noqa: E402
from testbed.runtime.docker import ReplumbReport, _move_namespace  # noqa: E402
from testbed.runtime.netns import run_ip  # noqa: E402

BOUNDS = {"ring20": (20, 5.0), "grid10x10": (100, 30.0)}


def build(kind: str, real: bool) -> Network:
    topo = ring(20) if kind == "ring20" else grid(10, 10)
    mgmt = free_mgmt_subnet()
    pools = ("10.200.0.0/16", "10.202.0.0/16", mgmt)
    if real:
        return Network(topo, None, shaper="auto", pools=pools, kind="bench")
    return Network(topo, hand_plan(topo, mgmt), shaper=VethShaper(), pools=pools, kind="bench")


# ---- netlink: `ip` processes against pyroute2, at 100 hosts ------------------------------------

HOSTS = 100
ROUTES = 280          # per host: a 10x10 grid's plan has ~28 000 kernel routes over 100 hosts


def _host_config() -> tuple[list[tuple[str, str]], list[str]]:
    """(interface, cidr) addresses and route destinations of one bench host (the same in every namespace)."""
    addrs = [("e1", "10.250.0.1/30"), ("e2", "10.250.0.2/30"), ("lo", "10.251.0.1/32")]
    return addrs, [f"10.252.{i // 250}.{i % 250 + 1}/32" for i in range(ROUTES)]


def _make_hosts(names: list[str]) -> None:
    """Namespaces with lo up and a veth pair e1/e2 inside each (one `ip -batch` per host, in parallel)."""
    run_ip([], batch="".join(f"netns add {n}\n" for n in names))
    script = "link set lo up\nlink add e1 type veth peer name e2\nlink set e1 up\nlink set e2 up\n"
    _parallel_ip(names, script)


def _parallel_ip(names: list[str], script: str) -> None:
    procs = [subprocess.Popen(["ip", "-n", n, "-batch", "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for n in names]
    for n, p in zip(names, procs):
        _, err = p.communicate(script)
        if p.returncode != 0:
            raise RuntimeError(f"{n}: {err.strip()}")


def _drop_hosts(names: list[str]) -> None:
    run_ip([], batch="".join(f"netns del {n}\n" for n in names), check=False)


def configure_ip(names: list[str]) -> None:
    """As testbed/network.py does it: one `ip -n NS -batch -` per host, all hosts at once."""
    addrs, dsts = _host_config()
    lines = [f"addr add {cidr} dev {dev}" for dev, cidr in addrs]
    lines += [f"route replace {d} via 10.250.0.2 dev e1" for d in dsts]
    _parallel_ip(names, "\n".join(lines) + "\n")


def configure_pyroute2(names: list[str]) -> None:
    addrs, dsts = _host_config()
    for n in names:
        with netlink.session(n) as ipr:
            for dev, cidr in addrs:
                netlink.add_address(dev, cidr, ipr=ipr)
            for d in dsts:
                netlink.add_route(d, via="10.250.0.2", dev="e1", ipr=ipr)


def _root_veths(pfx: str) -> list[str]:
    run_ip([], batch="".join(f"link add {pfx}v{i:03d} type veth peer name {pfx}p{i:03d}\n" for i in range(HOSTS)))
    return [f"{pfx}{k}{i:03d}" for i in range(HOSTS) for k in ("v", "p")]


def list_ip(pfx: str) -> list[str]:
    """What cleanup.root_links did before: parse `ip -o link show`."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(": ")[1].split("@")[0] for line in out.splitlines() if len(line.split(": ")) > 1]
    return [n for n in names if n.startswith(pfx)]


def delete_ip(names: list[str]) -> None:
    run_ip([], batch="".join(f"link del {n}\n" for n in names), check=False)


def delete_pyroute2(names: list[str]) -> None:
    with netlink.session() as ipr:
        for n in names:
            netlink.delete_link(n, ipr=ipr)


def move_ip(old: str, new: str) -> None:
    """The re-plumbing as it was with `ip`: JSON dumps, then -batch scripts (the routes' text re-added)."""
    links = [l for l in json.loads(run_ip(["-n", old, "-j", "link", "show"]).stdout) if l["ifname"] != "lo"]
    addrs = json.loads(run_ip(["-n", old, "-j", "addr", "show"]).stdout)
    routes = [line for line in run_ip(["-n", old, "-o", "-4", "route", "show"]).stdout.splitlines()
              if "proto kernel" not in line]
    subprocess.run(["ip", "netns", "exec", old, "iptables-save"], capture_output=True)   # as both versions do
    run_ip(["-n", old], batch="".join(f"link set dev {l['ifname']} netns {new}\n" for l in links))
    lines = [f"link set dev {l['ifname']} mtu {l['mtu']}" for l in links]
    lines += [f"addr add {i['local']}/{i['prefixlen']} dev {a['ifname']}" for a in addrs for i in a["addr_info"]
              if i.get("scope") != "link" and i["local"] not in ("127.0.0.1", "::1")]
    lines += [f"link set dev {l['ifname']} up" for l in links]
    run_ip(["-n", new], batch="\n".join(lines) + "\n")
    run_ip(["-n", new, "-4"], batch="".join(f"route add {r}\n" for r in routes), check=False)


def move_pyroute2(old: str, new: str) -> None:
    _move_namespace(old, new, ReplumbReport("bench"))


def _toggle_ip(names: list[str]) -> None:
    """Single changes as separate calls (a fault on one link), not a batch."""
    for n in names:
        for state in ("down", "up"):
            run_ip(["-n", n, "link", "set", "e1", state])


def _toggle_pyroute2(names: list[str]) -> None:
    for n in names:
        for up in (False, True):
            netlink.set_link_up("e1", up, ns=n)


def _best(times: list[float]) -> str:
    return f"{min(times):.3f} s (best of {len(times)}; worst {max(times):.3f} s)"


def bench_netlink(reps: int) -> None:
    run_id = registry.new_run_id()
    registry.register(run_id, "bench")       # registered: a concurrent `testbed clean` leaves it alone
    pfx = registry.prefix(run_id)
    names = [f"{pfx}-h{i:03d}" for i in range(HOSTS)]
    try:
        for label, fn in (("ip -batch", configure_ip), ("pyroute2", configure_pyroute2)):
            times = []
            for _ in range(reps):
                _make_hosts(names)
                t0 = time.monotonic()
                fn(names)
                times.append(time.monotonic() - t0)
                _drop_hosts(names)
            print(f"netlink configure {HOSTS} hosts x ({len(_host_config()[0])} addresses + {ROUTES} routes) "
                  f"via {label}: measured {_best(times)} (no bound)")
        _make_hosts(names)
        for label, toggle in (("one ip process each", _toggle_ip), ("pyroute2, one session each", _toggle_pyroute2)):
            times = []
            for _ in range(reps):
                t0 = time.monotonic()
                toggle(names)
                times.append(time.monotonic() - t0)
            print(f"netlink link down+up once in each of {HOSTS} hosts via {label}: measured {_best(times)} "
                  f"(no bound)")
        _drop_hosts(names)
        veths = _root_veths(pfx)
        for label, lister in (("ip -o link", list_ip), ("pyroute2", netlink.interface_names)):
            times = []
            for _ in range(reps):
                t0 = time.monotonic()
                found = lister(pfx)
                times.append(time.monotonic() - t0)
            assert len(found) == len(veths), (label, len(found))
            print(f"netlink list {len(veths)} root interfaces by prefix via {label}: measured {_best(times)} "
                  f"(no bound)")
        delete_ip(veths)
        for label, deleter in (("ip -batch", delete_ip), ("pyroute2", delete_pyroute2)):
            times = []
            for _ in range(reps):
                veths = _root_veths(pfx)
                t0 = time.monotonic()
                deleter(veths)
                times.append(time.monotonic() - t0)
                assert not netlink.interface_names(pfx), label
            print(f"netlink delete {HOSTS} root veth pairs via {label}: measured {_best(times)} (no bound)")
        for label, mover in (("ip", move_ip), ("pyroute2", move_pyroute2)):
            times = []
            for _ in range(reps):
                old, new = names[0], names[1]
                _make_hosts([old])
                configure_ip([old])
                run_ip(["netns", "add", new])
                t0 = time.monotonic()
                mover(old, new)
                times.append(time.monotonic() - t0)
                assert len(netlink.routes(new)) >= ROUTES, label
                _drop_hosts([old, new])
            print(f"netlink re-plumb one host (2 veth ends, 3 addresses, {ROUTES} routes) via {label}: "
                  f"measured {_best(times)} (no bound)")
    finally:
        cleanup.remove_run_resources(run_id)
        registry.unregister(run_id)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", choices=("setup", "netlink"), help="run one part (default: both)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_network: needs root (network namespaces); skipped")
        return 0
    if args.only != "netlink":
        bench_setup(args.reps)
    if args.only != "setup":
        bench_netlink(args.reps)
    return 0


def bench_setup(reps: int) -> None:
    real = (hasattr(importlib.import_module("testbed.shaping"), "make_shaper")
            and importlib.util.find_spec("testbed.topology.addressing") is not None)
    print(f"network set-up: {'real planner + shaper auto' if real else 'hand plan + veth links (shaper not installed)'}")
    for kind, (hosts, bound) in BOUNDS.items():
        ups, downs = [], []
        shaper = ""
        for _ in range(reps):
            net = build(kind, real)
            t0 = time.monotonic()
            net.start()
            ups.append(time.monotonic() - t0)
            shaper = net.shaper_name
            t0 = time.monotonic()
            net.stop()
            downs.append(time.monotonic() - t0)
        up, down = max(ups), max(downs)
        print(f"network up {kind} ({hosts} hosts, {shaper}): measured {up:.2f} s / bound {bound:.2f} s = "
              f"ratio {up / bound:.2f} (worst of {reps}; best {min(ups):.2f} s)")
        print(f"network down {kind} ({hosts} hosts, {shaper}): measured {down:.2f} s (worst of {reps}; "
              f"best {min(downs):.2f} s; no bound)")


if __name__ == "__main__":
    sys.exit(main())
