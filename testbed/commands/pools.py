"""`testbed pools NODE`: the pool controller as a live replica sees it (node/pools/, the Pools service's
GetPools): the leader, term and map version, the applications, instances with their load, consumers and
connections.

The node is reached as `testbed routes` reaches it (commands/messaging.py resolve_address). Every failure is
one line (exit 2): no network, an unknown or daemon-less host, a node that runs no pools (a run without a
`pools:` section) or is not a controller replica, a node that does not answer.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from google.protobuf.json_format import MessageToDict

from node.errors import UserError
from testbed.commands.messaging import node_client, resolve_address
from testbed.commands.routing import one_line

ANSWER_TIMEOUT = 5.0       # seconds a node has to answer


def as_dict(reply: Any) -> dict[str, Any]:
    """The reply as plain data, every field present (0, "" and [] too)."""
    return MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def render(p: dict[str, Any]) -> str:
    from spark_analysis.render import plain_lines     # rich comes with it: loaded only to print
    leader = p["leader"] or "none (an election is on)"
    lines = [f"{p['node']}: leader {leader}{' (this replica)' if p['is_leader'] else ''}, term {p['term']}, "
             f"map version {p['version']}"]
    if p["apps"]:
        rows = [[a["name"], a["algorithm"], f"{a['move_share']:g}", ",".join(a["types"])] for a in p["apps"]]
        lines += ["", *plain_lines(["APPLICATION", "ALGORITHM", "MOVE SHARE", "TYPES"], rows)]
    if p["instances"]:
        conns: dict[tuple[str, str], int] = {}
        for c in p["connections"]:
            conns[(c["app"], c["instance"])] = conns.get((c["app"], c["instance"]), 0) + 1
        rows = [[i["app"], i["instance"], i["node"], i["state"], f"{i['load']:.3g}",
                 str(conns.get((i["app"], i["instance"]), 0))] for i in p["instances"]]
        lines += ["", *plain_lines(["APPLICATION", "INSTANCE", "NODE", "STATE", "LOAD EV/S", "CONNECTIONS"], rows)]
    if p["consumers"]:
        rows = [[c["name"], c["node"], ",".join(c["types"])] for c in p["consumers"]]
        lines += ["", *plain_lines(["CONSUMER", "NODE", "TYPES"], rows)]
    if p["connections"]:
        rows = [[c["consumer"], c["app"], c["instance"], f"{c['load']:.3g}"] for c in p["connections"]]
        lines += ["", *plain_lines(["CONSUMER", "APPLICATION", "INSTANCE", "LOAD EV/S"], rows)]
    return "\n".join(lines)


def _pools(args: argparse.Namespace) -> int:
    with node_client(args.node, resolve_address(args.node, args.address), timeout=ANSWER_TIMEOUT) as c:
        try:
            reply = c.get_pools()
        except UserError as exc:
            raise UserError(f"pools of {args.node}: {one_line(exc)}") from None
    p = as_dict(reply)
    print(json.dumps(p, indent=1) if args.json else render(p))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pools",
        description="Show the pool controller as NODE (a controller replica of the run's `pools:`) sees it: "
                    "the leader, term and map version, the applications, instances with their load and "
                    "connections, consumers, and which instance each consumer feeds per application.",
        epilog="examples:\n  testbed pools r1\n  testbed pools r2 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("node", metavar="NODE", help="a controller replica")
    p.add_argument("--json", action="store_true", help="machine-readable output (the GetPools reply)")
    p.add_argument("--address", help="the node's management address HOST:PORT (else WANBED_NODES or the "
                                     "running network)")
    p.set_defaults(handler=_pools)
