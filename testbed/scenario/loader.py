"""Scenario files: YAML with line numbers -> validated, defaulted `Scenario`.

Every error is a ScenarioError naming the file, line and key path and what was
expected, e.g. ``quickstart.yaml:14 topology.links[3].delay: expected a
duration like "25ms", got "fast"``. The YAML is composed into nodes first so
each mapping value and sequence item keeps its line; `--set` overrides and the
`quick:` section are applied to the plain data before validation and remember
where they came from.
"""
from __future__ import annotations

import copy
import difflib
import ipaddress
import math
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

import yaml

from node.errors import UserError
from testbed.runtime.base import normalise_sysctls
from testbed.scenario import units
from testbed.scenario.spec import (CaptureSpec, Fault, Generator, Interarrival, LinkOverride, NodesSpec,
                                   RecipientChoice, Scenario, SizeDist, SweepSpec, TopologySpec, WorkloadSpec)
from testbed.topology import generators
from testbed.topology.model import Direction, GilbertElliott, Topology

Path_ = tuple[Any, ...]          # key path: str keys and int list indices

DIRECTION_KEYS = ("delay", "jitter", "loss", "loss_model", "duplicate", "reorder", "rate", "queue")
RUNTIMES = ("netns", "docker")
SHAPERS = ("auto", "netem", "wire")
FAULT_ACTIONS = ("link_down", "link_up", "link_set", "partition", "heal", "kill", "restart", "pause", "resume")
INTERARRIVALS = ("normal", "exponential", "constant", "piecewise")
SIZE_DISTS = ("thesis", "fixed", "empirical")
RECIPIENT_CHOICES = ("uniform", "fixed", "weighted")
ROUTINGS = ("auto", "shortest", "unidirectional", "delay")
TOP_KEYS = ("name", "seed", "duration", "time_scale", "topology", "link_defaults", "links", "runtime", "routing",
            "shaper", "capture", "sysctls", "nodes", "workload", "faults", "sweep", "quick")


