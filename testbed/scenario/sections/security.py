"""The `security` section: mTLS between the nodes (`tls`) and client tokens (`auth`), both off by default.

`tls: true` makes a certificate authority for the run and a certificate per node (testbed/secrets.py);
`auth: true` makes a token per (node, user) and an admin token, which every Submit, Control and PubSub call
then needs. The testbed's own clients carry the admin token.
"""
from __future__ import annotations

from typing import Any

from testbed.scenario.checks import Check
from testbed.scenario.parts import SecuritySpec
from testbed.scenario.sections.base import Scenario, Section


def _read(c: Check, raw: Any, s: Scenario) -> None:
    m = c.mapping(("security",), raw, ("tls", "auth"))
    s.security = SecuritySpec(tls=c.boolean(("security", "tls"), m.get("tls", False)),
                              auth=c.boolean(("security", "auth"), m.get("auth", False)))


SECURITY = Section("security", read=_read, plain=lambda s: {"tls": s.security.tls, "auth": s.security.auth},
                   default=SecuritySpec)
