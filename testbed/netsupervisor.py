"""The process that holds a `testbed up` network after the command has returned.

`testbed up` starts `python -P -m testbed.netsupervisor SCENARIO [--set KEY=VALUE]...`
in a session of its own (testbed/pycmd.py: the caller's directory cannot shadow the
project). It registers the run (kind "up", owner = itself), builds the network with
the links `testbed run` would build (Network.from_scenario: wall units, time_scale
applied), reports success or the error sentence on a pipe the parent reads, then sleeps
until SIGTERM/SIGINT (`testbed down`) and tears everything down. Meanwhile it samples the links'
counters into links.jsonl and, with --dashboard-port, serves the dashboard of its run directory. A kill -9 of
it leaves resources whose owner is dead: exactly what `testbed clean` removes.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from testbed import netstate, registry
from node.errors import UserError

log = logging.getLogger("testbed.netsupervisor")


def _report(fd: int, payload: dict) -> None:
    if fd < 0:
        return
    try:
        os.write(fd, (json.dumps(payload) + "\n").encode())
        os.close(fd)
    except OSError:
        pass     # the parent went away; the network still stays up until `testbed down`


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.netsupervisor")
    p.add_argument("scenario")
    p.add_argument("--run-id", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--runtime")
    p.add_argument("--shaper")
    p.add_argument("--report-fd", type=int, default=-1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="scenario overrides, as for run")
    p.add_argument("--dashboard-port", type=int, default=None, help="serve the dashboard on this port (0: any)")
    p.add_argument("--dashboard-bind", default="127.0.0.1")
    p.add_argument("--factory", help="MODULE:FUNCTION returning an unstarted Network (tests; replaces the loader)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)    # the user's terminal closing must not take the network down

    net = None
    linkmon = None
    dash = None
    try:
        if args.dashboard_port is not None:
            # first: a port in use is refused before anything is built
            from testbed.dashboard.server import DashboardServer
            dash = DashboardServer(Path(args.run_dir), port=args.dashboard_port, bind=args.dashboard_bind,
                                   check=False, experiment=False).start()
        # imported here so that a failing import, too, reaches the parent as a report
        from testbed.network import Network
        from testbed.scenario import dump_resolved, load
        kw = {}
        if args.runtime:
            kw["runtime"] = args.runtime
        if args.shaper:
            kw["shaper"] = args.shaper
        scenario = None
        if args.factory:
            mod, _, fn = args.factory.partition(":")
            net = getattr(importlib.import_module(mod), fn)(run_id=args.run_id, run_dir=Path(args.run_dir),
                                                           kind=netstate.UP_KIND, handle_signals=False)
        else:
            scenario = load(args.scenario, overrides=args.set)
            net = Network.from_scenario(scenario, Path(args.run_dir), run_id=args.run_id, kind=netstate.UP_KIND,
                                        handle_signals=False, **kw)
        net.start()
        linkmon = net.link_monitor(Path(args.run_dir) / "links.jsonl")
        linkmon.start()
        # A concurrent `up` may have slipped past the parent's check: the older one wins.
        others = [r for r in netstate.running() if r.run_id != args.run_id and r.started <= registry.load(
            args.run_id).started]
        if others:
            raise UserError(f"network {others[0].run_id} is already up; run `testbed down` first.")
        try:
            if scenario is None:
                raise LookupError("no scenario")
            (Path(args.run_dir) / "scenario.yaml").write_text(dump_resolved(scenario))
        except Exception:
            log.warning("could not write the resolved scenario", exc_info=True)
    except BaseException as exc:
        msg = str(exc) if isinstance(exc, UserError) else f"building the network failed: {exc!r}"
        log.error("%s", msg, exc_info=not isinstance(exc, UserError))
        if dash is not None:
            dash.stop()
        if linkmon is not None:
            linkmon.stop()
        if net is not None:
            net.stop()
        registry.unregister(args.run_id)
        _report(args.report_fd, {"ok": False, "error": msg})
        return 2
    _report(args.report_fd, {"ok": True, "run_id": args.run_id, "dashboard": dash.url if dash else None})
    if stop.is_set():
        log.info("stop requested during set-up")
    while not stop.wait(3600):
        pass
    log.info("tearing down network %s", args.run_id)
    if dash is not None:
        dash.stop()
    linkmon.stop()
    net.stop()
    log.info("network %s is down", args.run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
