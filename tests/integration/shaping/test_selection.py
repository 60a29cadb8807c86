"""Backend selection and the netem error path (testable on a kernel without netem)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import registry
from node.errors import UserError
from testbed.shaping import make_shaper
from testbed.shaping.probe import netem_available

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="probing netem needs root (namespaces)")]


def test_probe_is_cached() -> None:
    first = netem_available()
    assert netem_available() is first


def test_auto_and_netem_selection(tmp_path: Path) -> None:
    run_id = registry.new_run_id()
    registry.register(run_id, "test")
    try:
        if netem_available():
            shaper, msg = make_shaper("netem", run_id, tmp_path)
            assert shaper.name == "netem"
        else:
            with pytest.raises(UserError, match="no netem"):
                make_shaper("netem", run_id, tmp_path)
            shaper, msg = make_shaper("auto", run_id, tmp_path)
            assert shaper.name == "wire" and "no netem" in msg
        shaper.close()
        with pytest.raises(UserError):
            make_shaper("bogus", run_id, tmp_path)
    finally:
        registry.unregister(run_id)
