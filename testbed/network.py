"""The public network API: build an emulated WAN from a Topology, change it while it runs, tear it down.

    with Network(topology, plan) as net:
        net.host("n1").run(["ping", "-c1", net.data_address("n5")])
        net.set_link("n1", "n2", delay=0.02)
        net.partition(["n1", "n2"], ["n4"]); net.heal()

    net = Network.attach(run_id)     # another process's running network (the CLI): queries and changes, no stop()

Build order (every step recorded first, so a failure half-way tears down what exists):
register the run id -> check the pools against the machine's routes -> hosts ->
management bridge `<prefix>-mgmt` in the root namespace + one veth per host (eth0
inside) -> data links through the shaper -> addresses, loopback /32s, kernel
routes -> `topology.json` + the network state for later CLI calls.

Partitions are iptables rules inside the hosts: a chain `<prefix>-part` in each
host of one side drops packets to and from every data and loopback address of
the other side. `heal()` deletes exactly that chain. The management network is
never partitioned: it is the control plane the testbed itself needs. A placed
host's chain is put and removed by the agent of its machine
(testbed/agent/ops.py `chain`), the same rules, one request per machine.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import importlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from node.errors import UserError
from node.names import NODE_NAME_RULE, is_node_name
from testbed import cleanup, netstate, registry
from testbed.experiment.linkmon import LinkMonitor
from testbed.runtime.base import Host, Runtime, normalise_sysctls
from testbed.runtime.netns import NetnsHost, run_ip
from testbed.shaping import attach as attach_shaper, make_shaper
from testbed.shaping.base import LinkEnd, Shaper
from testbed.topology import addressing
from testbed.topology.model import AddressPlan, Direction, Interface, Link, Topology

log = logging.getLogger(__name__)

DIRECTIONS = ("both", "a_to_b", "b_to_a")
# duplex is fixed when the link is built (a shaper's transmitter model), so it is not a run-time parameter
LINK_PARAMS = {f.name for f in dataclasses.fields(Direction)} - {"duplex"}
DEFAULT_POOLS = ("10.200.0.0/16", "10.202.0.0/16", "10.201.0.0/16")   # data, loopback, management


def mgmt_bridge_name(run_id: str) -> str:
    return f"{registry.prefix(run_id)}-mgmt"


def mgmt_veth_name(run_id: str, index: int) -> str:
    return f"{registry.prefix(run_id)}m{index}"


def lan_netns_name(run_id: str, index: int) -> str:
    return f"{registry.prefix(run_id)}.lan{index}"


def partition_chain(run_id: str) -> str:
    return f"{registry.prefix(run_id)}-part"


class Network:
    """One emulated WAN on this machine. Small on purpose: hosts, link changes, partitions, stop()."""

    def __init__(self, topology: Topology, plan: AddressPlan | None = None, runtime: str | Runtime = "netns",
                 shaper: str | Shaper = "auto", run_dir: str | Path | None = None, capture: Iterable[str] | str = (),
                 run_id: str | None = None, pools: tuple[str, str, str] = DEFAULT_POOLS, kind: str = "network",
                 handle_signals: bool = True, sysctls: dict[str, Any] | None = None, generator: str = "",
                 placement: Any = None) -> None:
        """placement: the scenario's PlacementSpec (testbed/scenario/sections/placement.py) to spread the hosts
        over several machines' Docker engines (testbed/agent/placed.py); None or an empty one: this machine."""
        self.topology = topology
        self.placement = placement if placement is not None and placement.enabled else None
        self.generator = generator          # the scenario's topology.generator: how a viewer lays the hosts out
        self.sysctls = normalise_sysctls(sysctls or {})   # extra per-host sysctls, "net/ipv4/..." form
        self.plan = plan
        self._runtime_choice = runtime
        self._shaper_choice = shaper
        self._own_run_dir = run_dir is None
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.capture = capture
        self.run_id = run_id or registry.new_run_id()
        self.pools = pools
        self.kind = kind
        self.handle_signals = handle_signals
        self.runtime: Runtime | None = None
        self.shaper: Shaper | None = None
        self.shaper_name = ""
        self.shaper_message = ""
        self.link_state: dict[str, dict[str, Any]] = {}     # link name -> {"a_if","b_if","up"}
        self.partitions: list[list[list[str]]] = []
        # host -> machine, set when the scenario places hosts on several machines; topology.json then names each
        # host's machine (records' times are that machine's clock: node/clockmodel.py)
        self.machines: dict[str, str] = {}
        self.agents: dict[str, Any] = {}        # machine -> its Agent (testbed/agent/controller.py), when placed
        # machine -> (address, port) of its agent's clock service, started by the first measure_clocks()
        self.clock_services: dict[str, tuple[str, int]] = {}
        self.clock_offsets: dict[str, float] = {}   # machine -> a test-only clock offset (testbed/agent/placed.py)
        self.lan_netns: list[str] = []
        self.partitioned_hosts: set[str] = set()
        self._started = False
        self._stopped = False
        self._attached = False
        self._ready = False
        self._old_handlers: dict[int, Any] = {}
        self._lock = threading.RLock()
        self._validate_topology()

    # ---- construction ---------------------------------------------------------------

    @classmethod
    def from_scenario(cls, scenario: Any, run_dir: str | Path | None, **kw: Any) -> "Network":
        """The scenario's network (model units or already converted: links in wall units either way)."""
        from testbed.experiment import timescale
        topo = timescale.wall_topology(scenario)
        spec = scenario.topology
        capture = scenario.capture.links
        kw.setdefault("runtime", scenario.runtime)
        kw.setdefault("shaper", scenario.shaper)
        kw.setdefault("sysctls", scenario.sysctls)
        kw.setdefault("generator", spec.generator)
        kw.setdefault("placement", scenario.placement)
        return cls(topo, None, run_dir=run_dir, capture=capture,
                   pools=(spec.data_pool, spec.loopback_pool, spec.mgmt_pool), **kw)

    @classmethod
    def attach(cls, run_id: str) -> "Network":
        """The network of run `run_id`, which another process holds (`testbed up`'s supervisor): queries
        and runtime changes (link, partition, heal) through its saved state; stop() leaves it alone."""
        record = registry.load(run_id)
        if record is None:
            raise UserError(f"the state of network {run_id} is missing; it may be shutting down.")
        st = netstate.load_state(record)
        net = cls(netstate.topology_from_dict(st["topology"]), netstate.plan_from_dict(st["plan"]),
                  run_dir=st["run_dir"], run_id=run_id, pools=tuple(st.get("pools") or ()),  # type: ignore[arg-type]
                  kind=record.kind, handle_signals=False)
        net.sysctls = dict(st.get("sysctls", {}))      # as recorded (already normalised by the owner)
        net.generator = st.get("generator", "")
        net._attached = True
        net._started = True
        net.link_state = st.get("link_state", {})
        net.partitions = st.get("partitions", [])
        net.partitioned_hosts = set(st.get("partitioned_hosts", []))
        net.shaper_name = st.get("shaper", "")
        net.shaper_message = st.get("shaper_message", "")
        net.runtime = _AttachedRuntime(st.get("runtime", "netns"), _attached_hosts(st))
        net.shaper = _attached_shaper(st)
        if st.get("agents"):
            from testbed.agent.controller import Agent
            net.agents = {m: Agent.from_state(run_id, a) for m, a in st["agents"].items()}
            net.machines = {n: e[0] for n, e in st.get("engines", {}).items()}
        return net

    def _validate_topology(self) -> None:
        names = self.topology.node_names()
        if not names:
            raise UserError("the topology has no nodes.")
        if len(set(names)) != len(names):
            raise UserError("the topology names a node twice.")
        for n in names:
            if not is_node_name(n):
                raise UserError(f"node name {n!r} must be {NODE_NAME_RULE}.")
        seen = set()
        for link in self.topology.links:
            for end in link.ends():
                if end not in names:
                    raise UserError(f"link {link.name} names unknown node {end!r}.")
            if link.a == link.b:
                raise UserError(f"link {link.name} connects {link.a} to itself.")
            if link.name in seen:
                raise UserError(f"link name {link.name!r} is used twice.")
            seen.add(link.name)
        for lan in self.topology.lans:
            for m in lan.members:
                if m not in names:
                    raise UserError(f"LAN {lan.name} names unknown node {m!r}.")
            if lan.name in seen:
                raise UserError(f"LAN name {lan.name!r} is also used by a link.")
            seen.add(lan.name)

    def _make_plan(self) -> AddressPlan:
        data, loop, mgmt = self.pools
        return addressing.plan(self.topology, data, loop, mgmt)

    def _make_runtime(self) -> Runtime:
        if isinstance(self._runtime_choice, Runtime):
            return self._runtime_choice
        if self._runtime_choice == "netns":
            from testbed.runtime.netns import NetnsRuntime
            return NetnsRuntime(self.run_id, self.run_dir)
        if self.placement is not None and self._runtime_choice != "docker":
            raise UserError("a network over several machines needs runtime docker.")
        if self._runtime_choice == "docker":
            from testbed.runtime.docker import DockerRuntime   # here: only a docker network loads it
            if self.placement is not None:
                from testbed.agent.placed import host_engines
                return DockerRuntime(self.run_id, self.run_dir, engines=host_engines(self.machines, self.placement))
            return DockerRuntime(self.run_id, self.run_dir)
        raise UserError(f"unknown runtime {self._runtime_choice!r}: expected netns or docker.")

    def _make_shaper(self) -> Shaper:
        if self.placement is not None:
            return self._make_placed_shaper()
        if isinstance(self._shaper_choice, Shaper):
            self.shaper_message = f"shaper: {self._shaper_choice.name} (given)"
            return self._shaper_choice
        if self._shaper_choice not in ("auto", "netem", "wire"):
            raise UserError(f"unknown shaper {self._shaper_choice!r}: expected auto, netem or wire.")
        if self._shaper_choice == "wire" and not os.path.exists("/dev/net/tun"):
            raise UserError("the wire shaper needs TUN/TAP support, but /dev/net/tun does not exist (modprobe tun).")
        shaper, message = make_shaper(self._shaper_choice, self.run_id, self.run_dir / "shaping")
        self.shaper_message = message
        return shaper

    def _make_placed_shaper(self) -> Shaper:
        """The wire shaper split over the machines, each half run by its machine's agent."""
        from testbed.agent.placed import placed_shaper, start_agents
        if self._shaper_choice not in ("auto", "wire"):
            raise UserError("a network over several machines needs the wire shaper (shaper: wire or auto).")
        assert self.run_dir is not None and self.runtime is not None
        used = set(self.machines.values())
        start_agents(self.run_id, self.placement, self.runtime.image, used, self.agents)  # type: ignore[attr-defined]
        shaper = placed_shaper(self.run_id, self.run_dir / "shaping", self.placement, self.agents, self.hosts,
                               self.machines)
        self.shaper_message = f"shaper: wire, split over machines {', '.join(sorted(used))} (one agent each)"
        return shaper

    def measure_clocks(self) -> dict[str, Any]:
        """machine -> its clock Estimate against this controller's (testbed/clockoffset.py), through the clock
        service each machine's agent runs (started on the first call); {} for a network on one machine."""
        if not self.agents:
            return {}
        from testbed.agent.placed import measure_clocks, start_clocks
        if not self.clock_services:
            self.clock_services = start_clocks(self.run_id, self.placement, self.agents, self.clock_offsets)
        return measure_clocks(self.clock_services)

    def daemon_env(self, host: str) -> dict[str, str]:
        """What a node daemon on `host` gets in its environment beyond the runtime's (a placed host's test-only
        clock offset; nothing otherwise)."""
        if host not in self.machines or not self.clock_offsets:
            return {}
        from testbed.agent.placed import daemon_env
        return daemon_env(self.machines[host], self.clock_offsets)

    # ---- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> "Network":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "Network":
        if self._started:
            raise UserError("this network has already been started.")
        self._started = True
        if os.geteuid() != 0:
            raise UserError("the testbed must run as root to create network namespaces and interfaces.")
        _check_kernel()
        if self._own_run_dir:
            self.run_dir = Path(tempfile.mkdtemp(prefix=f"{registry.prefix(self.run_id)}-"))
        assert self.run_dir is not None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        registry.register(self.run_id, self.kind, state={"run_dir": str(self.run_dir.resolve()),
                                                         "component": "network", "ready": False})
        t0 = time.monotonic()
        try:
            self._install_signal_handlers()
            with _mgmt_lock():
                # Picking a free management subnet and claiming it (the bridge's route) is one step:
                # two runs starting at once must not both take the same one.
                if self.plan is None:
                    if self.pools[2] == DEFAULT_POOLS[2]:
                        self.pools = (self.pools[0], self.pools[1], self._free_mgmt_subnet())
                    self.plan = self._make_plan()
                self._check_plan()
                self._check_pools()
                if self.placement is not None:
                    from testbed.agent.placed import host_machines, injected_offsets
                    self.machines = host_machines(self.topology, self.placement)
                    self.clock_offsets = injected_offsets(self.placement)
                self.runtime = self._make_runtime()
                self.runtime.sysctls = dict(self.sysctls)
                names = self.topology.node_names()
                if hasattr(self.runtime, "add_hosts"):
                    self.runtime.add_hosts(names)
                else:
                    for n in names:
                        self.runtime.add_host(n)
                self._build_mgmt()
            self.shaper = self._make_shaper()
            self.shaper_name = getattr(self.shaper, "name", "") or type(self.shaper).__name__
            self._build_links()
            self._build_lans()
            self._configure_hosts()
            self._save_state(ready=True)
            self._ready = True
            atexit.register(self.stop)      # a script that forgets stop() still leaves nothing behind
        except BaseException:
            log.info("start of run %s failed; tearing down what was built", self.run_id)
            self.stop()
            raise
        log.info("network %s up: %d hosts, %d links in %.2f s (%s)", self.run_id, len(self.topology.nodes),
                 len(self.topology.links), time.monotonic() - t0, self.shaper_message)
        return self

    def stop(self) -> None:
        """Tear everything down. Idempotent; safe to call from a signal handler or after a failed start."""
        with self._lock:
            if self._stopped or self._attached:
                return
            self._stopped = True
            installed = dict(self._old_handlers)
            self._old_handlers.clear()
            if installed:
                self._shield_signals()      # a second Ctrl-C must not cut the teardown short
            atexit.unregister(self.stop)
            if self.shaper is not None:
                try:
                    self.shaper.close()
                except Exception:
                    log.exception("closing the shaper of run %s failed", self.run_id)
            for agent in self.agents.values():
                try:
                    agent.close()
                except Exception:
                    log.exception("removing the agent of machine %s failed", agent.machine)
            for ns in self.lan_netns:
                run_ip(["netns", "del", ns], check=False)
            if self.runtime is not None:
                try:
                    self.runtime.close()
                except Exception:
                    log.exception("closing the runtime of run %s failed", self.run_id)
            try:
                # Safety net: anything left with this run's prefix (a half-made veth, the bridge).
                cleanup.remove_run_resources(self.run_id)
            except Exception:
                log.exception("sweeping run %s failed", self.run_id)
            registry.unregister(self.run_id)
            netstate.state_path(self.run_id).unlink(missing_ok=True)    # the CLI's view of this network
            if self._own_run_dir and self.run_dir is not None:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            self._old_handlers = installed
            self._restore_signal_handlers()

    # ---- signals ----------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    @staticmethod
    def _shield_signals() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                signal.signal(sig, lambda s, f: log.warning("signal %d during teardown: finishing teardown first", s))
            except ValueError:      # not the main thread: handlers cannot change, nothing to shield
                pass

    def _restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, TypeError):
                pass
        self._old_handlers.clear()

    def _on_signal(self, signum: int, frame: Any) -> None:
        old = self._old_handlers.get(signum)
        log.warning("signal %d: tearing down network %s", signum, self.run_id)
        if self._ready:
            self.stop()
        # During start() the exception unwinds first (an `ip -batch` child gets killed), and start()'s
        # handler tears down afterwards, so its final sweep also sees what that child made.
        if callable(old):
            old(signum, frame)
        elif old == signal.SIG_IGN:
            return
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)

    # ---- build steps -----------------------------------------------------------------

    def _check_plan(self) -> None:
        assert self.plan is not None
        for n in self.topology.node_names():
            if n not in self.plan.mgmt_address:
                raise UserError(f"the address plan has no management address for {n}.")
        for link in self.topology.links:
            a_if = self._plan_iface(link.a, link.name)
            b_if = self._plan_iface(link.b, link.name)
            self.link_state[link.name] = {"a_if": a_if.ifname, "b_if": b_if.ifname, "up": link.up}

    def _plan_iface(self, node: str, link_name: str) -> Interface:
        assert self.plan is not None
        for iface in self.plan.interfaces.get(node, []):
            if iface.link == link_name:
                return iface
        raise UserError(f"the address plan has no interface of {node} on link {link_name}.")

    def _mgmt_network(self) -> ipaddress.IPv4Network:
        assert self.plan is not None
        if self.plan.mgmt_subnet:
            return ipaddress.ip_network(self.plan.mgmt_subnet, strict=False)
        return ipaddress.ip_network(self.pools[2], strict=False)

    def mgmt_gateway(self) -> str:
        """The root namespace's address on the management network: the subnet's first address no host uses."""
        assert self.plan is not None
        used = {a.split("/")[0] for a in self.plan.mgmt_address.values()}
        for addr in self._mgmt_network().hosts():
            if str(addr) not in used:
                return str(addr)
        raise UserError(f"the management subnet {self._mgmt_network()} has no address left for the testbed itself.")

    def _free_mgmt_subnet(self) -> str:
        """With the default management pool, the first subnet of it (just big enough) no route uses yet,
        so several runs (a user's experiment and a test suite) can share the machine."""
        pool = ipaddress.ip_network(DEFAULT_POOLS[2])
        need = len(self.topology.node_names()) + 3          # hosts + network, bridge, broadcast
        prefix = min(24, 32 - max(need - 1, 1).bit_length())
        taken = [ipaddress.ip_network(d, strict=False) for d in _root_routes()]
        for subnet in pool.subnets(new_prefix=prefix):
            if not any(subnet.overlaps(t) for t in taken):
                return str(subnet)
        raise UserError(f"every management subnet in {pool} is in use by other runs; stop one "
                        f"(testbed status) or set topology.mgmt_pool in the scenario.")

    def _check_pools(self) -> None:
        """Refuse pools that overlap a route the machine already has (another run, the LAN, a VPN)."""
        out = subprocess.run(["ip", "-j", "route", "show"], capture_output=True, text=True).stdout
        try:
            routes = json.loads(out or "[]")
        except json.JSONDecodeError:
            routes = []
        ours = {"management": self._mgmt_network()}
        for label, pool in zip(("data", "loopback"), self.pools[:2]):
            try:
                ours[label] = ipaddress.ip_network(pool, strict=False)
            except ValueError:
                raise UserError(f"the {label} pool {pool!r} is not an IPv4 network like 10.200.0.0/16.") from None
        for r in routes:
            dst = r.get("dst", "")
            if dst in ("default", "") or ":" in dst:
                continue
            try:
                net = ipaddress.ip_network(dst, strict=False)
            except ValueError:
                continue
            for label, pool in ours.items():
                if net.overlaps(pool):
                    raise UserError(f"the {label} pool {pool} overlaps the existing route {dst} on dev "
                                    f"{r.get('dev', '?')}; choose another pool in the scenario's topology section.")

    def _build_mgmt(self) -> None:
        assert self.runtime is not None and self.plan is not None
        net = self._mgmt_network()
        bridge = mgmt_bridge_name(self.run_id)
        gw = self.mgmt_gateway()
        lines = [f"link add {bridge} type bridge", f"addr add {gw}/{net.prefixlen} dev {bridge}",
                 f"link set {bridge} up"]
        for i, name in enumerate(self.topology.node_names()):
            veth = mgmt_veth_name(self.run_id, i)
            ns = self.host(name).netns
            lines += [f"link add {veth} type veth peer name eth0 netns {ns}",
                      f"link set {veth} master {bridge}", f"link set {veth} up"]
        run_ip([], batch="\n".join(lines) + "\n")

    def _build_links(self) -> None:
        assert self.shaper is not None and self.run_dir is not None
        capture = self._capture_set()
        if capture:
            (self.run_dir / "pcap").mkdir(parents=True, exist_ok=True)
        for link in self.topology.links:
            st = self.link_state[link.name]
            pcap = self.run_dir / "pcap" / f"{link.name}.pcap" if link.name in capture else None
            self.shaper.add_link(link.name, LinkEnd(self.host(link.a).netns, st["a_if"]),
                                 LinkEnd(self.host(link.b).netns, st["b_if"]), link.a_to_b, link.b_to_a, pcap=pcap)
            if not link.up:
                self.shaper.set_carrier(link.name, False)

    def _build_lans(self) -> None:
        """A shared segment: a bridge in a namespace of its own (`<prefix>.lan<i>`), one veth per member.

        Its own namespace keeps LAN traffic out of the root namespace's netfilter. LANs are not shaped
        (the shaper contract is point-to-point); use links through a hub host for impaired stars.
        """
        for i, lan in enumerate(self.topology.lans):
            ns = lan_netns_name(self.run_id, i)
            self.lan_netns.append(ns)
            run_ip(["netns", "add", ns])
            lines = ["link add br0 type bridge", "link set br0 up"]
            for j, member in enumerate(lan.members):
                iface = self._plan_iface(member, lan.name)
                lines += [f"link add p{j} type veth peer name {iface.ifname} netns {self.host(member).netns}",
                          f"link set p{j} master br0", f"link set p{j} up"]
            run_ip(["-n", ns], batch="\n".join(lines) + "\n")

    def _capture_set(self) -> set[str]:
        names = {l.name for l in self.topology.links}
        if self.capture == "all":
            return names
        if self.capture in ("none", None, ""):
            return set()
        chosen = {self.capture} if isinstance(self.capture, str) else set(self.capture)
        out = set()
        for c in chosen:
            if c in names:
                out.add(c)
                continue
            a, _, b = c.partition("-")
            try:
                out.add(self.topology.link(a, b).name)
            except KeyError:
                raise UserError(f"capture names link {c!r}, which is not in the topology.") from None
        return out

    def _configure_hosts(self) -> None:
        """Addresses and routes: one `ip -n NS -batch -` per host, all hosts in parallel."""
        assert self.plan is not None
        mnet = self._mgmt_network()
        procs = []
        for name in self.topology.node_names():
            lines = []
            mgmt_cidr = f"{self.plan.mgmt_address[name].split('/')[0]}/{mnet.prefixlen}"
            for iface in self.plan.interfaces.get(name, []):
                if iface.link == "mgmt":
                    mgmt_cidr = iface.address if "/" in iface.address else mgmt_cidr
                    continue
                lines += [f"addr add {iface.address} dev {iface.ifname}", f"link set {iface.ifname} up"]
            lines = [f"addr add {mgmt_cidr} dev eth0", "link set eth0 up"] + lines
            if self.plan.loopback.get(name):
                lines.append(f"addr add {self.plan.loopback[name].split('/')[0]}/32 dev lo")
            lines += [_route_line(r) for r in self.plan.routes.get(name, [])]
            p = subprocess.Popen(["ip", "-n", self.host(name).netns, "-batch", "-"], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            procs.append((name, p, "\n".join(lines) + "\n"))
        errors = []
        for name, p, script in procs:
            _, err = p.communicate(script)
            if p.returncode != 0:
                errors.append(f"{name}: {err.strip()}")
        if errors:
            raise RuntimeError("configuring host addresses and routes failed: " + "; ".join(errors))

    def _apply_routes(self, nodes: list[str]) -> None:
        assert self.plan is not None
        procs = []
        for name in nodes:
            script = "".join(_route_line(r) + "\n" for r in self.plan.routes.get(name, []))
            p = subprocess.Popen(["ip", "-n", self.host(name).netns, "-force", "-batch", "-"], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            procs.append((name, p, script))
        for name, p, script in procs:
            _, err = p.communicate(script)
            if p.returncode != 0:
                log.warning("restoring routes of %s: %s", name, err.strip())

    # ---- queries ------------------------------------------------------------------------

    @property
    def hosts(self) -> dict[str, Host]:
        if self.runtime is None:
            return {}
        return dict(self.runtime.hosts)  # type: ignore[attr-defined]

    def host(self, name: str) -> Host:
        if self.runtime is None:
            raise UserError("the network is not started.")
        try:
            return self.runtime.hosts[name]  # type: ignore[attr-defined]
        except KeyError:
            raise UserError(f"no host named {name!r} in this network.") from None

    def mgmt_address(self, name: str) -> str:
        self._need_node(name)
        assert self.plan is not None
        return self.plan.mgmt_address[name].split("/")[0]

    def data_address(self, name: str) -> str:
        """The host's stable data-plane address: its loopback, else its first data interface."""
        self._need_node(name)
        assert self.plan is not None
        if self.plan.loopback.get(name):
            return self.plan.loopback[name].split("/")[0]
        for iface in self.plan.interfaces.get(name, []):
            if iface.link != "mgmt":
                return iface.address.split("/")[0]
        raise UserError(f"{name} has no data-plane address.")

    def link_address(self, node: str, peer: str) -> str:
        """`node`'s address on its direct link (or LAN) to `peer`: what peer dials to reach node next door."""
        self._need_node(node)
        self._need_node(peer)
        assert self.plan is not None
        segs = {i.link for i in self.plan.interfaces.get(peer, []) if i.link != "mgmt"}
        for iface in self.plan.interfaces.get(node, []):
            if iface.link in segs:
                return iface.address.split("/")[0]
        raise UserError(f"{node} and {peer} are not neighbours.")

    def addresses(self, name: str) -> list[str]:
        """Every data-plane address of a host (loopback first)."""
        assert self.plan is not None
        out = [self.plan.loopback[name].split("/")[0]] if self.plan.loopback.get(name) else []
        out += [i.address.split("/")[0] for i in self.plan.interfaces.get(name, []) if i.link != "mgmt"]
        return out

    def _need_node(self, name: str) -> None:
        if name not in self.topology.node_names():
            raise UserError(f"no host named {name!r} in this network.")

    def _link(self, a: str, b: str) -> tuple[Link, bool]:
        """The link between a and b, and whether the caller named its ends in reverse order."""
        self._need_node(a)
        self._need_node(b)
        try:
            link = self.topology.link(a, b)
        except KeyError:
            raise UserError(f"there is no link between {a} and {b}.") from None
        return link, link.a != a

    # ---- runtime changes ------------------------------------------------------------------

    def set_link(self, a: str, b: str, direction: str = "both", **params: Any) -> None:
        """Change impairments of the a-b link. `a_to_b` means frames sent by `a` as named here."""
        if direction not in DIRECTIONS:
            raise UserError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}.")
        params = {k: v for k, v in params.items() if v is not None}
        unknown = set(params) - LINK_PARAMS
        if unknown:
            raise UserError(f"unknown link parameter {sorted(unknown)[0]!r}; expected one of "
                            f"{', '.join(sorted(LINK_PARAMS))}.")
        if not params:
            raise UserError("set_link needs at least one parameter to change.")
        _check_params(params)
        self._change_link(a, b, direction, params)

    def clear_rate(self, a: str, b: str, direction: str = "both") -> None:
        """Lift the rate limit of the a-b link (set_link takes rate=None as "unchanged")."""
        if direction not in DIRECTIONS:
            raise UserError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}.")
        self._change_link(a, b, direction, {"rate": None})

    def _change_link(self, a: str, b: str, direction: str, params: dict[str, Any]) -> None:
        link, reverse = self._link(a, b)
        fwd, back = direction in ("both", "a_to_b"), direction in ("both", "b_to_a")
        if reverse:
            fwd, back = back, fwd
        old = {"a_to_b": link.a_to_b.to_dict(), "b_to_a": link.b_to_a.to_dict()}
        new_ab = dataclasses.replace(link.a_to_b, **params) if fwd else None
        new_ba = dataclasses.replace(link.b_to_a, **params) if back else None
        self._need_shaper().set_params(link.name, new_ab, new_ba)
        if new_ab is not None:
            link.a_to_b = new_ab
        if new_ba is not None:
            link.b_to_a = new_ba
        changed = Direction(**params).to_dict()
        # `before`: the changed fields' values until now, per direction of the link's own ends (the report
        # needs a link's configured values for the time before its first change; topology.json is the last)
        before = {d: {k: old[d][k] for k in params if k in old[d]}
                  for d, on in (("a_to_b", new_ab is not None), ("b_to_a", new_ba is not None)) if on}
        self._event("link_set", link.name, direction=direction, before=before, **{k: changed[k] for k in params})
        self._save_state()

    def link_down(self, a: str, b: str) -> None:
        self._carrier(a, b, False)

    def link_up(self, a: str, b: str) -> None:
        self._carrier(a, b, True)

    def _carrier(self, a: str, b: str, up: bool) -> None:
        link, _ = self._link(a, b)
        self._need_shaper().set_carrier(link.name, up)
        if up:
            # A shaper may take the interfaces administratively down, and the kernel then drops
            # every route through them: put this link's hosts' routes back.
            self._apply_routes([link.a, link.b])
        link.up = up
        self.link_state[link.name]["up"] = up
        self._event("link_up" if up else "link_down", link.name)
        self._save_state()

    def _need_shaper(self) -> Shaper:
        if self.shaper is None:
            raise UserError(f"the link shaper of run {self.run_id} cannot be reached from this process.")
        return self.shaper

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Drop all data-plane traffic between two host sets (adjacent or not); traffic within a side flows."""
        a, b = list(dict.fromkeys(side_a)), list(dict.fromkeys(side_b))
        if not a or not b:
            raise UserError("a partition needs at least one host on each side.")
        for n in a + b:
            self._need_node(n)
        both = set(a) & set(b)
        if both:
            raise UserError(f"host {sorted(both)[0]} is on both sides of the partition.")
        chain = partition_chain(self.run_id)
        procs = []
        by_agent: dict[str, list[dict[str, Any]]] = {}
        for mine, other in ((a, b), (b, a)):
            blocked = [addr for n in other for addr in self.addresses(n)]
            rules = "*filter\n" + "".join(f"-A {chain} -s {x}/32 -j DROP\n-A {chain} -d {x}/32 -j DROP\n"
                                          for x in blocked) + "COMMIT\n"
            for n in mine:
                if self._agent_of(n) is not None:
                    by_agent.setdefault(self.machines[n], []).extend(self._chain_ops(n, chain, rules))
                    continue
                script = (f"iptables -w -N {chain} 2>/dev/null; "
                          f"iptables -w -C INPUT -j {chain} 2>/dev/null || iptables -w -I INPUT 1 -j {chain}; "
                          f"iptables -w -C OUTPUT -j {chain} 2>/dev/null || iptables -w -I OUTPUT 1 -j {chain}; "
                          "iptables-restore -w --noflush")
                procs.append((n, self._ns_popen(n, script), rules))
        self._agents_do(by_agent, "partition")
        self._wait_all(procs, "partition")
        self.partitioned_hosts |= set(a) | set(b)
        self.partitions.append([a, b])
        self._event("partition", [a, b])
        self._save_state()

    def heal(self) -> None:
        """Remove every partition of this run (exactly the run's chain in each host)."""
        chain = partition_chain(self.run_id)
        script = (f"iptables -w -D INPUT -j {chain} 2>/dev/null; iptables -w -D OUTPUT -j {chain} 2>/dev/null; "
                  f"iptables -w -F {chain} 2>/dev/null; iptables -w -X {chain} 2>/dev/null; true")
        by_agent: dict[str, list[dict[str, Any]]] = {}
        for n in sorted(self.partitioned_hosts):
            if self._agent_of(n) is not None:
                by_agent.setdefault(self.machines[n], []).extend(self._chain_ops(n, chain, None))
        procs = [(n, self._ns_popen(n, script), "") for n in sorted(self.partitioned_hosts)
                 if self._agent_of(n) is None]
        self._agents_do(by_agent, "heal")
        self._wait_all(procs, "heal")
        healed = self.partitions
        self.partitions = []
        self.partitioned_hosts = set()
        self._event("heal", "all", partitions=healed)
        self._save_state()

    def _agent_of(self, node: str) -> Any:
        """The agent of a placed host's machine (it makes the host's partition chain), or None: the controller
        makes it in the host's namespace itself."""
        return self.agents.get(self.machines.get(node, ""))

    def _chain_ops(self, node: str, chain: str, rules: str | None) -> list[dict[str, Any]]:
        """The agent's operations that put (rules) or remove (None) `chain` in a placed host's namespace. The
        agent names the namespace again by the container's current init first: a restarted container has a new
        one. A stopped container has none to name; its old name stays (the runtime carries the rules over)."""
        h = self.host(node)
        ops: list[dict[str, Any]] = []
        try:
            ops.append({"op": "attach", "netns": h.netns, "pid": h.init_pid()})  # type: ignore[attr-defined]
        except (RuntimeError, ValueError, subprocess.TimeoutExpired):
            pass
        return ops + [{"op": "chain", "netns": h.netns, "chain": chain, "rules": rules}]

    def _agents_do(self, ops: dict[str, list[dict[str, Any]]], what: str) -> None:
        """One request per machine's agent; RuntimeError naming the machines whose agent failed."""
        errors = []
        for machine, batch in sorted(ops.items()):
            try:
                self.agents[machine].request(batch)
            except UserError as exc:
                errors.append(str(exc))
        if errors:
            raise RuntimeError(f"{what} failed: " + "; ".join(errors))

    def _ns_popen(self, node: str, script: str) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.host(node).netns, "sh", "-c", script],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    @staticmethod
    def _wait_all(procs: list[tuple[str, subprocess.Popen, str]], what: str) -> None:
        errors = []
        for n, p, stdin in procs:
            _, err = p.communicate(stdin)
            if p.returncode != 0:
                errors.append(f"{n}: {err.strip()}")
        if errors:
            raise RuntimeError(f"{what} failed: " + "; ".join(errors))

    def record_event(self, event: str, target: str | list, **params: Any) -> None:
        """Append one line to events.jsonl (for faults applied by later layers: kill, restart, pause ...)."""
        self._event(event, target, **params)

    def _event(self, event: str, target: str | list, **params: Any) -> None:
        assert self.run_dir is not None
        line = {"ts": time.time(), "node": "testbed", "event": event, "target": target, **params,
                **self._where(target)}
        with open(self.run_dir / "events.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")

    def _where(self, target: str | list) -> dict[str, Any]:
        """On several machines, where an event happened: a host's `machine`, or the `machines` of a link's
        ends or of a partition's hosts (sorted); nothing on one machine."""
        if not self.machines:
            return {}
        if isinstance(target, str):
            if target in self.machines:
                return {"machine": self.machines[target]}
            ends = next(((l.a, l.b) for l in self.topology.links if l.name == target), None)
            return {"machines": sorted({self.machines[h] for h in ends if h in self.machines})} if ends else {}
        hosts = [h for x in target for h in (x if isinstance(x, list) else [x]) if isinstance(h, str)]
        return {"machines": sorted({self.machines[h] for h in hosts if h in self.machines})}

    # ---- state -------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """What topology.json and `testbed status --json` show."""
        assert self.plan is not None
        hosts = []
        for n in self.topology.nodes:
            hosts.append({
                "name": n.name, "role": n.role,
                # the generator's attributes (cluster, city, region, broker, ...): where a viewer places the host
                "attrs": dict(n.attrs),
                "netns": self.host(n.name).netns if self.runtime is not None else "",
                "mgmt_address": self.mgmt_address(n.name), "data_address": self.data_address(n.name),
                "loopback": self.plan.loopback.get(n.name, ""),
                # vars() instead of asdict(): flat dataclasses, and asdict's deep copy costs seconds at 100 hosts
                "interfaces": [dict(vars(i)) for i in self.plan.interfaces.get(n.name, [])],
                "routes": [dict(vars(r)) for r in self.plan.routes.get(n.name, [])],
                **({"machine": self.machines[n.name]} if n.name in self.machines else {}),
            })
        links = []
        for l in self.topology.links:
            st = self.link_state.get(l.name, {})
            links.append({"name": l.name, "a": l.a, "b": l.b, "a_if": st.get("a_if"), "b_if": st.get("b_if"),
                          "state": "up" if l.up else "down",
                          "a_to_b": l.a_to_b.to_dict(), "b_to_a": l.b_to_a.to_dict()})
        return {"run_id": self.run_id, "topology": self.topology.name, "generator": self.generator,
                "runtime": getattr(self.runtime, "name", "") or str(self._runtime_choice),
                "shaper": self.shaper_name, "shaper_message": self.shaper_message,
                "mgmt_subnet": str(self._mgmt_network()), "mgmt_bridge": mgmt_bridge_name(self.run_id),
                "mgmt_gateway": self.mgmt_gateway(),
                "hosts": hosts, "links": links, "partitions": self.partitions,
                **(self._placement_description() if self.placement is not None else {})}

    def _placement_description(self) -> dict[str, Any]:
        """The machines of a placed network and the measured tunnels between them (seconds; keyed "m1|m2", then
        by the sending machine)."""
        tunnels = getattr(self.shaper, "tunnels", {})
        return {"machines": [{"name": m.name, "engine": m.engine, "cores": m.cores, "address": m.address}
                             for m in self.placement.machines],
                "tunnels": {f"{a}|{b}": {m: dataclasses.asdict(e) for m, e in est.items()}
                            for (a, b), est in tunnels.items()}}

    def link_monitor(self, path: Path, interval: float = 1.0) -> LinkMonitor:
        """A links.jsonl sampler of this network's shaper (started by the caller)."""
        shaper = self.shaper

        def read() -> dict:
            if shaper is None:
                return {}
            return shaper.counters_all()
        ends = {l.name: (l.a, l.b) for l in self.topology.links}
        return LinkMonitor(path, read, ends, interval=interval)

    def _save_state(self, ready: bool | None = None) -> None:
        """topology.json in the run directory, and the state other processes attach with (testbed/netstate.py)."""
        assert self.run_dir is not None
        desc = self.describe()
        tmp = self.run_dir / "topology.json.tmp"
        tmp.write_text(json.dumps(desc, separators=(",", ":")))   # compact: C encoder (indent is pure Python)
        tmp.replace(self.run_dir / "topology.json")
        big = {"topology": netstate.topology_to_dict(self.topology),
               "plan": netstate.plan_to_dict(self.plan) if self.plan is not None else None,
               "link_state": self.link_state, "partitions": self.partitions,
               "partitioned_hosts": sorted(self.partitioned_hosts)}
        state = {"component": "network",
                 "run_dir": str(Path(self.run_dir).resolve()),
                 "runtime": getattr(self.runtime, "name", "") or str(self._runtime_choice),
                 "shaper": self.shaper_name, "shaper_message": self.shaper_message,
                 "shaper_state": self._shaper_state(),
                 "netns": {n: h.netns for n, h in self.hosts.items()},
                 # a placed host's engine: exec, kill and restart from a later process go to its machine
                 "engines": {n: [h.engine.name, h.engine.address()] for n, h in self.hosts.items()
                             if n in self.machines and hasattr(h, "engine")},
                 # a placed network's agents: a later process's partition and heal go through them
                 "agents": {m: a.state() for m, a in self.agents.items()},
                 "pools": list(self.pools), "sysctls": dict(self.sysctls), "generator": self.generator}
        netstate.save(self.run_id, state, big, ready=ready)

    def _shaper_state(self) -> Any:
        """How another process reattaches to the shaper; None when it cannot (the recorded one is kept)."""
        if self.shaper is None or not hasattr(self.shaper, "state"):
            return None
        try:
            return self.shaper.state()
        except Exception:       # the reattach state is optional for a network that stays in-process
            return None


