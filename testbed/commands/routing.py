"""Routing commands on a live network: `routes` (a node's table and its measured links) and `rules`
(show or replace a node's routing rules).

The node is reached as `testbed send` reaches it (commands/messaging.py resolve_address: --address,
WANBED_NODE_ADDRESS, WANBED_NODES, else the running `testbed up` network) and asked through
node/client.py. Every failure is one line: no network, an unknown or daemon-less host, a daemon that
does not answer within ANSWER_TIMEOUT, or a node refusing the rules (with the node's reason).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Callable

import yaml

from node.errors import UserError
from node.natural import natural_key
from testbed.commands import examples
from testbed.commands.messaging import node_client, resolve_address

ANSWER_TIMEOUT = 5.0       # seconds a node has to answer GetRoutes / SetRules


# ---- talking to the node ------------------------------------------------------------------------

def get_routes(node: str, address: str) -> dict[str, Any]:
    """The node's GetRoutes reply as plain data (reply_plain)."""
    with node_client(node, address, timeout=ANSWER_TIMEOUT) as c:
        try:
            return reply_plain(c.routes(), node)
        except UserError as exc:
            raise UserError(f"cannot get the routes of {node}: {one_line(exc)}") from None


def set_rules(node: str, address: str, rules: list[Any]) -> int:
    """Replace the node's rules; returns how many it installed. A refusal carries the node's reason."""
    with node_client(node, address, timeout=ANSWER_TIMEOUT) as c:
        try:
            return int(c.set_rules(rules))
        except UserError as exc:
            raise UserError(f"{node} did not take the rules: {one_line(exc)}") from None


def one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if text.endswith(".") else text + "."


# ---- the reply as plain data and as text ---------------------------------------------------------



def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def reply_plain(reply: Any, node: str = "") -> dict[str, Any]:
    """A GetRoutesReply as JSON-safe data, routes and links in natural order. A cost that is not a number
    becomes None: a static entry has none (NaN), an unreachable destination or a withdrawn link an infinite
    one (`learned` says which for a route)."""
    try:
        rules = json.loads(reply.rules_json) if reply.rules_json else []
    except json.JSONDecodeError:
        rules = reply.rules_json
    routes = [{"destination": r.destination, "next_hop": r.next_hop, "cost": _finite(r.cost), "learned": r.learned}
              for r in reply.routes]
    links = [{"neighbour": l.neighbour, "up": l.up, "latency_ms": l.latency_ms, "sd_ms": l.sd_ms,
              "jitter_ms": l.jitter_ms, "loss": l.loss, "probes_sent": l.probes_sent,
              "probes_answered": l.probes_answered, "cost": _finite(l.cost), "suppressed": l.suppressed}
             for l in reply.links]
    return {"node": reply.node or node, "mode": reply.mode,
            "routes": sorted(routes, key=lambda r: natural_key(r["destination"])),
            "links": sorted(links, key=lambda l: natural_key(l["neighbour"])), "rules": rules}


def _cost(value: float | None, infinite: bool) -> str:
    """A cost for the table: "inf" for an unreachable route or withdrawn link, "-" for none at all."""
    return f"{value:g}" if value is not None else "inf" if infinite else "-"


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def render(plain: dict[str, Any]) -> str:
    """The routing table as the thesis prints it, then the links to the neighbours and the number of rules."""
    from spark_analysis.render import plain_lines     # rich comes with it: loaded only to print
    dynamic = plain["mode"] == "dynamic"      # a static node measures and advertises no link costs
    routes = [[r["destination"], r["next_hop"] or "-", _cost(r["cost"], r["learned"] == "unreachable"), r["learned"]]
              for r in plain["routes"]]
    links = [[l["neighbour"], yes_no(l["up"]), *_measured(l), _cost(l["cost"], dynamic), yes_no(l["suppressed"])]
             for l in plain["links"]]
    lines = [f"routes at {plain['node']} ({plain['mode'] or 'unknown mode'})"]
    lines += plain_lines(["Destination", "Next hop", "Cost", "Learned"], routes) if routes else ["no routes"]
    lines.append("")
    lines += (plain_lines(["Neighbour", "Up", "Latency ms", "Sd", "Jitter", "Loss %", "Probes", "Cost", "Suppressed"],
                     links) if links else ["no neighbours"])
    rules = plain["rules"]
    if rules:
        count = len(rules) if isinstance(rules, list) else "some"
        lines += ["", f"{count} rule(s) in force (testbed rules {plain['node']} --show)"]
    return "\n".join(lines)


