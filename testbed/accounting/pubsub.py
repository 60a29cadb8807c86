"""The publish/subscribe account of one repetition: every expected (publication, subscription) receipt.

Reads (docs/run-directory.md): nodes/<node>/publications.jsonl (what each publisher's node expected:
the subscriptions whose interest had reached it at publish time), subscribers/<node>/<name>/receipts.jsonl
and subscriber.json (what each subscriber client received), and the spools the teardown left (read-only),
for publications still on their way. Per topic and per subscription kind:

  published          publications accepted
  expected           expected receipts ((publication, subscription) pairs); durable ones apart
  received           expected receipts that arrived (first arrival of the publication at the client)
  duplicates         arrivals of a publication the client had already, that the node did NOT flag as a
                     redelivery (a flagged one after a reconnect is expected and counted as `redelivered`)
  late (durable)     not received, but still held at teardown: queued for the subscription at its node,
                     or a copy on its way on that subscription's branch: a stored copy (a spool's inbox, or
                     its frag pieces, which must together hold the whole copy) whose targets include the
                     subscription's node. A copy on another branch of the fan-out does not make it late.
  lost (durable)     not received and held nowhere: must be 0
  missing (non-durable)  not received: allowed (at most once: the client was away, the path was cut)
  unexpected         receipts of pairs no publication record expected (interest that reached the
                     publisher after it published; or a publisher's records cut short by a kill)

Topics starting with '_' are a subsystem's control traffic between nodes (`_pools.assign.<consumer>`, read by
the node itself, not by a client): they are left out, their subsystem accounts them.
"""
from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from node.broker.kinds import PUB_PREFIX
from node.rpc import link_pb2
from testbed.accounting.check import node_directories
from testbed.accounting.coverage import whole
from testbed.accounting.records import RecordReader
from testbed.accounting.spools import SPOOL_FILE

SUBSCRIBERS = "subscribers"
CONTROL = "_"               # the first character of a subsystem's control topics


def subscriber_dirs(rep_dir: Path) -> list[Path]:
    """subscribers/<node>/<name>/ of every subscriber client, sorted."""
    base = Path(rep_dir) / SUBSCRIBERS
    try:
        return sorted(d for node in base.iterdir() if node.is_dir() for d in node.iterdir() if d.is_dir())
    except OSError:
        return []


def account(rep_dir: Path, reader: RecordReader | None = None) -> dict[str, Any] | None:
    """The pub/sub account (see the module docstring); None for a run without publications or subscribers."""
    rep_dir = Path(rep_dir)
    reader = reader or RecordReader(rep_dir)
    pubs: list[dict[str, Any]] = []
    for d in node_directories(rep_dir):
        pubs.extend(p for p in reader.records(d / "publications.jsonl", "publication")
                    if not str(p["topic"]).startswith(CONTROL))
    subs = subscriber_dirs(rep_dir)
    if not pubs and not subs:
        return None
    durable_subs: set[str] = set()
    clients: dict[str, dict[str, Any]] = {}
    received: set[tuple[str, str]] = set()
    for d in subs:
        key = f"{d.parent.name}/{d.name}"
        info = _json(d / "subscriber.json")
        clients[key] = info
        for rec in reader.records(d / "receipts.jsonl", "receipt"):
            received.add((rec["pub_id"], key))
            if rec["durable"]:
                durable_subs.add(key)
        if info.get("durable"):
            durable_subs.add(key)

    in_transit, queued = _held(rep_dir)
    topics: dict[str, Counter] = defaultdict(Counter)
    expected_pairs: set[tuple[str, str]] = set()
    lost_pairs: list[list[str]] = []
    for p in pubs:
        t = topics[p["topic"]]
        t["published"] += 1
        durable = set(p["expected_durable"])
        for sub in p["expected"]:
            pair = (p["pub_id"], sub)
            expected_pairs.add(pair)
            kind = "durable" if sub in durable else "live"
            t[f"expected_{kind}"] += 1
            if pair in received:
                t[f"received_{kind}"] += 1
            elif kind == "live":
                t["missing_live"] += 1
            elif p["pub_id"] in queued.get(sub, ()) or _node(sub) in in_transit.get(p["pub_id"], ()):
                t["late_durable"] += 1
            else:
                t["lost_durable"] += 1
                if len(lost_pairs) < 20:
                    lost_pairs.append([p["pub_id"], sub])
    unexpected = len(received - expected_pairs)
    for key, info in clients.items():
        for topic, n in (info.get("duplicates_by_topic") or {}).items():
            topics[topic]["duplicates"] += int(n)
        for topic, n in (info.get("redelivered_by_topic") or {}).items():
            topics[topic]["redelivered"] += int(n)

    fields = ("published", "expected_durable", "received_durable", "late_durable", "lost_durable",
              "expected_live", "received_live", "missing_live", "duplicates", "redelivered")
    per_topic = {topic: {f: int(c.get(f, 0)) for f in fields} for topic, c in sorted(topics.items())}
    total = {f: sum(v[f] for v in per_topic.values()) for f in fields}
    per_subscription = {key: {k: info.get(k) for k in ("durable", "pattern", "received", "deliveries", "redelivered",
                                                       "duplicates", "dropped", "streams")}
                        for key, info in sorted(clients.items())}
    return {"topics": per_topic, "total": total, "unexpected_receipts": unexpected,
            "lost_pairs": lost_pairs, "subscriptions": per_subscription,
            "ok": total["lost_durable"] == 0 and total["duplicates"] == 0}