class ScenarioError(UserError):
    """A bad scenario file, override or sweep; the message says where and what was expected."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


def path_text(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---- YAML with marks -------------------------------------------------------------

def _compose(text: str, source: str) -> tuple[Any, dict[Path_, int]]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ScenarioError(f"{source}{line}: not valid YAML: {e.problem or e.context}.") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{source}: not valid YAML: {e}.") from None
    lines: dict[Path_, int] = {}
    constructor = yaml.SafeLoader("")

    def build(node: yaml.Node, path: Path_) -> Any:
        lines[path] = node.start_mark.line + 1
        if len(path) > 40:   # also stops self-referencing aliases
            raise ScenarioError(f"{source}:{node.start_mark.line + 1} {path_text(path[:3])}...: nested too deeply.")
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = build(key_node, path + ("<key>",))
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    raise ScenarioError(f"{source}:{key_node.start_mark.line + 1} {path_text(path) or '(top)'}: "
                                        f"a mapping key must be a plain name.")
                key = str(key) if not isinstance(key, str) else key
                if key in out:
                    raise ScenarioError(f"{source}:{key_node.start_mark.line + 1} {path_text(path + (key,))}: "
                                        f"key given twice.")
                out[key] = build(value_node, path + (key,))
                lines[path + (key,)] = key_node.start_mark.line + 1
            lines.pop(path + ("<key>",), None)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [build(item, path + (i,)) for i, item in enumerate(node.value)]
        try:
            return constructor.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            raise ScenarioError(f"{source}:{node.start_mark.line + 1} {path_text(path)}: {e}.") from None

    if root is None:
        return {}, lines
    return build(root, ()), lines


# ---- where a value came from --------------------------------------------------------

class _Check:
    """Error reporting with locations, and typed getters."""

    def __init__(self, source: str, lines: dict[Path_, int]) -> None:
        self.source = source
        self.origin: dict[Path_, str] = {p: f"{source}:{n}" for p, n in lines.items()}

    def where(self, path: Path_) -> str:
        for i in range(len(path), -1, -1):
            if path[:i] in self.origin:
                return self.origin[path[:i]]
        return self.source

    def fail(self, path: Path_, message: str) -> NoReturn:
        detail = f"{path_text(path) or '(top level)'}: {message}"
        raise ScenarioError(f"{self.where(path)} {detail}", detail)

    # typed getters
    def mapping(self, path: Path_, value: Any, allowed: Iterable[str] | None = None) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping (key: value lines), got {_kind(value)}")
        if allowed is not None:
            allowed = list(allowed)
            for key in value:
                if key not in allowed:
                    near = difflib.get_close_matches(key, allowed, n=1)
                    hint = (f" (did you mean '{near[0]}'?)" if near else
                            f" (expected one of: {', '.join(allowed)})" if allowed else " (no keys are allowed here)")
                    self.fail(path + (key,), f"unknown key '{key}'{hint}")
        return value

    def sequence(self, path: Path_, value: Any) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def integer(self, path: Path_, value: Any, low: int | None = None, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected a whole number, got {_show(value)}")
        if low is not None and value < low or high is not None and value > high:
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            self.fail(path, f"expected a whole number {bounds}, got {value}")
        return value

    def number(self, path: Path_, value: Any, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(path, f"expected a number, got {_show(value)}")
        if positive and value <= 0:
            self.fail(path, f"expected a number greater than zero, got {value}")
        return float(value)

    def boolean(self, path: Path_, value: Any) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_show(value)}")
        return value

    def text(self, path: Path_, value: Any) -> str:
        if not isinstance(value, str) or not value:
            self.fail(path, f"expected a non-empty string, got {_show(value)}")
        return value

    def choice(self, path: Path_, value: Any, choices: Sequence[str]) -> str:
        if value not in choices:
            self.fail(path, f"expected one of {', '.join(choices)}, got {_show(value)}")
        return value

    def unit(self, path: Path_, value: Any, parser: Callable[[Any], Any], positive: bool = False) -> Any:
        try:
            out = parser(value)
        except units.UnitError as e:
            self.fail(path, str(e))
        if positive and out <= 0:
            self.fail(path, f"expected a value greater than zero, got {_show(value)}")
        return out


def _kind(value: Any) -> str:
    return {list: "a list", dict: "a mapping", type(None): "nothing"}.get(type(value), _show(value))


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


# ---- overrides ------------------------------------------------------------------------

def _flat(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"net": {"ipv4": {"x": 1}}} -> {"net.ipv4.x": 1}."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> Path_:
    """Set data[a][b][2][c] = value for key "a.b.2.c"; returns the path."""
    parts: list[Any] = []
    node: Any = data
    segs = key.split(".")
    if not key or any(not s for s in segs):
        raise ValueError("expected a dotted key like topology.params.n")
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if isinstance(node, list):
            if not seg.isdigit() or int(seg) >= len(node):
                raise ValueError(f"'{seg}' is not an index of the {len(node)}-item list at {path_text(tuple(parts))}")
            seg_key: Any = int(seg)
        elif isinstance(node, dict):
            seg_key = seg
            if not last and node.get(seg) is None:
                if segs[i + 1].isdigit():
                    raise ValueError(f"there is no list at {path_text(tuple(parts) + (seg,))} to index")
                node[seg] = {}
        else:
            raise ValueError(f"{path_text(tuple(parts))} is not a mapping or list")
        parts.append(seg_key)
        if last:
            node[seg_key] = value
        else:
            node = node[seg_key]
    return tuple(parts)


def _parse_set(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ScenarioError(f"--set {item}: expected KEY=VALUE, e.g. --set duration=30s.")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise ScenarioError(f"--set {key}: the value {raw!r} is not a YAML scalar, list or mapping.") from None
    return key, value


# ---- sections ------------------------------------------------------------------------

def _direction(c: _Check, path: Path_, raw: dict[str, Any], base: Direction) -> Direction:
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
    return d


def _loss_model(c: _Check, path: Path_, value: Any) -> GilbertElliott | None:
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


def _link_entry(c: _Check, path: Path_, raw: Any, base: Direction) -> LinkOverride:
    m = c.mapping(path, raw, ("a", "b", "a_to_b", "b_to_a") + DIRECTION_KEYS)
    for end in ("a", "b"):
        if end not in m:
            c.fail(path + (end,), f"missing: a link needs both ends 'a' and 'b'")
        c.text(path + (end,), m[end])
    if m["a"] == m["b"]:
        c.fail(path + ("b",), f"a link cannot connect {m['a']} to itself")
    flat = {k: v for k, v in m.items() if k in DIRECTION_KEYS}
    both = _direction(c, path, flat, base)
    there = _direction(c, path + ("a_to_b",), c.mapping(path + ("a_to_b",), m.get("a_to_b"), DIRECTION_KEYS), both)
    back = _direction(c, path + ("b_to_a",), c.mapping(path + ("b_to_a",), m.get("b_to_a"), DIRECTION_KEYS), both)
    return LinkOverride(a=m["a"], b=m["b"], a_to_b=there, b_to_a=back)


def _topology(c: _Check, raw: Any, base: Direction) -> TopologySpec:
    path: Path_ = ("topology",)
    m = c.mapping(path, raw, ("generator", "params", "nodes", "links", "data_pool", "loopback_pool", "mgmt_pool"))
    spec = TopologySpec()
    spec.generator = c.choice(path + ("generator",), m.get("generator", spec.generator), generators.GENERATORS)
    schema = generators.GENERATOR_PARAMS[spec.generator]
    params = c.mapping(path + ("params",), m.get("params"), schema)
    for key, value in params.items():
        p, d = path + ("params", key), schema[key]
        if d.kind is bool:
            spec.params[key] = c.boolean(p, value)
        elif d.kind is int:
            spec.params[key] = c.integer(p, value, d.low, d.high)
        else:
            spec.params[key] = c.choice(p, value, d.choices)
    nodes = c.sequence(path + ("nodes",), m.get("nodes"))
    for i, n in enumerate(nodes):
        _check_node_name(c, path + ("nodes", i), n)
        if n in nodes[:i]:
            c.fail(path + ("nodes", i), f"node {n} is listed twice")
    if nodes and spec.generator not in ("explicit", "ring", "linear"):
        c.fail(path + ("nodes",), f"the {spec.generator} generator names its own nodes; "
                                  f"topology.nodes is for explicit, ring and linear")
    spec.nodes = list(nodes)
    for key, d in schema.items():      # fill defaults so the resolved scenario is complete
        spec.params.setdefault(key, d.default)
    if spec.generator in ("ring", "linear") and nodes:
        if "n" in params and params["n"] != len(nodes):
            c.fail(path + ("params", "n"), f"n={params['n']} disagrees with the {len(nodes)} names in topology.nodes")
        spec.params["n"] = len(nodes)
    links = c.sequence(path + ("links",), m.get("links"))
    if links and spec.generator != "explicit":
        c.fail(path + ("links",), "topology.links is for generator: explicit; override generated links in "
                                  "the top-level 'links:' section")
    if spec.generator == "explicit" and not nodes:
        c.fail(path + ("nodes",), "generator explicit needs a list of node names")
    spec.links = [_link_entry(c, path + ("links", i), l, base) for i, l in enumerate(links)]
    for key in ("data_pool", "loopback_pool", "mgmt_pool"):
        if key in m:
            try:
                net = ipaddress.ip_network(c.text(path + (key,), m[key]), strict=False)
            except ValueError:
                net = None
            if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen > 24:
                c.fail(path + (key,), f'expected an IPv4 network of /24 or larger like "10.200.0.0/16", got {_show(m[key])}')
            setattr(spec, key, str(net))
    return spec


def _check_node_name(c: _Check, path: Path_, name: Any) -> None:
    if not isinstance(name, str) or not name or len(name) > 10 or not all(ch.isalnum() or ch in "_-" for ch in name):
        c.fail(path, f"expected a node name of 1-10 letters, digits, '_' or '-', got {_show(name)}")
    if name == "all":
        c.fail(path, "'all' is reserved (nodes.all, workload nodes: all); pick another node name")


def _workload(c: _Check, raw: Any, names: list[str]) -> WorkloadSpec:
    path: Path_ = ("workload",)
    m = c.mapping(path, raw, ("warmup", "drain", "generators"))
    w = WorkloadSpec()
    w.warmup = c.unit(path + ("warmup",), m.get("warmup", w.warmup), units.parse_duration)
    w.drain = c.unit(path + ("drain",), m.get("drain", w.drain), units.parse_duration)
    for i, g in enumerate(c.sequence(path + ("generators",), m.get("generators"))):
        w.generators.append(_generator(c, path + ("generators", i), g, names))
    return w


def _node_list(c: _Check, path: Path_, value: Any, names: list[str], allow_all: bool = True) -> list[str] | str:
    if allow_all and value == "all":
        return "all"
    if isinstance(value, str):
        value = [value]
    items = c.sequence(path, value)
    for i, n in enumerate(items):
        if n not in names:
            c.fail(path + (i,), f"unknown node {_show(n)} (nodes: {_names(names)})")
    return list(items)


def _names(names: list[str]) -> str:
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")


def _generator(c: _Check, path: Path_, raw: Any, names: list[str]) -> Generator:
    m = c.mapping(path, raw, ("nodes", "interarrival", "size", "recipients", "priority", "start", "stop"))
    g = Generator()
    g.nodes = _node_list(c, path + ("nodes",), m.get("nodes", "all"), names)
    ip = path + ("interarrival",)
    ia = c.mapping(ip, m.get("interarrival"), ("dist", "mean", "sd", "schedule"))
    g.interarrival = Interarrival()
    g.interarrival.dist = c.choice(ip + ("dist",), ia.get("dist", "normal"), INTERARRIVALS)
    g.interarrival.mean = c.unit(ip + ("mean",), ia.get("mean", g.interarrival.mean), units.parse_duration, positive=True)
    if ia.get("sd") is not None:
        g.interarrival.sd = c.unit(ip + ("sd",), ia["sd"], units.parse_duration)
    for i, entry in enumerate(c.sequence(ip + ("schedule",), ia.get("schedule"))):
        ep = ip + ("schedule", i)
        e = c.mapping(ep, entry, ("from", "to", "dist", "mean", "sd"))
        for need in ("from", "to"):
            if need not in e:
                c.fail(ep + (need,), "missing: a schedule period needs 'from' and 'to'")
        out: dict[str, Any] = {"from": c.unit(ep + ("from",), e["from"], units.parse_duration),
                               "to": c.unit(ep + ("to",), e["to"], units.parse_duration),
                               "dist": c.choice(ep + ("dist",), e.get("dist", g.interarrival.dist if
                                                g.interarrival.dist != "piecewise" else "normal"),
                                                ("normal", "exponential", "constant")),
                               "mean": c.unit(ep + ("mean",), e.get("mean", g.interarrival.mean),
                                              units.parse_duration, positive=True)}
        if out["to"] <= out["from"]:
            c.fail(ep + ("to",), "expected 'to' after 'from'")
        if e.get("sd") is not None:
            out["sd"] = c.unit(ep + ("sd",), e["sd"], units.parse_duration)
        g.interarrival.schedule.append(out)
    if g.interarrival.dist == "piecewise" and not g.interarrival.schedule:
        c.fail(ip + ("schedule",), "missing: dist piecewise needs a schedule of periods")
    sp = path + ("size",)
    s = c.mapping(sp, m.get("size"), ("dist", "bytes", "file", "fragment_size"))
    g.size = SizeDist()
    g.size.dist = c.choice(sp + ("dist",), s.get("dist", "thesis"), SIZE_DISTS)
    g.size.bytes = c.unit(sp + ("bytes",), s.get("bytes", g.size.bytes), units.parse_size, positive=True)
    g.size.fragment_size = c.unit(sp + ("fragment_size",), s.get("fragment_size", g.size.fragment_size),
                                  units.parse_size, positive=True)
    if s.get("file") not in (None, ""):
        g.size.file = c.text(sp + ("file",), s["file"])
    if g.size.dist == "empirical" and not g.size.file:
        c.fail(sp + ("file",), "missing: dist empirical needs a file of sizes")
    rp = path + ("recipients",)
    r = c.mapping(rp, m.get("recipients"), ("choice", "nodes", "weights"))
    g.recipients = RecipientChoice()
    g.recipients.choice = c.choice(rp + ("choice",), r.get("choice", "uniform"), RECIPIENT_CHOICES)
    if "nodes" in r:
        g.recipients.nodes = list(_node_list(c, rp + ("nodes",), r["nodes"], names, allow_all=False))
    if g.recipients.choice == "fixed" and not g.recipients.nodes:
        c.fail(rp + ("nodes",), "missing: choice fixed needs one or more recipient nodes")
    weights = c.mapping(rp + ("weights",), r.get("weights"))
    for n, wv in weights.items():
        if n not in names:
            c.fail(rp + ("weights", n), f"unknown node {_show(n)} (nodes: {_names(names)})")
        g.recipients.weights[n] = c.number(rp + ("weights", n), wv)
        if g.recipients.weights[n] < 0:
            c.fail(rp + ("weights", n), "expected a weight of zero or more")
    if g.recipients.choice == "weighted" and not any(v > 0 for v in g.recipients.weights.values()):
        c.fail(rp + ("weights",), "missing: choice weighted needs weights with at least one above zero")
    g.priority = c.integer(path + ("priority",), m.get("priority", 1), 0, 255)
    g.start = c.unit(path + ("start",), m.get("start", 0.0), units.parse_duration)
    if m.get("stop") is not None:
        g.stop = c.unit(path + ("stop",), m["stop"], units.parse_duration)
        if g.stop <= g.start:
            c.fail(path + ("stop",), "expected stop after start")
    return g


def _link_name(c: _Check, path: Path_, value: Any, topo: Topology) -> tuple[str, bool]:
    """The canonical name of the link `value` names ("a-b" in either order) and whether it was reversed."""
    for link in topo.links:
        if value == link.name:
            return link.name, False
        if value == f"{link.b}-{link.a}":
            return link.name, True
    some = ", ".join(sorted(l.name for l in topo.links)[:8])
    c.fail(path, f"unknown link {_show(value)} (expected a link name like {some or 'a-b'})")


def _faults(c: _Check, raw: Any, topo: Topology) -> list[Fault]:
    out = []
    names = topo.node_names()
    for i, entry in enumerate(c.sequence(("faults",), raw)):
        path: Path_ = ("faults", i)
        m = c.mapping(path, entry, ("at", "action", "target", "params"))
        if "at" not in m or "action" not in m:
            c.fail(path + ("at" if "at" not in m else "action",), "missing: a fault needs 'at' and 'action'")
        at = c.unit(path + ("at",), m["at"], units.parse_duration)
        action = c.choice(path + ("action",), m["action"], FAULT_ACTIONS)
        target = m.get("target")
        tp = path + ("target",)
        params: dict[str, Any] = {}
        if target is None and action != "heal":
            c.fail(tp, f"missing: {action} needs a target "
                       f"({'a link name like n1-n2' if action.startswith('link_') else '[[side A], [side B]]' if action == 'partition' else 'a node name'})")
        if action != "link_set" and m.get("params"):
            c.fail(path + ("params",), f"{action} takes no params (only link_set does)")
        reversed_name = False
        if action.startswith("link_"):
            target, reversed_name = _link_name(c, tp, target, topo)
        elif action in ("kill", "restart", "pause", "resume"):
            if target not in names:
                c.fail(tp, f"unknown node {_show(target)} (nodes: {_names(names)})")
        elif action == "partition":
            sides = c.sequence(tp, target)
            if len(sides) != 2:
                c.fail(tp, "expected two lists of nodes: [[side A], [side B]]")
            target = [list(_node_list(c, tp + (j,), s, names, allow_all=False)) for j, s in enumerate(sides)]
            if set(target[0]) & set(target[1]):
                c.fail(tp, "a node cannot be on both sides of a partition")
        elif action == "heal" and target is not None:
            c.fail(tp, "heal takes no target (it heals every partition)")
        raw_params = c.mapping(path + ("params",), m.get("params"),
                               DIRECTION_KEYS + ("direction",) if action == "link_set" else ())
        if action == "link_set":
            if not raw_params:
                c.fail(path + ("params",), "missing: link_set needs the link parameters to set")
            flat = {k: v for k, v in raw_params.items() if k != "direction"}
            d = _direction(c, path + ("params",), flat, Direction())
            for k in flat:
                params[k] = {"delay": d.delay, "jitter": d.jitter, "loss": d.loss, "duplicate": d.duplicate,
                             "reorder": d.reorder, "rate": d.rate, "queue": d.queue,
                             "loss_model": _loss_model_plain(d.gilbert)}[k]
            direction = c.choice(path + ("params", "direction"), raw_params.get("direction", "both"),
                                 ("both", "a_to_b", "b_to_a"))
            # stored against the canonical link name: a target written "b-a" swaps the direction
            swap = {"a_to_b": "b_to_a", "b_to_a": "a_to_b", "both": "both"}
            params["direction"] = swap[direction] if reversed_name else direction
        out.append(Fault(at=at, action=action, target=target, params=params))
    return out


def _loss_model_plain(g: GilbertElliott | None) -> Any:
    if g is None:
        return "random"
    return {"type": "gilbert", "p": g.p, "r": g.r, "loss_good": g.loss_good, "loss_bad": g.loss_bad}


def _validate(c: _Check, data: Any) -> Scenario:
    top = c.mapping((), data, TOP_KEYS)
    name = top.get("name", Path(c.source).stem if not c.source.startswith("<") else "scenario")
    name = c.text(("name",), name)
    if not all(ch.isalnum() or ch in "_-." for ch in name) or len(name) > 64:
        c.fail(("name",), f"expected a name of letters, digits, '-', '_' or '.', got {_show(name)}")
    s = Scenario(name=name)
    s.seed = c.integer(("seed",), top.get("seed", s.seed), 0, 2 ** 63 - 1)
    s.duration = c.unit(("duration",), top.get("duration", s.duration), units.parse_duration, positive=True)
    s.time_scale = c.number(("time_scale",), top.get("time_scale", s.time_scale), positive=True)
    s.link_defaults = _direction(c, ("link_defaults",), c.mapping(("link_defaults",), top.get("link_defaults"),
                                                                  DIRECTION_KEYS), Direction())
    s.topology = _topology(c, top.get("topology"), s.link_defaults)
    s.links = [_link_entry(c, ("links", i), l, s.link_defaults)
               for i, l in enumerate(c.sequence(("links",), top.get("links")))]
    s.runtime = c.choice(("runtime",), top.get("runtime", s.runtime), RUNTIMES)
    s.shaper = c.choice(("shaper",), top.get("shaper", s.shaper), SHAPERS)
    s.routing = c.choice(("routing",), top.get("routing", s.routing), ROUTINGS)

    # the topology itself: generator constraints, then cross references
    try:
        topo = generators.generate(s.topology.generator, s.topology.params, s.topology.nodes,
                                   [(l.a, l.b) for l in s.topology.links], s.link_defaults, s.name)
    except generators.ParamError as e:
        c.fail(("topology", "params", e.param) if e.param != "generator" else ("topology", "generator"), str(e))
    names = topo.node_names()
    seen_pairs: set[frozenset[str]] = set()
    for i, l in enumerate(s.topology.links):
        for end in ("a", "b"):
            if getattr(l, end) not in names:
                c.fail(("topology", "links", i, end), f"unknown node {_show(getattr(l, end))} "
                                                      f"(topology.nodes: {_names(names)})")
        if frozenset((l.a, l.b)) in seen_pairs:
            c.fail(("topology", "links", i), f"a second link between {l.a} and {l.b}")
        seen_pairs.add(frozenset((l.a, l.b)))
    overridden: set[frozenset[str]] = set()
    for i, l in enumerate(s.links):
        for end in ("a", "b"):
            if getattr(l, end) not in names:
                c.fail(("links", i, end), f"unknown node {_show(getattr(l, end))} (nodes: {_names(names)})")
        try:
            topo.link(l.a, l.b)
        except KeyError:
            c.fail(("links", i), f"there is no link between {l.a} and {l.b} in the {s.topology.generator} topology")
        if frozenset((l.a, l.b)) in overridden:
            c.fail(("links", i), f"the link {l.a}-{l.b} is overridden twice")
        overridden.add(frozenset((l.a, l.b)))

    s.capture = CaptureSpec()
    cap = top.get("capture")
    cap_path: Path_ = ("capture",)
    if isinstance(cap, dict):
        cm = c.mapping(cap_path, cap, ("links", "snaplen"))
        s.capture.snaplen = c.integer(cap_path + ("snaplen",), cm.get("snaplen", s.capture.snaplen), 0, 262144)
        cap, cap_path = cm.get("links", "none"), cap_path + ("links",)
    if cap is not None:
        if cap in ("all", "none"):
            s.capture.links = cap
        else:
            items = c.sequence(cap_path, cap if isinstance(cap, list) else [cap] if isinstance(cap, str) else cap)
            s.capture.links = [_link_name(c, cap_path + (i,), v, topo)[0] for i, v in enumerate(items)]

    sysctls = _flat(c.mapping(("sysctls",), top.get("sysctls")))   # nested form and --set sysctls.net.x=1
    try:
        normalise_sysctls(sysctls)
    except UserError as e:
        c.fail(("sysctls",), str(e).rstrip("."))
    s.sysctls = dict(sysctls)

    nodes = c.mapping(("nodes",), top.get("nodes"))
    s.nodes = NodesSpec()
    for key, value in nodes.items():
        if key != "all" and key not in names:
            near = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else f" (nodes: all, {_names(names)})"
            c.fail(("nodes", key), f"unknown node '{key}'{hint}")
        settings = dict(c.mapping(("nodes", key), value))
        if key == "all":
            s.nodes.all = settings
        else:
            s.nodes.per_node[key] = settings

    s.workload = _workload(c, top.get("workload"), names)
    s.faults = _faults(c, top.get("faults"), topo)

    sw = c.mapping(("sweep",), top.get("sweep"), ("grid", "reps"))
    s.sweep = SweepSpec(reps=c.integer(("sweep", "reps"), sw.get("reps", 1), 1, 10000))
    for key, values in c.mapping(("sweep", "grid"), sw.get("grid")).items():
        vals = c.sequence(("sweep", "grid", key), values)
        if not vals:
            c.fail(("sweep", "grid", key), "expected a non-empty list of values")
        if key.split(".")[0] in ("sweep", "quick", "name"):
            c.fail(("sweep", "grid", key), f"cannot sweep over {key}")
        s.sweep.grid[key] = list(vals)

    quick = c.mapping(("quick",), top.get("quick"))
    for key in quick:
        if key.split(".")[0] not in TOP_KEYS or key.split(".")[0] == "quick":
            c.fail(("quick", key), f"unknown scenario key '{key}' (expected a dotted key like duration or "
                                   f"workload.drain)")
    s.quick = dict(quick)
    s.source = c.source
    return s


def _load(text: str, source: str, overrides: Sequence[str], quick: bool, check_sweep: bool = True) -> Scenario:
    if isinstance(overrides, str):    # one --set given as a bare string
        overrides = [overrides]
    data, lines = _compose(text, source)
    c = _Check(source, lines)
    if not isinstance(data, dict):
        c.fail((), f"expected a mapping of sections (name:, topology:, ...), got {_kind(data)}")
    raw = copy.deepcopy(data)
    if quick:
        q = data.get("quick")
        if isinstance(q, dict):
            for key, value in q.items():
                try:
                    path = _set_dotted(data, key, copy.deepcopy(value))
                except ValueError as e:
                    c.fail(("quick", key), str(e))
                c.origin[path] = f"{c.where(('quick', key))} (quick: {key})"
                _forget_below(c, path)
    for item in overrides:
        key, value = _parse_set(item)
        try:
            path = _set_dotted(data, key, value)
        except ValueError as e:
            raise ScenarioError(f"--set {key}: {e}.") from None
        c.origin[path] = "--set"
        _forget_below(c, path)
    scenario = _validate(c, data)
    if check_sweep:
        # every sweep value must give a valid scenario (this also checks that the key exists)
        for key, values in scenario.sweep.grid.items():
            for i, value in enumerate(values):
                trial = copy.deepcopy(data)
                trial.pop("sweep", None)
                try:
                    _set_dotted(trial, key, copy.deepcopy(value))
                    _validate(_Check(source, {}), trial)
                except ValueError as e:
                    c.fail(("sweep", "grid", key, i), str(e))
                except ScenarioError as e:
                    c.fail(("sweep", "grid", key, i), f"with {key}={_show(value)}: {e.detail}")
    return scenario


def _forget_below(c: _Check, path: Path_) -> None:
    for p in [p for p in c.origin if len(p) > len(path) and p[:len(path)] == path]:
        del c.origin[p]


def load_text(text: str, source: str = "<string>", overrides: Sequence[str] = (), quick: bool = False) -> Scenario:
    """Parse and validate a scenario from text (`source` names it in messages)."""
    return _load(text, source, overrides, quick)


def load(path: str | Path, overrides: Sequence[str] = (), quick: bool = False) -> Scenario:
    """Parse and validate a scenario file; `overrides` are --set KEY=VALUE strings."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{p}: no such scenario file.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{p}: cannot read the scenario file ({e.__class__.__name__}).") from None
    return _load(text, str(p), overrides, quick)


