"""Node config loading: good files load, every kind of mistake is one clear sentence."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from node import config

from node import registry
from node.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]
GOOD = {"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001",
        "neighbours": {"n2": "127.0.0.1:7100"}, "routes": {"n3": "n2"}}


def test_good_config_has_defaults() -> None:
    cfg = registry.config_from_dict(GOOD)
    assert cfg.mode == "fragmenting" and cfg.fragment_size == 1000
    assert cfg.batch.max_frames > 1 and cfg.session.hold_time > cfg.session.keepalive
    assert cfg.chunk_size == 1000


def test_nested_sections_load() -> None:
    cfg = registry.config_from_dict({**GOOD, "mode": "non-fragmenting", "batch": {"max_frames": 64}, "limits": {"max_hops": 8}})
    assert cfg.batch.max_frames == 64 and cfg.limits.max_hops == 8 and cfg.chunk_size == cfg.wire_chunk


@pytest.mark.parametrize("change, words", [
    ({"colour": "red"}, "unknown key colour"),
    ({"batch": {"max_framez": 3}}, "unknown key batch.max_framez in node config (did you mean 'max_frames'?)"),
    ({"mode": "teleport"}, "mode"),
    ({"routes": {"n3": "n9"}}, "not a neighbour"),
    ({"data_listen": "nowhere"}, "host:port"),
    ({"neighbours": {"n2": "127.0.0.1:99999"}}, "host:port"),
    ({"fragment_size": "big"}, "wrong type"),
    ({"fragment_size": 3}, "fragment_size"),
    ({"metrics_interval": 0}, "positive"),
    ({"name": "bad name!"}, "not a valid name"),
    ({"session": {"keepalive": 5.0, "hold_time": 1.0}}, "hold_time"),
    ({"session": {"backoff_min": 0}}, "backoff_min"),
    ({"session": {"backoff_min": 6.0, "backoff_max": 5.0}}, "backoff_min"),
    ({"limits": {"max_link_queue": 0}}, "max_link_queue"),
])
def test_bad_config_is_one_clear_error(change: dict, words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        registry.config_from_dict({**GOOD, **change})
    assert words in str(exc.value)


def test_missing_required_key() -> None:
    with pytest.raises(ConfigError, match="mgmt_listen"):
        registry.config_from_dict({k: v for k, v in GOOD.items() if k != "mgmt_listen"})


def test_not_a_mapping_and_bad_yaml(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        registry.load_config(p)
    p.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        registry.load_config(p)
    with pytest.raises(ConfigError, match="cannot read"):
        registry.load_config(tmp_path / "missing.yaml")


def test_dump_round_trips(tmp_path: Path) -> None:
    cfg = registry.config_from_dict(GOOD)
    p = tmp_path / "c.yaml"
    p.write_text(config.dump(cfg))
    assert registry.load_config(p) == cfg


def test_daemon_bad_config_exits_2_with_one_sentence(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("name: n1\ncolour: red\n")
    out = subprocess.run([sys.executable, "-m", "node", "--config", str(p)], capture_output=True, text=True,
                         cwd=ROOT, timeout=30)
    assert out.returncode == 2
    assert "unknown key colour" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_daemon_port_in_use_exits_2_with_one_sentence(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = tmp_path / "c.yaml"
        p.write_text(f"name: n1\ndata_listen: 127.0.0.1:{port}\nmgmt_listen: 127.0.0.1:{port}\n"
                     f"records_dir: {tmp_path}\n")
        out = subprocess.run([sys.executable, "-m", "node", "--config", str(p)], capture_output=True, text=True,
                             cwd=ROOT, timeout=30)
    assert out.returncode == 2 and "cannot listen" in out.stderr and "Traceback" not in out.stderr


def test_resources_section_loads_and_validates() -> None:
    import pytest
    from node import config as node_config
    base = {"name": "a", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2"}
    cfg = registry.config_from_dict({**base, "resources": {"rbsad": 4, "buffer_classes": False}})
    assert cfg.resources.rbsad == 4.0 and cfg.resources.buffer_classes is False
    assert cfg.resources.transit_buffers == 100
    with pytest.raises(node_config.ConfigError):
        registry.config_from_dict({**base, "resources": {"rbsad_probability": 1.5}})
    with pytest.raises(node_config.ConfigError):
        registry.config_from_dict({**base, "resources": {"no_such_key": 1}})
