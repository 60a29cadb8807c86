"""What a scenario section is: one top-level key, how it is read, checked and written back.

The loader validates in two passes over the registry (testbed/scenario/sections/__init__.py):
`read` turns the section's raw value into typed fields of the Scenario before
any topology exists; then the topology is built, and `check` resolves what
needs it (node and link names) or must come after it. `plain` gives the
section's value for `to_plain`/`dump_resolved`, in the file's own shape, so
that loading it again gives an equal Scenario. `default` makes the section's
attribute of a Scenario that was not given one (testbed/scenario/spec.py builds
the Scenario from the registry with these), `coerce` turns a short form given
to the Scenario's constructor into the full value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from testbed.scenario.checks import Check
from testbed.topology.model import Topology

# The Scenario (testbed/scenario/spec.py) is built from the registry of these sections, so a section cannot
# import it: to a section it is an object with one attribute per section key.
Scenario = Any

# raw is the key's value, checks.MISSING when the file does not have the key
Reader = Callable[[Check, Any, Scenario], None]
Checker = Callable[[Check, Any, Scenario, Topology], None]
Plain = Callable[[Scenario], Any]


@dataclass(frozen=True)
class Section:
    key: str                      # the top-level key
    plain: Plain                  # the resolved value as plain data (seconds, bit/s, bytes, fractions)
    read: Reader | None = None    # first pass: no topology yet
    check: Checker | None = None  # second pass: with the built topology
    needs: tuple[str, ...] = ()   # sections whose `read` must run before this one's
    # The key a scalar value of the section stands for (`routing: delay` is `routing: {policy: delay}`), so a
    # dotted override or sweep key below the section (`routing.monitor.interval`) also works on the short form.
    shorthand: str = ""
    # The Scenario attribute's default (a factory: each Scenario gets its own value); None: no default, the
    # Scenario must be given it (its name).
    default: Callable[[], Any] | None = None
    coerce: Callable[[Any], Any] | None = None     # a short form given to the Scenario's constructor -> full value


def read_order(sections: tuple[Section, ...]) -> list[Section]:
    """`sections` in registry order, except that a section's `needs` are read before it."""
    by_key = {s.key: s for s in sections}
    out: list[Section] = []
    placed: set[str] = set()

    def place(section: Section) -> None:
        if section.key in placed:
            return
        placed.add(section.key)
        for key in section.needs:
            place(by_key[key])
        out.append(section)

    for section in sections:
        place(section)
    return out
