"""`testbed gateway`: a live node's EMG gateway policies (node/gateway/): show them, set gamma and the queue
thresholds, or ask whether a user's request would be accepted.

The node is reached as `testbed routes` reaches it (commands/messaging.py resolve_address). Every failure is
one line: no network, an unknown or daemon-less host, a node without a gateway, a value the node refuses
(with its reason).
"""
from __future__ import annotations

import argparse
import json
import math
from typing import Any

from node.errors import UserError
from testbed.commands.messaging import node_client, resolve_address
from testbed.commands.routing import one_line

ANSWER_TIMEOUT = 5.0       # seconds a node has to answer


def _rate(value: Any) -> str:
    return "unlimited" if value is None else f"{value:g}"


def render(node: str, g: dict[str, Any]) -> str:
    from spark_analysis.render import plain_lines     # rich comes with it: loaded only to print
    lines = [f"{node}: gamma {g['gamma']:g}, threshold {g['threshold']:g}, MAXRATE "
             f"{'original' if g['maxrate'] is None else format(g['maxrate'], 'g') + ' msg/s'}, "
             f"Phi_out {g.get('phi_out', 0.0):.3g} msg/s, dropped {g['dropped']}"]
    rows = [[c, str(o["queue"]), "off" if o["deactivated"] else "on", f"{o['rate']:g}" if o["rate"] else "-",
             str(o["sent"])] for c, o in g["outgoing"].items()]
    lines += ["", *plain_lines(["OUTGOING", "QUEUE", "LB", "RATE", "SENT"], rows)]
    if g["incoming"]:
        rows = [[n, _rate(x["throughput"]), str(x["accepted"]), str(x.get("deferred", x.get("throttled", 0)))]
                for n, x in g["incoming"].items()]
        lines += ["", *plain_lines(["INCOMING", "THROUGHPUT", "ACCEPTED", "REFUSED"], rows)]
    if g["users"]:
        rows = [[u, _rate(x["credits"])] for u, x in g["users"].items()]
        lines += ["", *plain_lines(["USER", "CREDITS LEFT"], rows)]
    refused = ", ".join(f"{k} {v}" for k, v in g["refused"].items())
    lines += ["", f"submissions refused: {refused}"]
    return "\n".join(lines)


def _finite(name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, got {value}.")


def _gateway(args: argparse.Namespace) -> int:
    asked = [args.throughput, args.guarantee, args.percent]
    if args.request is None and any(v is not None for v in asked):
        raise UserError("--throughput, --guarantee and --percent go with --request USER.")
    if args.request is not None and (any(v is None for v in asked) or
                                     any(v is not None for v in (args.gamma, args.threshold, args.lower))):
        raise UserError("--request USER needs --throughput, --guarantee and --percent (and nothing to set).")
    for name in ("gamma", "throughput", "guarantee", "percent"):
        _finite(f"--{name}", getattr(args, name))
    for name in ("threshold", "lower"):
        v = getattr(args, name)
        if v is not None and not 0 <= v < 2 ** 32:
            raise UserError(f"--{name} must be a number of messages from 0 to {2 ** 32 - 1}, got {v}.")
    with node_client(args.node, resolve_address(args.node, args.address), timeout=ANSWER_TIMEOUT) as c:
        try:
            if args.request is not None:
                ok, why = c.gateway_request(args.request, args.throughput, args.guarantee, args.percent)
                if args.json:
                    print(json.dumps({"node": args.node, "user": args.request, "accept": ok, "why": why}))
                else:
                    print(f"{args.node}: {'accept' if ok else 'refuse'} {args.request}: {why}")
                return 0
            g = c.gateway(args.gamma, args.threshold, args.lower)
        except UserError as exc:
            raise UserError(f"gateway of {args.node}: {one_line(exc)}") from None
    print(json.dumps(g, indent=1) if args.json else render(args.node, g))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gateway",
        description="Show NODE's EMG gateway state (gamma, MAXRATE, per connector its queue, load balancing, "
                    "rate; incoming THROUGHPUT; users' credits; refusals), set gamma or the queue thresholds "
                    "(until the daemon restarts), or ask whether a user's request of a throughput at a delivery "
                    "guarantee for a share of the time would be accepted, and why.",
        epilog="examples:\n  testbed gateway gw\n  testbed gateway gw --gamma 1 --threshold 200 --lower 150\n"
               "  testbed gateway gw --request alice --throughput 2 --guarantee 0.4 --percent 99",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("node", metavar="NODE", help="the node whose gateway policies to show or set")
    p.add_argument("--gamma", type=float, help="the selector: -1 utilisation .. 1 delivery guarantee")
    p.add_argument("--threshold", type=int, help="messages queued for a connector: the event")
    p.add_argument("--lower", type=int, help="actions are undone below it (must be below the threshold)")
    p.add_argument("--request", metavar="USER", help="ask about USER's request (with the next three)")
    p.add_argument("--throughput", type=float, help="requested msg/s")
    p.add_argument("--guarantee", type=float, help="requested delivery guarantee, 0..1")
    p.add_argument("--percent", type=float, help="percentage of the time it must hold, 0..100")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--address", help="the node's management address HOST:PORT (else WANBED_NODES or the "
                                     "running network)")
    p.set_defaults(handler=_gateway)
