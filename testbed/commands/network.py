"""Network commands: up, down, status, exec, link, partition, heal, clean.

`up` leaves a supervisor process (testbed/netsupervisor.py) holding the network, starts
the node daemons (testbed/live_nodes.py; not with --no-nodes) and returns; every other
command finds that run in the registry (kind "up") and acts on the state it recorded
(testbed/netstate.py). `down` stops the daemons and then
signals the supervisor, both by pid, and waits for the teardown to finish.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed import netstate, pycmd, registry
from testbed.commands import dashboard, examples
from testbed.commands.values import parse_duration, parse_percent, parse_rate
from testbed.experiment import console
from testbed.network import Network
from node.errors import UserError

UP_TIMEOUT = 300.0        # seconds `up` waits for the supervisor's report (100 hosts take well under 30)
DOWN_TIMEOUT = 60.0
UNLIMITED = ("unlimited", "none")      # `link --rate` words for no rate limit (so is a rate of 0)


# ---- up / down -----------------------------------------------------------------------------

def _up(args: argparse.Namespace) -> int:
    dash = dashboard.options(args)
    if os.geteuid() != 0:
        raise UserError("the testbed must run as root to create network namespaces and interfaces.")
    if not Path(args.scenario).is_file():
        raise UserError(f"scenario file {args.scenario} does not exist.")
    live = netstate.running()
    if live:
        raise UserError(f"network {live[0].run_id} is already up; run `testbed down` first.")
    if args.test and (args.no_nodes or args.factory):
        raise UserError("--test checks the node daemons: it cannot go with --no-nodes.")
    if args.factory and args.set:
        raise UserError("--set applies to a scenario file; --factory builds its network without one.")
    scenario = None
    if not args.no_nodes and not args.factory:     # a test factory's network has no scenario to configure nodes from
        from testbed import live_nodes
        from testbed.scenario import load
        from testbed.scenario.sections.security import for_up
        scenario = load(args.scenario, overrides=args.set)     # the supervisor applies the same --set values
        scenario.security = for_up(scenario.security, tls=args.tls, auth=args.auth, insecure=args.insecure)
        live_nodes.check(scenario)                 # bad node settings: one error before anything is built
    run_id = registry.new_run_id()
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / "up" / registry.prefix(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    rfd, wfd = os.pipe()
    argv = pycmd.module_argv("testbed.netsupervisor", str(Path(args.scenario).resolve()), "--run-id", run_id,
                             "--run-dir", str(run_dir.resolve()), "--report-fd", str(wfd),
                             *(f"--set={s}" for s in args.set))
    if args.runtime:
        argv += ["--runtime", args.runtime]
    if args.shaper:
        argv += ["--shaper", args.shaper]
    if args.factory:
        argv += ["--factory", args.factory]
    if dash is not None:
        argv += ["--dashboard-port", str(dash["port"]), "--dashboard-bind", dash["bind"]]
    with open(run_dir / "supervisor.log", "ab") as logf:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                pass_fds=(wfd,), start_new_session=True, env=pycmd.env())
    os.close(wfd)
    with console.waiting(f"building the network of {args.scenario} (hosts, links, shaping; log: "
                         f"{run_dir / 'supervisor.log'})"):
        report = _read_report(rfd, proc, UP_TIMEOUT)
    if not report.get("ok"):
        raise UserError(report.get("error") or f"the network did not come up; see {run_dir / 'supervisor.log'}.")
    rec = registry.load(run_id)
    if rec is None:
        raise UserError(f"the network came up but its state is gone; see {run_dir / 'supervisor.log'}.")
    net = Network.attach(rec.run_id)
    desc = net.describe()
    doc: dict[str, Any] = {"running": True, **desc, "run_dir": str(run_dir), "nodes": None, "security": None,
                           "dashboard": report.get("dashboard")}
    if not args.json:
        _print_tables(desc, run_dir)
    if dash is not None:
        # printed once (the URL carries the token): here, or with --json in the document
        dashboard.announce(None if args.json else report.get("dashboard"), dash["bind"])
    if scenario is not None:
        nodes = _start_nodes(rec, scenario)
        doc["nodes"], doc["security"] = _nodes_plain(nodes, scenario)
        if not args.json:
            _print_nodes(nodes, scenario)
    if not args.test:
        if args.json:
            print(json.dumps(doc, indent=1))
        return 0
    if not args.json:
        return _smoke_test(rec, proc)
    with contextlib.redirect_stdout(sys.stderr):       # the checks' lines beside the progress, not in the JSON
        status = _smoke_test(rec, proc)
    print(json.dumps({**doc, "running": False, "test": {"passed": status == 0}}, indent=1))
    return status


def _smoke_test(rec: registry.RunRecord, supervisor: subprocess.Popen) -> int:
    """`up --test`: the checks of testbed/commands/smoke.py, then the network goes down whatever they found."""
    from testbed import live_nodes
    from testbed.commands import smoke
    try:
        ok = smoke.run(registry.load(rec.run_id) or rec)      # the record as the started daemons left it
    finally:
        nodes = live_nodes.stop(rec.run_id)
        supervisor.terminate()
        try:                   # the supervisor is this process's child here: reap it, or it stays a zombie
            supervisor.wait(DOWN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        _stop_supervisor(rec)
        if nodes is not None:
            live_nodes.remove_records(nodes)
        print(f"network {rec.run_id} is down")
    return 0 if ok else 1


def _start_nodes(rec: registry.RunRecord, scenario: Any) -> Any:
    """The node daemons of a fresh `up` (testbed/live_nodes.py); if they fail, the network goes down too."""
    from testbed import live_nodes
    try:
        with console.waiting("starting the node daemons and waiting until every one is healthy"):
            return live_nodes.start(rec, scenario)
    except BaseException as exc:
        try:
            _stop_supervisor(rec)
        except UserError:
            pass                 # its own message names the pid; the daemons' error matters more here
        if isinstance(exc, UserError):
            raise UserError(f"{exc}\n(network {rec.run_id} was taken down again)") from None
        raise


def _nodes_plain(nodes: Any, scenario: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """`up --json`'s nodes and security: what _print_nodes says in sentences."""
    sec = scenario.security
    tokens = Path(nodes.run_dir) / "secrets" / "tokens.json"
    return ({"daemons": [d.host for d in nodes.daemons], "without_daemon": list(nodes.without_daemon),
             "sessions_missing": list(nodes.sessions_missing), "records_dir": str(nodes.records_dir)},
            {"tls": bool(sec.tls), "auth": bool(sec.auth), "tokens": str(tokens) if sec.auth else None})


