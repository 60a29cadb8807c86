"""Messaging commands: send, mailbox (through a node's management address).

Where a node's management address comes from, first match wins:
  --address HOST:PORT
  WANBED_NODE_ADDRESS=HOST:PORT            (one address for this command)
  WANBED_NODES="n1=HOST:PORT,n2=HOST:PORT"  (a map by node name)
  the running network's state (testbed/netstate.py), when a network is up; a host there
  that runs no node daemon (daemon: false, or `testbed up --no-nodes`) is one clear error.

The token a call carries (scenario `security.auth`), first match wins:
  WANBED_TOKEN=TOKEN
  the running network's secrets/tokens.json, when the address is that network's node NODE: the user's token
  at that node when the command names a user (`mailbox --user`, `send --originator`) and the run has one,
  else that node's admin token
  none (a network without tokens)

TLS (scenario `security.tls`: the node serves its management port over TLS), first match wins:
  WANBED_CA=FILE                            (the PEM certificate of the CA to trust)
  the running network's secrets/ca.crt, when its nodes have certificates and the address is its node NODE
  none: plaintext
With a CA the node's certificate must name the node the command names (NODE, not the address dialled).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from node.errors import UserError
from testbed import netstate
from testbed.commands import examples
from testbed.commands.values import parse_duration, parse_size

if TYPE_CHECKING:          # grpc loads only for the commands that talk to a node
    from node.client import Access, NodeClient


def read_body(args: argparse.Namespace) -> tuple[bytes | None, int | None]:
    """The payload and the generated size: a literal BODY (UTF-8), `--file F` (`--file -`: standard input) or
    `--size` with units (`100kB`, `4KiB`, bare bytes); exactly one of them. `send` and `pub` share it."""
    literal = getattr(args, "body", None)
    given = [x for x in (literal, args.file, args.size) if x is not None]
    if len(given) != 1:
        which = "BODY, --size or --file" if hasattr(args, "body") else "--size or --file"
        raise UserError(f"give exactly one of {which}.")
    if literal is not None:
        return literal.encode(), None
    if args.file == "-":
        return sys.stdin.buffer.read(), None
    if args.file:
        try:
            return Path(args.file).read_bytes(), None
        except OSError as exc:
            raise UserError(f"cannot read {args.file}: {exc.strerror}.") from None
    return None, parse_size(args.size, "--size")


def read_lifetime(args: argparse.Namespace) -> float:
    """`--lifetime` in seconds (`10s`, `2m`, a bare number of seconds); 0: the node's default lifetime."""
    return parse_duration(args.lifetime, "--lifetime")


def resolve_address(node: str, address: str | None) -> str:
    if address:
        return address
    if os.environ.get("WANBED_NODE_ADDRESS"):
        return os.environ["WANBED_NODE_ADDRESS"]
    mapping = os.environ.get("WANBED_NODES", "")
    for item in filter(None, (x.strip() for x in mapping.split(","))):
        name, _, addr = item.partition("=")
        if name == node and addr:
            return addr
    try:
        addr = netstate.mgmt_address(node)
    except UserError:
        raise
    except Exception as exc:  # a damaged state file: one line that names it, not a traceback
        raise UserError(f"cannot read the running network's state for {node}: {exc}.") from None
    _check_daemon(node)
    return addr


def node_access(node: str, address: str, user: str = "") -> Access:
    """The token and TLS check for calls to `node` at `address` (see the module docstring)."""
    from node.client import Access
    from testbed import secrets
    run = secrets.RunSecrets()
    if _running_network_node(node, address):
        run_dir = netstate.current().state.get("run_dir")
        if run_dir:
            run = secrets.load(Path(run_dir))
    token = os.environ.get("WANBED_TOKEN") or (run.token(node, user) if user in run.users.get(node, {})
                                               else run.token(node))
    ca = run.ca if run.tls else b""
    if os.environ.get("WANBED_CA"):
        path = os.environ["WANBED_CA"]
        try:
            ca = Path(path).read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read WANBED_CA {path}: {exc.strerror}.") from None
        if b"-----BEGIN CERTIFICATE" not in ca:
            raise UserError(f"WANBED_CA {path} is not a PEM certificate.")
    return Access(token, ca, node if ca else "")


