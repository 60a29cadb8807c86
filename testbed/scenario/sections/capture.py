"""The `capture` section: which links are captured (all, none or link names) and the snap length."""
from __future__ import annotations

import copy
from typing import Any

from testbed.scenario.checks import MISSING, Check, KeyPath
from testbed.scenario.parts import CaptureSpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.scenario.sections.refs import link_name
from testbed.topology.model import Topology


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    s.capture = CaptureSpec()
    cap = None if raw is MISSING else raw
    path: KeyPath = ("capture",)
    if isinstance(cap, dict):           # the long form {links: ..., snaplen: ...}
        m = c.mapping(path, cap, ("links", "snaplen"))
        s.capture.snaplen = c.integer(path + ("snaplen",), m.get("snaplen", s.capture.snaplen), 0, 262144)
        cap, path = m.get("links", "none"), path + ("links",)
    if cap is not None:
        if cap in ("all", "none"):
            s.capture.links = cap
        else:
            items = c.sequence(path, cap if isinstance(cap, list) else [cap] if isinstance(cap, str) else cap)
            s.capture.links = [link_name(c, path + (i,), v, topo)[0] for i, v in enumerate(items)]


CAPTURE = Section("capture", check=_check,
                  plain=lambda s: {"links": copy.deepcopy(s.capture.links), "snaplen": s.capture.snaplen},
                  default=CaptureSpec)
