"""Rule routing (placeholder until the rules module lands): first match wins."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from node.errors import UserError
from node.spool import Piece


class RuleError(UserError):
    """A routing rule is invalid."""


def parse_rules(raw: Any, neighbours: Mapping[str, str]) -> list:
    if raw:
        raise RuleError("rules are not supported yet")
    return []


class RuleSet:
    def __init__(self, rules: list) -> None:
        self.rules = rules

    def pick(self, copy: Piece, usable: Callable[[str], bool]) -> str | None:
        return None

    def to_plain(self) -> list[dict]:
        return []
