"""Generator `mininet`: a Mininet `Topo` subclass (the user's own Python file) as a wanbed topology.

The user's file is executed as Mininet would (it is their code) and their class
is instantiated with the `mininet` package's own `Topo`; nothing of Mininet that
needs Open vSwitch or netem is used. While it runs, `Topo.addNode` and
`Topo.addLink` are wrapped to note the line of the user's file that called them,
so an option wanbed cannot honour is reported at its line.

Hosts become hosts with node daemons. A switch becomes a hub host without a
node daemon joined to its neighbours by shaped point-to-point links, so every
`addLink` option keeps its meaning (a LAN segment would not be shaped); the
hosts' MTAs become neighbours across the hubs (testbed/topology/overlay.py).

Link options in Mininet's units: `bw` Mbit/s, `delay`/`jitter` strings ("10ms",
"1.5ms", "2us", "1s"), `loss` percent 0..100, `max_queue_size` packets.
Mininet gives options passed to `addLink` directly to both interfaces and
`params1`/`params2` to the interface of node1/node2 (the direction node1 ->
node2 / node2 -> node1), the direct ones winning (mininet/link.py, `Link`).
"""
from __future__ import annotations

import json
import math
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from testbed import units
from testbed.topology.importers import Imported, ImportedLink, ImportFailed, check_name, warn_once

PARAM = "file"      # the scenario key errors point at

# Link options and the Direction field each sets (value converted from Mininet's unit).
LINK_FIELDS = ("bw", "delay", "jitter", "loss", "max_queue_size")
# Options that change nothing about the emulated link here: interface names, MAC and IP addresses, offloads,
# the tc qdisc flavour used for `bw` (the rate means the same), and what Topo.addLink itself records.
LINK_IGNORED = ("intfName1", "intfName2", "addr1", "addr2", "ip", "mac", "gro", "txo", "rxo",
                "use_hfsc", "use_tbf", "fast")
LINK_STRUCTURE = ("node1", "node2", "port1", "port2", "port", "params1", "params2", "cls")
LINK_CLASSES = ("Link", "TCLink", "TCULink")     # plain veth or tc-shaped: the options say what is shaped
HOST_IGNORED = ("ip", "mac", "defaultRoute", "privateDirs", "inNamespace")
SWITCH_IGNORED = ("dpid", "protocols", "failMode", "stp", "prio", "inband", "listenPort", "datapath", "opts",
                  "batch", "reconnectms", "verbose", "inNamespace", "ip", "mac")


# ---- reading the user's file ------------------------------------------------------------------------

_cache: dict[tuple[Any, ...], Imported] = {}


def load(path: str, cls: str = "", args: dict[str, Any] | None = None) -> Imported:
    """The topology of class (or `topos` key) `cls` in the Mininet file `path`, built with `args`."""
    args = dict(args or {})
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        raise ImportFailed(PARAM, f"{path}: no such Mininet topology file") from None
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, cls, json.dumps(args, sort_keys=True, default=repr))
    if key not in _cache:
        _cache[key] = _read(p, cls, args)
    imported = _cache[key]
    if imported.warnings:
        warn_once(key[:1], f"{p.name}: ignored (no effect in wanbed): {', '.join(imported.warnings)}")
    return imported


def _read(path: Path, cls: str, args: dict[str, Any]) -> Imported:
    try:
        from mininet.topo import Topo
    except ImportError:   # pragma: no cover - the third-party mininet package (requirements.lock installs it)
        raise ImportFailed(PARAM, "the generator mininet needs the 'mininet' package (make setup installs it)") \
            from None
    source = path.read_text(encoding="utf-8", errors="replace")
    filename = str(path.resolve())
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as e:
        raise ImportFailed(PARAM, f"{path.name}:{e.lineno}: not valid Python: {e.msg}") from None
    namespace: dict[str, Any] = {"__name__": "wanbed_mininet_topology", "__file__": filename}
    recorder = _Recorder(filename)
    with _user_code(path, filename, "running"), recorder.wrapping(Topo):
        exec(code, namespace)                      # noqa: S102 - the user's own topology, as Mininet runs it
    factory = _factory(namespace, cls, path, Topo)
    with _user_code(path, filename, f"building {cls or 'the topology'}"), recorder.wrapping(Topo):
        topo = factory(**args)
    if not isinstance(topo, Topo):
        raise ImportFailed("class", f"{path.name}: {cls or 'the topology'} gave {type(topo).__name__}, "
                                    f"not a mininet.topo.Topo")
    return _convert(topo, recorder, path.name)