def _print_nodes(nodes: Any, scenario: Any) -> None:
    print(f"node daemons: {', '.join(d.host for d in nodes.daemons)} (healthy)"
          + (f"; no daemon: {', '.join(nodes.without_daemon)}" if nodes.without_daemon else ""))
    if nodes.sessions_missing:
        print(f"warning: neighbour sessions of {', '.join(nodes.sessions_missing)} were not all up yet")
    print(f"node records: {nodes.records_dir}/<host>/ (removed by `testbed down` unless --keep)")
    sec = scenario.security
    if sec.tls or sec.auth:
        tokens = Path(nodes.run_dir) / "secrets" / "tokens.json"
        print(f"security: {'mTLS between the nodes, TLS on the management ports' if sec.tls else 'no TLS'}; "
              f"{f'tokens in {tokens} (the CLI uses them)' if sec.auth else 'no tokens'}; "
              f"the secrets are removed by `testbed down` unless --keep")
        print("to run without TLS and tokens: `testbed up --insecure` (or `security: {tls: false, auth: false}` "
              "in the scenario)")
    else:
        print("security: none: the management ports are plaintext and take calls from anyone on this host")


def _read_report(fd: int, proc: subprocess.Popen, timeout: float) -> dict[str, Any]:
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
            elif proc.poll() is not None and not buf:
                break
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)     # our own child, by pid: it tears down what it built
        proc.wait(DOWN_TIMEOUT)
        raise
    finally:
        os.close(fd)
    if not buf:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(DOWN_TIMEOUT)
            return {"ok": False, "error": f"the network did not come up within {timeout:.0f} s."}
        return {"ok": False, "error": ""}
    try:
        return json.loads(buf.decode().splitlines()[0])
    except (json.JSONDecodeError, IndexError):
        return {"ok": False, "error": ""}


