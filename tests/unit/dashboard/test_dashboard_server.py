"""The dashboard server over real HTTP on 127.0.0.1: the token, paths outside the assets, server-sent events
after a line is appended, a client that stops reading (one pending update, then dropped, its thread gone),
the client limit, and the CLI's one-sentence errors."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from node.errors import UserError
from testbed import cli
from testbed.dashboard.server import DashboardServer, bind_warning

INTERVAL = 0.2
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    (tmp_path / "topology.json").write_text(json.dumps({
        "topology": "t", "generator": "linear",
        "hosts": [{"name": "n1", "role": "host", "attrs": {}}, {"name": "n2", "role": "host", "attrs": {}}],
        "links": [{"name": "n1-n2", "a": "n1", "b": "n2", "state": "up", "a_to_b": {"rate": 1e6},
                   "b_to_a": {"rate": 1e6}}]}))
    (tmp_path / "events.jsonl").write_text("")
    return tmp_path


@pytest.fixture
def server(run: Path) -> Iterator[DashboardServer]:
    s = DashboardServer(run, interval=INTERVAL, max_clients=2, send_timeout=0.5, keepalive=0.5).start()
    try:
        yield s
    finally:
        s.stop()


def get(s: DashboardServer, path: str, token: str | None = "ok") -> tuple[int, bytes]:
    if token == "ok":
        token = s.token
    sep = "&" if "?" in path else "?"
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    c.request("GET", path + (f"{sep}token={token}" if token is not None else ""))
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def test_the_token_is_needed_and_paths_stay_inside_the_assets(server: DashboardServer) -> None:
    assert server.url.startswith(f"http://127.0.0.1:{server.port}/?token=") and len(server.token) >= 24
    assert get(server, "/", token=None)[0] == 403
    assert get(server, "/state", token="wrong")[0] == 403
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    c.request("GET", f"/?token={server.token}")
    r = c.getresponse()
    body = r.read()       # the minimal page, or the full one once `make setup` put its libraries in static/
    assert r.status == 200 and (b"EventSource" in body or b"/page/app.js" in body)
    cookie = (r.getheader("Set-Cookie") or "").split(";")[0]
    assert cookie == f"testbed_dashboard_{server.port}={server.token}"
    c.request("GET", "/state", headers={"Cookie": cookie})      # what the page's own requests carry
    r = c.getresponse()
    assert r.status == 200 and r.read()
    c.close()
    status, body = get(server, "/state")
    assert status == 200 and json.loads(body)["counts"] == {"hosts": 2, "links": 1}
    for path in ("/page/../server.py", "/page/%2e%2e/server.py", "/page/..%2fserver.py", "/page//etc/passwd",
                 "/page/%2fetc%2fpasswd", "/static/../../reader.py", "/nowhere"):
        assert get(server, path)[0] == 404, path
    status, body = get(server, "/app")          # the full page's libraries come with `make setup`
    assert status in (200, 503) and (status == 200 or b"run make setup" in body)
    assert get(server, "/state?t=yesterday")[0] == 400


def events(s: DashboardServer) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    c.request("GET", f"/events?token={s.token}")
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    return c, r


def next_state(r: http.client.HTTPResponse) -> dict:
    while True:
        line = r.readline()
        assert line, "the stream ended"
        if line.startswith(b"data: "):
            return json.loads(line[6:])


def test_an_appended_line_reaches_the_stream_within_the_interval(server: DashboardServer, run: Path) -> None:
    c, r = events(server)
    assert next_state(r)["timeline"] == []                  # the current state first
    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps({"ts": time.time(), "node": "testbed", "event": "link_down", "target": "n1-n2"}) + "\n")
    t0 = time.monotonic()
    state = next_state(r)
    assert [e["event"] for e in state["timeline"]] == ["link_down"]
    assert time.monotonic() - t0 < 2 * INTERVAL + 1.0
    c.close()


def test_a_client_that_stops_reading_holds_one_update_and_is_dropped(server: DashboardServer) -> None:
    threads = threading.active_count()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(f"GET /events?token={server.token} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    deadline = time.monotonic() + 5
    while not server.hub.clients and time.monotonic() < deadline:
        time.sleep(0.02)
    [client] = server.hub.clients
    big = b"data: " + b"x" * 256 * 1024 + b"\n\n"
    for i in range(40):                        # 10 MB offered to a reader that takes nothing
        server.hub.publish(big)
        with client.cond:
            assert client.pending in (None, big)   # one slot: the newest replaces the unsent one
        time.sleep(0.01)
    deadline = time.monotonic() + 5 * 0.5 + 3
    while server.hub.clients and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.hub.clients == [], "a client that reads nothing must be dropped after send_timeout"
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads, "the dropped client's thread must end"
    sock.close()


def test_at_most_max_clients_streams(server: DashboardServer) -> None:
    held = [events(server) for _ in range(server.max_clients)]
    assert get(server, "/events")[0] == 503
    for c, _ in held:
        c.close()


def test_bad_input_is_one_sentence_and_exit_2(run: Path, tmp_path: Path, capsys) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    with pytest.raises(UserError, match="cannot listen on 127.0.0.1"):
        DashboardServer(run, port=busy.getsockname()[1])
    for args, words in (([str(run), "--port", str(busy.getsockname()[1])], "pick another --port"),
                        ([str(tmp_path / "nowhere")], "is not a directory"),
                        ([str(run / "events.jsonl")], "is not a directory"),
                        ([str(tmp_path / "nowhere"), "--port", "70000"], "between 0 and 65535")):
        code = cli.main(["dashboard", *args])
        err = capsys.readouterr().err
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (args, err)
    out = tmp_path / "out"
    code = cli.main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(out), "--dashboard", "--port",
                     str(busy.getsockname()[1])])
    err = capsys.readouterr().err
    assert code == 2 and "pick another --port" in err and not out.exists(), err     # before anything runs
    for args, words in ((["run", "x.yaml", "--port", "8000"], "go with --dashboard"),
                        (["up", "x.yaml", "--dashboard-bind", "0.0.0.0"], "go with --dashboard")):
        assert cli.main(args) == 2 and words in capsys.readouterr().err
    busy.close()
    assert bind_warning("127.0.0.1") is None and "0.0.0.0" in (bind_warning("0.0.0.0") or "")