def _measured(link: dict[str, Any]) -> list[str]:
    probes = f"{link['probes_sent']}/{link['probes_answered']}"
    if not link["probes_answered"]:
        return ["-", "-", "-", "-" if not link["probes_sent"] else f"{100 * link['loss']:.1f}", probes]
    return [f"{link['latency_ms']:.1f}", f"{link['sd_ms']:.1f}", f"{link['jitter_ms']:.1f}",
            f"{100 * link['loss']:.1f}", probes]


# ---- rules files ---------------------------------------------------------------------------------

def read_rules(path: str) -> list[Any]:
    """A YAML file holding a list of rules (or `rules: [...]`), in the node config's form."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc.__class__.__name__}.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or 'parse error'}).") from None
    if isinstance(data, dict) and set(data) == {"rules"}:
        data = data["rules"]
    if data is None:
        data = []
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a list of rules (or `rules: [...]`), got a {type(data).__name__}.")
    try:
        json.dumps(data)
    except (TypeError, ValueError):
        raise UserError(f"{path}: the rules hold a value JSON cannot carry (a date or a binary string?).") from None
    return data


# ---- the commands --------------------------------------------------------------------------------

def _routes(args: argparse.Namespace) -> int:
    plain = get_routes(args.node, resolve_address(args.node, args.address))
    print(json.dumps(plain, indent=1) if args.json else render(plain))
    return 0


def _rules(args: argparse.Namespace) -> int:
    rules = read_rules(args.file) if args.file else [] if args.clear else None
    address = resolve_address(args.node, args.address)
    if rules is None:
        current = get_routes(args.node, address)["rules"]
        print(yaml.safe_dump(current, sort_keys=False).rstrip() if current else f"no rules at {args.node}")
        return 0
    installed = set_rules(args.node, address, rules)
    print(f"{args.node}: {installed} rule(s) in force (until the daemon restarts; its node.yaml is unchanged)")
    return 0


def _add(sub: argparse._SubParsersAction, name: str, handler: Callable[[argparse.Namespace], int],
         **kw: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(name, **kw)
    p.add_argument("node", metavar="NODE", help="the node to ask (through its management address)")
    p.add_argument("--address", help="the node's management address HOST:PORT (else WANBED_NODES or the "
                                     "running network)")
    p.set_defaults(handler=handler)
    return p


def register(sub: argparse._SubParsersAction) -> None:
    p = _add(sub, "routes", _routes,
             description="Print NODE's routing table (destination, next hop, cost, how it was learned) "
                         "and its measured links, from the running network.",
             **examples("testbed routes n1", "testbed routes n1 --json"))
    p.add_argument("--json", action="store_true", help="the reply as JSON (node, mode, routes, links, rules)")
    p = _add(sub, "rules", _rules,
             description="Replace NODE's routing rules with a YAML list (node config form, see README), "
                         "show the rules in force, or clear them. Not kept across a daemon restart.",
             **examples("testbed rules n1 --show", "testbed rules n1 --file rules.yaml", "testbed rules n1 --clear"))
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--file", metavar="RULES.yaml", help="install the rules listed in this YAML file")
    what.add_argument("--show", action="store_true", help="print the rules in force")
    what.add_argument("--clear", action="store_true", help="remove every rule")
