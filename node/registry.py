"""The node's subsystems, in the order they are built, started and stopped: the one list to add a subsystem to.

Each entry is a node.subsystem.Subsystem class that its package exports as SUBSYSTEM. The node config's
sections are theirs too: `config_from_dict` and `load_config` read a node config with the sections of the
subsystems given (by default all of these).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from node import config
from node.broker.subsystem import SUBSYSTEM as BROKER
from node.config import NodeConfig
from node.gateway.subsystem import SUBSYSTEM as GATEWAY
from node.pools.subsystem import SUBSYSTEM as POOLS
from node.rate.subsystem import SUBSYSTEM as RATE
from node.routing.subsystem import SUBSYSTEM as ROUTING
from node.security.subsystem import SUBSYSTEM as SECURITY
from node.subsystem import Subsystem

# routing first: it gives the engine its router and stops before the sessions close; pools after the broker they
# build on; the gateway last: its admission layer is the outermost (it composes its credit charge with any inner
# policy's)
SUBSYSTEMS: tuple[type[Subsystem], ...] = (ROUTING, SECURITY, BROKER, RATE, POOLS, GATEWAY)


def config_sections(subsystems: Sequence[type[Subsystem]] = SUBSYSTEMS) -> dict[str, type]:
    out: dict[str, type] = {}
    for sub in subsystems:
        if sub.config is not None:
            if sub.name in out or sub.name in {f for f in NodeConfig.__dataclass_fields__}:
                raise ValueError(f"config section {sub.name!r} is taken already")
            out[sub.name] = sub.config
    return out


def config_from_dict(data: Any, subsystems: Sequence[type[Subsystem]] = SUBSYSTEMS) -> NodeConfig:
    """A validated node config with these subsystems' sections."""
    return config.from_dict(data, config_sections(subsystems))


def load_config(path: str | Path, subsystems: Sequence[type[Subsystem]] = SUBSYSTEMS) -> NodeConfig:
    return config.load(path, config_sections(subsystems))
