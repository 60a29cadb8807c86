"""Inspection commands on a live network, in the way of `postqueue -p`: `queue` (the copies a node holds for
others) and `trace` (where one message is, node by node, from each node's Status).

Nodes are reached as `testbed send` reaches them (commands/messaging.py: --address, WANBED_NODE_ADDRESS,
WANBED_NODES, else the running `testbed up` network), with its token and CA. Every failure is one line with
status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from node.errors import UserError
from node.natural import natural_key
from testbed import live_nodes, netstate
from testbed.commands.messaging import node_client, resolve_address
from testbed.commands.routing import one_line

ANSWER_TIMEOUT = 10.0      # seconds a node has to answer one ListQueue page or one Status


def _emit(text: str) -> None:
    """Print; a closed stdout (`testbed queue n2 --json | head`) ends the command quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # the final flush must not complain


# ---- queue ---------------------------------------------------------------------------------------

def queue_plain(items: list[Any], now: float) -> list[dict[str, Any]]:
    return [{"msg_id": i.msg_id, "destination": i.destination, "next_hop": i.next_hop, "state": i.state,
             "age_s": round(max(0.0, now - i.submit_ts), 3), "bytes": i.bytes, "pieces": i.pieces,
             "size": i.total, "priority": i.priority, "submit_ts": i.submit_ts, "expires_ts": i.expires_ts}
            for i in items]


def render_queue(node: str, rows: list[dict[str, Any]]) -> str:
    from spark_analysis.render import plain_lines     # rich comes with it: loaded only to print
    if not rows:
        return f"queue of {node} is empty"
    table = [[r["msg_id"], r["destination"], r["next_hop"] or "-", r["state"], f"{r['age_s']:.1f}",
              str(r["bytes"]), str(r["pieces"])] for r in rows]
    held = sum(r["bytes"] for r in rows)
    return "\n".join([*plain_lines(["Msg id", "Destination", "Next hop", "State", "Age s", "Bytes", "Pieces"], table),
                      f"-- {held} bytes in {len(rows)} message copies"])


