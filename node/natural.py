"""Natural sort order: digit runs compare as numbers, so b2 < b10 and '2667bit' < '16000bit'.

One key serves two readers that must agree with themselves over time:
- route tie-breaks (node/routing/spf.py) sort node names with it, and every node of a network must
  pick the same route for the same graph, so the order of node names is fixed: text and digit runs
  alternate, the runs compare as integers, and the name itself breaks ties (b2 vs b02);
- tables of swept values (testbed/reproduce/table.py) sort numbers, decimals and numbers with a unit.

The two agree because a node name holds only letters, digits, '_' and '-' (node/names.py): a leading
decimal such as '0.25' needs a '.', which no node name has, so reading it as one number changes no
node name's place. A sign or an exponent in a string stays text ('-1' and '1e3' are valid node names,
and their place is the one above); values given as numbers (int, float) compare by their value.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Union

_RUNS = re.compile(r"([0-9]+)")                 # ASCII only: int() would also read other scripts' digits
_LEADING_DECIMAL = re.compile(r"[0-9]+\.[0-9]+")

Number = Union[int, Decimal]


def natural_key(value: Any) -> tuple[tuple[Union[str, Number], ...], str]:
    """Sort key: (text and numbers alternating, starting and ending with text; the text itself).

    Every key has text at even and numbers at odd positions, so any two keys compare without mixing a
    str with a number, whatever mix of values is sorted.
    """
    if isinstance(value, str):
        text = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        # repr of a float is its shortest exact spelling: 0.1 compares equal to the string '0.1'
        number: Number = value if isinstance(value, int) else Decimal(repr(value))
        return ("", number, ""), str(value)
    else:
        text = str(value)
    head: tuple[Union[str, Number], ...] = ()
    rest = text
    m = _LEADING_DECIMAL.match(text)
    if m:
        head, rest = ("", Decimal(m.group())), text[m.end():]
    parts = _RUNS.split(rest)        # text, digits, text, ...: odd positions are digit runs
    return head + tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), text
