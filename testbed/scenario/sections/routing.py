"""The `routing` section: how the nodes route.

Either a policy name (`routing: delay`) or a mapping of settings (`routing: {policy: delay}`).
The static policies compute every node's next-hop table from the topology; `dynamic` runs the
node's routing stack (link monitor, link-state adverts, shortest paths on measured costs), whose
settings are the other keys: `monitor`, `cost`, `damping`, `hysteresis`, `refresh`, `max_age`
(node/config.py RoutingConfig; the same ranges are checked here, with the file's line). They are
accepted with any policy, so a sweep over the policy can keep them, but only `dynamic` uses them.

A new routing setting is a field of spec.RoutingSpec, a key in ROUTING_KEYS and a line in `_read`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from node.routing.config import CostConfig, DampingConfig, MonitorConfig, ProbeLinkConfig, min_window
from testbed import units
from testbed.scenario.checks import MISSING, Check, KeyPath, show
from testbed.scenario.parts import RoutingSpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.scenario.sections.refs import link_name
from testbed.topology import overlay
from testbed.topology.model import Topology

ROUTINGS = ("auto", "shortest", "unidirectional", "delay", "dynamic")
ROUTING_KEYS = ("policy", "monitor", "cost", "damping", "hysteresis", "refresh", "max_age")
MONITOR_KEYS = ("enabled", "interval", "window", "z", "alpha", "loss_window", "timeout", "links")
PROBE_LINK_KEYS = ("interval", "probe")
COST_KEYS = ("a", "b", "c", "d", "quantum", "threshold")
DAMPING_KEYS = ("enabled", "penalty", "suppress", "reuse", "half_life", "max_suppress")
MAX_WINDOW = 100_000        # samples; a sanity bound, not the node's


def _read(c: Check, raw: Any, s: Scenario) -> None:
    path: KeyPath = ("routing",)
    spec = RoutingSpec()
    if isinstance(raw, dict):
        if "rules" in raw:
            c.fail(path + ("rules",), "rules are set per node: nodes.<node>.routing.rules (or nodes.all.routing.rules)")
        m = c.mapping(path, raw, ROUTING_KEYS)
        spec.policy = c.choice(path + ("policy",), m.get("policy", spec.policy), ROUTINGS)
        spec.monitor = _monitor(c, path + ("monitor",), m.get("monitor"))
        spec.cost = _cost(c, path + ("cost",), m.get("cost"))
        spec.damping = _damping(c, path + ("damping",), m.get("damping"))
        if "hysteresis" in m:
            spec.hysteresis = c.share(path + ("hysteresis",), m["hysteresis"])
            if spec.hysteresis >= 1.0:
                c.fail(path + ("hysteresis",), f"expected a fraction below 1 (100%), got {show(m['hysteresis'])}")
        spec.refresh = _seconds(c, path, m, "refresh", spec.refresh, positive=True)
        spec.max_age = _seconds(c, path, m, "max_age", spec.max_age, positive=True)
        if spec.max_age <= spec.refresh:
            key = "max_age" if "max_age" in m else "refresh"
            c.fail(path + (key,), f"max_age ({spec.max_age:g} s) must be longer than refresh ({spec.refresh:g} s): "
                                  f"a node's advert is dropped when not refreshed within max_age")
    elif raw is not MISSING:
        spec.policy = c.choice(path, raw, ROUTINGS)
    s.routing = spec


def _monitor(c: Check, path: KeyPath, raw: Any) -> MonitorConfig:
    m = c.mapping(path, raw, MONITOR_KEYS)
    out = MonitorConfig()
    if m.get("enabled") is not None:
        out.enabled = c.boolean(path + ("enabled",), m["enabled"])
    out.interval = _seconds(c, path, m, "interval", out.interval, positive=True)
    out.timeout = _seconds(c, path, m, "timeout", out.timeout)
    out.window = c.integer(path + ("window",), m.get("window", out.window), 2, MAX_WINDOW)
    out.loss_window = c.integer(path + ("loss_window",), m.get("loss_window", out.loss_window), 1, MAX_WINDOW)
    out.z = c.number(path + ("z",), m.get("z", out.z), positive=True)
    out.alpha = c.number(path + ("alpha",), m.get("alpha", out.alpha), positive=True)
    if out.alpha > 1.0:
        c.fail(path + ("alpha",), f"expected a weight greater than 0 and at most 1, got {show(m['alpha'])}")
    if out.window < min_window(out.z):
        c.fail(path + ("window",), f"expected at least floor(z^2) + 2 = {min_window(out.z)} at z = {out.z:g}, got "
                                   f"{out.window}: in a smaller window the z-test can never drop a sample")
    for name, entry in c.mapping(path + ("links",), m.get("links")).items():
        lp = path + ("links", name)
        e = c.mapping(lp, entry, PROBE_LINK_KEYS)
        link = ProbeLinkConfig()
        link.interval = _seconds(c, lp, e, "interval", link.interval)
        link.probe = c.boolean(lp + ("probe",), e.get("probe", link.probe))
        out.links[str(name)] = link
    return out


def _cost(c: Check, path: KeyPath, raw: Any) -> CostConfig:
    m = c.mapping(path, raw, COST_KEYS)
    out = CostConfig()
    for key in ("a", "b", "c", "d"):
        setattr(out, key, c.not_negative(path + (key,), m.get(key, getattr(out, key))))
    out.quantum = c.number(path + ("quantum",), m.get("quantum", out.quantum), positive=True)
    if "threshold" in m:
        out.threshold = c.share(path + ("threshold",), m["threshold"])
    return out


def _damping(c: Check, path: KeyPath, raw: Any) -> DampingConfig:
    m = c.mapping(path, raw, DAMPING_KEYS)
    out = DampingConfig()
    out.enabled = c.boolean(path + ("enabled",), m.get("enabled", out.enabled))
    for key in ("penalty", "suppress", "reuse"):
        setattr(out, key, c.number(path + (key,), m.get(key, getattr(out, key)), positive=True))
    if out.reuse >= out.suppress:
        key = "reuse" if "reuse" in m else "suppress"
        c.fail(path + (key,), f"reuse ({out.reuse:g}) must be below suppress ({out.suppress:g}): a suppressed link "
                              f"is used again once its penalty decays below reuse")
    out.half_life = _seconds(c, path, m, "half_life", out.half_life, positive=True)
    out.max_suppress = _seconds(c, path, m, "max_suppress", out.max_suppress, positive=True)
    return out


def _seconds(c: Check, path: KeyPath, m: dict[str, Any], key: str, default: float, positive: bool = False) -> float:
    """m[key] as a duration ("500ms", "2s", a bare number of seconds), or `default` when absent."""
    if key not in m:
        return default
    return float(c.unit(path + (key,), m[key], units.parse_duration, positive=positive))


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    """`monitor.links` names topology links: stored under the topology's own link name."""
    links = s.routing.monitor.links
    if not links:
        return
    named: dict[str, ProbeLinkConfig] = {}
    written: dict[str, str] = {}
    for name, settings in links.items():
        path: KeyPath = ("routing", "monitor", "links", name)
        canonical, _ = link_name(c, path, name, topo)
        if canonical in named:
            c.fail(path, f"the link {canonical} is given twice (as {written[canonical]} and {name})")
        named[canonical], written[canonical] = settings, name
    s.routing.monitor.links = named


