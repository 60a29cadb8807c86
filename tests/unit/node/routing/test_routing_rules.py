"""Rule routing: filters, first match, the three targets and one clear error per config mistake."""
from __future__ import annotations

import json
from typing import Any

import pytest

from node import registry
from node.config import ConfigError
from node.errors import UserError
from node.routing.rules import Match, Rule, RuleError, RuleSet, parse_rules, reads_body
from node.piece import Piece

NEIGHBOURS = {"n2": "10.0.0.2:7000", "n3": "10.0.0.3:7000", "n4": "10.0.0.4:7000"}


def piece(msg_id: str = "n1-1", dst: str = "n5", *, off: int = 0, src: str = "n1", originator: str = "alice",
          users: list[str] | None = None, prio: int = 1, kind: str = "", data: bytes = b"hello") -> Piece:
    return Piece(msg_id, dst, off, 1000, 0, src, originator, users if users is not None else ["bob"], prio,
                 1.0, 99.0, kind, 1, data)


def ruleset(raw: list[dict]) -> RuleSet:
    return RuleSet(parse_rules(raw, NEIGHBOURS))


def everyone(_hop: str) -> bool:
    return True


def only(*hops: str):
    return lambda h: h in hops


def matches(match: dict, p: Piece) -> bool:
    return ruleset([{"match": match, "to": "n2"}]).pick(p, everyone) is not None


@pytest.mark.parametrize("match, hit, miss", [
    ({"src": "n1"}, piece(src="n1"), piece(src="n9")),
    ({"src": ["n7", "n1"]}, piece(src="n1"), piece(src="n9")),
    ({"src_user": "alice"}, piece(originator="alice"), piece(originator="mallory")),
    ({"dst": ["n5", "n6"]}, piece(dst="n6"), piece(dst="n7")),
    ({"dst_user": "carol"}, piece(users=["bob", "carol"]), piece(users=["bob"])),
    ({"priority": 8}, piece(prio=8), piece(prio=7)),
    ({"priority": [3, 5]}, piece(prio=5), piece(prio=6)),
    ({"priority": [3, 5]}, piece(prio=3), piece(prio=2)),
    ({"keyword": "URGENT"}, piece(data=b"hi URGENT"), piece(data=b"hi urgent")),
    ({"keyword": "caf\u00e9"}, piece(data="un caf\u00e9".encode()), piece(data=b"un cafe")),
    ({"keyword": "URGENT"}, piece(data=b"URGENT!"), piece(off=1000, data=b"URGENT!")),
    ({"keyword": "URG", "keyword_bytes": 4}, piece(data=b"xURGy"), piece(data=b"xxURG")),
    ({"keyword": "fax", "keyword_in": "kind"}, piece(kind="telefax"), piece(kind="mail")),
    ({"keyword": "ali", "keyword_in": "originator"}, piece(originator="alice"), piece(originator="bob")),
    ({"keyword": "aro", "keyword_in": "users"}, piece(users=["bob", "carol"]), piece(users=["bob", "dave"])),
    ({"keyword": "-7", "keyword_in": "msg_id"}, piece(msg_id="n1-77"), piece(msg_id="n1-66")),
    ({"keyword": "hello", "keyword_in": "kind"}, piece(kind="hello"), piece(kind="", data=b"hello")),
])
def test_each_filter_alone(match: dict, hit: Piece, miss: Piece) -> None:
    assert matches(match, hit)
    assert not matches(match, miss)


def test_filters_are_anded_and_empty_match_takes_all() -> None:
    match = {"src": "n1", "dst_user": "bob", "priority": [5, 9], "keyword": "URGENT"}
    assert matches(match, piece(prio=6, data=b"URGENT"))
    assert not matches(match, piece(prio=4, data=b"URGENT"))
    assert not matches(match, piece(prio=6, data=b"later"))
    assert not matches(match, piece(prio=6, data=b"URGENT", users=["eve"]))
    assert not matches(match, piece(prio=6, data=b"URGENT", src="n4"))
    for empty in ({}, None):
        assert matches(empty, piece(src="n9", dst="n8", prio=0))
    assert ruleset([{"to": "n3"}]).pick(piece(), everyone) == ("n3", "rule1")


def test_first_match_wins_and_no_match_is_none() -> None:
    rs = ruleset([{"name": "urgent", "match": {"keyword": "URGENT"}, "to": "n3"},
                  {"match": {"dst": "n5"}, "to": "n2"},
                  {"match": {"src_user": "carol"}, "failover": ["n4"]}])
    assert len(rs) == 3
    assert rs.pick(piece(data=b"URGENT"), everyone) == ("n3", "urgent")
    assert rs.pick(piece(data=b"calm"), everyone) == ("n2", "rule2")
    assert rs.pick(piece(dst="n6", originator="carol"), everyone) == ("n4", "rule3")
    assert rs.pick(piece(dst="n6"), everyone) is None
    assert RuleSet([]).pick(piece(), everyone) is None


