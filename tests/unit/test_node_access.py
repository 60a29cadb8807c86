"""Which secrets a command's call to a node carries (testbed/commands/messaging.py node_access): the running
`testbed up` network's token and CA only for that network's own node addresses, never for an address of
another setup given by --address or WANBED_NODES."""
from __future__ import annotations

import json

import pytest

from testbed import netstate, registry, secrets
from testbed.commands.messaging import node_access


@pytest.fixture
def live(tmp_path, monkeypatch) -> str:
    """A registered, ready `testbed up` run (owned by this process) with TLS and tokens; n1 at 127.0.0.1:50051."""
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path / "registry")
    for var in ("WANBED_TOKEN", "WANBED_CA"):
        monkeypatch.delenv(var, raising=False)
    run_dir = tmp_path / "run"
    secrets.make(run_dir, {"n1": []}, tls=True, auth=True)
    registry.register("abc123", netstate.UP_KIND, state={"ready": True, "mgmt_port": 50051,
                                                        "run_dir": str(run_dir)})
    netstate.state_path("abc123").write_text(json.dumps({"plan": {"mgmt_address": {"n1": "127.0.0.1/8"}}}))
    return str(run_dir)


def test_the_running_networks_node_gets_its_token_and_ca(live) -> None:
    access = node_access("n1", "127.0.0.1:50051")
    run = secrets.load(live)
    assert access.token == run.token("n1") and access.ca == run.ca and access.name == "n1"


def test_an_address_of_another_setup_gets_none_of_them(live) -> None:
    for node, address in (("n1", "127.0.0.1:40000"), ("n9", "127.0.0.1:50051")):
        access = node_access(node, address)
        assert (access.token, access.ca, access.name) == ("", b"", "")
