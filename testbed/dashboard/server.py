"""The dashboard's HTTP server: stdlib http.server (threaded) and server-sent events.

Routes (every one needs the token, in `?token=` or the cookie the first page load sets; missing or wrong: 403):
  /               the full page (page/app.html) once `make setup` has filled static/; until then the minimal one
                  (page/index.html): counts, phase, last events
  /app            the full page; without its libraries: one sentence
  /state          the state as JSON; `?t=UNIX_TIME` replays the run as it stood then
  /events         server-sent events: the state, at most once a second, only when it changed
  /page/<file>, /static/<file>   assets; anything outside their folders is 404

One poller thread reads the run directory every `interval` seconds and publishes the state to a Hub. A client
holds at most ONE pending update (the newest replaces an unsent one: coalesced), so a slow client costs no
growing buffer; a write that cannot go out within `send_timeout` drops that client and ends its thread.
At most `max_clients` streams at once; the next one gets 503.
"""
from __future__ import annotations

import http.server
import json
import logging
import secrets
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from node.errors import UserError
from testbed.dashboard.state import ExperimentState, RunState, State, open_source

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
PAGE_DIR = HERE / "page"          # tracked: the minimal page
STATIC_DIR = HERE / "static"      # git-ignored: the libraries `make setup` copies in
FULL_PAGE_NEEDS = ("cytoscape.min.js", "uPlot.iife.min.js", "uPlot.min.css")  # what app.html needs from static/
COOKIE = "testbed_dashboard"
LOCAL = "127.0.0.1"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css",
         ".json": "application/json", ".svg": "image/svg+xml", ".png": "image/png", ".map": "application/json"}


