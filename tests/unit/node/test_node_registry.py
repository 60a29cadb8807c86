"""The subsystem registry: a daemon imports the subsystems its config switches on, and only those."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from node import registry
from node.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]

# a fresh interpreter: what the daemon of a config without the broker, pools and gateway loads, then what one
# with the broker loads on top (so the probe sees a subsystem's import when there is one)
PROBE = r"""
import json, sys
from node import registry
from node.daemon import NodeDaemon
base = {"name": "n1", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2"}
watched = ("node.broker.subsystem", "node.broker.broker", "node.pools.subsystem", "node.pools.controller",
           "pysyncobj", "node.gateway.subsystem", "node.rate.subsystem")
out = {}
for key, extra in (("off", {"broker": {"enabled": False}}), ("broker", {})):
    cfg = registry.config_from_dict({**base, **extra, "records_dir": sys.argv[1] + "/" + key})
    daemon = NodeDaemon(cfg)
    out[key] = {"running": [s.name for s in daemon.subsystems], "loaded": [m for m in watched if m in sys.modules]}
print(json.dumps(out))
"""


def test_a_daemon_imports_only_the_subsystems_its_config_switches_on(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["off"] == {"running": ["routing", "security"], "loaded": []}
    assert out["broker"]["running"] == ["routing", "security", "broker"]
    assert out["broker"]["loaded"] == ["node.broker.subsystem", "node.broker.broker"]


def test_each_entry_names_its_subsystem_and_section_and_its_switch_agrees_with_enabled() -> None:
    base = {"name": "n1", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2"}
    default = registry.config_from_dict(base)
    for entry in registry.ENTRIES:
        cls = entry.subsystem()
        assert cls.name == entry.name and cls.config is entry.config_class()
        assert cls(default).enabled() == entry.switched_on(default), entry.name
        if entry.switch:
            off = registry.config_from_dict({**base, entry.name: {entry.switch: type(getattr(
                default.sections[entry.name], entry.switch))()}})
            assert not entry.switched_on(off) and not cls(off).enabled(), entry.name
    assert registry.all_subsystems() == tuple(e.subsystem() for e in registry.ENTRIES)


def test_an_unknown_or_broken_subsystem_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="no subsystem named 'nope'"):
        registry.entry("nope")
    with pytest.raises(ConfigError, match="subsystem 'nope' cannot be loaded: No module named 'node.nope'"):
        registry.Entry("nope", "node.nope.subsystem", "node.nope.config:NopeConfig").subsystem()
    with pytest.raises(ConfigError, match="node.config exports no Subsystem named 'nope'"):
        registry.Entry("nope", "node.config", "node.config:NodeConfig").subsystem()
