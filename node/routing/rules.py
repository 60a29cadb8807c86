"""Rule routing, as a messaging gateway does it: the first matching rule names the next hop.

Rules are evaluated before the routing table. The config form (`routing.rules`, or JSON over the
Control service's SetRules) is a list of mappings:

    - name: urgent                  # optional; default "rule<N>" (N = 1-based position)
      match:                        # optional; all filters AND-ed; absent or empty matches everything
        src: n1                     # source node; a name or a list of names (any of)
        src_user: alice             # the submitting user (Piece.originator)
        dst: n5                     # destination node
        dst_user: bob               # any recipient of the copy at dst
        keyword: URGENT             # case-sensitive substring looked for in keyword_in:
        keyword_in: body            # body (default), kind, originator, users, msg_id
        keyword_bytes: 256          # body only: how many leading body bytes are searched (1..65536)
        priority: 8                 # exact, or [lo, hi] inclusive
      to: n3                        # exactly one target: to / round_robin / failover
    - match: {dst: [n5, n6]}
      round_robin: {n2: 2, n3: 1}   # smooth weighted round robin; a list [n2, n3] means weight 1 each
    - match: {src_user: carol}
      failover: [n2, n3]            # the first usable member

A copy is judged by its first piece seen at this node: the header fields, and at offset 0 the first
body bytes (a copy first seen at another offset has no body to search, so a body keyword never matches).
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

from node.errors import UserError
from node.names import NODE_NAME_RULE, is_node_name, is_user_name
from node.piece import Piece

MAX_RULES = 1000
KEYWORD_IN = ("body", "kind", "originator", "users", "msg_id")
KEYWORD_BYTES_DEFAULT = 256
KEYWORD_BYTES_MAX = 65536
TARGETS = ("to", "round_robin", "failover")
RULE_KEYS = ("name", "match", *TARGETS)
MATCH_KEYS = ("src", "src_user", "dst", "dst_user", "keyword", "keyword_in", "keyword_bytes", "priority")
USER_NAME_RULE = "up to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
RULE_NAME_RULE = "1-64 letters, digits, '_', '.', ':', '@', '+' or '-'"
# rule names go into log lines and records, so they are plain tokens like message ids
_RULE_NAME = re.compile(r"[A-Za-z0-9_.:@+-]{1,64}")
# copies whose round-robin member is remembered; beyond this the least recently asked is forgotten
CHOICE_MEMORY = 65536


class RuleError(UserError):
    """A routing rule is invalid."""


@dataclass(frozen=True)
class Match:
    """The filters of one rule; an empty tuple (or empty keyword, or no priority) does not filter."""
    src: tuple[str, ...] = ()
    src_user: tuple[str, ...] = ()
    dst: tuple[str, ...] = ()
    dst_user: tuple[str, ...] = ()
    keyword: str = ""
    keyword_in: str = "body"
    keyword_bytes: int = KEYWORD_BYTES_DEFAULT
    priority: tuple[int, int] | None = None
    # the keyword as bytes, encoded once: the body filter runs for every new copy
    _needle: bytes = field(default=b"", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_needle", self.keyword.encode())

    def matches(self, copy: Piece) -> bool:
        if self.src and copy.src not in self.src:
            return False
        if self.src_user and copy.originator not in self.src_user:
            return False
        if self.dst and copy.dst not in self.dst:
            return False
        if self.dst_user and not any(u in self.dst_user for u in copy.users):
            return False
        if self.priority is not None and not self.priority[0] <= copy.prio <= self.priority[1]:
            return False
        return not self.keyword or self._keyword_found(copy)

    def _keyword_found(self, copy: Piece) -> bool:
        where = self.keyword_in
        if where == "body":
            # a copy recovered after a restart has no bytes in memory unless a body rule was configured then
            # (Engine.recover); one set at run time later cannot see into it
            return copy.off == 0 and copy.data is not None and self._needle in bytes(copy.data[:self.keyword_bytes])
        if where == "users":
            return any(self.keyword in u for u in copy.users)
        return self.keyword in getattr(copy, where)      # kind, originator, msg_id: header strings

    def to_plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("src", "src_user", "dst", "dst_user"):
            names = getattr(self, key)
            if names:
                out[key] = names[0] if len(names) == 1 else list(names)
        if self.keyword:
            out["keyword"] = self.keyword
            out["keyword_in"] = self.keyword_in
            if self.keyword_in == "body":
                out["keyword_bytes"] = self.keyword_bytes
        if self.priority is not None:
            lo, hi = self.priority
            out["priority"] = lo if lo == hi else [lo, hi]
        return out


@dataclass(frozen=True)
class Rule:
    """One routing rule: when `match` matches a copy, its next hop is one of `members`."""
    name: str
    match: Match
    target: str                           # "to" | "round_robin" | "failover"
    members: tuple[tuple[str, int], ...]  # (neighbour, weight) in config order; weight 1 unless round_robin

    @property
    def hops(self) -> tuple[str, ...]:
        return tuple(m for m, _w in self.members)

    def to_plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        match = self.match.to_plain()
        if match:
            out["match"] = match
        if self.target == "to":
            out["to"] = self.members[0][0]
        elif self.target == "failover":
            out["failover"] = list(self.hops)
        else:
            out["round_robin"] = dict(self.members)
        return out


def parse_rules(raw: Any, neighbours: Mapping[str, str]) -> list[Rule]:
    """Rules from their config form; any mistake is one RuleError naming the rule and key."""
    if not isinstance(raw, list):
        raise RuleError(f"rules must be a list of rules, got {_kind(raw)}.")
    if len(raw) > MAX_RULES:
        raise RuleError(f"at most {MAX_RULES} rules are allowed, got {len(raw)}.")
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    for pos, item in enumerate(raw, 1):
        rule = _parse_rule(pos, item, neighbours)
        if rule.name in seen:
            # names identify rules in logs and records, so two rules must not share one
            raise RuleError(f"rule {pos} ({rule.name}): name {rule.name!r} is already used by rule "
                            f"{seen[rule.name]}.")
        seen[rule.name] = pos
        rules.append(rule)
    return rules


def _parse_rule(pos: int, item: Any, neighbours: Mapping[str, str]) -> Rule:
    if not isinstance(item, dict):
        raise RuleError(f"rule {pos} must be a mapping, got {_kind(item)}.")
    where = f"rule {pos}"
    name = item.get("name")
    if name is None:
        name = f"rule{pos}"
    elif not isinstance(name, str) or _RULE_NAME.fullmatch(name) is None:
        raise RuleError(f"{where}: name must be {RULE_NAME_RULE}, got {name!r}.")
    else:
        where = f"rule {pos} ({name})"
    unknown = [k for k in item if k not in RULE_KEYS]
    if unknown:
        raise RuleError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(RULE_KEYS)}).")
    match = _parse_match(where, item.get("match"))
    given = [k for k in TARGETS if k in item]
    if len(given) != 1:
        what = "has none" if not given else f"has {' and '.join(given)}"
        raise RuleError(f"{where}: needs exactly one target of to, round_robin or failover ({what}).")
    target = given[0]
    members = _parse_target(where, target, item[target], neighbours)
    return Rule(name, match, target, members)


def _parse_match(where: str, raw: Any) -> Match:
    if raw is None:
        return Match()
    if not isinstance(raw, dict):
        raise RuleError(f"{where}: match must be a mapping of filters, got {_kind(raw)}.")
    unknown = [k for k in raw if k not in MATCH_KEYS]
    if unknown:
        raise RuleError(f"{where}: unknown key match.{unknown[0]} (known: {', '.join(MATCH_KEYS)}).")
    kw: dict[str, Any] = {}
    for key in ("src", "dst"):
        if key in raw:
            kw[key] = _names(where, key, raw[key], is_node_name, "node", NODE_NAME_RULE)
    for key in ("src_user", "dst_user"):
        if key in raw:
            kw[key] = _names(where, key, raw[key], is_user_name, "user", USER_NAME_RULE)
    if "keyword" in raw:
        keyword = raw["keyword"]
        if not isinstance(keyword, str) or not keyword:
            raise RuleError(f"{where}: match.keyword must be a non-empty string, got {keyword!r}.")
        kw["keyword"] = keyword
    elif "keyword_in" in raw or "keyword_bytes" in raw:
        extra = "keyword_in" if "keyword_in" in raw else "keyword_bytes"
        raise RuleError(f"{where}: match.{extra} needs match.keyword.")
    if "keyword_in" in raw:
        place = raw["keyword_in"]
        if place not in KEYWORD_IN:
            raise RuleError(f"{where}: match.keyword_in must be one of {', '.join(KEYWORD_IN)}, got {place!r}.")
        kw["keyword_in"] = place
    if "keyword_bytes" in raw:
        n = raw["keyword_bytes"]
        if kw.get("keyword_in", "body") != "body":
            raise RuleError(f"{where}: match.keyword_bytes only applies to keyword_in body.")
        if not _is_int(n) or not 1 <= n <= KEYWORD_BYTES_MAX:
            raise RuleError(f"{where}: match.keyword_bytes must be an integer from 1 to {KEYWORD_BYTES_MAX}, "
                            f"got {n!r}.")
        kw["keyword_bytes"] = n
    if "priority" in raw:
        kw["priority"] = _priority(where, raw["priority"])
    return Match(**kw)


def _names(where: str, key: str, raw: Any, valid: Callable[[object], bool], what: str,
           rule: str) -> tuple[str, ...]:
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values:
        shown = "an empty list" if isinstance(values, list) else _kind(raw)
        raise RuleError(f"{where}: match.{key} must be a {what} name or a non-empty list of them, got {shown}.")
    for v in values:
        if not valid(v):
            raise RuleError(f"{where}: match.{key} {v!r} is not a valid {what} name ({rule}).")
    return tuple(values)


def _priority(where: str, raw: Any) -> tuple[int, int]:
    if _is_int(raw):
        lo = hi = raw
    elif isinstance(raw, list) and len(raw) == 2 and all(_is_int(v) for v in raw):
        lo, hi = raw
    else:
        raise RuleError(f"{where}: match.priority must be an integer or a list [lo, hi] of two integers, "
                        f"got {raw!r}.")
    if lo < 0:
        raise RuleError(f"{where}: match.priority must not be negative, got {raw!r}.")
    if lo > hi:
        raise RuleError(f"{where}: match.priority range [{lo}, {hi}] has lo greater than hi.")
    return (lo, hi)


def _parse_target(where: str, target: str, raw: Any,
                  neighbours: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    if target == "to":
        if not isinstance(raw, str):
            raise RuleError(f"{where}: to must be one neighbour name, got {_kind(raw)}.")
        pairs = [(raw, 1)]
    elif target == "failover":
        if not isinstance(raw, list) or not raw:
            shown = "an empty list" if isinstance(raw, list) else _kind(raw)
            raise RuleError(f"{where}: failover must be a non-empty list of neighbours, got {shown}.")
        pairs = [(m, 1) for m in raw]
    else:
        if isinstance(raw, list) and raw:
            pairs = [(m, 1) for m in raw]
        elif isinstance(raw, dict) and raw:
            pairs = list(raw.items())
        else:
            shown = _kind(raw)
            if isinstance(raw, list | dict):
                shown = "an empty " + ("list" if isinstance(raw, list) else "mapping")
            raise RuleError(f"{where}: round_robin must be a non-empty mapping neighbour -> weight or a list "
                            f"of neighbours, got {shown}.")
        for m, w in pairs:
            if not _is_int(w) or w < 1:
                raise RuleError(f"{where}: round_robin weight for {m} must be a positive integer, got {w!r}.")
    seen: set[str] = set()
    for m, _w in pairs:
        if not isinstance(m, str):
            raise RuleError(f"{where}: {target} member {m!r} must be a neighbour name.")
        if m not in neighbours:
            known = ", ".join(sorted(neighbours)) or "none"
            raise RuleError(f"{where}: {target} member {m!r} is not a neighbour (neighbours: {known}).")
        if m in seen:
            raise RuleError(f"{where}: {target} names {m} twice.")
        seen.add(m)
    return tuple(pairs)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _kind(v: Any) -> str:
    return f"{type(v).__name__} {v!r}" if not isinstance(v, dict | list) else type(v).__name__


class _Smooth:
    """Smooth weighted round robin (as in nginx): every pick raises each candidate's current weight by its
    weight and lowers the winner's by the candidates' total, so over a full cycle each member is picked
    exactly in proportion to its weight, spread out rather than in bursts."""

    def __init__(self, weights: Sequence[int]) -> None:
        self.weights = list(weights)
        self.current = [0] * len(weights)

    def pick(self, candidates: Sequence[int]) -> int:
        total = 0
        best = candidates[0]
        for j in candidates:
            self.current[j] += self.weights[j]
            total += self.weights[j]
            if self.current[j] > self.current[best]:
                best = j
        self.current[best] -= total
        return best

    def peek(self, candidates: Sequence[int]) -> int:
        """What `pick` would answer now, changing nothing."""
        return max(candidates, key=lambda j: self.current[j] + self.weights[j])


def reads_body(raw: Any, neighbours: Mapping[str, str]) -> bool:
    """Whether any of these (valid) rules searches a message's body: the engine then recovers the first
    bytes of every stored copy with it."""
    return any(r.match.keyword and r.match.keyword_in == "body" for r in parse_rules(raw, neighbours))


class RuleSet:
    """Rules in order plus the little state they need (round-robin counters, remembered choices).

    Not thread-safe: the node runs one asyncio loop.
    """

    def __init__(self, rules: list[Rule], memory: int = CHOICE_MEMORY) -> None:
        self.rules = list(rules)
        self._rr = [_Smooth([w for _m, w in r.members]) if r.target == "round_robin" else None
                    for r in self.rules]
        # (rule index, msg_id, dst) -> member index: the engine re-asks for every queued copy whenever
        # routes change, and a copy must not bounce between members (nor shift the round-robin shares)
        self._chosen: OrderedDict[tuple[int, str, str], int] = OrderedDict()
        self._memory = memory

    def __len__(self) -> int:
        return len(self.rules)

    def depends_on_sessions(self) -> bool:
        """Whether an answer of `pick` can change when a neighbour becomes usable or unusable: only a
        round-robin or fail-over rule with more than one member looks at `usable`."""
        return any(r.target != "to" and len(r.members) > 1 for r in self.rules)

    def pick(self, copy: Piece, usable: Callable[[str], bool], avoid: Collection[str] = (),
             allowed: Callable[[str], bool] | None = None, commit: bool = True) -> tuple[str, str] | None:
        """(next hop, rule name) of the first rule matching `copy`, or None when no rule matches. `avoid`: round-robin
        members taken out of load balancing (a gateway's deactivation) for new picks; `allowed`: whether this copy
        may go to a member at all (a gateway user's permit/deny): a member it may not use is passed over like an
        unusable one, and only when no member is allowed is the answer one it may not use. `commit` False: the
        answer a pick would give now, for a copy not taken yet (nothing advances, nothing is remembered)."""
        for i, rule in enumerate(self.rules):
            if rule.match.matches(copy):
                return self._member(i, rule, copy, usable, avoid, allowed, commit), rule.name
        return None

    def forget(self, hop: str) -> int:
        """Forget every remembered choice of `hop` (the next re-ask picks those copies' members anew); how many."""
        gone = [k for k, j in self._chosen.items() if self.rules[k[0]].hops[j] == hop]
        for k in gone:
            del self._chosen[k]
        return len(gone)

    def _member(self, i: int, rule: Rule, copy: Piece, usable: Callable[[str], bool],
                avoid: Collection[str] = (), allowed: Callable[[str], bool] | None = None,
                commit: bool = True) -> str:
        hops = rule.hops
        if rule.target == "to":
            return hops[0]          # usable or not: the copy waits for that neighbour
        ok = [j for j, h in enumerate(hops) if allowed is None or allowed(h)]
        if rule.target == "failover":
            return next((hops[j] for j in ok if usable(hops[j])), hops[ok[0] if ok else 0])
        up = [j for j in ok if usable(hops[j])]
        key = (i, copy.msg_id, copy.dst)
        held = self._chosen.get(key)
        # keep the remembered member while it is usable, or while no member is (then it is as good as any)
        if held is not None and (held in up or (not up and (held in ok or not ok))):
            if commit:
                self._chosen.move_to_end(key)
            return hops[held]
        candidates = up or ok or list(range(len(hops)))
        if avoid:       # a deactivated member still takes new copies when it is the only usable one
            candidates = [j for j in candidates if hops[j] not in avoid] or candidates
        smooth = self._rr[i]
        assert smooth is not None
        if not commit:
            return hops[smooth.peek(candidates)]
        j = smooth.pick(candidates)
        self._chosen[key] = j
        self._chosen.move_to_end(key)
        if len(self._chosen) > self._memory:
            self._chosen.popitem(last=False)
        return hops[j]

    def to_plain(self) -> list[dict]:
        """The rules in config form (parse_rules of this gives equal rules)."""
        return [r.to_plain() for r in self.rules]
