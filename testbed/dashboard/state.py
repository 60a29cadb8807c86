"""What the dashboard shows, folded from the run directory's files as they grow.

RunState follows one run directory (a repetition of `testbed run`, or a `testbed up` network): topology.json,
links.jsonl, events.jsonl, host.jsonl and nodes/<host>/{metrics,routes,rates}.jsonl. ExperimentState follows
an experiment folder: its experiment.json says which repetition runs now, its progress.jsonl the phases and
ticks, and it switches to each repetition as it starts. open_source() picks one of the two for a path.
Everything comes from the files; `until` (a Unix time) replays the run as it stood then.
"""
from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any, Iterator

from node.errors import UserError
from testbed.dashboard.reader import Item, JsonFile, JsonlReader

RECENT_ROUTES = 100        # route changes kept for the per-node view
TIMELINE = 500             # timeline entries kept
PROBLEMS = 50              # problems kept (the newest)
NODE_FILES = (("metrics.jsonl", "metrics"), ("routes.jsonl", "route"), ("rates.jsonl", "rate"))


def _ok_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class RunState:
    """The state of one run directory; poll() reads what was appended, snapshot() is what the page gets."""

    def __init__(self, run_dir: Path, until: float | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.until = until
        self.topology_file = JsonFile(self.run_dir / "topology.json")
        self.topology: dict[str, Any] = {}
        self.readers: dict[str, JsonlReader] = {}
        for name, kind in (("events.jsonl", "event"), ("host.jsonl", "host"), ("links.jsonl", "link")):
            self.readers[name] = JsonlReader(self.run_dir / name, kind)
        self.links: dict[str, dict[str, Any]] = {}          # link -> its latest links.jsonl record
        self.nodes: dict[str, dict[str, Any]] = {}          # node -> what its latest metrics line says
        self.routes: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_ROUTES)
        self.timeline: collections.deque[dict[str, Any]] = collections.deque(maxlen=TIMELINE)
        self.problems: collections.deque[dict[str, Any]] = collections.deque(maxlen=PROBLEMS)
        self.host: dict[str, Any] = {}
        self.broker: dict[str, dict[str, Any]] = {}
        self.rate: dict[str, dict[str, Any]] = {}
        self.last_ts = 0.0
        self.first_ts = 0.0                                # the earliest record: where a replay's slider starts
        self.version = 0                                   # grows with every change poll() found
        # replay: topology.json holds the links' LAST state; at `until` a link is as its last link_down/link_up
        # before then said, or, with none, as it was before its first one after then
        self.link_at: dict[str, str] = {}
        self.link_before: dict[str, str] = {}

    # ---- reading -----------------------------------------------------------------------------------------

    def poll(self) -> bool:
        """Read what is new; True when anything changed."""
        changed = self._poll_topology()
        nodes_dir = self.run_dir / "nodes"
        try:
            hosts = sorted(e.name for e in os.scandir(nodes_dir) if e.is_dir())
        except OSError:
            hosts = []
        for host in hosts:
            for name, kind in NODE_FILES:
                key = f"nodes/{host}/{name}"
                if key not in self.readers:
                    self.readers[key] = JsonlReader(nodes_dir / host / name, kind)
        for key, reader in self.readers.items():
            for item in reader.read():
                changed = True
                try:
                    self._take(key, item)
                except (TypeError, ValueError, KeyError, AttributeError) as exc:
                    # a line that passed the schema but holds values of the wrong shape inside: shown, skipped
                    self._problem(f"{key} line {reader.lineno}: unexpected value ({exc!r}); skipped")
            late = reader.take_problem()
            if late:
                self._problem(late)
                changed = True
        if changed:
            self.version += 1
        return changed

    def _poll_topology(self) -> bool:
        if not self.topology_file.changed():
            return False
        doc, problem = self.topology_file.load()
        if problem:
            self._problem(problem)
            return True
        if isinstance(doc, dict):
            self.topology = doc
            return True
        if doc is not None:
            self._problem("topology.json: not a JSON object")
        return False

    def _problem(self, text: str) -> None:
        if self.problems and self.problems[-1]["text"] == text:
            return           # the same file still unreadable: once is enough
        self.problems.append({"ts": self.last_ts, "text": text})

    def _take(self, key: str, item: Item) -> None:
        if item.problem is not None:
            self._problem(item.problem)
            return
        rec = item.record
        assert rec is not None
        ts = rec.get("ts")
        if not _ok_number(ts):
            return
        if key == "events.jsonl" and rec["event"] in ("link_down", "link_up") and isinstance(rec["target"], str):
            state = "down" if rec["event"] == "link_down" else "up"
            if self.until is None or ts <= self.until:
                self.link_at[rec["target"]] = state
            else:
                self.link_before.setdefault(rec["target"], "up" if state == "down" else "down")
        if self.until is not None and ts > self.until:
            return
        self.last_ts = max(self.last_ts, float(ts))
        self.first_ts = min(self.first_ts or float(ts), float(ts))
        name = key.rsplit("/", 1)[-1]
        if name == "links.jsonl":
            self.links[rec["link"]] = rec
        elif name == "events.jsonl":
            target = rec["target"]
            text = f"{rec['event']} {target if isinstance(target, str) else target!r}"
            self.timeline.append({"ts": ts, "kind": "fault", "event": rec["event"], "text": text})
        elif name == "host.jsonl":
            self.host = {"ts": ts, "cpu_percent": rec["cpu_percent"], "mem_percent": rec["mem_percent"]}
        elif name == "metrics.jsonl":
            self._metrics(rec)
        elif name == "routes.jsonl":
            change = {"ts": ts, "node": rec["node"], "dst": rec["dst"], "next_hop": rec["next_hop"],
                      "cost": rec["cost"], "reason": rec["reason"]}
            self.routes.append(change)
            if rec["reason"] != "initial":      # the initial table is not a change worth a timeline mark
                self.timeline.append({"ts": ts, "kind": "route", "event": rec["reason"],
                                      "text": f"{rec['node']}: to {rec['dst']} via {rec['next_hop']} "
                                              f"({rec['reason']})"})
        elif name == "rates.jsonl":
            self.rate[f"{rec['node']}/{rec['client'] or 'root'}"] = {
                "ts": ts, "node": rec["node"], "event": rec["event"], "client": rec["client"],
                "weight": rec["weight"], "rate_bps": rec["rate_bps"], "queue_bytes": rec["queue_bytes"]}

    def _metrics(self, rec: dict[str, Any]) -> None:
        neighbours = rec["neighbours"]
        queue = {n: int(v.get("queue_messages", 0)) for n, v in neighbours.items() if isinstance(v, dict)}
        self.nodes[rec["node"]] = {
            "ts": rec["ts"], "spool_messages": rec["spool_messages"], "spool_bytes": rec["spool_bytes"],
            "held_messages": rec.get("held_messages", 0), "orphans": rec.get("orphans", 0),
            "delivered": rec["delivered"], "queue_messages": sum(queue.values()), "queues": queue,
            "neighbours_up": {n: v.get("up") for n, v in neighbours.items() if isinstance(v, dict)}}
        if isinstance(rec.get("broker"), dict):
            b = rec["broker"]
            self.broker[rec["node"]] = {k: b.get(k) for k in ("published", "refused", "copies_in", "copies_out",
                                                               "duplicates", "expired")}

    # ---- what the page gets --------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        topo = self.topology
        hosts = [{"name": h.get("name"), "role": h.get("role"), "attrs": h.get("attrs", {})}
                 for h in topo.get("hosts", []) if isinstance(h, dict)]
        links = []
        for l in topo.get("links", []):
            if not isinstance(l, dict):
                continue
            state = l.get("state", "up")
            if self.until is not None:
                name = str(l.get("name"))
                state = self.link_at.get(name) or self.link_before.get(name) or state
            entry = {"name": l.get("name"), "a": l.get("a"), "b": l.get("b"), "state": state}
            seen = self.links.get(str(l.get("name")), {})
            for d in ("a_to_b", "b_to_a"):
                cfg = l.get(d) or {}
                traffic = seen.get(d) or {}
                rate = cfg.get("rate")
                bps = traffic.get("bps", 0.0)
                entry[d] = {"delay": cfg.get("delay"), "jitter": cfg.get("jitter"), "loss": cfg.get("loss"),
                            "rate": rate, "queue": cfg.get("queue"), "bps": bps,
                            # against the configured rate; None: unlimited (the page draws it grey)
                            "utilisation": round(bps / rate, 4) if _ok_number(rate) and rate > 0 and
                            _ok_number(bps) else None,
                            "drops": {k: traffic.get(k, 0) for k in ("dropped_loss", "dropped_queue",
                                                                     "dropped_down")}}
            links.append(entry)
        out: dict[str, Any] = {
            "run_dir": str(self.run_dir), "topology": topo.get("topology"), "generator": topo.get("generator", ""),
            "hosts": hosts, "links": links, "partitions": topo.get("partitions", []),
            "counts": {"hosts": len(hosts), "links": len(links)}, "nodes": self.nodes,
            "routes": list(self.routes)[-20:], "timeline": list(self.timeline), "host": self.host,
            "problems": list(self.problems), "last_ts": self.last_ts, "first_ts": self.first_ts,
            "panels": {}}
        # panels only when the run has them
        if self.broker:
            out["panels"]["broker"] = self.broker
        if self.rate:
            out["panels"]["rate"] = self.rate
        return out


