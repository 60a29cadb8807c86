"""The `sysctls` section: extra network-namespace sysctls for every host, nested or dotted."""
from __future__ import annotations

from typing import Any

from node.errors import UserError
from testbed.runtime.base import normalise_sysctls
from testbed.scenario.checks import Check
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology.model import Topology


def flat(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"net": {"ipv4": {"x": 1}}} -> {"net.ipv4.x": 1}."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    sysctls = flat(c.mapping(("sysctls",), raw))   # nested form and --set sysctls.net.x=1
    try:
        normalise_sysctls(sysctls)
    except UserError as e:
        c.fail(("sysctls",), str(e).rstrip("."))
    s.sysctls = dict(sysctls)


SYSCTLS = Section("sysctls", check=_check, plain=lambda s: dict(s.sysctls), default=dict)