class _Client:
    """One SSE stream: a single slot for the newest unsent update."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pending: bytes | None = None
        self.closed = False


class Hub:
    """Hands the newest state to every connected stream; bounded in clients and in what each one holds."""

    def __init__(self, max_clients: int = 8) -> None:
        self.max_clients = max_clients
        self._lock = threading.Lock()
        self.clients: list[_Client] = []
        self.latest: bytes | None = None

    def join(self) -> _Client | None:
        with self._lock:
            if len(self.clients) >= self.max_clients:
                return None
            c = _Client()
            c.pending = self.latest
            self.clients.append(c)
            return c

    def leave(self, c: _Client) -> None:
        with self._lock:
            if c in self.clients:
                self.clients.remove(c)
        with c.cond:
            c.closed = True
            c.cond.notify_all()

    def publish(self, payload: bytes) -> None:
        with self._lock:
            self.latest = payload
            clients = list(self.clients)
        for c in clients:
            with c.cond:
                c.pending = payload         # replaces an unsent one: a slow reader skips, it does not queue
                c.cond.notify_all()

    def close(self) -> None:
        with self._lock:
            clients = list(self.clients)
        for c in clients:
            self.leave(c)


def sse(payload: dict[str, Any]) -> bytes:
    return b"event: state\ndata: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


@dataclass
class DashboardServer:
    """Serve the state of `source` (a run directory or an experiment folder) on bind:port."""

    source: Path
    port: int = 0
    bind: str = LOCAL
    check: bool = True                 # refuse a path that is not a run; off: it may not be written yet
    experiment: bool | None = None     # an experiment folder (testbed run); None: by what the folder holds
    interval: float = 1.0              # seconds between reads of the run directory (and at most one event)
    max_clients: int = 8
    send_timeout: float = 10.0         # a stream whose write stalls this long is dropped
    keepalive: float = 15.0            # a comment line this often finds clients that went away
    replay: bool = False               # `testbed dashboard`: the page offers a time slider
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def __post_init__(self) -> None:
        self.state: State = open_source(self.source, check=self.check, experiment=self.experiment)
        self.hub = Hub(self.max_clients)
        self._stop = threading.Event()
        self._state_lock = threading.Lock()
        self._published = -1            # the state version last sent to the streams
        self._threads: list[threading.Thread] = []
        handler = _handler(self)
        try:
            self.httpd = _Server((self.bind, self.port), handler)
        except OSError as exc:
            raise UserError(f"the dashboard cannot listen on {self.bind}:{self.port} "
                            f"({exc.strerror or exc}); pick another --port.") from None
        self.port = self.httpd.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"http://{host}:{self.port}/?token={self.token}"

    def start(self) -> "DashboardServer":
        with self._state_lock:
            self.state.poll()
            self._published = self.state.version
            self.hub.publish(sse(self._snapshot(self.state)))
        for target, name in ((lambda: self.httpd.serve_forever(poll_interval=0.2), "dashboard-http"),
                             (self._poll_loop, "dashboard-poll")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self.hub.close()
        self.httpd.shutdown()
        self.httpd.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self._state_lock:
                    self.state.poll()
                    # by version, not by this poll's answer: a /state request may have read the change first
                    payload = None
                    if self.state.version != self._published:
                        self._published = self.state.version
                        payload = sse(self._snapshot(self.state))
            except Exception:  # noqa: BLE001 - a reading bug must not end the live view; the page keeps the last
                log.exception("dashboard: reading the run directory failed")
                continue
            if payload is not None:
                self.hub.publish(payload)

    def snapshot(self, until: float | None = None) -> dict[str, Any]:
        if until is None:
            with self._state_lock:
                self.state.poll()           # as of now, not as of the last tick
                return self._snapshot(self.state)
        # read afresh up to `until`: the run as it stood then
        if isinstance(self.state, ExperimentState):
            replay: State = ExperimentState(self.state.folder, until, pin=self.state.pin)
        else:
            replay = RunState(self.state.run_dir, until)
        replay.poll()
        return self._snapshot(replay)

    def _snapshot(self, state: State) -> dict[str, Any]:
        snap = state.snapshot()
        snap["replay"] = self.replay
        return snap


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False       # a port in use is an error, not shared

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("dashboard: request from %s failed", client_address, exc_info=True)


def _safe_file(root: Path, rel: str) -> Path | None:
    """The file `rel` under `root`, or None for anything that leaves it (.., absolute, encoded, links)."""
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    try:
        path = (root / rel).resolve()
        path.relative_to(root.resolve())
    except (OSError, ValueError):
        return None
    return path if path.is_file() else None


def _handler(server: DashboardServer) -> Callable[..., http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "testbed-dashboard"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("dashboard: " + format, *args)

        def _authorised(self, query: dict[str, list[str]]) -> bool:
            given = (query.get("token") or [""])[0]
            if not given:
                for part in (self.headers.get("Cookie") or "").split(";"):
                    name, _, value = part.strip().partition("=")
                    if name == f"{COOKIE}_{server.port}":
                        given = value
            return bool(given) and secrets.compare_digest(given.encode(), server.token.encode())

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
                  cookie: bool = False) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if cookie:
                # named by port: cookies ignore ports, and two dashboards on one machine must not overwrite each other's
                self.send_header("Set-Cookie", f"{COOKIE}_{server.port}={server.token}; Path=/; HttpOnly; "
                                               f"SameSite=Strict")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            if urllib.parse.urlsplit(self.path).path == "/events":
                self._send(405, b"the event stream takes GET\n")     # a stream has no head to give
                return
            self.do_GET()

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            if not self._authorised(query):
                self._send(403, b"forbidden: the dashboard's URL carries a token; use the one printed at start\n")
                return
            # decoded once: %2e%2e and %2f are judged as what they mean
            path = urllib.parse.unquote(url.path)
            full = all((STATIC_DIR / f).is_file() for f in FULL_PAGE_NEEDS)
            if path in ("/", "/index.html"):
                self._file(PAGE_DIR, "app.html" if full else "index.html", cookie=True)
            elif path == "/app":
                if not full:
                    self._send(503, b"the full dashboard page needs its libraries: run make setup\n")
                else:
                    self._file(PAGE_DIR, "app.html", cookie=True)
            elif path == "/state":
                self._state(query)
            elif path == "/events":
                self._events()
            elif path.startswith("/page/"):
                self._file(PAGE_DIR, path[len("/page/"):])
            elif path.startswith("/static/"):
                self._file(STATIC_DIR, path[len("/static/"):])
            else:
                self._send(404, b"not found\n")

        def _file(self, root: Path, rel: str, cookie: bool = False) -> None:
            f = _safe_file(root, rel)
            if f is None:
                self._send(404, b"not found\n")
                return
            self._send(200, f.read_bytes(), TYPES.get(f.suffix, "application/octet-stream"), cookie=cookie)

        def _state(self, query: dict[str, list[str]]) -> None:
            t = (query.get("t") or [None])[0]
            until = None
            if t is not None:
                try:
                    until = float(t)
                except ValueError:
                    self._send(400, b"t must be a Unix time in seconds\n")
                    return
            body = json.dumps(server.snapshot(until), separators=(",", ":")).encode()
            self._send(200, body, "application/json")

        def _events(self) -> None:
            client = server.hub.join()
            if client is None:
                self._send(503, f"at most {server.max_clients} live views at once\n".encode())
                return
            try:
                self.connection.settimeout(server.send_timeout)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                self.close_connection = True
                while True:
                    with client.cond:
                        if client.pending is None and not client.closed:
                            client.cond.wait(server.keepalive)
                        if client.closed:
                            return
                        payload, client.pending = client.pending, None
                    self.wfile.write(payload if payload is not None else b": keepalive\n\n")
                    self.wfile.flush()
            except (OSError, socket.timeout):
                return           # gone, or too slow to take a write: dropped
            finally:
                server.hub.leave(client)

    return Handler


def serve_forever(server: DashboardServer, stop: threading.Event) -> None:
    """Run until `stop` is set (the caller's signal handler sets it)."""
    server.start()
    while not stop.wait(1.0):
        pass
    server.stop()


def bind_warning(bind: str) -> str | None:
    if bind in (LOCAL, "localhost"):
        return None
    return (f"warning: the dashboard listens on {bind}, not only on this machine; anyone who can reach it and "
            f"has the URL's token sees the run")


__all__ = ["DashboardServer", "Hub", "bind_warning", "serve_forever"]
