"""The management port of real daemons with `tls` and `auth` on: TLS that names the node, tokens checked first.

A client that trusts the run's CA and checks the node's name gets through; one that expects another node's name,
trusts another CA or speaks plaintext is refused in one sentence, from the library and from the CLI. A call
without a known token is refused on its metadata alone: a request that never arrives is refused at once, where
a handler reading it would wait for it until the deadline.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from node.client import NodeClient
from node.errors import UserError
from node.rpc import submit_pb2
from node.security.tls import TARGET_NAME_OPTION
from testbed import secrets

ROOT = Path(__file__).resolve().parents[3]
NAMES = ["n1", "n2"]
STALL_DEADLINE = 2.0      # seconds a client waits for the answer to a request it never sends


def test_clients_check_the_nodes_name_and_ca_and_the_cli_says_so_in_one_line(localnet, tmp_path: Path) -> None:
    net = localnet(names=NAMES, edges=[], tls=True, auth=True)       # n2 has a certificate of the run's CA too
    run, mgmt = net.secrets, net.nodes["n1"].mgmt
    with net.client("n1") as c:                                   # the run's CA, n1's name, n1's admin token
        assert c.health() and c.stats()["node"] == "n1"
    stranger = secrets.make_stranger(tmp_path / "stranger", "n1")   # names n1, but from a CA of its own
    cases = {"another name": dict(ca=run.ca, name="n2"),
             "another CA": dict(ca=(stranger / "ca.crt").read_bytes(), name="n1"),
             "plaintext": {}}
    said = {}
    for case, tls in cases.items():
        with NodeClient(mgmt, token=run.token("n1"), timeout=5.0, **tls) as c:
            with pytest.raises(UserError) as info:
                c.stats()
            said[case] = str(info.value)
            if tls:
                with pytest.raises(UserError, match="TLS refused"):      # no use waiting for its health either
                    c.health()
            else:
                assert not c.health()
    assert said["another name"] == f"the certificate of the node at {mgmt} does not name 'n2' (TLS refused).", said
    assert said["another CA"] == f"the certificate of the node at {mgmt} is not from the CA this client trusts " \
                                 f"(TLS refused).", said
    assert "is not reachable" in said["plaintext"], said

    def tb(ca: Path, token: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "WANBED_CA": str(ca), "WANBED_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "testbed", "mailbox", "n1", "--json", "--address", mgmt],
                              capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
    out = tb(stranger / "ca.crt", run.token("n1"))
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"testbed: the certificate of the node at {mgmt} is not from the CA this client trusts (TLS refused)."], \
        out.stderr
    out = tb(net.workdir / "n1" / "ca.crt", run.token("n1"))
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def _stalled_send(mgmt: str, ca: bytes, token: str | None) -> tuple[grpc.StatusCode, float]:
    """A Send whose request message never comes (the stream stays open): how it ended, and after how long."""
    channel = grpc.secure_channel(mgmt, grpc.ssl_channel_credentials(ca), options=[(TARGET_NAME_OPTION, "n1")])
    held = threading.Event()

    def nothing():
        held.wait()
        return
        yield

    send = channel.stream_unary("/wanbed.Submit/Send", request_serializer=submit_pb2.SendRequest.SerializeToString,
                                response_deserializer=submit_pb2.SendReply.FromString)
    t0 = time.monotonic()
    try:
        send(nothing(), timeout=STALL_DEADLINE, metadata=(("authorization", token),) if token else ())
        code = grpc.StatusCode.OK
    except grpc.RpcError as exc:
        code = exc.code()
    finally:
        held.set()
        channel.close()
    return code, time.monotonic() - t0


def test_a_call_without_a_known_token_is_refused_before_its_request_is_read(localnet) -> None:
    net = localnet(names=["n1"], edges=[], tls=True, auth=True)
    run, mgmt = net.secrets, net.nodes["n1"].mgmt
    for token in (None, "not-a-token"):
        code, took = _stalled_send(mgmt, run.ca, token)
        assert code == grpc.StatusCode.UNAUTHENTICATED and took < STALL_DEADLINE / 2, (token, code, took)
    # with the right token the node does wait for the request (so the refusal above came before reading it)
    code, took = _stalled_send(mgmt, run.ca, run.token("n1"))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and took >= STALL_DEADLINE * 0.9, (code, took)
    with NodeClient(mgmt, token="", ca=run.ca, name="n1", timeout=10.0) as c:   # a 32 MiB body: refused all the same
        with pytest.raises(UserError, match="refused the call: missing token"):
            c.send(["n1"], payload=b"x" * (32 << 20))
    with net.client("n1") as c:
        assert c.send(["n1"], size=10).accepted
    assert "Traceback" not in (net.workdir / "n1" / "node.log").read_text()
