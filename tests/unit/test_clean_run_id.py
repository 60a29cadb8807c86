"""`testbed clean --run-id X` matches the run id exactly, never as a prefix of other runs' ids.

Nothing real is touched: the registry lives in a temporary directory and the machine's namespaces,
interfaces and iptables chains are replaced by lists; what cleanup would delete is recorded.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from node.errors import UserError
from testbed import cleanup, registry
from testbed.commands import network as network_cmd

DEAD_PID = 2 ** 22 + 12345     # above pid_max's usual limit: never a live process


@pytest.fixture
def fake_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path / "registry")
    machine: dict[str, list[str]] = {
        "netns": ["tba-x", "tba1-x", "tbab-x", "tba1b2c3-n1", "tba1b2c3m0", "tbab0000-n1", "tbabcdef-n1"],
        "links": ["tba1b2c3m0", "tbab0000m0", "tbabcdefm0", "eth0"],
        "chains": ["tba1b2c3-part", "tbab0000-part", "INPUT"],
        "deleted": [],
    }

    def run_ip(args: list[str], batch: str = "", check: bool = True) -> None:
        machine["deleted"] += [line.split()[-1] for line in batch.splitlines() if line.strip()]

    monkeypatch.setattr(cleanup, "list_netns", lambda: list(machine["netns"]))
    monkeypatch.setattr(cleanup, "root_links", lambda: list(machine["links"]))
    monkeypatch.setattr(cleanup, "_iptables_chains",
                        lambda tool, table: list(machine["chains"]) if (tool, table) == ("iptables", "filter") else [])
    monkeypatch.setattr(cleanup, "_remove_chain", lambda tool, table, chain: machine["deleted"].append(chain))
    monkeypatch.setattr(cleanup, "run_ip", run_ip)
    monkeypatch.setattr(cleanup, "netns_pids", lambda ns: [])
    monkeypatch.setattr(cleanup, "terminate_pids", lambda pids, grace=2.0: pytest.fail(f"would end {pids}"))
    return machine


def _registry_files() -> list[str]:
    return sorted(p.name for p in registry.REGISTRY_DIR.iterdir())


def test_short_ids_in_registry_only_the_exact_one_is_chosen(fake_machine: dict[str, list[str]]) -> None:
    for rid in ("a1", "ab", "a"):
        registry.register(rid, "test", owner_pid=DEAD_PID)
    (registry.REGISTRY_DIR / "tba1.lock").touch()
    (registry.REGISTRY_DIR / "tba.lock").touch()

    removed = cleanup.clean(only=["a"])

    assert _registry_files() == ["tba1.json", "tba1.lock", "tbab.json"]
    assert removed == ["registry record tba"]
    # None of the machine's tba... resources is run "a"'s: 'tba1b2c3' and 'tbab0000' are other runs.
    assert fake_machine["deleted"] == []


def test_full_id_takes_only_its_own_resources(fake_machine: dict[str, list[str]]) -> None:
    registry.register("a1b2c3", "test", owner_pid=DEAD_PID)
    registry.register("ab0000", "test", owner_pid=os.getpid())     # live: another shell's run
    (registry.REGISTRY_DIR / "tba1b2c3.state.json").write_text("{}")
    (registry.REGISTRY_DIR / "tba1b2c3-wire.sock").touch()
    (registry.REGISTRY_DIR / "tba1b2c4.lock").touch()              # another run's file

    cleanup.clean(only=["a1b2c3"])

    assert sorted(fake_machine["deleted"]) == ["tba1b2c3-n1", "tba1b2c3-part", "tba1b2c3m0", "tba1b2c3m0"]
    assert _registry_files() == ["tba1b2c4.lock", "tbab0000.json"]


@pytest.mark.parametrize("given", ["a", "a1b2c", "A1B2C3", "a1b2c3d"])
def test_cli_refuses_a_partial_run_id(given: str, fake_machine: dict[str, list[str]],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    registry.register("a1b2c3", "test", owner_pid=DEAD_PID)
    with pytest.raises(UserError, match="not a run id: give the whole id"):
        network_cmd._clean(argparse.Namespace(run_id=given, json=False))
    assert _registry_files() == ["tba1b2c3.json"]
    assert fake_machine["deleted"] == []


def test_cli_cleans_an_exactly_registered_short_id(fake_machine: dict[str, list[str]],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    for rid in ("a1", "ab", "a"):
        registry.register(rid, "test", owner_pid=DEAD_PID)
    assert network_cmd._clean(argparse.Namespace(run_id="a", json=False)) == 0
    assert _registry_files() == ["tba1.json", "tbab.json"]
    assert "removed 1 item(s)" in capsys.readouterr().out


def test_owns_is_exact() -> None:
    assert registry.owns("a1b2c3", "tba1b2c3-n1")
    assert not registry.owns("a1b2c", "tba1b2c3-n1")
    assert not registry.owns("a", "tba1b2c3-n1")
    assert registry.owns("a", "tba.json") and not registry.owns("a", "tba1.json")