def _print_tables(desc: dict[str, Any], run_dir: Path | None = None) -> None:
    """The hosts and links: rich tables on a terminal; otherwise plain aligned columns at full width (a pipe or
    a log file gets no table folded into 80 columns)."""
    from rich.console import Console

    from spark_analysis.render import console_table     # rich: only the commands that print tables pay for it

    out = Console()
    out.print(f"network [bold]{desc['run_id']}[/bold] ({desc['topology']}): runtime {desc['runtime']}, "
                  f"{desc.get('shaper_message') or 'shaper ' + desc['shaper']}"
                  + (f", run dir {run_dir}" if run_dir else ""), soft_wrap=True)
    hosts = [[h["name"], h["mgmt_address"], h["data_address"],
              " ".join(f"{i['ifname']}={i['address']}" for i in h["interfaces"] if i["link"] != "mgmt")]
             for h in desc["hosts"]]
    links = [[l["name"], l["state"], _fmt_dir(l["a_to_b"]), _fmt_dir(l["b_to_a"])] for l in desc["links"]]
    for title, head, rows in (("hosts", ["host", "management", "data (loopback)", "interfaces"], hosts),
                              ("links", ["link", "state", "a→b", "b→a"], links)):
        console_table(head, rows, title=title, console=out)
    if desc.get("partitions"):
        for a, b in desc["partitions"]:
            print(f"partition: {','.join(a)} | {','.join(b)}")


def _fmt_dir(d: dict[str, Any]) -> str:
    parts = [f"delay {d['delay'] * 1e3:g}ms"]
    if d.get("jitter"):
        parts.append(f"jitter {d['jitter'] * 1e3:g}ms")
    if d.get("loss"):
        parts.append(f"loss {d['loss'] * 100:g}%")
    if d.get("gilbert"):
        parts.append("gilbert-elliott")
    parts.append(f"rate {fmt_rate(d['rate'])}" if d.get("rate") else "rate unlimited")
    if d.get("duplex") == "half":
        parts.append("half-duplex")
    return ", ".join(parts)


