"""Scenario files: YAML with line numbers -> validated, defaulted `Scenario`.

Every error is a ScenarioError naming the file, line and key path and what was
expected, e.g. ``quickstart.yaml:14 topology.links[3].delay: expected a
duration like "25ms", got "fast"``. The YAML is composed into nodes first so
each mapping value and sequence item keeps its line; `--set` overrides and the
`quick:` section are applied to the plain data before validation and remember
where they came from.

Each top-level key is a section (testbed/scenario/sections/): the loader reads
every section, builds the topology, then lets every section check its cross
references against it. The checking helpers are in testbed/scenario/checks.py.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Sequence

import yaml

from testbed.scenario.checks import MISSING, Check, KeyPath, ScenarioError, kind_of, path_text, show
from testbed.scenario.sections import SCENARIO_KEYS, SECTIONS, read_order
from testbed.scenario.sections import nodes as nodes_section, routing as routing_section, topology as topology_section
from testbed.scenario.spec import Scenario

__all__ = ["ScenarioError", "dump_resolved", "load", "load_text", "path_text", "to_plain"]


# ---- YAML with marks -------------------------------------------------------------

ALIASES_REFUSED = "YAML anchors and aliases (&name, *name) are not allowed in scenario and reproduction files; write the value out"


class _AliasFound(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _NoAliasLoader(yaml.SafeLoader):
    """A SafeLoader that stops at the first anchor or alias. Aliases let a few hundred bytes stand for
    billions of values (each level of "billion laughs" multiplies by ten), and the loader runs as root;
    no shipped scenario uses them, so they are refused rather than counted."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _AliasFound(event.start_mark.line + 1)
        return super().compose_node(parent, index)


def _compose_root(text: str) -> yaml.Node | None:
    loader = _NoAliasLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def plain_yaml(text: str, source: str) -> Any:
    """A YAML document of the project's own (a scenario, a reproduction) as plain data, under the scenario's
    rule: an anchor or alias is one `source:line` error."""
    loader = _NoAliasLoader(text)
    try:
        return loader.get_single_data()
    except _AliasFound as e:
        raise ScenarioError(f"{source}:{e.line}: {ALIASES_REFUSED}.") from None
    finally:
        loader.dispose()


def _compose(text: str, source: str) -> tuple[Any, dict[KeyPath, int]]:
    try:
        root = _compose_root(text)
    except _AliasFound as e:
        raise ScenarioError(f"{source}:{e.line}: {ALIASES_REFUSED}.") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ScenarioError(f"{source}{line}: not valid YAML: {e.problem or e.context}.") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{source}: not valid YAML: {e}.") from None
    lines: dict[KeyPath, int] = {}
    constructor = yaml.SafeLoader("")

    def build(node: yaml.Node, path: KeyPath) -> Any:
        lines[path] = node.start_mark.line + 1
        if len(path) > 40:
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


# ---- overrides ------------------------------------------------------------------------

# top-level key -> the key its short scalar form stands for (see Section.shorthand)
SHORTHANDS: dict[str, str] = {s.key: s.shorthand for s in SECTIONS if s.shorthand}


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> KeyPath:
    """Set data[a][b][2][c] = value for key "a.b.2.c"; returns the path. A section written in its short
    scalar form is first expanded to its mapping when the key goes below it (SHORTHANDS)."""
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
            if not last and i == 0 and SHORTHANDS.get(seg) and _is_scalar(node.get(seg)):
                node[seg] = {SHORTHANDS[seg]: node[seg]}      # `routing: delay` -> {policy: delay}
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


def _is_scalar(value: Any) -> bool:
    return value is not None and not isinstance(value, (dict, list))


