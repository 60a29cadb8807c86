"""Model time -> wall time: one conversion, applied once, to a copy of the scenario.

A scenario is written in *model* seconds (the thesis' parameter tables as
printed: t = 2 s per fragment, interarrival Normal(50 s), RBSAD 400 s ...).
`time_scale` is wall seconds per model second. Every quantity that is a time
is multiplied by it; every quantity that is a rate (per second) is divided by
it, so "one fragment takes t model seconds" stays true on the emulated wire.
Sizes, probabilities and counts are untouched.

What is converted ("applied consistently to link rates, interarrivals,
RBSAD, removal intervals and durations"):
- duration, workload.warmup, workload.drain, workload.stall_after
- each generator's start/stop, interarrival mean/sd and its schedule periods
  (from/to/mean/sd)
- fault `at` times and link_set delay/jitter/rate parameters
- link delay and jitter (x), rate (/) in link_defaults, per-link overrides and
  explicit topology links
- node settings resources.removal_interval, resources.reservation_timeout,
  resources.rbsad in nodes.all and nodes.per_node
- each subsystem's own sections (testbed/subsystems/: `to_wall`), e.g. rate_control's interval and
  consumer.every (x) and rate (/)
- the routing stack's times: routing.monitor.interval and .timeout, each
  monitor.links interval, routing.damping.half_life and .max_suppress,
  routing.refresh and .max_age, in the `routing:` section and in the node
  settings' `routing:` (link costs are computed from measured wall-clock
  latencies and are not converted)

`wall_topology` is the one place a scenario becomes the network's link
parameters in wall units: `testbed run` (each cell), `testbed up` (its
supervisor, through Network.from_scenario) and `testbed export` all take their
links from it, so one scenario (with its --set overrides, which the loader has
applied) gives one network whatever the verb.

Not converted: delays built into a topology generator (intercontinental6's
Table 8 costs) because they are not scenario values; such scenarios are meant
to run at time_scale 1.
"""
from __future__ import annotations

import copy
import logging
import math
from typing import Any

from testbed.scenario.loader import ScenarioError
from testbed.scenario.spec import Fault, Generator, LinkOverride, RoutingSpec, Scenario
from testbed.subsystems import SUBSYSTEMS
from testbed.topology import generators
from testbed.topology.model import Direction, Topology

log = logging.getLogger(__name__)

# resources keys of the node config (node/config.py ResourcesConfig) that are model seconds
SCALED_RESOURCE_KEYS: tuple[str, ...] = ("removal_interval", "reservation_timeout", "rbsad")
# routing keys of the node config (node/routing/config.py RoutingConfig and its sub-sections) that are model seconds
SCALED_ROUTING_KEYS: tuple[str, ...] = ("refresh", "max_age")
SCALED_MONITOR_KEYS: tuple[str, ...] = ("interval", "timeout")
SCALED_DAMPING_KEYS: tuple[str, ...] = ("half_life", "max_suppress")


def to_wall(scenario: Scenario) -> Scenario:
    """A deep copy of `scenario` in wall seconds (time_scale set to 1.0); the input is not changed."""
    k = scenario.time_scale
    if not isinstance(k, (int, float)) or isinstance(k, bool) or not math.isfinite(k) or k <= 0:
        raise ScenarioError(f"time_scale: expected a positive number of wall seconds per model second, got {k!r}.")
    k = float(k)
    wall = copy.deepcopy(scenario)
    if k == 1.0:
        return wall
    wall.duration = scenario.duration * k
    wall.workload.warmup = scenario.workload.warmup * k
    wall.workload.drain = scenario.workload.drain * k
    wall.workload.stall_after = scenario.workload.stall_after * k
    for g in wall.workload.generators:
        _scale_generator(g, k)
    for f in wall.faults:
        _scale_fault(f, k)
    _scale_direction(wall.link_defaults, k)
    for link in list(wall.links) + list(wall.topology.links):
        _scale_override(link, k)
    _scale_routing(wall.routing, k)
    for sub in SUBSYSTEMS:              # the subsystems' own sections (testbed/subsystems/)
        sub.to_wall(wall, k)
    _scale_node_settings(wall.nodes.all, k)
    for settings in wall.nodes.per_node.values():
        _scale_node_settings(settings, k)
    wall.time_scale = 1.0
    log.debug("scenario %s converted to wall time at %g wall s per model s", scenario.name, k)
    return wall


def wall_topology(scenario: Scenario) -> Topology:
    """The scenario's topology with its link parameters in wall units (rates /, delays x time_scale)."""
    return generators.from_scenario(to_wall(scenario))


def model_to_wall(seconds: float, time_scale: float) -> float:
    return seconds * time_scale


def wall_to_model(seconds: float, time_scale: float) -> float:
    return seconds / time_scale


def _scale_generator(g: Generator, k: float) -> None:
    g.start *= k
    if g.stop is not None:
        g.stop *= k
    ia = g.interarrival
    ia.mean *= k
    if ia.sd is not None:
        ia.sd *= k
    for period in ia.schedule:
        for key in ("from", "to", "mean", "sd"):
            if isinstance(period.get(key), (int, float)) and not isinstance(period.get(key), bool):
                period[key] = period[key] * k


def _scale_fault(f: Fault, k: float) -> None:
    f.at *= k
    if f.action != "link_set":
        return
    for key in ("delay", "jitter"):
        if _is_number(f.params.get(key)):
            f.params[key] = f.params[key] * k
    if _is_number(f.params.get("rate")):
        f.params["rate"] = f.params["rate"] / k


def _scale_override(link: LinkOverride, k: float) -> None:
    for d in (link.a_to_b, link.b_to_a):
        if d is not None:
            _scale_direction(d, k)


def _scale_direction(d: Direction, k: float) -> None:
    d.delay *= k
    d.jitter *= k
    if d.rate is not None:
        d.rate = d.rate / k


def _scale_routing(r: RoutingSpec, k: float) -> None:
    for obj, keys in ((r, SCALED_ROUTING_KEYS), (r.monitor, SCALED_MONITOR_KEYS), (r.damping, SCALED_DAMPING_KEYS)):
        for key in keys:
            setattr(obj, key, getattr(obj, key) * k)
    for link in r.monitor.links.values():
        link.interval *= k


def _scale_node_settings(settings: dict[str, Any], k: float) -> None:
    _scale_keys(settings.get("resources"), SCALED_RESOURCE_KEYS, k)
    routing = settings.get("routing")
    if not isinstance(routing, dict):
        return
    _scale_keys(routing, SCALED_ROUTING_KEYS, k)
    _scale_keys(routing.get("damping"), SCALED_DAMPING_KEYS, k)
    monitor = routing.get("monitor")
    if isinstance(monitor, dict):
        _scale_keys(monitor, SCALED_MONITOR_KEYS, k)
        links = monitor.get("links")
        for link in links.values() if isinstance(links, dict) else ():
            _scale_keys(link, ("interval",), k)


def _scale_keys(section: Any, keys: tuple[str, ...], k: float) -> None:
    """Multiply the numeric `keys` of a settings mapping by k (anything else is the node's to refuse)."""
    if not isinstance(section, dict):
        return
    for key in keys:
        if _is_number(section.get(key)):
            section[key] = section[key] * k


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
