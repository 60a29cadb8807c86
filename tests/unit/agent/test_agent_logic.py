"""The agent's request handling (testbed/agent/ops.py, run here in-process) and the refusal of a machine on
another kernel (testbed/agent/placed.py, with a fake agent: no engine is started)."""
from __future__ import annotations

import io
import json
import os
import subprocess
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


def test_the_agent_starts_a_clock_service_the_controller_measures(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Any) -> None:
    """clock_start as an agent runs it (a detached process answering on UDP), with a test-only offset of 0.25 s
    on its machine: the exchange finds it within half the best round trip."""
    import os
    import signal

    from testbed.clockservice import measure
    monkeypatch.setattr(ops, "STATE_DIR", str(tmp_path))
    [answer] = ops.run([{"op": "clock_start", "tag": "tbtest", "host": "127.0.0.1", "offset": 0.25}])
    assert answer["ok"], answer
    try:
        est = measure(("127.0.0.1", answer["port"]), machine="m2")
        assert abs(est.offset - 0.25) <= est.rtt / 2 + 1e-6, est
    finally:
        os.kill(answer["pid"], signal.SIGKILL)
        os.waitpid(answer["pid"], 0)
    # an address the machine does not have: one answer naming it, no service left running
    [bad] = ops.run([{"op": "clock_start", "tag": "tbtest", "host": "192.0.2.77", "offset": 0}])
    assert bad["ok"] is False and "192.0.2.77" in bad["error"] and "\n" not in bad["error"]


def test_injected_machine_offsets_and_the_daemons_environment() -> None:
    spec = PlacementSpec([MachineSpec("m1", "unix:///a.sock", 1, "10.0.0.1"),
                          MachineSpec("m2", "tcp://10.0.0.2:2376", 1, "10.0.0.2")])
    env = placed.TEST_MACHINE_OFFSET_ENV
    assert placed.injected_offsets(spec, {}) == {}
    offsets = placed.injected_offsets(spec, {env: "m2=0.5, m1=-0.01"})
    assert offsets == {"m2": 0.5, "m1": -0.01}
    assert placed.daemon_env("m2", {"m2": 0.5}) == {"WANBED_TEST_CLOCK_OFFSET": "0.5"}
    assert placed.daemon_env("m1", {"m2": 0.5}) == {}
    for text in ("m3=0.5", "m2", "m2=fast", "m2=nan"):
        with pytest.raises(UserError) as exc:
            placed.injected_offsets(spec, {env: text})
        assert env in str(exc.value) and "m1, m2" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a network namespace and iptables)")
def test_the_agent_puts_and_removes_a_partition_chain_in_a_namespace() -> None:
    ns, chain = f"tbunit{os.getpid()}", f"tbunit{os.getpid()}-part"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        rules = f"*filter\n-A {chain} -s 10.9.9.9/32 -j DROP\n-A {chain} -d 10.9.9.9/32 -j DROP\nCOMMIT\n"
        assert ops.run([{"op": "chain", "netns": ns, "chain": chain, "rules": rules}]) == [{"ok": True}]
        listed = subprocess.run(["ip", "netns", "exec", ns, "iptables", "-S"], capture_output=True, text=True).stdout
        assert f"-A INPUT -j {chain}" in listed and f"-A OUTPUT -j {chain}" in listed
        assert f"-A {chain} -s 10.9.9.9/32 -j DROP" in listed
        assert ops.run([{"op": "chain", "netns": ns, "chain": chain, "rules": None}]) == [{"ok": True}]
        listed = subprocess.run(["ip", "netns", "exec", ns, "iptables", "-S"], capture_output=True, text=True).stdout
        assert chain not in listed
        [answer] = ops.run([{"op": "chain", "netns": "tbunit-none", "chain": chain, "rules": rules}])
        assert not answer["ok"] and "tbunit-none" in answer["error"]
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