class _AttachedRuntime:
    """Just enough of a Runtime for queries and exec: the hosts by name. Closing is the owner's job."""

    def __init__(self, name: str, hosts: dict[str, Any]) -> None:
        self.name = name
        self.hosts = hosts

    def close(self) -> None:
        pass


def _attached_hosts(st: dict[str, Any]) -> dict[str, Host]:
    """The hosts of a recorded network, by name, from their recorded namespaces."""
    kind = st.get("runtime", "netns")
    hosts: dict[str, Host] = {}
    for n, ns in st.get("netns", {}).items():
        workdir = Path(st["run_dir"]) / "nodes" / n
        if kind == "docker":
            # The named netns of a container carries the container's name (see DockerHost).
            from testbed.image import NODE_USER                # docker only: not needed (nor imported) for netns
            from testbed.docker_engine import LOCAL, Engine
            from testbed.runtime.docker import DockerHost
            placed = st.get("engines", {}).get(n)
            host = DockerHost(n, ns, workdir, user=NODE_USER, engine=Engine(*placed) if placed else LOCAL)
            host.sysctls = dict(st.get("sysctls", {}))       # set again when a fault restarts the container
            hosts[n] = host
        else:
            hosts[n] = NetnsHost(n, ns, workdir)
    return hosts


def _attached_shaper(st: dict[str, Any]) -> Shaper | None:
    """The shaper of a recorded network, reattached from its saved state (None: it cannot be reached)."""
    if st.get("shaper_state") is None:
        return None
    hook = st["shaper_state"].get("attach") if isinstance(st["shaper_state"], dict) else None
    if isinstance(hook, str) and ":" in hook:
        # A shaper outside testbed.shaping (a test's) names its own reattach function.
        mod, _, fn = hook.partition(":")
        return getattr(importlib.import_module(mod), fn)(st["shaper_state"])
    return attach_shaper(st["shaper_state"])


