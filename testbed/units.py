"""Parsers for the unit-bearing values of scenario files and imported topologies.

Results: durations in seconds, rates in bits per second, sizes in bytes,
probabilities as fractions 0..1. A bare number means the base unit (seconds,
bits/s, bytes, fraction).

Rate suffixes follow tc(8): ``bit``/``kbit``/``Mbit``/``Gbit`` are bits per
second; ``bps``/``kbps``/``Mbps``/``Gbps`` are BYTES per second (so "1.5Mbps"
is 12 000 000 bit/s). Write ``Mbit`` when you mean megabits. Size suffixes:
``B``, ``KB``/``MB``/``GB`` (powers of 1000) and ``KiB``/``MiB``/``GiB``
(powers of 1024).
"""
from __future__ import annotations

import math
import re

_NUMBER = r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"

_DURATION = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
             "m": 60.0, "min": 60.0, "h": 3600.0}
_RATE = {"": 1.0, "bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9,
         "bps": 8.0, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
_SIZE = {"": 1, "b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3,
         "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3}


class UnitError(ValueError):
    """A value that does not parse as the expected unit; the message says what was expected."""


def _split(value: object, table: dict, lower: bool, expected: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise UnitError(f"{expected}, got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise UnitError(f"{expected}, got {value!r}")
        return float(value), ""
    if not isinstance(value, str):
        raise UnitError(f"{expected}, got {value!r}")
    m = re.fullmatch(_NUMBER + r"\s*([A-Za-zµ]*)", value.strip())
    if not m:
        raise UnitError(f'{expected}, got "{value}"')
    suffix = m.group(2).lower() if lower else m.group(2)
    if suffix not in table:
        raise UnitError(f'{expected}, got "{value}" (unknown unit "{m.group(2)}")')
    number = float(m.group(1))
    if not math.isfinite(number):
        raise UnitError(f'{expected}, got "{value}"')
    return number, suffix


def parse_duration(value: object) -> float:
    """"25ms", "1.5s", "2m", "500us", "1h" or a bare number of seconds -> seconds (>= 0)."""
    expected = 'expected a duration like "25ms"'
    number, suffix = _split(value, _DURATION, True, expected)
    seconds = number * _DURATION[suffix]
    if seconds < 0:
        raise UnitError(f"{expected} (not negative), got {value!r}")
    return seconds


def parse_rate(value: object, zero: bool = False) -> float:
    """"10Mbit", "4800bit", "100kbit", "1.5Mbps" (bytes/s, as tc) or bare bits/s -> bits/s (> 0; >= 0 with
    `zero`, for a caller that gives 0 a meaning of its own)."""
    expected = 'expected a rate like "10Mbit"'
    number, suffix = _split(value, _RATE, True, expected)
    bits = number * _RATE[suffix]
    if bits < 0 or (bits == 0 and not zero):
        raise UnitError(f"{expected} (greater than zero), got {value!r}")
    return bits


def parse_size(value: object) -> int:
    """"64KiB", "1MB", "1000B" or a bare number of bytes -> bytes (whole, >= 0)."""
    expected = 'expected a size like "64KiB"'
    number, suffix = _split(value, _SIZE, True, expected)
    size = number * _SIZE[suffix]
    if size < 0 or size != int(size):
        raise UnitError(f"{expected} (a whole number of bytes, not negative), got {value!r}")
    return int(size)


def parse_percent(value: object) -> float:
    """"1%", "0.5%" or a fraction 0..1 -> fraction 0..1."""
    expected = 'expected a percentage like "1%" or a fraction from 0 to 1'
    if isinstance(value, str) and value.strip().endswith("%"):
        number, _ = _split(value.strip()[:-1], {"": 1.0}, True, expected)
        fraction = number / 100.0
    else:
        fraction, _ = _split(value, {"": 1.0}, True, expected)
    if not 0.0 <= fraction <= 1.0:
        raise UnitError(f"{expected}, got {value!r} (outside 0..1)")
    return fraction
