"""Unit-bearing option values (`--delay 25ms`, `--rate 10Mbit`, `--size 100kB`, `--lifetime 10s`): the scenario
loader's parsers (testbed/units.py), so a value means the same on the command line as in a file; a bad one is
one UserError naming the option."""
from __future__ import annotations

from typing import Callable, TypeVar

from node.errors import UserError
from testbed import units

T = TypeVar("T", int, float)


def _parse(fn: Callable[[str], T], text: str, what: str) -> T:
    try:
        return fn(text)
    except units.UnitError as e:
        raise UserError(f"{what}: {str(e).rstrip('.')}.") from None


def parse_duration(text: str, what: str) -> float:
    return float(_parse(units.parse_duration, text, what))


def parse_rate(text: str, what: str, zero: bool = False) -> float:
    return float(_parse(lambda t: units.parse_rate(t, zero), text, what))


def parse_percent(text: str, what: str) -> float:
    return float(_parse(units.parse_percent, text, what))


def parse_size(text: str, what: str) -> int:
    return int(_parse(units.parse_size, text, what))