def _queue(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise UserError("--limit must not be negative.")
    with node_client(args.node, resolve_address(args.node, args.address), timeout=ANSWER_TIMEOUT) as c:
        try:
            items = c.queue(limit=args.limit)
        except UserError as exc:
            raise UserError(f"cannot list the queue of {args.node}: {one_line(exc)}") from None
    rows = queue_plain(items, time.time())
    _emit(json.dumps(rows, indent=1) if args.json else render_queue(args.node, rows))
    return 0


# ---- trace ---------------------------------------------------------------------------------------

def known_nodes() -> list[str]:
    """The nodes a trace asks: those of WANBED_NODES, else the running network's."""
    mapping = os.environ.get("WANBED_NODES", "")
    names = [x.partition("=")[0].strip() for x in mapping.split(",") if "=" in x]
    if names:
        return sorted(set(names), key=natural_key)
    rec = netstate.current()
    try:
        plan = netstate.load_state(rec).get("plan", {})
    except Exception as exc:  # a damaged state file: one line that names it, not a traceback
        raise UserError(f"cannot read the running network's state: {exc}.") from None
    live = live_nodes.recorded(rec)
    if live is None:
        raise UserError(f"the running network {rec.run_id} has no node daemons (`testbed up --no-nodes`).")
    # a plain IP router (daemon: false) has no spool: no message passes through it in the MTA sense
    return sorted((n for n in plan.get("mgmt_address", {}) if n not in live.without_daemon), key=natural_key)


def _ask(node: str, msg_id: str) -> dict[str, Any] | None:
    """What `node` knows of the message (None: never saw it); a node that cannot be asked says why."""
    try:
        address = resolve_address(node, None)
    except UserError as exc:        # a daemon-less host: no messages pass its spool
        return {"node": node, "state": "unknown", "error": one_line(exc)}
    with node_client(node, address, timeout=ANSWER_TIMEOUT) as c:
        try:
            r = c.status(msg_id)
        except UserError as exc:
            if "no message" in str(exc):
                return None
            return {"node": node, "state": "unknown", "error": one_line(exc)}
    detail = json.loads(r.detail or "{}")
    return {"node": node, "state": r.state, "origin": detail.get("origin") is not None,
            "origin_record": detail.get("origin"),
            "pieces": detail.get("states", {}), "done": detail.get("done", {}),
            "delivered_copies": detail.get("mailbox", 0), "not_delivered": detail.get("ndr", [])}


def _destinations(origin: Any) -> list[str]:
    """The destination nodes of the origin's record (Status detail `origin`: [dsts as JSON, size])."""
    try:
        dsts = json.loads(origin[0])
    except (TypeError, ValueError, IndexError, KeyError):
        return []
    return [str(d).rpartition("@")[2] for d in dsts] if isinstance(dsts, list) else []


def route_path(src: str, dst: str, nodes: list[str]) -> list[str]:
    """src, then each next hop towards dst as the nodes' routing tables say now (GetRoutes), as far as known."""
    path = [src]
    while path[-1] != dst and len(path) <= len(nodes):
        here = path[-1]
        try:
            with node_client(here, resolve_address(here, None), timeout=ANSWER_TIMEOUT) as c:
                table = {r.destination: r.next_hop for r in c.routes().routes}
        except UserError:
            break
        hop = table.get(dst, "")
        if not hop or hop in path:
            break
        path.append(hop)
    return path


def trace_rows(nodes: list[str], msg_id: str) -> list[dict[str, Any]]:
    """Each node's answer about `msg_id`, hop by hop: the origin, then the nodes along the routes towards each
    destination, then any other node that knows it, in natural order."""
    # a node that only passed it on has forgotten it (its Status is NOT_FOUND): the origin and the nodes that
    # still hold or delivered a copy remain
    answers = [_ask(n, msg_id) for n in nodes]
    rows = [r for r in answers if r is not None]
    origin = next((r for r in rows if r.get("origin")), None)
    order: list[str] = []
    if origin is not None:
        for dst in _destinations(origin.pop("origin_record")):
            order += [n for n in route_path(origin["node"], dst, nodes) if n not in order]
    for r in rows:
        r.pop("origin_record", None)
    place = {n: i for i, n in enumerate(order)}
    return sorted(rows, key=lambda r: (place.get(r["node"], len(order)), natural_key(r["node"])))


def render_trace(msg_id: str, rows: list[dict[str, Any]]) -> str:
    """The message's rows, hop by hop (see trace_rows)."""
    from spark_analysis.render import plain_lines     # rich comes with it: loaded only to print
    def what(r: dict[str, Any]) -> str:
        if r.get("error"):
            return r["error"]
        parts = ["origin"] if r["origin"] else []
        parts += [f"{n} piece{'s' if n != 1 else ''} {s}" for s, n in sorted(r["pieces"].items())]
        parts += [f"{d}: {o}" for d, o in sorted(r["done"].items())]
        if r["not_delivered"]:
            parts.append("non-delivery report for " + ", ".join(r["not_delivered"]))
        return ", ".join(parts)
    table = [[r["node"], r["state"], what(r)] for r in rows]
    return "\n".join([f"message {msg_id}", *plain_lines(["Node", "State", "Detail"], table)])


def _trace(args: argparse.Namespace) -> int:
    nodes = known_nodes()
    if not nodes:
        raise UserError("no nodes to ask: no network is up and WANBED_NODES is empty.")
    rows = trace_rows(nodes, args.msg_id)
    if not any(not r.get("error") for r in rows):
        raise UserError(f"no node of {', '.join(nodes)} knows message {args.msg_id!r}.")
    _emit(json.dumps(rows, indent=1) if args.json else render_trace(args.msg_id, rows))
    return 0


# ---- registration ----------------------------------------------------------------------------------

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "queue",
        description="List the message copies NODE holds for other nodes (like postqueue -p): queued for a "
                    "neighbour, held while a hop collects a whole message, or orphans waiting for a route. "
                    "One row per copy and place: message id, destination, next hop, state, age since "
                    "submission, bytes and pieces held here.",
        epilog="examples:\n  testbed queue n2\n  testbed queue n2 --json --limit 10\n"
               "  testbed queue n2 --address 127.0.0.1:50051",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("node", metavar="NODE", help="the node whose queue to list")
    p.add_argument("--limit", type=int, default=0, help="at most this many copies (default: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output (a JSON list)")
    p.add_argument("--address", help="the node's management address HOST:PORT (else WANBED_NODES or the "
                                     "running network)")
    p.set_defaults(handler=_queue)
    p = sub.add_parser(
        "trace",
        description="Ask every node of the running network (or of WANBED_NODES) what it knows of MSG_ID "
                    "(Submit.Status): its state there (forwarded, queued, orphan, reassembling, delivered, "
                    "not-delivered), its pieces by state and the outcome per destination. Hop by hop: the "
                    "origin first, then the nodes along the current routes to each destination; nodes that "
                    "never saw the message, or only passed it on, are left out.",
        epilog="examples:\n  testbed trace n1-000001-1f3a\n"
               "  WANBED_NODES=n1=127.0.0.1:50051,n2=127.0.0.1:50052 testbed trace MSG_ID --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("msg_id", metavar="MSG_ID", help="the message id `testbed send` printed")
    p.add_argument("--json", action="store_true", help="machine-readable output (a JSON list, one per node)")
    p.set_defaults(handler=_trace)
