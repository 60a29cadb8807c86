"""Security pieces without daemons: the config section, token identities, the run's secrets, the
scenario key, the node configs the testbed writes with it."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from node import registry
from node.client import Access
from node.config import ConfigError
from node.errors import UserError
from node.security.tokens import ADMIN, Tokens, digest, token_from
from testbed import secrets
from testbed.experiment import nodeconfig
from testbed.network import Network
from testbed.scenario.loader import ScenarioError, dump_resolved, load_text
from testbed.scenario.sections.security import for_up
from testbed.scenario.spec import NodesSpec, Scenario, SecuritySpec
from testbed.topology import addressing, generators as g

BASE = {"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001"}


def test_security_section_loads_and_relative_paths_are_in_records_dir() -> None:
    cfg = registry.config_from_dict({**BASE, "records_dir": "/r/n1", "data_listen_also": ["10.0.0.1:7000"],
                                     "security": {"tls": {"cert": "node.crt", "key": "/abs/k", "ca": "ca.crt"},
                                         "auth": {"admin": digest("a"), "users": {"alice": digest("b")}}}})
    assert cfg.security.tls.enabled and cfg.security.auth.enabled
    assert cfg.security_path("node.crt") == Path("/r/n1/node.crt") and cfg.security_path("/abs/k") == Path("/abs/k")
    assert cfg.data_addresses == ["127.0.0.1:7000", "10.0.0.1:7000"]
    assert not registry.config_from_dict(BASE).security.tls.enabled and not registry.config_from_dict(BASE).security.auth.enabled


@pytest.mark.parametrize("security, words", [
    ({"tls": {"cert": "a"}}, "needs all of cert, key and ca"),
    ({"auth": {"admin": "not-a-digest"}}, "SHA-256 hex digest"),
    ({"auth": {"users": {"alice": "x"}}}, "users.alice must be a SHA-256"),
    ({"auth": {"users": {"bad name": digest("t")}}}, "not a valid user name"),
    ({"tls": {"crt": "a"}}, "unknown key security.tls.crt"),
])
def test_bad_security_sections_are_one_sentence(security: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        registry.config_from_dict({**BASE, "security": security})


def _tokens(**auth) -> Tokens:
    return Tokens(registry.config_from_dict({**BASE, "security": {"auth": auth}}))


def test_tokens_name_the_admin_a_user_or_nobody() -> None:
    t = _tokens(admin=digest("root-token"), users={"alice": digest("alice-token")})
    assert t.enabled
    assert t.identify("root-token").user == ADMIN and t.identify("root-token").admin
    assert t.identify("alice-token").user == "alice" and not t.identify("alice-token").admin
    assert t.identify("wrong") is None and t.identify("") is None
    assert token_from([("authorization", "Bearer alice-token")]) == "alice-token"
    assert token_from([("other", "x")]) == ""


def test_without_auth_everyone_is_the_admin_and_the_control_token_joins_the_admins() -> None:
    assert Tokens(registry.config_from_dict(BASE)).identify("").admin
    t = Tokens(registry.config_from_dict({**BASE, "control_token": "ctl", "security": {"auth": {"admin": digest("a")}}}))
    assert t.identify("ctl").admin and t.identify("a").admin and t.identify("b") is None


def test_calls_are_refused_on_their_metadata_by_the_token_or_the_legacy_control_token() -> None:
    """What TokenGuard refuses before it reads a request: with auth an unknown token at any service; without,
    a wrong control_token at Control only (the Submit service needs none)."""
    auth = Tokens(registry.config_from_dict({**BASE, "security": {"auth": {"admin": digest("a")}}}))
    assert auth.refusal("a", "/wanbed.Submit/Send") is None
    assert auth.refusal("", "/wanbed.Submit/Send") == "missing token (metadata authorization)"
    assert auth.refusal("b", "/wanbed.PubSub/Subscribe") == "unknown token"
    legacy = Tokens(registry.config_from_dict({**BASE, "control_token": "ctl"}))
    assert legacy.refusal("", "/wanbed.Control/SetRules") == "missing or wrong control token"
    assert legacy.refusal("ctl", "/wanbed.Control/SetRules") is None
    assert legacy.refusal("", "/wanbed.Submit/Send") is None
    assert Tokens(registry.config_from_dict(BASE)).refusal("", "/wanbed.Control/Drain") is None


def test_up_turns_tls_and_auth_on_unless_the_scenario_says_otherwise() -> None:
    def up(text: str, **flags: bool) -> tuple[bool, bool]:
        spec = for_up(load_text("name: x\n" + text).security, **flags)
        return spec.tls, spec.auth
    assert up("") == (True, True)
    assert up("security: {tls: false}\n") == (False, True)
    assert up("security: {tls: false, auth: false}\n") == (False, False)
    assert up("security: {tls: false, auth: false}\n", tls=True) == (True, False)
    assert up("security: {tls: true, auth: true}\n", insecure=True) == (False, False)
    with pytest.raises(UserError, match="--insecure .* cannot go with --tls or --auth"):
        up("", insecure=True, auth=True)


def test_run_secrets_are_private_and_configs_hold_only_digests(tmp_path: Path) -> None:
    run = secrets.make(tmp_path, {"n1": ["alice"], "n2": []}, tls=True, auth=True)
    for f in (tmp_path / "secrets" / "tokens.json", tmp_path / "nodes" / "n1" / "node.key"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert (tmp_path / "nodes" / "n2" / "node.crt").read_bytes().startswith(b"-----BEGIN CERTIFICATE")
    section = run.node_section("n1")
    assert section["tls"] == {"cert": "node.crt", "key": "node.key", "ca": "ca.crt"}
    assert section["auth"] == {"admin": digest(run.token("n1")), "users": {"alice": digest(run.token("n1", "alice"))}}
    assert run.token("n1") not in json.dumps(section) and run.token("n1", "alice") not in json.dumps(section)
    assert run.node_section("n2")["auth"] == {"admin": digest(run.token("n2")), "users": {}}
    assert run.token("n1") != run.token("n2")                 # an admin token per node
    again = secrets.load(tmp_path)
    assert (again.admins, again.users, again.tls, again.auth) == (run.admins, run.users, True, True)
    assert again.ca == run.ca == (tmp_path / "nodes" / "n1" / "ca.crt").read_bytes()
    assert again.access("n2") == Access(run.token("n2"), run.ca, "n2")
    with pytest.raises(UserError, match="no admin token for n3"):
        run.token("n3")
    with pytest.raises(UserError, match="no token for user 'bob' at n1"):
        run.token("n1", "bob")


def test_no_security_writes_nothing(tmp_path: Path) -> None:
    run = secrets.make(tmp_path, {"n1": ["alice"]}, tls=False, auth=False)
    assert run.node_section("n1") == {} and run.token("n1") == "" and not (tmp_path / "secrets").exists()
    assert secrets.load(tmp_path).token("n1") == ""


def test_scenario_security_defaults_off_and_reads_booleans() -> None:
    assert load_text("name: x\n").security == SecuritySpec(False, False)
    s = load_text("name: x\nsecurity: {tls: true, auth: true}\n")
    assert s.security == SecuritySpec(True, True)
    assert "security:\n  tls: true\n  auth: true\n" in dump_resolved(s)
    with pytest.raises(ScenarioError, match="security.tls: expected true or false"):
        load_text("name: x\nsecurity: {tls: yes please}\n")
    with pytest.raises(ScenarioError, match="unknown key 'mtls'"):
        load_text("name: x\nsecurity: {mtls: true}\n")


def test_node_configs_listen_on_data_addresses_and_get_security(tmp_path: Path) -> None:
    topo = g.linear(3)
    net = Network(topo, addressing.plan(topo))          # never started: only the address plan is read
    scenario = Scenario(name="t", nodes=NodesSpec(all={"local_users": ["alice"]}), security=SecuritySpec(True, True))
    configs = nodeconfig.node_configs(scenario, net, tmp_path)
    for name, cfg in configs.items():
        listens = [cfg["data_listen"], *cfg["data_listen_also"]]
        assert listens == [f"{a}:{nodeconfig.DATA_PORT}" for a in net.addresses(name)]
        assert not any(a.startswith("0.0.0.0") for a in listens)
        for peer, addr in cfg["neighbours"].items():
            assert addr in [f"{a}:{nodeconfig.DATA_PORT}" for a in net.addresses(peer)]
    run = nodeconfig.add_security(scenario, configs, tmp_path)
    tokens = nodeconfig.client_tokens(configs, run)
    assert tokens == {n: Access(run.token(n), run.ca, n) for n in configs}
    assert len({a.token for a in tokens.values()}) == len(configs)
    for name, cfg in configs.items():
        assert set(cfg["security"]["auth"]["users"]) == {"alice"}
        assert (tmp_path / "nodes" / name / "node.key").exists()
        registry.config_from_dict(cfg)                            # the node's own loader takes it
    with pytest.raises(UserError, match="security is set by the testbed"):
        nodeconfig.node_configs(Scenario(name="t", nodes=NodesSpec(all={"security": {}})), net, tmp_path)


def test_a_scenarios_control_token_goes_with_the_testbeds_clients(tmp_path: Path) -> None:
    topo = g.linear(2)
    net = Network(topo, addressing.plan(topo))
    scenario = Scenario(name="t", nodes=NodesSpec(all={"control_token": "ctl"}))
    configs = nodeconfig.node_configs(scenario, net, tmp_path)
    assert nodeconfig.client_tokens(configs, nodeconfig.add_security(scenario, configs, tmp_path)) == \
        {n: Access("ctl") for n in configs}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_node_key_belongs_to_whoever_owns_the_node_directory(tmp_path: Path) -> None:
    """The docker runtime chowns nodes/<node>/ to the image's non-root user: the daemon must read its key."""
    d = tmp_path / "nodes" / "n1"
    d.mkdir(parents=True)
    os.chown(d, 10001, 10001)
    secrets.make(tmp_path, {"n1": []}, tls=True, auth=False)
    st = (d / "node.key").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (10001, 10001, 0o600)
    assert (tmp_path / "secrets" / "tokens.json").stat().st_uid == 0     # the run's own secrets stay root's


def test_link_probes_listen_on_the_data_port_of_every_address() -> None:
    """The Link service listens on the listed addresses only, and so do the UDP probes: one socket per address,
    no wildcard."""
    from node.routing.dynamic import probe_listen
    assert probe_listen(registry.config_from_dict(BASE)) == ["127.0.0.1:7000"]
    several = registry.config_from_dict({**BASE, "data_listen": "10.202.0.1:7000", "data_listen_also": ["10.200.0.1:7000"]})
    assert probe_listen(several) == ["10.202.0.1:7000", "10.200.0.1:7000"]
    v6 = registry.config_from_dict({**BASE, "data_listen": "[fd00::1]:7000", "data_listen_also": ["[fd00::2]:7000"]})
    assert probe_listen(v6) == ["[fd00::1]:7000", "[fd00::2]:7000"]
