"""Error reporting with locations, and typed getters, for every scenario section.

A `Check` knows where each key path came from (file and line, `--set`, or a
`quick:` entry) and raises a `ScenarioError` naming that place, the key path
and what was expected, e.g. ``quickstart.yaml:14 topology.links[3].delay:
expected a duration like "25ms", got "fast"``.
"""
from __future__ import annotations

import difflib
import math
from typing import Any, Callable, Iterable, NoReturn, Sequence

from node.errors import UserError
from testbed import units

KeyPath = tuple[Any, ...]          # str keys and int list indices


class _Missing:
    """The value of a top-level key the file does not have (unlike null, which it has)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def given(value: Any, default: Any) -> Any:
    """`value`, or `default` when the key is absent (a key written with no value stays None)."""
    return default if value is MISSING else value


class ScenarioError(UserError):
    """A bad scenario file, override or sweep; the message says where and what was expected."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


def path_text(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def show(value: Any) -> str:
    """A value as an error message quotes it: strings in double quotes, the rest as repr."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def kind_of(value: Any) -> str:
    return {list: "a list", dict: "a mapping", type(None): "nothing"}.get(type(value), show(value))


def names_text(names: list[str]) -> str:
    """At most twelve names for a hint, then "..."."""
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")


def locate(origins: dict[KeyPath, str], path: KeyPath, default: str) -> str:
    """Where the value at `path` came from: its own origin or that of the nearest key above it."""
    for i in range(len(path), -1, -1):
        if path[:i] in origins:
            return origins[path[:i]]
    return default


class Check:
    """Error reporting with locations, and typed getters."""

    def __init__(self, source: str, lines: dict[KeyPath, int]) -> None:
        self.source = source
        self.origin: dict[KeyPath, str] = {p: f"{source}:{n}" for p, n in lines.items()}

    def where(self, path: KeyPath) -> str:
        return locate(self.origin, path, self.source)

    def fail(self, path: KeyPath, message: str) -> NoReturn:
        detail = f"{path_text(path) or '(top level)'}: {message}"
        raise ScenarioError(f"{self.where(path)} {detail}", detail)

    def forget_below(self, path: KeyPath) -> None:
        """Drop the origins of keys under `path` (an override replaced the whole value there)."""
        for p in [p for p in self.origin if len(p) > len(path) and p[:len(path)] == path]:
            del self.origin[p]

    # typed getters
    def mapping(self, path: KeyPath, value: Any, allowed: Iterable[str] | None = None) -> dict[str, Any]:
        if value is None or value is MISSING:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping (key: value lines), got {kind_of(value)}")
        if allowed is not None:
            allowed = list(allowed)
            for key in value:
                if key not in allowed:
                    near = difflib.get_close_matches(key, allowed, n=1)
                    hint = (f" (did you mean '{near[0]}'?)" if near else
                            f" (expected one of: {', '.join(allowed)})" if allowed else " (no keys are allowed here)")
                    self.fail(path + (key,), f"unknown key '{key}'{hint}")
        return value

    def sequence(self, path: KeyPath, value: Any) -> list[Any]:
        if value is None or value is MISSING:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {kind_of(value)}")
        return value

    def integer(self, path: KeyPath, value: Any, low: int | None = None, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected a whole number, got {show(value)}")
        if low is not None and value < low or high is not None and value > high:
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            self.fail(path, f"expected a whole number {bounds}, got {value}")
        return value

    def number(self, path: KeyPath, value: Any, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(path, f"expected a number, got {show(value)}")
        if positive and value <= 0:
            self.fail(path, f"expected a number greater than zero, got {value}")
        return float(value)

    def not_negative(self, path: KeyPath, value: Any, what: str = "a number") -> float:
        out = self.number(path, value)
        if out < 0:
            self.fail(path, f"expected {what} not below zero, got {show(value)}")
        return out

    def share(self, path: KeyPath, value: Any) -> float:
        """A fraction not below zero, written 0.1 or "10%" (may exceed 1)."""
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                value = float(value.strip()[:-1]) / 100.0
            except ValueError:
                self.fail(path, f'expected a fraction like 0.1 or "10%", got {show(value)}')
        return self.not_negative(path, value)

    def boolean(self, path: KeyPath, value: Any) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {show(value)}")
        return value

    def text(self, path: KeyPath, value: Any) -> str:
        if not isinstance(value, str) or not value:
            self.fail(path, f"expected a non-empty string, got {show(value)}")
        return value

    def choice(self, path: KeyPath, value: Any, choices: Sequence[str]) -> str:
        if value not in choices:
            self.fail(path, f"expected one of {', '.join(choices)}, got {show(value)}")
        return value

    def unit(self, path: KeyPath, value: Any, parser: Callable[[Any], Any], positive: bool = False) -> Any:
        try:
            out = parser(value)
        except units.UnitError as e:
            self.fail(path, str(e))
        if positive and out <= 0:
            self.fail(path, f"expected a value greater than zero, got {show(value)}")
        return out
