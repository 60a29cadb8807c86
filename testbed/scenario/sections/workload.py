"""The `workload` section: warm-up, drain and the message generators (who sends, how often, what size, to whom)."""
from __future__ import annotations

import copy
import os
import stat
from dataclasses import fields
from pathlib import Path
from typing import Any

from testbed import units
from testbed.scenario.checks import Check, KeyPath, names_text, show
from testbed.scenario.parts import Generator, Interarrival, PublishSpec, RecipientChoice, SizeDist, WorkloadSpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.scenario.sections.refs import node_list
from node.broker.topics import topic_problem
from node.names import is_user_name
from testbed.topology.model import Topology

INTERARRIVALS = ("normal", "exponential", "constant", "piecewise")
SIZE_DISTS = ("thesis", "fixed", "empirical")
RECIPIENT_CHOICES = ("uniform", "fixed", "weighted")
# A file of sizes (`size: {dist: empirical, file: PATH}`) is read whole into memory: anything larger than the
# node's default max_message_size (node/config.py LimitsConfig, 64 MiB; millions of lines) is refused unread,
# as is anything that is not a regular file (/dev/zero, a FIFO, a directory would never end or not be text).
SIZE_FILE_MAX_BYTES = 64 << 20


def size_file_problem(path: Path) -> str | None:
    """Why the empirical size file at `path` cannot be read (without reading it), or None when it can.

    A missing file is not a problem here: the workload plan reports it ("does not exist")."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read the empirical size file {path} ({exc.strerror or exc.__class__.__name__})"
    return size_file_stat_problem(path, st)


def size_file_stat_problem(path: Path, st: os.stat_result) -> str | None:
    """size_file_problem for a file already stat()ed (or fstat()ed once open)."""
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        return f"the empirical size file {path} is {kind}; expected a regular file of sizes, one per line"
    if st.st_size > SIZE_FILE_MAX_BYTES:
        return (f"the empirical size file {path} is {st.st_size} bytes; expected at most "
                f"{SIZE_FILE_MAX_BYTES} bytes (64 MiB)")
    return None


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    names = topo.node_names()
    path: KeyPath = ("workload",)
    m = c.mapping(path, raw, ("warmup", "drain", "stall_after", "measure_from", "generators"))
    w = WorkloadSpec()
    w.warmup = c.unit(path + ("warmup",), m.get("warmup", w.warmup), units.parse_duration)
    w.drain = c.unit(path + ("drain",), m.get("drain", w.drain), units.parse_duration)
    w.stall_after = c.unit(path + ("stall_after",), m.get("stall_after", w.stall_after), units.parse_duration,
                           positive=True)
    w.measure_from = c.unit(path + ("measure_from",), m.get("measure_from", w.measure_from), units.parse_duration)
    if s.duration > 0 and w.measure_from >= s.duration:
        c.fail(path + ("measure_from",), f"{w.measure_from:g} s leaves no throughput window: it must be "
                                         f"shorter than the duration ({s.duration:g} s)")
    for i, g in enumerate(c.sequence(path + ("generators",), m.get("generators"))):
        w.generators.append(_generator(c, path + ("generators", i), g, names))
    s.workload = w


def _generator(c: Check, path: KeyPath, raw: Any, names: list[str]) -> Generator:
    m = c.mapping(path, raw, ("nodes", "interarrival", "size", "recipients", "priority", "start", "stop", "publish",
                              "originator"))
    g = Generator()
    g.nodes = node_list(c, path + ("nodes",), m.get("nodes", "all"), names)
    g.interarrival = _interarrival(c, path + ("interarrival",), m.get("interarrival"))
    g.size = _size(c, path + ("size",), m.get("size"))
    if m.get("publish") is not None:
        if m.get("recipients") is not None:
            c.fail(path + ("recipients",), "a generator that publishes has topics, not recipients")
        g.publish = _publish(c, path + ("publish",), m["publish"], names)
    g.recipients = _recipients(c, path + ("recipients",), m.get("recipients"), names)
    if m.get("originator") not in (None, ""):
        if g.publish is not None:
            c.fail(path + ("originator",), "a generator that publishes has no originator (publications are the "
                                           "node's own)")
        g.originator = c.text(path + ("originator",), m["originator"])
        if not is_user_name(g.originator):
            c.fail(path + ("originator",), f"{show(g.originator)} is not a valid user name (letters, digits, '_.-')")
    g.priority = c.integer(path + ("priority",), m.get("priority", 1), 0, 255)
    g.start = c.unit(path + ("start",), m.get("start", 0.0), units.parse_duration)
    if m.get("stop") is not None:
        g.stop = c.unit(path + ("stop",), m["stop"], units.parse_duration)
        if g.stop <= g.start:
            c.fail(path + ("stop",), "expected stop after start")
    return g


def _publish(c: Check, pp: KeyPath, raw: Any, names: list[str]) -> PublishSpec:
    """publish: {topics: [...], sources: {count, skew}}; "{node}" in a topic stands for the publishing node,
    "{source}" for one of its own `count` sources (<node>-<k>), drawn Zipf-skewed (weight 1 / k**skew)."""
    m = c.mapping(pp, raw, ("topics", "sources"))
    topics = [c.text(pp + ("topics", i), t) for i, t in enumerate(c.sequence(pp + ("topics",), m.get("topics")))]
    if not topics:
        c.fail(pp + ("topics",), "missing: a publishing generator needs one or more topics")
    out = PublishSpec(topics=topics)
    if m.get("sources") is not None:
        sp = pp + ("sources",)
        sm = c.mapping(sp, m["sources"], ("count", "skew"))
        if "count" not in sm:
            c.fail(sp + ("count",), "missing: sources need a count")
        out.sources = c.integer(sp + ("count",), sm["count"], low=1, high=1_000_000)
        out.skew = c.not_negative(sp + ("skew",), sm.get("skew", out.skew))
        if not any("{source}" in t for t in topics):
            c.fail(sp, 'no topic has "{source}" to put a source in')
    for i, t in enumerate(topics):
        if "{source}" in t and not out.sources:
            c.fail(pp + ("topics", i), '"{source}" needs publish.sources: {count, skew}')
        why = topic_problem(t.replace("{node}", names[0] if names else "n").replace("{source}", "n-1"))
        if why:
            c.fail(pp + ("topics", i), why)
    return out


def _interarrival(c: Check, ip: KeyPath, raw: Any) -> Interarrival:
    ia = c.mapping(ip, raw, ("dist", "mean", "sd", "schedule"))
    out = Interarrival()
    out.dist = c.choice(ip + ("dist",), ia.get("dist", "normal"), INTERARRIVALS)
    out.mean = c.unit(ip + ("mean",), ia.get("mean", out.mean), units.parse_duration, positive=True)
    if ia.get("sd") is not None:
        out.sd = c.unit(ip + ("sd",), ia["sd"], units.parse_duration)
    for i, entry in enumerate(c.sequence(ip + ("schedule",), ia.get("schedule"))):
        ep = ip + ("schedule", i)
        e = c.mapping(ep, entry, ("from", "to", "dist", "mean", "sd"))
        for need in ("from", "to"):
            if need not in e:
                c.fail(ep + (need,), "missing: a schedule period needs 'from' and 'to'")
        period: dict[str, Any] = {"from": c.unit(ep + ("from",), e["from"], units.parse_duration),
                                  "to": c.unit(ep + ("to",), e["to"], units.parse_duration),
                                  "dist": c.choice(ep + ("dist",), e.get("dist", out.dist if
                                                   out.dist != "piecewise" else "normal"),
                                                   ("normal", "exponential", "constant")),
                                  "mean": c.unit(ep + ("mean",), e.get("mean", out.mean),
                                                 units.parse_duration, positive=True)}
        if period["to"] <= period["from"]:
            c.fail(ep + ("to",), "expected 'to' after 'from'")
        if e.get("sd") is not None:
            period["sd"] = c.unit(ep + ("sd",), e["sd"], units.parse_duration)
        out.schedule.append(period)
    if out.dist == "piecewise" and not out.schedule:
        c.fail(ip + ("schedule",), "missing: dist piecewise needs a schedule of periods")
    return out


def _size(c: Check, sp: KeyPath, raw: Any) -> SizeDist:
    s = c.mapping(sp, raw, ("dist", "bytes", "file", "fragment_size"))
    out = SizeDist()
    out.dist = c.choice(sp + ("dist",), s.get("dist", "thesis"), SIZE_DISTS)
    out.bytes = c.unit(sp + ("bytes",), s.get("bytes", out.bytes), units.parse_size, positive=True)
    out.fragment_size = c.unit(sp + ("fragment_size",), s.get("fragment_size", out.fragment_size),
                               units.parse_size, positive=True)
    if s.get("file") not in (None, ""):
        out.file = c.text(sp + ("file",), s["file"])
        # Relative to the scenario file, as the workload plan reads it (testbed/experiment/workload.py).
        path = Path(out.file).expanduser()
        if not path.is_absolute() and not c.source.startswith("<"):
            path = Path(c.source).parent / path
        problem = size_file_problem(path)
        if problem:
            c.fail(sp + ("file",), problem)
    if out.dist == "empirical" and not out.file:
        c.fail(sp + ("file",), "missing: dist empirical needs a file of sizes")
    return out


def _recipients(c: Check, rp: KeyPath, raw: Any, names: list[str]) -> RecipientChoice:
    r = c.mapping(rp, raw, ("choice", "nodes", "weights", "user"))
    out = RecipientChoice()
    if r.get("user") not in (None, ""):
        out.user = c.text(rp + ("user",), r["user"])
        if not is_user_name(out.user):
            c.fail(rp + ("user",), f"{show(out.user)} is not a valid user name (letters, digits, '_.-')")
    out.choice = c.choice(rp + ("choice",), r.get("choice", "uniform"), RECIPIENT_CHOICES)
    if "nodes" in r:
        out.nodes = list(node_list(c, rp + ("nodes",), r["nodes"], names, allow_all=False))
    if out.choice == "fixed" and not out.nodes:
        c.fail(rp + ("nodes",), "missing: choice fixed needs one or more recipient nodes")
    weights = c.mapping(rp + ("weights",), r.get("weights"))
    for n, wv in weights.items():
        if n not in names:
            c.fail(rp + ("weights", n), f"unknown node {show(n)} (nodes: {names_text(names)})")
        out.weights[n] = c.number(rp + ("weights", n), wv)
        if out.weights[n] < 0:
            c.fail(rp + ("weights", n), "expected a weight of zero or more")
    if out.choice == "weighted" and not any(v > 0 for v in out.weights.values()):
        c.fail(rp + ("weights",), "missing: choice weighted needs weights with at least one above zero")
    return out


def _generator_plain(g: Generator) -> dict[str, Any]:
    ia = {"dist": g.interarrival.dist, "mean": g.interarrival.mean, "sd": g.interarrival.sd,
          "schedule": copy.deepcopy(g.interarrival.schedule)}
    what = ({"publish": {"topics": list(g.publish.topics),
                         **({"sources": {"count": g.publish.sources, "skew": g.publish.skew}}
                            if g.publish.sources else {})}} if g.publish is not None else
            {"recipients": {"choice": g.recipients.choice, "nodes": list(g.recipients.nodes),
                            "weights": dict(g.recipients.weights), "user": g.recipients.user}})
    return {"nodes": copy.deepcopy(g.nodes), "interarrival": ia,
            "size": {f.name: getattr(g.size, f.name) for f in fields(g.size)}, **what,
            "priority": g.priority, "start": g.start, "stop": g.stop,
            **({"originator": g.originator} if g.originator else {})}


def _plain(s: Scenario) -> dict[str, Any]:
    return {"warmup": s.workload.warmup, "drain": s.workload.drain, "stall_after": s.workload.stall_after,
            "measure_from": s.workload.measure_from,
            "generators": [_generator_plain(g) for g in s.workload.generators]}


WORKLOAD = Section("workload", check=_check, plain=_plain, default=WorkloadSpec)