def fmt_rate(bits: float) -> str:
    """A rate in the largest unit that keeps it at 1 or more (320kbit, not 0.32Mbit), as the scenario writes it."""
    for unit, scale in (("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits:g}bit"


def _down(args: argparse.Namespace) -> int:
    from testbed import live_nodes
    rec = _current_any()
    nodes = live_nodes.stop(rec.run_id)       # the daemons first, by pid, while their network still carries them
    _stop_supervisor(rec)
    if nodes is not None:
        if args.keep:
            print(f"node records kept in {nodes.records_dir}")
        else:
            live_nodes.remove_records(nodes)
    print(f"network {rec.run_id} is down")
    return 0


def _stop_supervisor(rec: registry.RunRecord) -> None:
    """SIGTERM the supervisor holding the network and wait until its teardown is complete."""
    try:
        os.kill(rec.owner_pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + DOWN_TIMEOUT
    while registry.pid_alive(rec.owner_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if registry.pid_alive(rec.owner_pid):
        raise UserError(f"network {rec.run_id} did not stop within {DOWN_TIMEOUT:.0f} s (supervisor pid "
                        f"{rec.owner_pid}); try again or kill that pid and run `testbed clean`.")
    if registry.load(rec.run_id) is not None:     # the supervisor died without finishing: finish for it
        from testbed import cleanup
        cleanup.clean(only=[rec.run_id])


def _current_any() -> registry.RunRecord:
    """The running network even while it is still being built (for down)."""
    runs = netstate.running()
    if not runs:
        dead = [r.run_id for r in registry.all_runs() if r.kind == netstate.UP_KIND]
        if dead:
            raise UserError(f"no network is up, but network {dead[0]} died without tearing down; "
                            "run `testbed clean`.")
        raise UserError("no network is up (start one with `testbed up SCENARIO`).")
    return runs[0]


# ---- queries and changes -----------------------------------------------------------------

def _status(args: argparse.Namespace) -> int:
    if args.json and not netstate.running():
        print(json.dumps({"running": False}))      # a state, not an error, for a script that asks
        return 0
    rec = netstate.current()
    net = Network.attach(rec.run_id)
    desc = net.describe()
    if args.json:
        print(json.dumps({"running": True, **desc, "run_dir": rec.state.get("run_dir")}, indent=1))
    else:
        _print_tables(desc, Path(rec.state.get("run_dir", "")))
    return 0


def _exec(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("no command given: testbed exec NODE -- CMD [ARGS...].")
    rec = netstate.current()
    ns = rec.state.get("netns", {}).get(args.node)
    if not ns:
        raise UserError(f"no host named {args.node!r} in the running network {rec.run_id}.")
    try:
        return subprocess.run(["ip", "netns", "exec", ns, *cmd]).returncode
    except KeyboardInterrupt:
        return 130


def _link(args: argparse.Namespace) -> int:
    if args.down and args.up:
        raise UserError("--down and --up exclude each other.")
    params: dict[str, Any] = {}
    if args.delay is not None:
        params["delay"] = parse_duration(args.delay, "--delay")
    if args.jitter is not None:
        params["jitter"] = parse_duration(args.jitter, "--jitter")
    if args.loss is not None:
        params["loss"] = parse_percent(args.loss, "--loss")
    if args.rate is not None:
        bits = None if args.rate.strip().lower() in UNLIMITED else parse_rate(args.rate, "--rate", zero=True)
        if bits == 0:
            # 0 could be read as "carry nothing": say that it lifts the limit (--down is what stops a link)
            print(f"testbed: --rate {args.rate} removes the rate limit (the same as --rate unlimited); "
                  f"--down takes the link down", file=sys.stderr)
        params["rate"] = bits or None
    if not params and not args.down and not args.up:
        raise UserError("nothing to change: give --delay, --jitter, --loss, --rate, --down or --up.")
    rec = netstate.current()
    with netstate.locked(rec.run_id):
        net = Network.attach(rec.run_id)
        if params:
            unlimited = "rate" in params and params["rate"] is None
            if unlimited:
                params.pop("rate")
            if params:
                net.set_link(args.a, args.b, direction=args.direction, **params)
            if unlimited:
                net.clear_rate(args.a, args.b, args.direction)
        if args.down:
            net.link_down(args.a, args.b)
        if args.up:
            net.link_up(args.a, args.b)
    link = net.topology.link(args.a, args.b)
    if args.json:
        print(json.dumps({"link": link.name, "a": link.a, "b": link.b, "up": link.up, "a_to_b": link.a_to_b.to_dict(),
                          "b_to_a": link.b_to_a.to_dict()}, indent=1))
        return 0
    print(f"link {link.name}: {'up' if link.up else 'down'}; {link.a}→{link.b} {_fmt_dir(link.a_to_b.to_dict())}; "
          f"{link.b}→{link.a} {_fmt_dir(link.b_to_a.to_dict())}")
    return 0


def _side(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise UserError(f"a partition side must name at least one host, got {text!r}.")
    return names


def _partition(args: argparse.Namespace) -> int:
    a, b = _side(args.side_a), _side(args.side_b)
    rec = netstate.current()
    with netstate.locked(rec.run_id):
        net = Network.attach(rec.run_id)
        net.partition(a, b)
    print(f"partitioned {','.join(a)} from {','.join(b)}")
    return 0


def _heal(args: argparse.Namespace) -> int:
    rec = netstate.current()
    with netstate.locked(rec.run_id):
        net = Network.attach(rec.run_id)
        n = len(net.partitions)
        net.heal()
    print(f"healed {n} partition(s)")
    return 0


def _clean(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise UserError("`testbed clean` must run as root to remove namespaces and interfaces.")
    from testbed import cleanup
    if args.run_id and not registry.is_run_id(args.run_id) and registry.load(args.run_id) is None:
        # Matching is exact: a shorter id is never taken as the prefix of the runs that start with it.
        raise UserError(f"--run-id {args.run_id!r} is not a run id: give the whole id, "
                        f"{registry.RUN_ID_LEN} hex digits such as 3f9a1c (prefixes are not matched).")
    if args.run_id and registry.is_live(args.run_id):
        raise UserError(f"run {args.run_id} is live (its owner is running); stop it instead of cleaning it.")
    unreachable: list[str] = []
    removed = cleanup.clean(only=[args.run_id] if args.run_id else None, unreachable=unreachable)
    for u in unreachable:
        print(f"testbed clean: could not reach {u}; its containers are left", file=sys.stderr)
    if args.json:
        print(json.dumps({"removed": [str(r) for r in removed], "unreachable": unreachable}, indent=1))
        return 0
    for r in removed:
        print(f"removed {r}")
    print(f"testbed clean: removed {len(removed)} item(s)" if removed else "testbed clean: nothing to remove")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        description="Build SCENARIO's network (hosts, links with their delay, loss and rate), start a node daemon "
                    "in every host and return, leaving the network up for `send`, `link`, `partition` ... until "
                    "`testbed down`. Needs root (it creates network namespaces and interfaces). What it waits "
                    "for goes to standard error, the hosts and links to standard output.",
        **examples("sudo testbed up scenarios/quickstart.yaml", "sudo testbed up scenarios/quickstart.yaml --json",
                   "sudo testbed up scenarios/brachman-linear.yaml --set link_defaults.delay=50ms --insecure",
                   "sudo testbed up scenarios/quickstart.yaml --test",
                   "sudo testbed up scenarios/quickstart.yaml --dashboard --port 8765"))
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
    p.add_argument("--runtime", choices=("netns", "docker"), help="host runtime (default: the scenario's)")
    p.add_argument("--shaper", choices=("auto", "netem", "wire"), help="link shaping backend (default: the scenario's)")
    p.add_argument("--run-dir", help="where topology.json, events.jsonl and logs go (default: runs/up/<run>)")
    p.add_argument("--no-nodes", action="store_true", help="build the network only; start no node daemons")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key, as for `testbed run` (repeatable)")
    p.add_argument("--tls", action="store_true", help="TLS between the node daemons and on their management ports "
                   "(scenario security.tls; on unless the scenario says tls: false)")
    p.add_argument("--auth", action="store_true", help="tokens for every client call (scenario security.auth; on "
                   "unless the scenario says auth: false; the CLI reads them from <run dir>/secrets/tokens.json)")
    p.add_argument("--insecure", action="store_true", help="no TLS and no tokens, whatever the scenario says: "
                   "anyone on this host can call the nodes")
    p.add_argument("--test", action="store_true", help="smoke test: ping every pair of MTA neighbours, send one "
                   "message across the longest path, tear down; exit 0 if all passed, else 1")
    p.add_argument("--json", action="store_true", help="print the network as `status --json` does, with nodes "
                   "(daemons, without_daemon, sessions_missing, records_dir) and security (tls, auth, tokens)")
    dashboard.add_options(p, serve=True)
    p.add_argument("--factory", help=argparse.SUPPRESS)   # MODULE:FUNCTION building the Network (tests)
    p.set_defaults(handler=_up)
    p = sub.add_parser("down",
                       description="Stop the node daemons of the running network, then tear the network down "
                                   "and remove the node records and secrets (unless --keep).",
                       **examples("sudo testbed down", "sudo testbed down --keep"))
    p.add_argument("--keep", action="store_true", help="keep the node daemons' records (<run dir>/nodes/) and the "
                   "run's secrets")
    p.set_defaults(handler=_down)
    p = sub.add_parser("status",
                       description="The running network's hosts (addresses, interfaces) and links (state, delay, "
                                   "loss, rate per direction). With --json and no network up it prints "
                                   '{"running": false} and exits 0.',
                       **examples("testbed status", "testbed status --json"))
    p.add_argument("--json", action="store_true", help="machine-readable output (with running: true or false)")
    p.set_defaults(handler=_status)
    p = sub.add_parser("exec",
                       description="Run CMD in NODE's network namespace; the exit status is CMD's.",
                       **examples("sudo testbed exec n1 -- ping -c 3 10.0.0.2", "sudo testbed exec n2 -- ip addr"))
    p.add_argument("node", metavar="NODE", help="the host to run the command in")
    p.add_argument("cmd", metavar="CMD", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    p.set_defaults(handler=_exec)
    p = sub.add_parser("link",
                       description="Change the link between A and B while the network runs: delay, jitter, "
                                   "loss, rate (in both directions or one), or take it down and up. Units as "
                                   "in a scenario: 25ms, 1%, 10Mbit.",
                       **examples("sudo testbed link n1 n2 --delay 100ms --loss 1%",
                                  "sudo testbed link n1 n2 --rate 64kbit --direction a_to_b",
                                  "sudo testbed link n1 n2 --rate unlimited --json", "sudo testbed link n1 n2 --down"))
    p.add_argument("a", metavar="A", help="one end of the link (a host)")
    p.add_argument("b", metavar="B", help="the other end")
    p.add_argument("--delay", help="one-way delay, e.g. 25ms")
    p.add_argument("--jitter", help="delay variation, e.g. 5ms")
    p.add_argument("--loss", help="random loss, e.g. 1%% or 0.01")
    p.add_argument("--rate", help="bandwidth, e.g. 10Mbit; 'unlimited' (or 0) removes the rate limit, it does not "
                                  "stop the link (that is --down)")
    p.add_argument("--direction", choices=("both", "a_to_b", "b_to_a"), default="both",
                   help="a_to_b = frames sent by A as named here (default: both)")
    p.add_argument("--down", action="store_true", help="take the link down (drops everything)")
    p.add_argument("--up", action="store_true", help="bring the link back up")
    p.add_argument("--json", action="store_true", help="print the link afterwards as JSON (link, a, b, up, a_to_b, "
                                                       "b_to_a)")
    p.set_defaults(handler=_link)
    p = sub.add_parser("partition",
                       description="Drop every packet between the hosts of SIDE_A and those of SIDE_B (both "
                                   "ways) until `testbed heal`.",
                       **examples("sudo testbed partition n1,n2 n3,n4", "sudo testbed partition n1 n2"))
    p.add_argument("side_a", metavar="SIDE_A", help="hosts on one side, comma separated")
    p.add_argument("side_b", metavar="SIDE_B", help="hosts on the other side, comma separated")
    p.set_defaults(handler=_partition)
    p = sub.add_parser("heal", description="Undo every partition of the running network.",
                       **examples("sudo testbed heal"))
    p.set_defaults(handler=_heal)
    p = sub.add_parser("clean",
                       description="Remove the namespaces, interfaces, rules, processes and registry entries of "
                                   "testbed runs whose owner is gone (only names with the testbed's prefix). "
                                   "Needs root.",
                       **examples("sudo testbed clean", "sudo testbed clean --run-id 3f9a1c --json"))
    p.add_argument("--run-id", help="only this exact run id (refused while it is live)")
    p.add_argument("--json", action="store_true", help='print {"removed": [...]} as JSON')
    p.set_defaults(handler=_clean)