class ExperimentState:
    """An experiment folder: the repetition that runs now (or the last one), and the experiment's progress."""

    def __init__(self, folder: Path, until: float | None = None, pin: str | None = None) -> None:
        self.folder = Path(folder)
        self.until = until
        self.pin = pin                  # "cell/rep": show that repetition only (RUN_DIR named one)
        self._ours = pin is None        # the progress lines since the last phase line are about the shown rep
        self.doc_file = JsonFile(self.folder / "experiment.json")
        self.doc: dict[str, Any] = {}
        self.progress = JsonlReader(self.folder / "progress.jsonl")
        self.phase: dict[str, Any] = {}
        self.tick: dict[str, Any] = {}
        self.messages: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self.problems: collections.deque[dict[str, Any]] = collections.deque(maxlen=PROBLEMS)
        self.current: RunState | None = None
        self.version = 0

    def _reps(self) -> Iterator[dict[str, Any]]:
        for cell in self.doc.get("cells", []) or []:
            reps = cell.get("reps") if isinstance(cell, dict) else None
            if not isinstance(reps, list):      # a hand-made or older experiment.json counts them: nothing to follow
                continue
            for rep in reps:
                if isinstance(rep, dict) and isinstance(rep.get("dir"), str):
                    yield rep

    def _pick(self) -> str | None:
        """The repetition to show: the pinned one, the one running, else the last one that has a folder."""
        if self.pin is not None:
            return self.pin
        reps = list(self._reps())
        for rep in reps:
            if rep.get("status") == "running":
                return rep["dir"]
        with_dir = [r["dir"] for r in reps if (self.folder / r["dir"]).is_dir() and r.get("status") != "skipped"]
        if self.phase.get("cell") is not None:
            wanted = f"{self.phase['cell']}/{self.phase.get('rep')}"
            if wanted in with_dir:
                return wanted
        return with_dir[-1] if with_dir else None

    def poll(self) -> bool:
        changed = False
        if self.doc_file.changed():
            doc, problem = self.doc_file.load()
            if problem and (not self.problems or self.problems[-1]["text"] != problem):
                self.problems.append({"ts": 0, "text": problem})
            if isinstance(doc, dict):
                self.doc = doc
                changed = True
        for item in self.progress.read():
            changed = True
            if item.problem:
                self.problems.append({"ts": 0, "text": item.problem})
                continue
            rec = item.record or {}
            if self.until is not None and _ok_number(rec.get("ts")) and rec["ts"] > self.until:
                continue
            event = rec.get("event")
            if event == "phase":
                self._ours = self.pin is None or f"{rec.get('cell')}/{rec.get('rep')}" == self.pin
            if not self._ours:
                continue
            if event == "phase":
                self.phase = {k: rec.get(k) for k in ("ts", "cell", "rep", "phase")}
                self.tick = {}
            elif event == "tick":
                self.tick = {k: rec.get(k) for k in ("ts", "elapsed", "total", "submitted", "delivered")}
            elif event == "message":
                self.messages.append({"ts": rec.get("ts"), "text": rec.get("text")})
        rep = self._pick()
        if rep is not None and (self.current is None or self.current.run_dir != self.folder / rep):
            self.current = RunState(self.folder / rep, self.until)
            changed = True
        if self.current is not None and self.current.poll():
            changed = True
        if changed:
            self.version += 1
        return changed

    def snapshot(self) -> dict[str, Any]:
        snap = self.current.snapshot() if self.current is not None else RunState(self.folder).snapshot()
        snap["experiment"] = {"folder": str(self.folder), "scenario": self.doc.get("scenario"),
                              "status": self.doc.get("status"),
                              "reps": [{"dir": r["dir"], "status": r.get("status")} for r in self._reps()],
                              "showing": str(self.current.run_dir.relative_to(self.folder)) if self.current else None}
        snap["phase"], snap["progress"], snap["messages"] = self.phase, self.tick, list(self.messages)
        snap["problems"] = list(self.problems) + snap["problems"]
        return snap