def _parse_set(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ScenarioError(f"--set {item}: expected KEY=VALUE, e.g. --set duration=30s.")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not raw.strip():
        return key, ""
    try:
        root = _compose_root(raw)
        value = yaml.SafeLoader("").construct_document(root) if root is not None else None
    except _AliasFound:
        raise ScenarioError(f"--set {key}: {ALIASES_REFUSED}.") from None
    except yaml.YAMLError:
        raise ScenarioError(f"--set {key}: the value {raw!r} is not a YAML scalar, list or mapping.") from None
    return key, value


def _grid_index(data: dict[str, Any], key: str, value: Any) -> int | None:
    """The index of `value` among the file's sweep.grid values for `key`, if it is one of them."""
    sweep = data.get("sweep")
    grid = sweep.get("grid") if isinstance(sweep, dict) else None
    values = grid.get(key) if isinstance(grid, dict) else None
    for i, v in enumerate(values if isinstance(values, list) else []):
        if type(v) is type(value) and v == value:
            return i
    return None


# ---- validation ------------------------------------------------------------------------

def _validate(c: Check, data: Any) -> Scenario:
    top = c.mapping((), data, SCENARIO_KEYS)
    s = Scenario(name="")
    for section in read_order(SECTIONS):
        if section.read is not None:
            section.read(c, top.get(section.key, MISSING), s)
    topo = topology_section.build(c, s)
    for section in SECTIONS:
        if section.check is not None:
            section.check(c, top.get(section.key, MISSING), s, topo)
    nodes_section.check_daemon_references(c, s, topo)     # workload and faults naming daemon-less hosts
    routing_section.check_probe_links(c, s, topo)         # probe settings on links between MTA neighbours
    s.source = c.source
    s.origins = dict(c.origin)
    return s


def _load(text: str, source: str, overrides: Sequence[str], quick: bool, check_sweep: bool = True) -> Scenario:
    if isinstance(overrides, str):    # one --set given as a bare string
        overrides = [overrides]
    data, lines = _compose(text, source)
    c = Check(source, lines)
    if not isinstance(data, dict):
        c.fail((), f"expected a mapping of sections (name:, topology:, ...), got {kind_of(data)}")
    if quick:
        q = data.get("quick")
        if isinstance(q, dict):
            for key, value in q.items():
                try:
                    path = _set_dotted(data, key, copy.deepcopy(value))
                except ValueError as e:
                    c.fail(("quick", key), str(e))
                c.origin[path] = f"{c.where(('quick', key))} (quick: {key})"
                c.forget_below(path)
    for item in overrides:
        key, value = _parse_set(item)
        try:
            path = _set_dotted(data, key, value)
        except ValueError as e:
            raise ScenarioError(f"--set {key}: {e}.") from None
        swept = _grid_index(data, key, value)
        # the runner hands each sweep cell's values over as --set: an error names the grid line instead
        c.origin[path] = "--set" if swept is None else \
            f"{c.where(('sweep', 'grid', key, swept))} (sweep.grid: {key}={show(value)})"
        c.forget_below(path)
    scenario = _validate(c, data)
    if check_sweep:
        # every sweep value must give a valid scenario (this also checks that the key exists)
        for key, values in scenario.sweep.grid.items():
            for i, value in enumerate(values):
                trial = copy.deepcopy(data)
                trial.pop("sweep", None)
                try:
                    _set_dotted(trial, key, copy.deepcopy(value))
                    _validate(Check(source, {}), trial)
                except ValueError as e:
                    c.fail(("sweep", "grid", key, i), str(e))
                except ScenarioError as e:
                    c.fail(("sweep", "grid", key, i), f"with {key}={show(value)}: {e.detail}")
    return scenario


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

def to_plain(s: Scenario) -> dict[str, Any]:
    """The fully defaulted scenario as plain data in the file's own shape (units: s, bit/s, bytes, fractions)."""
    return {section.key: section.plain(s) for section in SECTIONS}


# Node settings that are secrets: the run directory's copies of a scenario show that one was set, never its value
# (only the node's own node.yaml, 0600, carries it).
SECRET_KEYS = ("control_token",)
HIDDEN = "(hidden)"


def dump_resolved(scenario: Scenario) -> str:
    """The run directory's scenario.yaml: every default written out; load_text() of it gives an equal Scenario,
    but for the values of SECRET_KEYS, which are written as HIDDEN."""
    header = (f"# resolved scenario{' from ' + scenario.source if scenario.source else ''}; units: seconds, "
              f"bits per second, bytes, fractions 0..1\n")
    return header + yaml.safe_dump(hide_secrets(to_plain(scenario)), sort_keys=False, default_flow_style=False,
                                   allow_unicode=True)


def hide_secrets(value: Any) -> Any:
    """A copy of plain data with the non-empty values of SECRET_KEYS (at any depth) replaced by HIDDEN."""
    if isinstance(value, dict):
        return {k: HIDDEN if k in SECRET_KEYS and value[k] else hide_secrets(value[k]) for k in value}
    if isinstance(value, list):
        return [hide_secrets(v) for v in value]
    return value


def hide_secret_sets(sets: Sequence[str]) -> list[str]:
    """`--set KEY=VALUE` strings as a run records them: a secret key's value is HIDDEN."""
    out = []
    for item in sets:
        key, eq, _value = item.partition("=")
        out.append(f"{key}={HIDDEN}" if eq and key.strip().rsplit(".", 1)[-1] in SECRET_KEYS else item)
    return out
