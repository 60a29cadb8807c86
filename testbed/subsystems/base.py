"""What the testbed side of a subsystem is: one object with a hook for every place a repetition meets it.

Like a scenario section (testbed/scenario/sections/base.py), every hook has a default that adds nothing, so
a subsystem's module overrides only the hooks its subsystem needs. The hooks, in the order a run meets them:

  sections        the scenario sections it owns. They are listed in testbed/scenario/sections/__init__.py
                  (the scenario sits below this package, so it cannot ask it); `to_wall` converts their
                  model times to wall times (testbed/experiment/timescale.py)
  node_config     what it writes into one node's config (testbed/experiment/nodeconfig.py); `wire`: what
                  it completes once every node's wiring is made (other nodes' addresses, a per-run secret);
                  `users`: the users it needs a mailbox and a token for at a node
  clients         the clients it runs during a repetition, from before the warm-up to the teardown
  submits/submit  the planned workload items it sends itself instead of as mail (the workload driver), with
                  `counters`: the driver's counts of their outcomes (events.jsonl's workload_end, summary.json)
  held/activity   its share of what a node's Stats say the node holds / has moved (the drain)
  copy_prefixes   message ids of the stored copies it accounts itself, which the loss checker leaves out
  account         its keys in summary.json; `problems`: the sentences a researcher must see about them;
                  `fails`: whether they fail the repetition in `testbed run`
  console         its lines under the loss checker's verdict on the run's console
  checked         its account in `testbed check` (keys in the JSON), with `check_ok` and `check_lines`

The list of subsystems is testbed/subsystems/__init__.py (SUBSYSTEMS); the experiment code loops over it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from node.client import Access, NodeClient
from testbed.accounting.records import RecordReader
from testbed.scenario.sections.base import Section
from testbed.scenario.spec import Scenario


@dataclass(frozen=True)
class RunContext:
    """What a subsystem's clients get from the repetition that runs them."""
    rep_dir: Path
    address: Callable[[str], str]              # node -> its management target (Submit, Control, PubSub)
    reachable: Callable[[str], bool]           # False while the node's daemon is down or paused
    tokens: dict[str, Access]                  # node -> the token (and TLS check) the testbed's clients carry
    client: Callable[[str], NodeClient]        # node -> a short-lived management client (the drain's questions)
    # (node, user) -> that user's token there (security.auth); None: the run has no user tokens, clients use
    # `tokens`
    user_access: Callable[[str, str], Access] | None = None
    # the run's id in the registry (testbed/registry.py): clients that start processes record their pids in its
    # state, so `testbed clean` ends them after a crashed testbed; "" for none
    run_id: str = ""


class Clients:
    """The clients of one subsystem in one repetition (all hooks default to nothing)."""

    name = "clients"        # what the teardown calls them in a warning

    def start(self, timeout: float, stop: threading.Event) -> list[str]:
        """Start them; wait at most `timeout` wall seconds (or until `stop`) for them to be ready.
        Returns console lines about any that were not."""
        return []

    def backlog(self) -> dict[str, int | str]:
        """What the nodes still hold for these clients (where -> count); the drain waits for it."""
        return {}

    def stop(self) -> None:
        """Stop them and write their files in the repetition directory."""

    def fault(self, action: str, target: Any) -> dict[str, Any] | None:
        """Apply one of its fault actions (scenario `faults:`) now; the details for events.jsonl. None: the
        action is not its own."""
        return None

    def resolve(self, target: str) -> list[str] | None:
        """The nodes a symbolic fault target of its own (`pools.leader`) stands for now; None: not its target."""
        return None


class Subsystem:
    """The testbed side of one subsystem (see the module docstring); the defaults add nothing."""

    name = ""
    sections: tuple[Section, ...] = ()
    counters: tuple[str, ...] = ()
    copy_prefixes: tuple[str, ...] = ()

    def to_wall(self, wall: Scenario, k: float) -> None:
        """Convert its sections of `wall` (a copy of the model scenario) from model to wall seconds (k wall s
        per model s)."""

    def node_config(self, scenario: Scenario, node: str) -> dict[str, Any]:
        """Its top-level sections of `node`'s config (node/config.py keys); `scenario` is in wall units."""
        return {}

    def wire(self, scenario: Scenario, wirings: dict[str, dict[str, Any]], rep_dir: Path) -> None:
        """Complete its sections in the nodes' wirings (node -> config mapping before the scenario's settings
        are laid over it) once every node's is made: what needs other nodes' addresses or a per-run secret."""

    def users(self, config: dict[str, Any]) -> set[str]:
        """The users it needs a mailbox (and a token) for at the node whose config this is."""
        return set()

    def clients(self, scenario: Scenario, ctx: RunContext) -> Clients | None:
        """The clients it runs in a repetition of `scenario` (wall units); None: none."""
        return None

    def submits(self, planned: Any) -> bool:
        """True when the planned workload item is its to send (the driver then calls `submit`)."""
        return False

    def submit(self, client: NodeClient, planned: Any, reachable: bool) -> str:
        """Send one planned item through `client` (its node's, when `reachable`); returns the counter to count."""
        raise NotImplementedError(f"{self.name or type(self).__name__} claims no planned items")

    def held(self, stats: dict[str, Any]) -> int:
        """What a node's Stats say it holds for this subsystem besides the spool's messages."""
        return 0

    def activity(self, stats: dict[str, Any]) -> int:
        """A number from a node's Stats that grows whenever this subsystem moves anything."""
        return 0

    def account(self, rep_dir: Path, reader: RecordReader, scenario: Scenario,
                submissions: list[dict[str, Any]]) -> dict[str, Any]:
        """Its keys in summary.json, read from the run directory alone (`submissions`: the nodes' lines)."""
        return {}

    def problems(self, summary: dict[str, Any]) -> list[str]:
        """One sentence per thing a researcher must see in its part of `summary`."""
        return []

    def fails(self, summary: dict[str, Any]) -> bool:
        """True when its part of `summary` must fail the repetition in `testbed run` (exit status 1), besides
        the loss checker's verdict."""
        return False

    def console(self, summary: dict[str, Any]) -> list[str]:
        """Its lines under the loss checker's verdict on the console."""
        return []

    def checked(self, rep_dir: Path) -> dict[str, Any]:
        """Its account for `testbed check` (key -> value, in the JSON output); empty: nothing to check."""
        return {}

    def check_ok(self, checked: dict[str, Any]) -> bool:
        """Whether the repetition passes on what `checked` returned."""
        return True

    def check_lines(self, checked: dict[str, Any]) -> list[str]:
        """Its lines under the verdict in `testbed check`."""
        return []