State = RunState | ExperimentState


def looks_like_run(path: Path) -> bool:
    return any((path / n).exists() for n in ("topology.json", "experiment.json", "events.jsonl", "nodes"))


def open_source(path: Path, until: float | None = None, check: bool = True,
                experiment: bool | None = None) -> State:
    """The state of a run directory or of an experiment folder (`experiment`: None = by what the folder holds).
    Without `check` the folder may be empty or not there yet (`up --dashboard` and `run --dashboard` serve
    before the first file is written); with it, a path that is not a run is a UserError."""
    path = Path(path)
    if check:
        if not path.is_dir():
            raise UserError(f"{path} is not a directory; give a run directory of `testbed run` or `testbed up`.")
        if not looks_like_run(path):
            raise UserError(f"{path} is not a run directory (no topology.json, experiment.json, events.jsonl or "
                            f"nodes/ in it).")
    if experiment is None:
        experiment = (path / "experiment.json").exists() or (path / "progress.jsonl").exists()
        folder = path.parent.parent
        if not experiment and (folder / "experiment.json").exists():
            # one repetition of an experiment: shown alone, with its phases from the experiment's progress.jsonl
            return ExperimentState(folder, until, pin=f"{path.parent.name}/{path.name}")
    return ExperimentState(path, until) if experiment else RunState(path, until)