def line(acc: dict[str, Any]) -> str:
    """The account in one line (testbed check)."""
    t = acc["total"]
    return (f"pub/sub: {t['published']} published; durable receipts {t['received_durable']} of "
            f"{t['expected_durable']} received, {t['late_durable']} late, {t['lost_durable']} lost; non-durable "
            f"{t['received_live']} of {t['expected_live']} received; {t['duplicates']} duplicates — "
            f"{'OK' if acc['ok'] else 'FAILED'}")


def problems(acc: dict[str, Any] | None) -> list[str]:
    """One sentence per thing a researcher must see in the pub/sub account."""
    if not acc:
        return []
    total = acc.get("total") or {}
    out = []
    if total.get("lost_durable"):
        out.append(f"{total['lost_durable']} durable receipts lost (expected, never received, held nowhere)")
    if total.get("late_durable"):
        out.append(f"{total['late_durable']} durable receipts still on their way at teardown (late)")
    if total.get("duplicates"):
        out.append(f"{total['duplicates']} duplicate publications at subscriber clients")
    return out


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def held(rep_dir: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """What the teardown left on its way (`_held`), for another account of publications (the pools')."""
    return _held(rep_dir)


def _held(rep_dir: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per publication id the target nodes of its copies still on their way (a spool's inbox, or frag pieces
    that together hold the whole copy), and per subscription ('node/name') the ids queued for it at its node.
    Read-only, like testbed/accounting/spools.py."""
    in_transit: dict[str, set[str]] = defaultdict(set)
    queued: dict[str, set[str]] = defaultdict(set)
    pieces: dict[tuple[str, str], dict[int, bytes]] = defaultdict(dict)     # stored copy -> offset -> bytes
    totals: dict[tuple[str, str], int] = {}
    for d in node_directories(rep_dir):
        path = d / SPOOL_FILE
        if not path.is_file():
            continue
        wal = path.with_name(path.name + "-wal")
        flags = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True, timeout=5.0)
        except sqlite3.Error:
            continue
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "frag" in tables:
                # a copy's pieces may sit at several nodes (copy-until-ack): gathered, then judged whole or not
                for msg_id, dst, off, total, data in conn.execute(
                        "SELECT msg_id, dst, off, total, data FROM frag WHERE msg_id LIKE ?", (PUB_PREFIX + "%",)):
                    key = (str(msg_id), str(dst))
                    pieces[key][int(off)] = bytes(data)
                    totals[key] = max(totals.get(key, 0), int(total))
            if "inbox" in tables:
                for msg_id, payload in conn.execute("SELECT msg_id, payload FROM inbox WHERE msg_id LIKE ?",
                                                    (PUB_PREFIX + "%",)):
                    in_transit[_pub_id(str(msg_id))].update(_targets(bytes(payload)))
            if "pub_queue" in tables:
                for name, pub_id in conn.execute("SELECT name, pub_id FROM pub_queue"):
                    queued[f"{d.name}/{name}"].add(str(pub_id))
        except (sqlite3.Error, TypeError, ValueError):
            pass         # a spool the checker cannot read: check_run names it, and it fails the repetition
        finally:
            conn.close()
    for key, parts in pieces.items():
        payload = _assembled(parts, totals[key])
        if payload is not None:
            in_transit[_pub_id(key[0])].update(_targets(payload))
    return in_transit, queued


def _assembled(parts: dict[int, bytes], total: int) -> bytes | None:
    """The stored copy from its pieces (offset -> bytes); None when a piece of it is held nowhere."""
    if not whole(((off, len(data)) for off, data in parts.items()), total):
        return None
    buf = bytearray(total)
    for off, data in parts.items():
        chunk = data[:max(0, total - off)]
        buf[off:off + len(chunk)] = chunk
    return bytes(buf)


def _targets(payload: bytes) -> list[str]:
    """The nodes a stored publication copy is responsible for (node/broker/broker.py `_onward`); none when
    it does not decode."""
    try:
        return list(link_pb2.Publication.FromString(payload).targets)
    except DecodeError:
        return []


def _node(subscription: str) -> str:
    """'node/name' -> node."""
    return subscription.split("/", 1)[0]


def _pub_id(copy_id: str) -> str:
    """pub.<pub_id>.<node>.<hops>.<addressee> -> <pub_id> (a pub_id is '<node>-<hex>': no dots)."""
    return copy_id[len(PUB_PREFIX):].split(".", 1)[0]
