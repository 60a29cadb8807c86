"""Link impairments: `link_defaults`, per-link overrides in `links`, and the parsing of one direction
(delay, jitter, loss, loss_model, duplicate, reorder, rate, queue) that topology and faults share.

`duplex` (full | half) belongs to the whole link, not to a direction: it is accepted in link_defaults
and beside a link's ends, refused inside a_to_b / b_to_a and in faults (it cannot change at run time)."""
from __future__ import annotations

import copy
from typing import Any

from testbed import units
from testbed.scenario.checks import Check, KeyPath, names_text, show
from testbed.scenario.parts import LinkOverride
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology.model import Direction, GilbertElliott, Topology

DIRECTION_KEYS = ("delay", "jitter", "loss", "loss_model", "duplicate", "reorder", "rate", "queue")
LINK_KEYS = ("duplex",)         # whole-link keys: link_defaults and link entries, never one direction
DUPLEX = ("full", "half")


def parse_direction(c: Check, path: KeyPath, raw: dict[str, Any], base: Direction) -> Direction:
    """`base` with the keys of `raw` (already checked to be DIRECTION_KEYS) parsed and applied."""
    d = copy.deepcopy(base)
    for key, value in raw.items():
        p = path + (key,)
        if key == "delay":
            d.delay = c.unit(p, value, units.parse_duration)
        elif key == "jitter":
            d.jitter = c.unit(p, value, units.parse_duration)
        elif key == "loss":
            d.loss = c.unit(p, value, units.parse_percent)
        elif key == "duplicate":
            d.duplicate = c.unit(p, value, units.parse_percent)
        elif key == "reorder":
            d.reorder = c.boolean(p, value)
        elif key == "rate":
            d.rate = None if value in (None, "unlimited") else c.unit(p, value, units.parse_rate)
        elif key == "queue":
            d.queue = c.integer(p, value, 1, 1_000_000)
        elif key == "loss_model":
            d.gilbert = _loss_model(c, p, value)
        elif key == "duplex":
            d.duplex = c.choice(p, value, DUPLEX)
    return d


def _loss_model(c: Check, path: KeyPath, value: Any) -> GilbertElliott | None:
    if value in (None, "random"):
        return None
    if value == "gilbert":
        c.fail(path, "expected a mapping {type: gilbert, p: ..., r: ...} (gilbert needs p and r)")
    m = c.mapping(path, value, ("type", "p", "r", "loss_good", "loss_bad"))
    kind = c.choice(path + ("type",), m.get("type"), ("random", "gilbert"))
    if kind == "random":
        return None
    for need in ("p", "r"):
        if need not in m:
            c.fail(path + (need,), "missing: the gilbert model needs p (good->bad) and r (bad->good)")
    return GilbertElliott(p=c.unit(path + ("p",), m["p"], units.parse_percent),
                          r=c.unit(path + ("r",), m["r"], units.parse_percent),
                          loss_good=c.unit(path + ("loss_good",), m.get("loss_good", 0.0), units.parse_percent),
                          loss_bad=c.unit(path + ("loss_bad",), m.get("loss_bad", 1.0), units.parse_percent))


def parse_link_entry(c: Check, path: KeyPath, raw: Any, base: Direction) -> LinkOverride:
    """One {a, b, <direction keys>, a_to_b: {...}, b_to_a: {...}} entry; both directions start from `base`."""
    m = c.mapping(path, raw, ("a", "b", "a_to_b", "b_to_a") + DIRECTION_KEYS + LINK_KEYS)
    for end in ("a", "b"):
        if end not in m:
            c.fail(path + (end,), f"missing: a link needs both ends 'a' and 'b'")
        c.text(path + (end,), m[end])
    if m["a"] == m["b"]:
        c.fail(path + ("b",), f"a link cannot connect {m['a']} to itself")
    for side in ("a_to_b", "b_to_a"):
        if isinstance(m.get(side), dict) and "duplex" in m[side]:
            c.fail(path + (side, "duplex"), "duplex belongs to the whole link (both directions share one "
                                            "medium): set it beside 'a' and 'b'")
    flat = {k: v for k, v in m.items() if k in DIRECTION_KEYS + LINK_KEYS}
    both = parse_direction(c, path, flat, base)
    there = parse_direction(c, path + ("a_to_b",), c.mapping(path + ("a_to_b",), m.get("a_to_b"), DIRECTION_KEYS),
                            both)
    back = parse_direction(c, path + ("b_to_a",), c.mapping(path + ("b_to_a",), m.get("b_to_a"), DIRECTION_KEYS),
                           both)
    return LinkOverride(a=m["a"], b=m["b"], a_to_b=there, b_to_a=back)


def link_plain(l: LinkOverride) -> dict[str, Any]:
    out: dict[str, Any] = {"a": l.a, "b": l.b}
    for side in ("a_to_b", "b_to_a"):
        d = getattr(l, side)
        if d is not None:
            plain = d.to_scenario()
            out["duplex"] = plain.pop("duplex")     # written where parse_link_entry reads it back
            out[side] = plain
    return out


# ---- link_defaults ----------------------------------------------------------------------

def _read_link_defaults(c: Check, raw: Any, s: Scenario) -> None:
    path: KeyPath = ("link_defaults",)
    s.link_defaults = parse_direction(c, path, c.mapping(path, raw, DIRECTION_KEYS + LINK_KEYS), Direction())


LINK_DEFAULTS = Section("link_defaults", read=_read_link_defaults, plain=lambda s: s.link_defaults.to_scenario(),
                        default=Direction)


# ---- links: overrides of generated links ------------------------------------------------------

def _read_links(c: Check, raw: Any, s: Scenario) -> None:
    s.links = [parse_link_entry(c, ("links", i), l, s.link_defaults) for i, l in enumerate(c.sequence(("links",), raw))]


def _check_links(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    names = topo.node_names()
    overridden: set[frozenset[str]] = set()
    for i, l in enumerate(s.links):
        for end in ("a", "b"):
            if getattr(l, end) not in names:
                c.fail(("links", i, end), f"unknown node {show(getattr(l, end))} (nodes: {names_text(names)})")
        try:
            topo.link(l.a, l.b)
        except KeyError:
            c.fail(("links", i), f"there is no link between {l.a} and {l.b} in the {s.topology.generator} topology")
        if frozenset((l.a, l.b)) in overridden:
            c.fail(("links", i), f"the link {l.a}-{l.b} is overridden twice")
        overridden.add(frozenset((l.a, l.b)))


LINKS = Section("links", read=_read_links, check=_check_links, plain=lambda s: [link_plain(l) for l in s.links],
                needs=("link_defaults",), default=list)