@contextmanager
def _user_code(path: Path, filename: str, doing: str) -> Iterator[None]:
    """Run the user's code with its folder importable; an exception becomes one line with its file and line."""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        yield
    except ImportFailed:
        raise
    except (Exception, SystemExit) as e:          # the user's code: any failure is theirs, no traceback
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == filename]
        line = f":{frames[-1].lineno}" if frames else ""
        text = str(e) if not isinstance(e, SystemExit) else f"exit({e.code})"
        raise ImportFailed(PARAM, f"{path.name}{line}: {type(e).__name__} while {doing}: {text}") from None
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass


def _factory(namespace: dict[str, Any], cls: str, path: Path, Topo: type) -> Callable[..., Any]:
    """The class named `cls` (or `topos[cls]`, Mininet's `--custom` convention); without a name the only one."""
    topos = namespace.get("topos") if isinstance(namespace.get("topos"), dict) else {}
    classes = {k: v for k, v in namespace.items()
               if isinstance(v, type) and issubclass(v, Topo) and v.__module__ == namespace["__name__"]}
    if cls:
        if cls in topos and callable(topos[cls]):
            return topos[cls]
        found = namespace.get(cls)
        if isinstance(found, type) and issubclass(found, Topo):
            return found
        choices = sorted(set(topos) | set(classes))
        raise ImportFailed("class", f"{path.name} has no Topo class or topos entry {cls!r}"
                                    f" (it has: {', '.join(choices) or 'none'})")
    choices = list(topos) or list(classes)
    if len(choices) != 1:
        raise ImportFailed("class", f"{path.name} defines {len(choices)} topologies"
                                    f"{' (' + ', '.join(choices) + ')' if choices else ''}; name one with class:")
    return topos[choices[0]] if topos else classes[choices[0]]


class _Recorder:
    """Notes the user's line of every addNode/addLink call (Mininet's own topologies have no user line)."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.node_lines: dict[str, int] = {}
        self.link_lines: dict[tuple[str, str, Any], int] = {}

    def _caller_line(self) -> int:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self.filename:
                return frame.f_lineno
            frame = frame.f_back
        return 0

    @contextmanager
    def wrapping(self, Topo: type) -> Iterator[None]:
        add_node, add_link = Topo.addNode, Topo.addLink
        recorder = self

        def addNode(topo: Any, name: str, **opts: Any) -> Any:
            recorder.node_lines.setdefault(name, recorder._caller_line())
            return add_node(topo, name, **opts)

        def addLink(topo: Any, node1: str, node2: str, *rest: Any, **opts: Any) -> Any:
            line = recorder._caller_line()
            key = add_link(topo, node1, node2, *rest, **opts)
            recorder.link_lines[(node1, node2, key)] = line
            return key

        Topo.addNode, Topo.addLink = addNode, addLink
        try:
            yield
        finally:
            Topo.addNode, Topo.addLink = add_node, add_link


# ---- Mininet's topology -> Imported -------------------------------------------------------------------

def _at(file: str, line: int) -> str:
    return f"{file}:{line}" if line else file


def _convert(topo: Any, rec: _Recorder, file: str) -> Imported:
    out = Imported()
    ignored: dict[str, list[int]] = {}      # "host option ip" -> lines (one warning for them all)
    for name in topo.nodes(sort=False):
        line = rec.node_lines.get(name, 0)
        where = _at(file, line)
        check_name(PARAM, where, name)
        info = dict(topo.nodeInfo(name))
        switch = bool(info.pop("isSwitch", False))
        for opt in info:
            if opt in (SWITCH_IGNORED if switch else HOST_IGNORED) or (switch and opt == "cls"
                                                                      and _is_switch_class(info[opt])):
                _note(ignored, f"{'switch' if switch else 'host'} option {opt}", line)
            else:
                why = ("a host class decides what runs in the host; wanbed runs a node daemon there"
                       if opt == "cls" else "it would change the host's behaviour" if opt in ("cpu", "cores")
                       else "unknown option")
                raise ImportFailed(PARAM, f"{where}: {'addSwitch' if switch else 'addHost'}({name!r}): "
                                          f"option {opt!r} is not supported ({why})")
        out.nodes.append((name, not switch))
    seen: dict[frozenset[str], str] = {}
    for node1, node2, key, info in topo.links(sort=False, withKeys=True, withInfo=True):
        line = rec.link_lines.get((node1, node2, key), 0)
        where = f"{_at(file, line)}: addLink({node1!r}, {node2!r})"
        if node1 == node2:
            raise ImportFailed(PARAM, f"{where}: a link cannot connect a node to itself")
        pair = frozenset((node1, node2))
        if pair in seen:
            raise ImportFailed(PARAM, f"{where}: a second link between {node1} and {node2}; "
                                      f"wanbed has one link per pair of hosts")
        seen[pair] = f"{node1}-{node2}"
        there, back = _link_options(info, where, ignored, line)
        out.links.append(ImportedLink(node1, node2, there, back))
    out.warnings = [what + (f" (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})"
                            if lines else "") for what, lines in ignored.items()]
    return out


def _note(ignored: dict[str, list[int]], what: str, line: int) -> None:
    lines = ignored.setdefault(what, [])
    if line and line not in lines:
        lines.append(line)


def _is_switch_class(value: Any) -> bool:
    try:
        from mininet.node import Switch
    except Exception:   # pragma: no cover
        return False
    return isinstance(value, type) and issubclass(value, Switch)


def _link_options(info: dict[str, Any], where: str, ignored: dict[str, list[int]],
                  line: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Direction fields for node1 -> node2 and node2 -> node1 from one link's options."""
    cls = info.get("cls")
    if cls is not None and getattr(cls, "__name__", cls) not in LINK_CLASSES:
        raise ImportFailed(PARAM, f"{where}: option 'cls' ({getattr(cls, '__name__', cls)}) is not supported "
                                  f"(wanbed shapes links itself: {', '.join(LINK_CLASSES)} are accepted)")
    shared: dict[str, Any] = {}
    for opt, value in info.items():
        if opt in LINK_STRUCTURE:
            continue
        shared.update(_one_option(opt, value, where, ignored, line))
    directions = []
    for key in ("params1", "params2"):
        given = info.get(key) or {}
        if not isinstance(given, dict):
            raise ImportFailed(PARAM, f"{where}: {key} must be a dict of interface options, got {given!r}")
        fields: dict[str, Any] = {}
        for opt, value in given.items():
            if opt == "port":
                continue
            fields.update(_one_option(opt, value, f"{where} {key}", ignored, line))
        fields.update(shared)          # Mininet: options given directly override params1/params2
        directions.append(fields)
    return directions[0], directions[1]