def node_client(node: str, address: str, user: str = "", timeout: float = 30.0) -> NodeClient:
    """A client of `node` at `address` with `node_access`; gRPC's own log lines stay out of the CLI's output
    (a failed TLS check is one line of ours, not the library's handshake report)."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from node.client import NodeClient
    return NodeClient.to(address, node_access(node, address, user), timeout)


def _running_network_node(node: str, address: str) -> bool:
    """Whether `address` is node `node` of the running `testbed up` network: only then do its secrets apply (an
    address of another setup, from --address or WANBED_NODES, must not be sent this network's tokens)."""
    try:
        return netstate.mgmt_address(node) == address
    except Exception:     # no network is up, it has no such node, or its state is damaged: none of its secrets
        return False


def _check_daemon(node: str) -> None:
    """A daemon-less host (a plain IP router) or a `--no-nodes` network: say so instead of a connection error."""
    from testbed import live_nodes
    problem = live_nodes.daemon_problem(node)
    if problem:
        raise UserError(f"{problem}.")


def _send(args: argparse.Namespace) -> int:
    to = [t for t in (x.strip() for x in args.to.split(",")) if t]
    if not to:
        raise UserError("--to needs at least one recipient node.")
    payload, size = read_body(args)
    lifetime = read_lifetime(args)
    with node_client(args.src, resolve_address(args.src, args.address), args.originator) as c:
        r = c.send(to, size=size, payload=payload, priority=args.priority, lifetime=lifetime,
                   originator=args.originator)
    if not r.accepted:
        raise UserError(f"{args.src} refused the message: {r.reason}.")
    if args.json:
        print(json.dumps({"msg_id": r.msg_id, "from": args.src, "to": to,
                          "size": len(payload) if payload is not None else size}))
    else:
        print(r.msg_id)
    return 0


def _mailbox(args: argparse.Namespace) -> int:
    from spark_analysis.render import console_table     # rich comes with it: loaded only to print
    if args.delete:
        return _delete_mail(args)
    with node_client(args.node, resolve_address(args.node, args.address), args.user) as c:
        items = c.mailbox(user=args.user)
    if args.json:
        print(json.dumps([{"msg_id": i.msg_id, "user": i.user, "src": i.src, "size": i.size, "hops": i.hops,
                           "fragments": i.fragments, "kind": i.kind or "mail", "submit_ts": i.submit_ts,
                           "deliver_ts": i.deliver_ts} for i in items], indent=1))
        return 0
    if not items:
        print(f"mailbox of {args.node} is empty")
        return 0
    console_table(["MSG_ID", "USER", "FROM", "SIZE", "HOPS", "DELAY s", "KIND"],
                  [[i.msg_id, i.user or "-", i.src, str(i.size), str(i.hops), f"{i.deliver_ts - i.submit_ts:.3f}",
                    i.kind or "mail"] for i in items], align="lllrrrl")
    return 0


def _delete_mail(args: argparse.Namespace) -> int:
    """`mailbox NODE --delete ID...`: --user's copies, else those addressed to the node without a user."""
    ids = list(dict.fromkeys(i.strip() for i in args.delete if i.strip()))
    if not ids:
        raise UserError("--delete needs at least one message id.")
    with node_client(args.node, resolve_address(args.node, args.address), args.user) as c:
        n = c.delete_mail(ids, user=args.user, no_user=not args.user)
    whose = f"{args.user}'s" if args.user else "the node's own (no user)"
    if args.json:
        print(json.dumps({"node": args.node, "user": args.user, "asked": ids, "deleted": n}))
    else:
        print(f"{args.node}: deleted {n} of {len(ids)} ({whose} copies)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "send",
        description="Submit one message at FROM for the recipients of --to and print its message id. The payload "
                    "is --size generated bytes or --file (- reads standard input).",
        **examples("testbed send n1 --to n4 --size 100kB", "testbed send n1 --to bob@n4,n3 --file report.pdf "
                   "--lifetime 10m --json", "date | testbed send n1 --to n2 --file -"))
    p.add_argument("src", metavar="FROM", help="the node to submit through")
    p.add_argument("--to", required=True, help="recipients, comma separated: NODE or USER@NODE")
    body = p.add_mutually_exclusive_group(required=True)
    body.add_argument("--size", help="generated payload of this size: 100kB, 4KiB, 1MB or bare bytes")
    body.add_argument("--file", help="payload from a file ('-': standard input)")
    p.add_argument("--priority", type=int, default=1)
    p.add_argument("--lifetime", default="0", help="how long the message may live: 10s, 5m, 1h or bare seconds "
                                                   "(default 0: the node's default lifetime)")
    p.add_argument("--originator", default="", help="the sending user at FROM (where reports go)")
    p.add_argument("--address", help="FROM's management address HOST:PORT (else WANBED_NODES or the running network)")
    p.add_argument("--json", action="store_true", help="print msg_id, from, to and size as a JSON object")
    p.set_defaults(handler=_send)
    p = sub.add_parser(
        "mailbox",
        description="List the messages delivered to NODE, oldest first; with --delete, delete copies instead: "
                    "--user's, or without --user the copies addressed to the node itself (no user).",
        **examples("testbed mailbox n2", "testbed mailbox n2 --user bob --json",
                   "testbed mailbox n2 --user bob --delete n1-000001-1f3a n1-000002-77c0"))
    p.add_argument("node", metavar="NODE", help="the node whose mailbox to read")
    p.add_argument("--user", default="", help="only this user's mail")
    p.add_argument("--delete", nargs="+", metavar="ID", help="delete these messages' copies (see above)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--address", help="the node's management address HOST:PORT")
    p.set_defaults(handler=_mailbox)
