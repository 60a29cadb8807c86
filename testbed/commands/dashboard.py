"""`testbed dashboard RUN_DIR`: the live view of a run directory (finished, copied or still being written), and
the --dashboard options `up` and `run` share (testbed/dashboard/)."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from node.errors import UserError
from testbed.commands import examples


def add_options(p: argparse.ArgumentParser, serve: bool) -> None:
    """--dashboard (when `serve`: up and run), --port and --dashboard-bind."""
    if serve:
        p.add_argument("--dashboard", action="store_true",
                       help="serve the live dashboard of this run; the URL (with its token) is printed once")
    p.add_argument("--port", type=int, default=None,
                   help="the dashboard's TCP port (default: a free one)")
    p.add_argument("--dashboard-bind", metavar="ADDR", default=None,
                   help="listen on ADDR instead of 127.0.0.1 (prints a warning: others may reach it)")


def options(args: argparse.Namespace, serve: bool = True) -> dict[str, Any] | None:
    """The checked dashboard options: {"port", "bind"}, or None without --dashboard."""
    port, bind = getattr(args, "port", None), getattr(args, "dashboard_bind", None)
    if serve and not getattr(args, "dashboard", False):
        if port is not None or bind is not None:
            raise UserError("--port and --dashboard-bind go with --dashboard.")
        return None
    if port is not None and not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {port}.")
    return {"port": port or 0, "bind": bind or "127.0.0.1"}


def announce(url: str | None, bind: str, stream: Any = None) -> None:
    """The warning for a bind address other than 127.0.0.1 (stderr), then the URL (None: printed elsewhere)."""
    from testbed.dashboard.server import bind_warning
    warning = bind_warning(bind)
    if warning:
        print(warning, file=sys.stderr)
    if url:
        print(f"dashboard: {url}", file=stream or sys.stdout, flush=True)


def _dashboard(args: argparse.Namespace) -> int:
    from testbed.dashboard.server import DashboardServer
    opts = options(args, serve=False)
    assert opts is not None
    server = DashboardServer(Path(args.run_dir), port=opts["port"], bind=opts["bind"], replay=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    announce(server.url, opts["bind"])
    print("press Ctrl-C to stop", file=sys.stderr)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        description="Serve a web page showing RUN_DIR (a repetition, a `testbed up` run directory or a whole "
                    "experiment folder) from its files only: hosts and links with their state and utilisation, "
                    "queues per node, route changes, faults on a timeline, phases. It follows the files as they "
                    "grow, so it works for a finished, copied or half-finished run; /state?t=UNIX_TIME gives the "
                    "state at a past moment. Listens on 127.0.0.1; the URL, printed once, carries a token. "
                    "Runs until Ctrl-C.",
        **examples("testbed dashboard runs/quickstart", "testbed dashboard runs/quickstart/default/1 --port 8765",
                   "testbed dashboard runs/up/tb1234 --dashboard-bind 0.0.0.0 --port 8765"))
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory or experiment folder of `testbed run`, "
                                                     "or the run directory of `testbed up`")
    add_options(p, serve=False)
    p.set_defaults(handler=_dashboard)