def _one_option(opt: str, value: Any, where: str, ignored: dict[str, list[int]], line: int) -> dict[str, Any]:
    if opt in LINK_IGNORED:
        _note(ignored, f"link option {opt}", line)
        return {}
    if opt not in LINK_FIELDS:
        raise ImportFailed(PARAM, f"{where}: link option {opt!r} is not supported "
                                  f"(wanbed maps {', '.join(LINK_FIELDS)})")
    try:
        return _field(opt, value)
    except (units.UnitError, ValueError, TypeError) as e:
        raise ImportFailed(PARAM, f"{where}: {opt}={value!r}: {e}") from None


def _field(opt: str, value: Any) -> dict[str, Any]:
    """One Mininet link option as a Direction field in wanbed's base units."""
    if opt == "bw":
        if value is None:
            return {"rate": None}
        bw = _number(value, "bw in Mbit/s")
        if bw < 0:
            raise ValueError("expected a bandwidth in Mbit/s, not negative")
        return {"rate": rate_from_bw(bw) if bw else None}      # Mininet shapes nothing for bw=0
    if opt in ("delay", "jitter"):
        if value is None:
            return {opt: 0.0}
        if not isinstance(value, str):
            # tc would read a bare number as microseconds; Mininet users mean a string with its unit
            raise ValueError(f'expected a string with a unit like "10ms"')
        return {opt: units.parse_duration(value)}
    if opt == "loss":
        if value is None:
            return {"loss": 0.0}
        loss = _number(value, "loss in percent")
        if not 0 <= loss <= 100:
            raise ValueError("expected a loss in percent from 0 to 100")
        return {"loss": loss_from_percent(loss)}
    # max_queue_size
    if value is None:
        return {}
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("expected a whole number of packets, at least 1")
    return {"queue": value}


def rate_from_bw(bw: float) -> float:
    """Mininet's bw (Mbit/s) in bit/s; the exporter writes numbers this gives back exactly."""
    return bw * 1e6


def loss_from_percent(percent: float) -> float:
    return percent / 100.0


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"expected a number ({what})")
    return float(value)


__all__ = ["load", "LINK_FIELDS", "loss_from_percent", "rate_from_bw"]
