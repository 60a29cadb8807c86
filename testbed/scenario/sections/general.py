"""The scenario's scalar keys: name, seed, duration, time_scale, runtime, shaper."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed import units
from testbed.scenario.checks import Check, given, show
from testbed.scenario.sections.base import Scenario, Section

RUNTIMES = ("netns", "docker")
SHAPERS = ("auto", "netem", "wire")


def _read_name(c: Check, raw: Any, s: Scenario) -> None:
    name = c.text(("name",), given(raw, Path(c.source).stem if not c.source.startswith("<") else "scenario"))
    if not all(ch.isalnum() or ch in "_-." for ch in name) or len(name) > 64:
        c.fail(("name",), f"expected a name of letters, digits, '-', '_' or '.', got {show(name)}")
    if name in (".", ".."):     # the name becomes a directory (runs/<name>/): '.' and '..' are not one of their own
        c.fail(("name",), f"expected a name other than {show(name)} (it names the run directory)")
    s.name = name


def _read_seed(c: Check, raw: Any, s: Scenario) -> None:
    s.seed = c.integer(("seed",), given(raw, s.seed), 0, 2 ** 63 - 1)


def _read_duration(c: Check, raw: Any, s: Scenario) -> None:
    s.duration = c.unit(("duration",), given(raw, s.duration), units.parse_duration, positive=True)


def _read_time_scale(c: Check, raw: Any, s: Scenario) -> None:
    s.time_scale = c.number(("time_scale",), given(raw, s.time_scale), positive=True)


def _read_runtime(c: Check, raw: Any, s: Scenario) -> None:
    s.runtime = c.choice(("runtime",), given(raw, s.runtime), RUNTIMES)


def _read_shaper(c: Check, raw: Any, s: Scenario) -> None:
    s.shaper = c.choice(("shaper",), given(raw, s.shaper), SHAPERS)


NAME = Section("name", read=_read_name, plain=lambda s: s.name)
SEED = Section("seed", read=_read_seed, plain=lambda s: s.seed, default=lambda: 1)
DURATION = Section("duration", read=_read_duration, plain=lambda s: s.duration,
                   default=lambda: 60.0)
TIME_SCALE = Section("time_scale", read=_read_time_scale, plain=lambda s: s.time_scale,
                     default=lambda: 1.0)
RUNTIME = Section("runtime", read=_read_runtime, plain=lambda s: s.runtime,
                  default=lambda: "netns")
SHAPER = Section("shaper", read=_read_shaper, plain=lambda s: s.shaper,
                 default=lambda: "auto")
