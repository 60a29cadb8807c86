"""Control-plane publications: valid bodies parse, anything else is one BadMessage, and the guard refuses
stale assignments."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from node.pools.fence import Acked, Drained, Fence, FenceDone
from node.pools.messages import (Assignment, AssignmentGuard, BadMessage, ConsumerBeat, EventKey, InstanceBeat,
                                 parse_acked, parse_assignment, parse_done, parse_drained, parse_event_key,
                                 parse_fence, parse_heartbeat)

VALID = {
    parse_assignment: ({"term": 2, "version": 7, "connections": {"A": "PR1", "B": "X2"}, "fences": {"A": 41}},
                       Assignment(2, 7, {"A": "PR1", "B": "X2"}, {"A": 41})),
    parse_heartbeat: ({"role": "consumer", "name": "PS1", "node": "n1", "types": ["cell"], "load": {"A": 2.5}},
                      ConsumerBeat("PS1", "n1", ("cell",), "active", {"A": 2.5})),
    parse_fence: ({"consumer": "PS1", "app": "A", "seq": 3, "old": None, "new": "PR1", "version": 4, "term": 1},
                  Fence("PS1", "A", 3, None, "PR1", 4, 1)),
    parse_acked: ({"consumer": "PS1", "app": "A", "seq": 3, "instance": "PR1", "version": 4, "term": 1},
                  Acked("PS1", "A", 3, "PR1", 4, 1)),
    parse_drained: ({"app": "A", "instance": "PR1"}, Drained("A", "PR1")),
    parse_done: ({"consumer": "PS1", "app": "A", "seq": 3, "instance": "PR2", "version": 4, "term": 1},
                 FenceDone("PS1", "A", 3, "PR2", 4, 1)),
}
PARSERS = [*VALID, parse_event_key]


@pytest.mark.parametrize("parser", list(VALID), ids=lambda p: p.__name__)
def test_valid_bodies_parse(parser) -> None:
    body, want = VALID[parser]
    assert parser(json.dumps(body).encode()) == want == parser(json.dumps(body))


def test_instance_heartbeat_and_event_key() -> None:
    body = {"role": "instance", "name": "PR1", "app": "A", "node": "n3", "state": "leaving", "backlog": 12}
    assert parse_heartbeat(json.dumps(body)) == InstanceBeat("PR1", "A", "n3", "leaving", 12)
    key = parse_event_key("n1-ab:c:17:4")
    assert key == EventKey("n1-ab:c", 17, 4) and str(key) == "n1-ab:c:17:4"


BAD_BODIES = [
    (parse_assignment, b"\xff\xfe", "not UTF-8"),
    (parse_assignment, b"[" * 100_000, "over"),
    (parse_assignment, "[" * 50_000, "not valid JSON"),              # nesting deeper than the decoder goes
    (parse_assignment, '{"term": NaN, "version": 1, "connections": {}}', "not valid JSON"),
    (parse_assignment, '{"term": ' + "9" * 5000 + ', "version": 1, "connections": {}}', "not valid JSON"),
    (parse_assignment, "[]", "JSON object"),
    (parse_assignment, '{"term": true, "version": 1, "connections": {}}', "term"),
    (parse_assignment, '{"term": 1, "version": -1, "connections": {}}', "version"),
    (parse_assignment, '{"term": 1, "version": 1, "connections": {"A": "a.b"}}', "instance name"),
    (parse_assignment, '{"term": 1, "version": 1, "connections": {}, "extra": 1}', "unknown field"),
    (parse_assignment, '{"term": 1, "connections": {}}', "version is missing"),
    (parse_heartbeat, '{"role": "boss"}', "role"),
    (parse_heartbeat, '{"role": "consumer", "name": "c", "node": "n1", "types": ["t"], "load": {"A": -1}}', "load"),
    (parse_heartbeat, '{"role": "consumer", "name": "c", "node": "n1", "types": ["t"], "load": {"A": 1e999}}', "load"),
    (parse_heartbeat, '{"role": "consumer", "name": "c", "node": "n1", "types": ["t"], "load": {"A": 1'
     + "0" * 400 + '}}', "load"),
    (parse_heartbeat, '{"role": "instance", "name": "i", "app": "A", "node": "n1", "state": "gone"}', "state"),
    (parse_heartbeat, '{"role": "instance", "name": "i", "app": "A", "node": "n1", "state": "leaving"}', "backlog"),
    (parse_fence, '{"consumer": "c", "app": "A", "seq": 1, "old": "i", "new": "i", "version": 1, "term": 1}', "same"),
    (parse_event_key, "abc:1", "<event id>"),
    (parse_event_key, "abc:0:1", "seq"),
    (parse_event_key, "abc:1:-1", "version"),
    (parse_event_key, "a b:1:1", "event id"),
    (parse_event_key, "abc: 1:1", "seq"),
    (parse_event_key, 7, "text"),
]


@pytest.mark.parametrize("parser,body,reason", BAD_BODIES)
def test_bad_bodies_get_one_reason(parser, body, reason: str) -> None:
    with pytest.raises(BadMessage, match=reason) as err:
        parser(body)
    assert "\n" not in str(err.value)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


def parses_or_refuses(parser, body) -> None:
    try:
        parser(body)
    except BadMessage as err:
        assert str(err) and "\n" not in str(err)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from(PARSERS), st.one_of(st.binary(max_size=64), st.text(max_size=64)))
def test_garbage_never_raises_anything_else(parser, body) -> None:
    parses_or_refuses(parser, body)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from(list(VALID)), st.data())
def test_valid_shapes_with_any_field_values_never_raise_anything_else(parser, data) -> None:
    body = dict(VALID[parser][0])
    for key in data.draw(st.lists(st.sampled_from([*body, "role", "x"]), min_size=1, max_size=3)):
        body[key] = data.draw(JSON)
    parses_or_refuses(parser, json.dumps(body))


def test_guard_refuses_older_terms_and_non_increasing_versions() -> None:
    guard = AssignmentGuard()
    a = lambda term, version: Assignment(term, version, {}, {})     # noqa: E731
    assert guard.accept(a(1, 5)) is None
    assert guard.accept(a(1, 5)) == "version 5 is not above 5 in term 1"
    assert guard.accept(a(1, 4)) == "version 4 is not above 5 in term 1"
    assert guard.accept(a(2, 3)) is None                # a new leader's term wins even with a lower version
    assert guard.accept(a(1, 9)) == "stale term 1 < 2"
    assert (guard.term, guard.version) == (2, 3)
    assert guard.accept(a(2, 4)) is None
