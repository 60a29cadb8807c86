"""`testbed up SCENARIO --test`: a smoke check in the way of `mn --test pingall`, on the network `up` just built.

Every pair of MTA neighbours (the node daemons' own `neighbours`, read from their node.yaml) is pinged once
from inside the first host's namespace at the address the daemon dials; then one message goes across the
longest path of the MTA graph (most MTA hops) and is looked for in the far node's mailbox. `up` tears the
network down afterwards and exits 0 when every check passed, 1 otherwise.
"""
from __future__ import annotations

import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Any

import yaml

from node.errors import UserError
from node.natural import natural_key
from testbed import live_nodes, registry
from testbed.commands.messaging import node_client, resolve_address

PING_WAIT = 2             # seconds ping waits for its one answer (`ping -W`)
MESSAGE_SIZE = 1000       # bytes of the message sent across the longest path
DELIVERY_PER_HOP = 5.0    # seconds the message may take per MTA hop (a session may still be opening)
POLL = 0.1                # seconds between looks into the far node's mailbox


def mta_graph(run_dir: Path, hosts: list[str]) -> dict[str, dict[str, str]]:
    """Each daemon's neighbours and the address it dials for each (its node.yaml)."""
    graph: dict[str, dict[str, str]] = {}
    for host in hosts:
        path = run_dir / "nodes" / host / "node.yaml"
        try:
            cfg = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UserError(f"cannot read {path}: {exc}.") from None
        graph[host] = {str(k): str(v) for k, v in (cfg.get("neighbours") or {}).items()}
    return graph


def longest_path(graph: dict[str, dict[str, str]]) -> list[str]:
    """The path with the most MTA hops among the shortest paths between any two daemons (BFS from each);
    ties go to the first pair in natural order."""
    best: list[str] = []
    for src in sorted(graph, key=natural_key):
        before: dict[str, str | None] = {src: None}
        todo = deque([src])
        while todo:
            here = todo.popleft()
            for nxt in sorted(graph.get(here, {}), key=natural_key):
                if nxt in graph and nxt not in before:
                    before[nxt] = here
                    todo.append(nxt)
        for dst in before:
            path = [dst]
            while before[path[-1]] is not None:
                path.append(before[path[-1]])    # type: ignore[arg-type]
            if len(path) > len(best):
                best = path[::-1]
    return best


def _ping(netns: str | None, address: str) -> tuple[bool, str]:
    host = address.rsplit(":", 1)[0].strip("[]")
    if not netns:
        return False, "no network namespace to ping from"
    r = subprocess.run(["ip", "netns", "exec", netns, "ping", "-n", "-q", "-c", "1", "-W", str(PING_WAIT), host],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return False, f"no answer from {host}"
    rtt = next((line.split("=")[1].split("/")[1] for line in r.stdout.splitlines() if "min/avg" in line), "?")
    return True, f"{host} {rtt} ms"


def _message(path: list[str]) -> tuple[bool, str]:
    src, dst = path[0], path[-1]
    with node_client(src, resolve_address(src, None)) as c:
        r = c.send([dst], size=MESSAGE_SIZE)
    if not r.accepted:
        return False, f"{src} refused it: {r.reason}"
    t0 = time.monotonic()
    deadline = t0 + DELIVERY_PER_HOP * (len(path) - 1)
    with node_client(dst, resolve_address(dst, None)) as c:
        while time.monotonic() < deadline:
            if any(i.msg_id == r.msg_id for i in c.mailbox()):
                return True, f"{r.msg_id} delivered in {time.monotonic() - t0:.2f} s"
            time.sleep(POLL)
    return False, f"{r.msg_id} not delivered within {deadline - t0:.0f} s"


def run(rec: registry.RunRecord) -> bool:
    """Ping every pair of MTA neighbours, send one message across the longest path; print each check."""
    live = live_nodes.recorded(rec)
    if live is None or not live.daemons:
        print("test: no node daemons to check")
        return False
    graph = mta_graph(Path(live.run_dir), [d.host for d in live.daemons])
    netns: dict[str, Any] = rec.state.get("netns", {})
    ok = True
    pairs = sorted({tuple(sorted((a, b), key=natural_key)) for a in graph for b in graph[a] if b in graph},
                   key=lambda p: (natural_key(p[0]), natural_key(p[1])))
    for a, b in pairs:
        good, what = _ping(netns.get(a), graph[a][b])
        ok &= good
        print(f"test: ping {a} -> {b}: {'ok' if good else 'FAILED'} ({what})", flush=True)
    path = longest_path(graph)
    if len(path) < 2:
        print("test: no two node daemons are MTA neighbours; no message sent")
        return ok and bool(pairs)
    try:
        good, what = _message(path)
    except UserError as exc:
        good, what = False, str(exc).rstrip(".")
    ok &= good
    print(f"test: message {' -> '.join(path)} ({len(path) - 1} MTA hops): {'ok' if good else 'FAILED'} ({what})",
          flush=True)
    print(f"test: {'passed' if ok else 'FAILED'}: {len(pairs)} neighbour pairs pinged, one message across "
          f"{len(path) - 1} hops")
    return ok
