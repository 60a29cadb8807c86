"""The node's subsystems, in the order they are built, started and stopped: the one list to add a subsystem to.

Each entry names the package module that exports its node.subsystem.Subsystem class as SUBSYSTEM, the dataclass
of its config section, and the field of that section that switches it on. A daemon imports a subsystem's module
only when its node's config switches it on: the broker, the pools (with their Raft library) and the gateway cost
a fraction of a second of CPU to import, paid by every daemon of every run otherwise. The config sections are
read for every entry whether on or not (their dataclasses are small modules): `config_from_dict` and
`load_config` read a node config with the sections of the subsystems given (by default all of these).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from node import config
from node.config import ConfigError, NodeConfig
from node.subsystem import Subsystem


@dataclass(frozen=True)
class Entry:
    name: str           # the subsystem's name: its config section's key
    module: str         # the module that exports its Subsystem class as SUBSYSTEM
    config: str         # "module:Class": the dataclass of its config section
    switch: str = ""    # the section's field that switches it on ("": always on); its `enabled` agrees

    def config_class(self) -> type:
        module, _, cls = self.config.partition(":")
        return getattr(_import(module, self.name), cls)

    def subsystem(self) -> type[Subsystem]:
        cls = getattr(_import(self.module, self.name), "SUBSYSTEM", None)
        if not (isinstance(cls, type) and issubclass(cls, Subsystem) and cls.name == self.name):
            raise ConfigError(f"subsystem {self.name!r}: {self.module} exports no Subsystem named {self.name!r} "
                              f"as SUBSYSTEM.")
        return cls

    def switched_on(self, cfg: NodeConfig) -> bool:
        """Whether the node's config may switch it on (its own `enabled` then decides)."""
        return not self.switch or bool(getattr(cfg.sections[self.name], self.switch))


def _import(module: str, name: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"subsystem {name!r} cannot be loaded: {exc}.") from None


# routing first: it gives the engine its router and stops before the sessions close; pools after the broker they
# build on; the gateway last: its admission layer is the outermost (it composes its credit charge with any inner
# policy's)
ENTRIES: tuple[Entry, ...] = (
    Entry("routing", "node.routing.subsystem", "node.routing.config:RoutingConfig"),
    Entry("security", "node.security.subsystem", "node.security.config:SecurityConfig"),
    Entry("broker", "node.broker.subsystem", "node.broker.config:BrokerConfig", switch="enabled"),
    Entry("rate", "node.rate.subsystem", "node.rate.config:RateConfig", switch="role"),
    Entry("pools", "node.pools.subsystem", "node.pools.config:PoolsConfig", switch="enabled"),
    Entry("gateway", "node.gateway.subsystem", "node.gateway.config:GatewayConfig", switch="enabled"),
)


def entry(name: str) -> Entry:
    for e in ENTRIES:
        if e.name == name:
            return e
    raise ConfigError(f"no subsystem named {name!r} (known: {', '.join(e.name for e in ENTRIES)}).")


def all_subsystems() -> tuple[type[Subsystem], ...]:
    """Every subsystem class, in registry order (imports them all)."""
    return tuple(e.subsystem() for e in ENTRIES)


def subsystems_for(cfg: NodeConfig) -> tuple[type[Subsystem], ...]:
    """The subsystem classes a node with this config runs, in registry order: those its config switches on
    (importing only those)."""
    return tuple(e.subsystem() for e in ENTRIES if e.switched_on(cfg))


def config_sections(subsystems: Sequence[type[Subsystem]] | None = None) -> dict[str, type]:
    """Section key -> dataclass, of `subsystems` (by default every entry's, without importing the subsystems)."""
    pairs = [(e.name, e.config_class()) for e in ENTRIES] if subsystems is None else \
        [(sub.name, sub.config) for sub in subsystems if sub.config is not None]
    out: dict[str, type] = {}
    for name, cls in pairs:
        if name in out or name in NodeConfig.__dataclass_fields__:
            raise ValueError(f"config section {name!r} is taken already")
        out[name] = cls
    return out


def config_from_dict(data: Any, subsystems: Sequence[type[Subsystem]] | None = None) -> NodeConfig:
    """A validated node config with these subsystems' sections (by default every entry's)."""
    return config.from_dict(data, config_sections(subsystems))


def load_config(path: str | Path, subsystems: Sequence[type[Subsystem]] | None = None) -> NodeConfig:
    return config.load(path, config_sections(subsystems))
