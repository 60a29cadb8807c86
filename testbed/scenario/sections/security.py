"""The `security` section: TLS (`tls`) and client tokens (`auth`), both off by default in a run.

`tls: true` makes a certificate authority for the run and a certificate per node (testbed/secrets.py): mTLS
between the nodes, and TLS on each node's management port, which the testbed's clients and the CLI check
against the node's name; `auth: true` makes a token per (node, user) and an admin token per node, which every
Submit, Control and PubSub call then needs. The testbed's own clients carry the node's admin token.
`testbed up` turns on both unless the scenario says otherwise (`for_up`).
"""
from __future__ import annotations

from typing import Any

from node.errors import UserError
from testbed.scenario.checks import Check
from testbed.scenario.parts import SecuritySpec
from testbed.scenario.sections.base import Scenario, Section

KEYS = ("tls", "auth")


def _read(c: Check, raw: Any, s: Scenario) -> None:
    m = c.mapping(("security",), raw, KEYS)
    s.security = SecuritySpec(tls=c.boolean(("security", "tls"), m.get("tls", False)),
                              auth=c.boolean(("security", "auth"), m.get("auth", False)),
                              given=tuple(k for k in KEYS if k in m))


def for_up(spec: SecuritySpec, tls: bool = False, auth: bool = False, insecure: bool = False) -> SecuritySpec:
    """A live `testbed up` network's security: what the scenario says, and on for what it does not say (a
    network that stays up is for people to use, on a host others may share); `--tls`/`--auth` turn one on
    whatever the scenario says, `--insecure` both off."""
    if insecure:
        if tls or auth:
            raise UserError("--insecure turns TLS and tokens off; it cannot go with --tls or --auth.")
        return SecuritySpec(tls=False, auth=False, given=KEYS)
    return SecuritySpec(tls=tls or spec.tls or "tls" not in spec.given,
                        auth=auth or spec.auth or "auth" not in spec.given, given=KEYS)


SECURITY = Section("security", read=_read, plain=lambda s: {"tls": s.security.tls, "auth": s.security.auth},
                   default=SecuritySpec)