def test_to_is_taken_even_when_unusable() -> None:
    assert ruleset([{"to": "n2"}]).pick(piece(), only()) == ("n2", "rule1")


def test_depends_on_sessions_only_with_a_choice() -> None:
    assert not RuleSet([]).depends_on_sessions()
    assert not ruleset([{"to": "n2"}, {"failover": ["n3"]}, {"round_robin": {"n4": 5}}]).depends_on_sessions()
    assert ruleset([{"to": "n2"}, {"failover": ["n3", "n2"]}]).depends_on_sessions()
    assert ruleset([{"round_robin": ["n3", "n2"]}]).depends_on_sessions()


def rr_picks(rs: RuleSet, n: int, usable=everyone, start: int = 0) -> list[str]:
    return [rs.pick(piece(f"n1-{i}"), usable)[0] for i in range(start, start + n)]


def test_round_robin_weights_are_exact_and_smooth() -> None:
    rs = ruleset([{"round_robin": {"n2": 2, "n3": 1}}])
    hops = rr_picks(rs, 300)
    assert hops.count("n2") == 200 and hops.count("n3") == 100
    run = longest = 0
    for h in hops:
        run = run + 1 if h == "n2" else 0
        longest = max(longest, run)
    assert longest == 2
    assert all(hops[i:i + 3].count("n3") == 1 for i in range(0, 300, 3))   # every cycle of 3 has one n3


def test_round_robin_list_means_equal_weights() -> None:
    hops = rr_picks(ruleset([{"round_robin": ["n2", "n3", "n4"]}]), 9)
    assert hops == ["n2", "n3", "n4"] * 3


def test_round_robin_reask_returns_same_member() -> None:
    rs = ruleset([{"round_robin": {"n2": 1, "n3": 1}}])
    first = rr_picks(rs, 10)
    # the engine re-asks every queued copy on a route change: no copy moves, and the counters do not move
    assert rr_picks(rs, 10) == first
    assert rr_picks(rs, 2, start=10) == ["n2", "n3"]
    # a copy is the pair (msg_id, dst): the same message to another destination is a new choice
    assert rs.pick(piece("n1-0", dst="n6"), everyone)[0] == "n2"


def test_a_preview_is_the_next_pick_and_takes_no_turn() -> None:
    rs = ruleset([{"round_robin": {"n2": 2, "n3": 1}}])
    peeks = [rs.pick(piece(f"n1-{i}"), everyone, commit=False)[0] for i in range(5)]
    assert peeks == ["n2"] * 5                                   # nothing advanced, nothing remembered
    assert rr_picks(rs, 3) == ["n2", "n3", "n2"]                 # the picks as if no preview had been asked
    assert rs.pick(piece("n1-1"), everyone, commit=False)[0] == "n3"     # a kept choice previews as itself
    assert rr_picks(rs, 3, start=3) == ["n2", "n3", "n2"] and rs.pick(piece("n1-9"), everyone, commit=False)[0] == "n2"


def test_round_robin_moves_a_copy_only_off_an_unusable_member() -> None:
    rs = ruleset([{"round_robin": {"n2": 1, "n3": 1}}])
    assert rr_picks(rs, 2) == ["n2", "n3"]
    assert rr_picks(rs, 2, usable=only("n3")) == ["n3", "n3"]      # n1-0 leaves n2, n1-1 stays
    assert rr_picks(rs, 2) == ["n3", "n3"]                         # and stays on n3 once n2 is back
    assert rr_picks(rs, 2, usable=only()) == ["n3", "n3"]          # nothing usable: no bouncing either


def test_round_robin_skips_unusable_and_shares_among_the_rest() -> None:
    rs = ruleset([{"round_robin": {"n2": 2, "n3": 1, "n4": 3}}])
    hops = rr_picks(rs, 300, usable=only("n2", "n3"))
    assert hops.count("n4") == 0 and hops.count("n2") == 200 and hops.count("n3") == 100


def test_round_robin_with_none_usable_goes_over_all() -> None:
    rs = ruleset([{"round_robin": {"n2": 1, "n3": 2}}])
    hops = rr_picks(rs, 30, usable=only())
    assert hops.count("n2") == 10 and hops.count("n3") == 20


def test_round_robin_memory_is_bounded() -> None:
    rs = RuleSet(parse_rules([{"round_robin": ["n2", "n3"]}], NEIGHBOURS), memory=4)
    rr_picks(rs, 100)
    assert len(rs._chosen) == 4
    assert rr_picks(rs, 4, start=96) == ["n2", "n3"] * 2                  # the newest are still remembered


