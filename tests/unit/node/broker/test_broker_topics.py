"""Topic patterns in the NATS style: '*' one token, '>' the rest (at least one token)."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from node.broker.topics import matches, pattern_problem, topic_problem


@pytest.mark.parametrize("pattern,topic,want", [
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.b", "a.b.c", False),
    ("a.*.c", "a.x.c", True),
    ("a.*.c", "a.x.y.c", False),
    ("a.*", "a", False),
    ("a.>", "a.b", True),
    ("a.>", "a.b.c.d", True),
    ("a.>", "a", False),
    (">", "a", True),
    ("*.b.>", "x.b.y", True),
    ("*.b.>", "x.c.y", False),
    ("*", "a.b", False),
])
def test_matching(pattern: str, topic: str, want: bool) -> None:
    assert pattern_problem(pattern) is None and topic_problem(topic) is None
    assert matches(pattern, topic) is want


@pytest.mark.parametrize("topic", ["", "a..b", ".a", "a.", "a.*", "a.>", "a b", "a\n", "x" * 256, 7])
def test_bad_topics_are_refused_with_a_reason(topic) -> None:
    assert topic_problem(topic)


@pytest.mark.parametrize("pattern", ["", "a.>.b", "a..b", "a.b*", "a. b", "a.>\n"])
def test_bad_patterns_are_refused_with_a_reason(pattern) -> None:
    assert pattern_problem(pattern)


TOKENS = st.sampled_from(["a", "b", "c"])


@given(st.lists(TOKENS, min_size=1, max_size=5), st.lists(st.sampled_from(["a", "b", "*", ">"]), min_size=1, max_size=5))
def test_matching_agrees_with_a_regular_expression(topic_toks, pattern_toks) -> None:
    import re
    topic = ".".join(topic_toks)
    pattern = ".".join(pattern_toks)
    if pattern_problem(pattern):
        return
    rx = r"\.".join("[^.]+" if t == "*" else ".+" if t == ">" else re.escape(t) for t in pattern_toks)
    assert matches(pattern, topic) == bool(re.fullmatch(rx, topic))
