"""The workload driver: submits the planned messages (and the items subsystems send) at their wall times.

One thread per submitting node, so a node that hangs (paused) or is gone
(killed) delays only its own submissions. The node's own submissions.jsonl is
the record of what it accepted or refused; the driver adds to workload.jsonl
only the submissions that never reached a node (it was down, paused, or did
not answer), so `offered = accepted + refused + unreachable` holds. A call that
failed after it was sent is marked `maybe_accepted`: the node may have taken it.
Every acceptance the driver sees it writes to accepted.jsonl as the reply
arrives (one line each, on disk before the next submission): the client's own
record of what the nodes accepted, which the loss checker holds against the
nodes' records, so a node that failed to write a submission line cannot make a
copy invisible.
A planned item a subsystem claims (testbed/subsystems/: `submits`) is sent by
that subsystem's `submit`, and the driver counts its outcomes under the
subsystem's `counters`; the node keeps the record of those.
A submission with an originator (a generator's `originator:`) is sent as that
user: with client tokens (security.auth) on the user's own token at its node,
since the node then takes the user from the token; without, on the node's
token with the originator in the request.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from node.client import Access, NodeClient
from node.errors import UserError
from testbed.accounting.layout import ACCEPTED_FILE
from testbed.subsystems import SUBSYSTEMS, Subsystem

log = logging.getLogger(__name__)

SEND_TIMEOUT = 10.0     # wall seconds a submission may take before the node counts as unreachable


class Planned(Protocol):
    """What the driver needs of a planned submission (testbed.experiment.workload.PlannedSubmission)."""

    at: float
    node: str
    recipients: tuple[str, ...]
    size: int
    priority: int


def originator(p: Planned) -> str:
    """The submitting user of a planned item ("" for none, and for items that have no such field)."""
    return str(getattr(p, "originator", "") or "")


class WorkloadDriver:
    """Submit `schedule` (model seconds after the workload begins) at `at * time_scale` wall seconds."""

    def __init__(self, network: Any, schedule: Sequence[Planned], time_scale: float, rep_dir: Path,
                 address: Callable[[str], str] | None = None,
                 reachable: Callable[[str], bool] | None = None,
                 tokens: dict[str, Access] | None = None, subsystems: Sequence[Subsystem] = SUBSYSTEMS,
                 user_tokens: Callable[[str, str], Access] | None = None) -> None:
        self.network = network
        self.subsystems = tuple(subsystems)
        self.tokens = tokens or {}      # node -> its admin token (security.auth: it may send as anyone) and TLS check
        # (node, user) -> that user's access at the node (security.auth); None: originators go in the request
        self.user_tokens = user_tokens
        self.schedule = list(schedule)
        self.time_scale = time_scale
        self.path = Path(rep_dir) / "workload.jsonl"
        self.accepted_path = Path(rep_dir) / ACCEPTED_FILE
        self._address = address or (lambda n: f"{network.mgmt_address(n)}:7001")
        self._reachable = reachable or (lambda n: True)
        self.submitted = 0
        self.accepted = 0
        self.refused = 0
        self.unreachable = 0
        self.unrecorded = 0       # acceptances accepted.jsonl could not take (the checker finds them missing)
        # the subsystems' counters of the items they sent (counter -> count)
        self.extra: dict[str, int] = {c: 0 for sub in self.subsystems for c in sub.counters}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._t0 = 0.0

    @property
    def planned(self) -> int:
        return len(self.schedule)

    def counters(self) -> dict[str, int]:
        """Every count of the driver, the subsystems' after its own (events.jsonl's workload_end)."""
        with self._lock:
            return {"planned": self.planned, "submitted": self.submitted, "accepted": self.accepted,
                    "refused": self.refused, "unreachable": self.unreachable, **self.extra}

    def start(self, t0: float | None = None) -> None:
        """Begin at monotonic time t0 (now by default): schedule time 0 is t0."""
        self._t0 = time.monotonic() if t0 is None else t0
        try:
            self.accepted_path.touch()      # there even when nothing is accepted: the driver ran
        except OSError as exc:
            log.error("cannot create %s: %s", self.accepted_path, exc)
        by_node: dict[str, list[Planned]] = {}
        for p in sorted(self.schedule, key=lambda p: p.at):
            by_node.setdefault(p.node, []).append(p)
        # every user's access is looked up now: a missing token is one error before anything is sent
        access = {node: {user: self._access(node, user) for user in {originator(p) for p in plan}}
                  for node, plan in by_node.items()}
        for node, plan in by_node.items():
            t = threading.Thread(target=self._run_node, args=(node, plan, access[node]), name=f"driver-{node}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self, timeout: float = SEND_TIMEOUT + 5) -> None:
        """Stop submitting (what is due later is not offered) and wait for the node threads."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _access(self, node: str, user: str) -> Access:
        """What the driver carries at `node` to send as `user` ("": the node's own token)."""
        if user and self.user_tokens is not None:
            return self.user_tokens(node, user)
        return self.tokens.get(node, Access())

    def _run_node(self, node: str, plan: list[Planned], access: dict[str, Access]) -> None:
        # one client per user that submits here (the node's own: user ""), opened at its first submission
        clients: dict[str, NodeClient] = {}
        try:
            for p in plan:
                due = self._t0 + p.at * self.time_scale
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return
                user = originator(p)
                if user not in clients:
                    clients[user] = NodeClient.to(self._address(node), access[user], timeout=SEND_TIMEOUT)
                self._submit(clients[user], p)
        finally:
            for client in clients.values():
                client.close()

    def _submit(self, client: NodeClient, p: Planned) -> None:
        for sub in self.subsystems:
            if sub.submits(p):
                counter = sub.submit(client, p, self._reachable(p.node))
                with self._lock:
                    self.extra[counter] += 1
                return
        with self._lock:
            self.submitted += 1
        if not self._reachable(p.node):
            self._unreachable(p, "node unreachable: its daemon is down or paused")
            return
        try:
            to = [f"{p.user}@{n}" for n in p.recipients] if p.user else list(p.recipients)
            r = client.send(to, size=p.size, priority=p.priority, originator=originator(p))
        except UserError as exc:
            # sent, but no answer: the node may have accepted it (killed or paused between its commit and
            # its reply)
            self._unreachable(p, f"node unreachable: {exc}", maybe_accepted=True)
            return
        with self._lock:
            if r.accepted:
                self.accepted += 1
                self._write_accepted(p, r.msg_id)
            else:
                self.refused += 1

    def _write_accepted(self, p: Planned, msg_id: str) -> None:
        """One accepted.jsonl line (the caller holds the lock); opened per line, so it is on disk at once."""
        rec = {"ts": time.time(), "node": p.node, "msg_id": msg_id, "dst": sorted(set(p.recipients)),
               "size": int(p.size)}
        try:
            with open(self.accepted_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        except OSError as exc:
            self.unrecorded += 1
            if self.unrecorded == 1:
                log.error("cannot write %s: %s", self.accepted_path, exc)

    def _unreachable(self, p: Planned, reason: str, maybe_accepted: bool = False) -> None:
        rec = {"ts": time.time(), "node": p.node, "msg_id": "", "src": p.node, "dst": list(p.recipients),
               "size": int(p.size), "accepted": False, "reason": reason, "priority": p.priority,
               "planned_at": p.at, **({"maybe_accepted": True} if maybe_accepted else {})}
        with self._lock:
            self.unreachable += 1
            with open(self.path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        log.info("submission at %s not made: %s", p.node, reason)