def check_probe_links(c: Check, s: Scenario, topo: Topology) -> None:
    """Every `monitor.links` entry must join two MTA neighbours (run by the loader once `nodes` is checked)."""
    if not s.routing.monitor.links or overlay.is_identity(topo, s.nodes):
        return
    mta = overlay.mta_topology(topo, s.nodes)
    for name in s.routing.monitor.links:
        link = next(l for l in topo.links if l.name == name)
        if link.b in mta.neighbours(link.a):
            continue
        idle = [h for h in (link.a, link.b) if not overlay.runs_daemon(s.nodes, h)]
        why = (f"{idle[0]} runs no node daemon" if idle else
               f"nodes.<host>.{overlay.MTA_NEIGHBOURS_KEY} does not pair them")
        c.fail(("routing", "monitor", "links", name),
               f"{link.a} and {link.b} are not MTA neighbours ({why}), so no probes run on that link")


def _plain(s: Scenario) -> dict[str, Any]:
    """Just the policy while every other setting is at its default (a static policy as the file's shorthand
    means it); every setting otherwise, and always for `dynamic`, so scenario.yaml records what ran."""
    r = s.routing
    if r.is_plain and r.policy != "dynamic":
        return {"policy": r.policy}
    monitor = {k: v for k, v in dataclasses.asdict(r.monitor).items() if k != "links"}
    if monitor["enabled"] is None:
        del monitor["enabled"]            # None: the node decides (on with dynamic)
    monitor["links"] = {name: dataclasses.asdict(link) for name, link in r.monitor.links.items()}
    return {"policy": r.policy, "monitor": monitor, "cost": dataclasses.asdict(r.cost),
            "damping": dataclasses.asdict(r.damping), "hysteresis": r.hysteresis, "refresh": r.refresh,
            "max_age": r.max_age}



def _policy_name(value: Any) -> Any:
    """The file's shorthand `routing: delay` given to the Scenario's constructor: the whole RoutingSpec."""
    return RoutingSpec(policy=value) if isinstance(value, str) else value


ROUTING = Section("routing", read=_read, check=_check, plain=_plain, shorthand="policy", default=RoutingSpec,
                  coerce=_policy_name)