def _root_routes() -> list[str]:
    """Destinations of the root namespace's IPv4 routes (not the default route)."""
    out = subprocess.run(["ip", "-j", "-4", "route", "show"], capture_output=True, text=True).stdout
    try:
        routes = json.loads(out or "[]")
    except json.JSONDecodeError:
        return []
    return [r.get("dst", "") for r in routes if r.get("dst", "") not in ("default", "") and ":" not in r["dst"]]


@contextlib.contextmanager
def _mgmt_lock() -> Iterator[None]:
    registry.REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    with open(registry.REGISTRY_DIR / "mgmt.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _check_kernel() -> None:
    """Network namespaces and the `ip` tool are the floor everything else stands on."""
    if not os.path.exists("/proc/self/ns/net"):
        raise UserError("this kernel has no network namespace support (CONFIG_NET_NS), which the testbed needs.")
    if not any(os.access(os.path.join(d, "ip"), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)
               + ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]):
        raise UserError("the `ip` command (package iproute2) is not installed.")


def _check_params(params: dict[str, Any]) -> None:
    for k in ("delay", "jitter"):
        if k in params and (not isinstance(params[k], (int, float)) or params[k] < 0):
            raise UserError(f"{k} must be a non-negative number of seconds, got {params[k]!r}.")
    for k in ("loss", "duplicate"):
        if k in params and (not isinstance(params[k], (int, float)) or not 0 <= params[k] <= 1):
            raise UserError(f"{k} must be a probability between 0 and 1, got {params[k]!r}.")
    if "rate" in params and params["rate"] is not None and (not isinstance(params["rate"], (int, float))
                                                             or params["rate"] <= 0):
        raise UserError(f"rate must be a positive number of bits per second, got {params['rate']!r}.")
    if "queue" in params and (not isinstance(params["queue"], int) or params["queue"] < 1):
        raise UserError(f"queue must be a positive number of packets, got {params['queue']!r}.")


def _route_line(r: Any) -> str:
    """One `ip route` batch line; a route without a next hop is on-link."""
    if r.via:
        return f"route replace {r.destination} via {r.via} dev {r.dev}"
    return f"route replace {r.destination} dev {r.dev}"