# ---- the resolved scenario as YAML -------------------------------------------------

def _direction_plain(d: Direction) -> dict[str, Any]:
    return {"delay": d.delay, "jitter": d.jitter, "loss": d.loss, "loss_model": _loss_model_plain(d.gilbert),
            "duplicate": d.duplicate, "reorder": d.reorder, "rate": d.rate, "queue": d.queue}


def _link_plain(l: LinkOverride) -> dict[str, Any]:
    out: dict[str, Any] = {"a": l.a, "b": l.b}
    if l.a_to_b is not None:
        out["a_to_b"] = _direction_plain(l.a_to_b)
    if l.b_to_a is not None:
        out["b_to_a"] = _direction_plain(l.b_to_a)
    return out


def to_plain(s: Scenario) -> dict[str, Any]:
    """The fully defaulted scenario as plain data in the file's own shape (units: s, bit/s, bytes, fractions)."""
    t = s.topology
    gens = []
    for g in s.workload.generators:
        ia = {"dist": g.interarrival.dist, "mean": g.interarrival.mean, "sd": g.interarrival.sd,
              "schedule": copy.deepcopy(g.interarrival.schedule)}
        gens.append({"nodes": copy.deepcopy(g.nodes), "interarrival": ia,
                     "size": {f.name: getattr(g.size, f.name) for f in fields(g.size)},
                     "recipients": {"choice": g.recipients.choice, "nodes": list(g.recipients.nodes),
                                    "weights": dict(g.recipients.weights)},
                     "priority": g.priority, "start": g.start, "stop": g.stop})
    nodes: dict[str, Any] = {"all": copy.deepcopy(s.nodes.all)}
    nodes.update(copy.deepcopy(s.nodes.per_node))
    return {
        "name": s.name, "seed": s.seed, "duration": s.duration, "time_scale": s.time_scale,
        "topology": {"generator": t.generator, "params": dict(t.params), "nodes": list(t.nodes),
                     "links": [_link_plain(l) for l in t.links],
                     "data_pool": t.data_pool, "loopback_pool": t.loopback_pool, "mgmt_pool": t.mgmt_pool},
        "link_defaults": _direction_plain(s.link_defaults),
        "links": [_link_plain(l) for l in s.links],
        "runtime": s.runtime, "routing": s.routing, "shaper": s.shaper,
        "capture": {"links": copy.deepcopy(s.capture.links), "snaplen": s.capture.snaplen},
        "nodes": nodes,
        "workload": {"warmup": s.workload.warmup, "drain": s.workload.drain, "generators": gens},
        "faults": [{"at": f.at, "action": f.action, "target": copy.deepcopy(f.target), "params": copy.deepcopy(f.params)}
                   for f in s.faults],
        "sweep": {"grid": copy.deepcopy(s.sweep.grid), "reps": s.sweep.reps},
        "quick": copy.deepcopy(s.quick),
    }


def dump_resolved(scenario: Scenario) -> str:
    """The run directory's scenario.yaml: every default written out; load_text() of it gives an equal Scenario."""
    header = (f"# resolved scenario{' from ' + scenario.source if scenario.source else ''}; units: seconds, "
              f"bits per second, bytes, fractions 0..1\n")
    return header + yaml.safe_dump(to_plain(scenario), sort_keys=False, default_flow_style=False, allow_unicode=True)
