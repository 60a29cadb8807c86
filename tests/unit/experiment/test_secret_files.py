"""The run's secrets on disk: nothing in secrets/ readable by others whatever the caller's umask, no CA key
left behind once the certificates are issued, and node.yaml (which may hold a control_token) private."""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testbed import secrets
from testbed.experiment import nodeconfig


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most careless caller: files created 0666 and directories 0777 unless the code says otherwise."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_secrets_are_private_under_any_umask_and_the_ca_key_is_not_kept(tmp_path, open_umask):
    secrets.make(tmp_path, {"n1": ["alice"], "n2": []}, tls=True, auth=True)
    sdir = tmp_path / secrets.SECRETS_DIR
    assert _mode(sdir) == 0o700
    inside = list(sdir.iterdir())
    assert {p.name for p in inside} == {"ca.crt", secrets.TOKENS_FILE}
    assert all(_mode(p) == 0o600 for p in inside), {p.name: oct(_mode(p)) for p in inside}
    assert not [p for p in tmp_path.rglob("*.key") if p.name != secrets.CERT_FILES["key"]]    # no CA key anywhere
    # a node's certificates are still what its daemon (a container's non-root user) can read
    assert _mode(tmp_path / "nodes" / "n1" / "node.crt") & stat.S_IROTH


def test_node_yaml_is_private(tmp_path, open_umask):
    paths = nodeconfig.write_configs({"n1": {"name": "n1", "control_token": "ctl"}}, tmp_path)
    assert _mode(paths["n1"]) == 0o600
    assert yaml.safe_load(paths["n1"].read_text())["control_token"] == "ctl"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_node_yaml_belongs_to_whoever_owns_the_node_directory(tmp_path):
    """The docker runtime chowns nodes/<node>/ to the image's non-root user: its daemon must read its config."""
    d = tmp_path / "nodes" / "n1"
    d.mkdir(parents=True)
    os.chown(d, 10001, 10001)
    path = nodeconfig.write_configs({"n1": {"name": "n1"}}, tmp_path)["n1"]
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (10001, 10001, 0o600)


def test_the_run_directorys_scenario_copies_hide_a_control_token() -> None:
    """scenario.yaml and experiment.json's `sets` are written with the process's umask (readable by others):
    they show that a control_token was set, never its value."""
    from testbed.scenario import loader

    text = (Path(__file__).resolve().parents[3] / "scenarios" / "quickstart.yaml").read_text()
    s = loader.load_text(text, overrides=["nodes.all.control_token=s3cret"])
    dumped = loader.dump_resolved(s)
    assert "s3cret" not in dumped and f"control_token: {loader.HIDDEN}" in dumped
    assert loader.hide_secret_sets(["nodes.all.control_token=s3cret", "seed=7"]) == \
        [f"nodes.all.control_token={loader.HIDDEN}", "seed=7"]