def test_failover_order_and_fallback() -> None:
    rs = ruleset([{"failover": ["n3", "n2", "n4"]}])
    assert rs.pick(piece(), everyone) == ("n3", "rule1")
    assert rs.pick(piece(), only("n2", "n4")) == ("n2", "rule1")
    assert rs.pick(piece(), only("n4")) == ("n4", "rule1")
    assert rs.pick(piece(), only()) == ("n3", "rule1")


def test_parsed_rule_shape() -> None:
    [rule] = parse_rules([{"name": "web", "match": {"dst": "n5", "priority": [1, 2]},
                           "round_robin": {"n2": 2, "n3": 1}}], NEIGHBOURS)
    assert rule == Rule("web", Match(dst=("n5",), priority=(1, 2)), "round_robin", (("n2", 2), ("n3", 1)))
    assert rule.hops == ("n2", "n3")


def test_to_plain_round_trips() -> None:
    raw: list[dict[str, Any]] = [
        {"name": "urgent", "match": {"src": "n1", "src_user": ["alice", "bob"], "dst": ["n5", "n6"],
                                     "dst_user": "carol", "keyword": "URGENT", "keyword_bytes": 64,
                                     "priority": [2, 9]}, "to": "n3"},
        {"match": {"keyword": "fax", "keyword_in": "kind", "priority": 4}, "round_robin": {"n2": 2, "n3": 1}},
        {"round_robin": ["n2", "n4"]},
        {"match": {}, "failover": ["n4", "n2"]},
    ]
    rules = parse_rules(raw, NEIGHBOURS)
    plain = RuleSet(rules).to_plain()
    assert parse_rules(plain, NEIGHBOURS) == rules
    assert plain[0]["name"] == "urgent" and plain[1]["name"] == "rule2"
    assert plain[0]["match"]["keyword_bytes"] == 64 and plain[1]["match"]["priority"] == 4
    assert plain[2]["round_robin"] == {"n2": 1, "n4": 1} and plain[3] == {"name": "rule4", "failover": ["n4", "n2"]}
    assert parse_rules(json.loads(json.dumps(plain)), NEIGHBOURS) == rules    # the SetRules form


