"""Topics and topic patterns, in the NATS style.

A topic is tokens separated by '.': `gunduz.perf.cgl1`. A pattern may use two
wildcards, each as a whole token: `*` matches exactly one token
(`gunduz.*.cgl1`), `>` matches one or more tokens and must be the last one
(`gunduz.>`). A topic never contains a wildcard. Tokens are letters, digits
and `_ - : + @`; at most 255 characters in all.
"""
from __future__ import annotations

import re

TOPIC_MAX = 255
CONTROL = "_"           # the first character of a subsystem's control topics (`_pools.hb.<name>` and the like)
_TOKEN = re.compile(r"[A-Za-z0-9_:+@-]+")


def topic_problem(topic: object) -> str | None:
    """Why `topic` is not a valid topic to publish on, or None."""
    if not isinstance(topic, str) or not topic:
        return "a topic is needed"
    if len(topic) > TOPIC_MAX:
        return f"topic is over {TOPIC_MAX} characters"
    for tok in topic.split("."):
        if not _TOKEN.fullmatch(tok):
            if tok in ("*", ">"):
                return f"topic {topic!r} has a wildcard ({tok}); wildcards are for subscriptions"
            return f"topic {topic!r} has an empty or invalid token {tok!r}"
    return None


def is_control(topic: str) -> bool:
    """Whether `topic` is a subsystem's control topic (node-to-node traffic, not a user's publication)."""
    return topic.startswith(CONTROL)


def pattern_problem(pattern: object) -> str | None:
    """Why `pattern` is not a valid subscription pattern, or None."""
    if not isinstance(pattern, str) or not pattern:
        return "a pattern is needed"
    if len(pattern) > TOPIC_MAX:
        return f"pattern is over {TOPIC_MAX} characters"
    toks = pattern.split(".")
    for i, tok in enumerate(toks):
        if tok == ">" and i != len(toks) - 1:
            return f"pattern {pattern!r}: '>' must be the last token"
        if tok not in ("*", ">") and not _TOKEN.fullmatch(tok):
            return f"pattern {pattern!r} has an empty or invalid token {tok!r}"
    return None


def matches(pattern: str, topic: str) -> bool:
    """True when `topic` (valid) matches `pattern` (valid)."""
    pt = pattern.split(".")
    tt = topic.split(".")
    for i, p in enumerate(pt):
        if p == ">":
            return len(tt) > i
        if i >= len(tt) or (p != "*" and p != tt[i]):
            return False
    return len(pt) == len(tt)
