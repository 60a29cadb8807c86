"""The scenario, as typed data. The loader (testbed/scenario/loader.py) turns a
YAML file into these dataclasses, filling defaults and validating; everything
downstream (network, node configs, workload, faults, sweeps) reads only these.

`Scenario` has one attribute per section of the registry
(testbed/scenario/sections/__init__.py), with the default that section gives,
plus `source` and `origins` (where each key was set: `where` names it in
errors found after loading); it is built from the registry, so a new section
is its own file and one registry line, never an edit here. The sections' value
types live in testbed/scenario/parts.py and are re-exported here for the
callers that know them by this module. Defaults live with the sections; `dump_resolved` writes
them out in full so a run can be repeated exactly. Units after loading:
seconds, bits per second, bytes, probabilities 0..1. Model time vs wall time:
durations in the scenario are *model* seconds; `time_scale` (wall seconds per
model second) is applied by the code that schedules things, never by the loader.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from testbed.scenario.checks import KeyPath, locate
from testbed.scenario.parts import (CaptureSpec, ConsumerSpec, Fault, Generator, Interarrival, LinkOverride,
                                    NodesSpec, PublishSpec, RateControlSpec, RecipientChoice, RoutingSpec,
                                    SecuritySpec, SizeDist, SubscriptionSpec, SweepSpec, TopologySpec, WorkloadSpec)
from testbed.scenario.sections import SECTIONS
from testbed.scenario.sections.base import Section

__all__ = ["CaptureSpec", "ConsumerSpec", "Fault", "Generator", "Interarrival", "LinkOverride", "NodesSpec",
           "PublishSpec", "RateControlSpec", "RecipientChoice", "RoutingSpec", "Scenario", "SecuritySpec", "SizeDist",
           "SubscriptionSpec", "SweepSpec", "TopologySpec", "WorkloadSpec"]


def _field(section: Section) -> tuple[str, Any, Any]:
    if section.default is None:       # no default: every Scenario is given it (the name)
        return section.key, Any, dataclasses.field()
    return section.key, Any, dataclasses.field(default_factory=section.default)


def _where(self: Any, path: KeyPath) -> str:
    """Where the scenario key `path` was set ("file.yaml:54", "--set", ...): for the errors found after loading."""
    return locate(self.origins, path, self.source or "<scenario>")


def _post_init(self: Any) -> None:
    # a section's short form given to the constructor (`routing="delay"`) becomes its full value
    for section in SECTIONS:
        if section.coerce is not None:
            setattr(self, section.key, section.coerce(getattr(self, section.key)))


# Sections without a default come first: a dataclass wants its required fields before the others.
_ordered = sorted(SECTIONS, key=lambda s: s.default is not None)
Scenario = dataclasses.make_dataclass(
    "Scenario",
    [_field(s) for s in _ordered]
    # the file it was loaded from (for messages; not compared)
    + [("source", str, dataclasses.field(default="", compare=False)),
       # key path -> where the loader found it ("file.yaml:54", "--set"), for errors found later (not compared)
       ("origins", dict[KeyPath, str], dataclasses.field(default_factory=dict, compare=False, repr=False))],
    namespace={"__post_init__": _post_init, "where": _where,
               "__doc__": "One scenario: an attribute per section of the registry (see the module docstring)."},
)
Scenario.__module__ = __name__      # pickle and deepcopy find the class here