@pytest.mark.parametrize("raw, words", [
    ({"to": "n2"}, "rules must be a list"),
    ([{"to": "n2"}] * 1001, "at most 1000 rules"),
    (["n2"], "rule 1 must be a mapping"),
    ([{"to": "n2"}, {"name": "x", "colour": 1, "to": "n2"}], "rule 2 (x): unknown key 'colour'"),
    ([{"name": "bad name", "to": "n2"}], "rule 1: name must be"),
    ([{"name": 7, "to": "n2"}], "rule 1: name must be"),
    ([{"name": "a", "to": "n2"}, {"name": "a", "to": "n3"}], "rule 2 (a): name 'a' is already used by rule 1"),
    ([{"name": "rule2", "to": "n2"}, {"to": "n3"}], "name 'rule2' is already used by rule 1"),
    ([{"match": {}}], "rule 1: needs exactly one target of to, round_robin or failover (has none)"),
    ([{"to": "n2", "failover": ["n3"]}], "(has to and failover)"),
    ([{"to": "n9"}], "rule 1: to member 'n9' is not a neighbour (neighbours: n2, n3, n4)"),
    ([{"to": ["n2"]}], "rule 1: to must be one neighbour name, got list"),
    ([{"failover": []}], "failover must be a non-empty list of neighbours, got an empty list"),
    ([{"failover": "n2"}], "failover must be a non-empty list"),
    ([{"failover": ["n2", "n2"]}], "failover names n2 twice"),
    ([{"failover": ["n2", 3]}], "failover member 3 must be a neighbour name"),
    ([{"round_robin": {}}], "round_robin must be a non-empty mapping"),
    ([{"round_robin": []}], "got an empty list"),
    ([{"round_robin": "n2"}], "round_robin must be a non-empty mapping"),
    ([{"to": "n2"}, {"name": "urgent", "round_robin": {"n2": 1, "n3": 0}}],
     "rule 2 (urgent): round_robin weight for n3 must be a positive integer, got 0"),
    ([{"round_robin": {"n2": -1}}], "round_robin weight for n2 must be a positive integer, got -1"),
    ([{"round_robin": {"n2": 1.5}}], "must be a positive integer, got 1.5"),
    ([{"round_robin": {"n2": True}}], "must be a positive integer, got True"),
    ([{"round_robin": {"n2": 1, "n8": 1}}], "round_robin member 'n8' is not a neighbour"),
    ([{"round_robin": ["n3", "n3"]}], "round_robin names n3 twice"),
    ([{"match": ["src"], "to": "n2"}], "rule 1: match must be a mapping"),
    ([{"match": {"source": "n1"}, "to": "n2"}], "rule 1: unknown key match.source"),
    ([{"match": {"src": []}, "to": "n2"}], "match.src must be a node name or a non-empty list of them, got an empty"),
    ([{"match": {"src": 5}, "to": "n2"}], "match.src must be a node name"),
    ([{"match": {"dst": ["n5", "bad name!"]}, "to": "n2"}], "match.dst 'bad name!' is not a valid node name"),
    ([{"match": {"src": "averyverylongname"}, "to": "n2"}], "is not a valid node name"),
    ([{"match": {"src_user": "-x"}, "to": "n2"}], "match.src_user '-x' is not a valid user name"),
    ([{"match": {"dst_user": [None]}, "to": "n2"}], "match.dst_user None is not a valid user name"),
    ([{"match": {"keyword": ""}, "to": "n2"}], "match.keyword must be a non-empty string"),
    ([{"match": {"keyword": 5}, "to": "n2"}], "match.keyword must be a non-empty string, got 5"),
    ([{"match": {"keyword_in": "kind"}, "to": "n2"}], "match.keyword_in needs match.keyword"),
    ([{"match": {"keyword": "x", "keyword_in": "subject"}, "to": "n2"}],
     "match.keyword_in must be one of body, kind, originator, users, msg_id, got 'subject'"),
    ([{"match": {"keyword": "x", "keyword_bytes": 0}, "to": "n2"}], "keyword_bytes must be an integer from 1 to 65536"),
    ([{"match": {"keyword": "x", "keyword_bytes": 65537}, "to": "n2"}], "got 65537"),
    ([{"match": {"keyword": "x", "keyword_bytes": "9"}, "to": "n2"}], "keyword_bytes must be an integer"),
    ([{"match": {"keyword": "x", "keyword_in": "kind", "keyword_bytes": 9}, "to": "n2"}],
     "keyword_bytes only applies to keyword_in body"),
    ([{"match": {"priority": "high"}, "to": "n2"}], "match.priority must be an integer or a list [lo, hi]"),
    ([{"match": {"priority": [1, 2, 3]}, "to": "n2"}], "match.priority must be an integer or a list"),
    ([{"match": {"priority": [1.0, 2]}, "to": "n2"}], "match.priority must be an integer or a list"),
    ([{"match": {"priority": -1}, "to": "n2"}], "match.priority must not be negative"),
    ([{"match": {"priority": [5, 2]}, "to": "n2"}], "match.priority range [5, 2] has lo greater than hi"),
])
def test_every_mistake_is_one_clear_rule_error(raw: Any, words: str) -> None:
    with pytest.raises(RuleError) as exc:
        parse_rules(raw, NEIGHBOURS)
    assert isinstance(exc.value, UserError)
    assert words in str(exc.value)
    assert "\n" not in str(exc.value)


GOOD = {"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001",
        "neighbours": {"n2": "127.0.0.1:7100", "n3": "127.0.0.1:7200"}}


def test_node_config_takes_rules_and_names_the_section_on_error() -> None:
    cfg = registry.config_from_dict({**GOOD, "routing": {"rules": [{"match": {"dst": "n5"}, "failover": ["n3", "n2"]}]}})
    assert parse_rules(cfg.routing.rules, cfg.neighbours)[0].hops == ("n3", "n2")
    with pytest.raises(ConfigError) as exc:
        registry.config_from_dict({**GOOD, "routing": {"rules": [{"to": "n2"}, {"round_robin": {"n3": 0}}]}})
    assert str(exc.value).startswith("routing.rules: rule 2: round_robin weight for n3")
    with pytest.raises(ConfigError, match="routing.rules: rule 1: to member 'n4' is not a neighbour"):
        registry.config_from_dict({**GOOD, "routing": {"rules": [{"to": "n4"}]}})


def test_a_copy_recovered_without_its_bytes_matches_no_body_keyword() -> None:
    """A piece queued after a restart may have no bytes in memory (data None): it is not searched, nor a crash;
    recovery keeps the first bytes when a body rule is configured (reads_body)."""
    lazy = Piece("n1-1", "n5", 0, 1000, 0, "n1", "alice", ["bob"], 1, 1.0, 99.0, "", 1, None, size=1000)
    assert not matches({"keyword": "hello"}, lazy) and matches({"dst": "n5"}, lazy)
    assert reads_body([{"match": {"keyword": "x"}, "to": "n2"}], NEIGHBOURS)
    assert not reads_body([{"match": {"keyword": "x", "keyword_in": "kind"}, "to": "n2"}], NEIGHBOURS)
    assert not reads_body([], NEIGHBOURS)
