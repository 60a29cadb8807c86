"""The agent's request handling (testbed/agent/ops.py, run here in-process) and the refusal of a machine on
another kernel (testbed/agent/placed.py, with a fake agent: no engine is started)."""
from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

from node.errors import UserError
from testbed.agent import ops, placed
from testbed.docker_engine import Engine
from testbed.scenario.sections.placement import MachineSpec, PlacementSpec


def test_a_request_list_stops_at_the_first_failure() -> None:
    answers = ops.run([{"op": "hello"}, {"op": "reboot"}, {"op": "hello"}])
    assert len(answers) == 2                       # the operation after the failure was not run
    assert answers[0]["ok"] and answers[0]["boot_id"] == open(placed.BOOT_ID).read().strip()
    assert answers[1] == {"ok": False, "error": "unknown operation 'reboot'"}
    assert ops.run([{"op": "attach", "netns": "x"}]) == [{"ok": False, "error": "'pid'"}]


def test_a_request_that_is_not_a_list_is_one_answer(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for text in ("{not json", '{"op": "hello"}'):
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
        ops.main()
        [answer] = json.loads(capsys.readouterr().out)
        assert answer["ok"] is False and answer["error"].startswith("bad request")


class FakeAgent:
    """Answers hello with a boot id of another kernel for machine m2."""

    def __init__(self, run_id: str, machine: str, engine: Engine, image: str) -> None:
        self.machine = machine

    def start(self) -> dict[str, Any]:
        return {"ok": True, "boot_id": "another-kernel" if self.machine == "m2" else placed._boot_id()}


def test_a_machine_on_another_kernel_is_refused_naming_it() -> None:
    spec = PlacementSpec([MachineSpec("m1", "unix:///a.sock", 1, "10.0.0.1"),
                          MachineSpec("m2", "tcp://10.0.0.2:2376", 1, "10.0.0.2")])
    agents: dict[str, Any] = {}
    with pytest.raises(UserError) as exc:
        placed.start_agents("3f9a1c", spec, "img", {"m1", "m2"}, agents,
                            agent_class=FakeAgent)  # type: ignore[arg-type]
    message = str(exc.value)
    assert message.startswith("machine m2 runs another kernel than this controller") and "\n" not in message
    assert set(agents) == {"m1", "m2"}             # both recorded: the caller removes them
