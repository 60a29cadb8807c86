"""The pool state's commands: both allocation algorithms, joins and leaves, refusals and the invariants."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings, strategies as st

from node.pools.assign import (BadCommand, Move, apply, balance, check_invariants, empty_state, instance_loads,
                               interested)

FIG7 = {"PR1": ["PS1", "PS4"], "PR2": ["PS2", "PS5"], "PR3": ["PS3", "PS6"]}


def run(state: dict, *commands: dict) -> tuple[dict, list[Move]]:
    moves: list[Move] = []
    for cmd in commands:
        state, made = apply(state, cmd)
        assert check_invariants(state) == [], cmd
        moves = made
    return state, moves


def app(algorithm: str, share: float = 0.5, name: str = "A", types: tuple = ("cell",)) -> dict:
    return {"op": "define_app", "app": name, "algorithm": algorithm, "move_share": share, "types": list(types)}


def inst(name: str, app_: str = "A") -> dict:
    return {"op": "instance_join", "app": app_, "instance": name, "node": "n1"}


def cons(name: str, types: tuple = ("cell",)) -> dict:
    return {"op": "consumer_join", "consumer": name, "node": "n2", "types": list(types)}


def by_instance(state: dict, app_: str = "A") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for consumer, conns in sorted(state["connections"].items()):
        if app_ in conns:
            out.setdefault(conns[app_], []).append(consumer)
    return out


def pool(algorithm: str, instances: int, consumers: int, share: float = 0.5) -> dict:
    state, _ = run(empty_state(), app(algorithm, share), *[inst(f"PR{i}") for i in range(1, instances + 1)],
                   *[cons(f"PS{i}") for i in range(1, consumers + 1)])
    return state


@pytest.mark.parametrize("algorithm", ["round_robin", "load_aware"])
def test_fig7_six_consumers_on_three_instances(algorithm: str) -> None:
    assert by_instance(pool(algorithm, 3, 6)) == FIG7


def test_round_robin_is_a_full_reallocation_whatever_the_order_of_joins() -> None:
    state, _ = run(empty_state(), app("round_robin"), *[cons(f"PS{i}") for i in (6, 2, 4, 1, 5, 3)],
                   *[inst(f"PR{i}") for i in (3, 1, 2)])
    assert by_instance(state) == FIG7
    state, moves = run(state, inst("PR4"))
    assert by_instance(state) == {"PR1": ["PS1", "PS5"], "PR2": ["PS2", "PS6"], "PR3": ["PS3"], "PR4": ["PS4"]}
    assert [m for m in moves if m.moved] == moves and len(moves) == 3      # PS4, PS5, PS6 each move


def with_loads(state: dict, loads: dict[str, float]) -> dict:
    state, _ = run(state, *[{"op": "load", "consumer": c, "app": "A", "rate": r} for c, r in loads.items()])
    return state


LOADS = {"PS1": 5, "PS2": 1, "PS3": 2, "PS4": 4, "PS5": 1, "PS6": 3}       # PR1 9, PR2 2, PR3 5


@pytest.mark.parametrize("share,want", [
    # k = move_share * (6 connections / 4 instances - 0 held), rounded half up
    (1.0, [("PS1", "PR1"), ("PS6", "PR3")]),        # 1.5 -> 2: PR1's heaviest, then PR3 (now the most loaded)'s
    (0.5, [("PS1", "PR1")]),                        # 0.75 -> 1
    (0.3, []),                                      # 0.45 -> 0
])
def test_load_aware_join_pulls_the_heaviest_connections_of_the_most_loaded(share: float, want: list) -> None:
    state = with_loads(pool("load_aware", 3, 6, share), LOADS)
    version = state["version"]
    state, moves = run(state, inst("PR4"))
    assert [(m.consumer, m.old) for m in moves] == want and all(m.new == "PR4" for m in moves)
    assert state["version"] == version + 1


def test_load_aware_rounds_half_up() -> None:
    # 10 consumers on one instance; the second pulls 0.5 * (10/2 - 0) = 2.5 -> 3 (half-to-even would give 2)
    state = pool("load_aware", 1, 10)
    state, moves = run(state, inst("PR2"))
    assert len(moves) == 3 and {m.consumer for m in moves} == {"PS1", "PS2", "PS3"}


def test_load_aware_consumer_leave_refills_the_instance_that_lost_load() -> None:
    state = pool("load_aware", 3, 9)
    assert by_instance(state)["PR1"] == ["PS1", "PS4", "PS7"]
    state, moves = run(state, {"op": "consumer_leave", "consumer": "PS1"})
    assert moves == [Move("PS1", "A", "PR1", None)]         # 0.5 * (8/3 - 2) = 0.33 -> nothing moves
    state, moves = run(state, {"op": "consumer_leave", "consumer": "PS4"})
    # 0.5 * (7/3 - 1) = 0.67 -> 1: PR2 and PR3 tie on load, PR2 first by name, its first connection by name
    assert moves == [Move("PS2", "A", "PR2", "PR1"), Move("PS4", "A", "PR1", None)]
    assert by_instance(state) == {"PR1": ["PS2", "PS7"], "PR2": ["PS5", "PS8"], "PR3": ["PS3", "PS6", "PS9"]}
    assert "PS4" not in state["consumers"] and "PS4" not in state["load"]


def test_load_aware_leave_moves_to_the_least_loaded_then_gone_removes() -> None:
    state = with_loads(pool("load_aware", 3, 6), LOADS)
    state, moves = run(state, {"op": "instance_leave", "app": "A", "instance": "PR1"})
    # PR1's PS1 (5) then PS4 (4), heaviest first, each to the least loaded of PR2 (2) and PR3 (5)
    assert moves == [Move("PS1", "A", "PR1", "PR2"), Move("PS4", "A", "PR1", "PR3")]
    assert state["apps"]["A"]["instances"]["PR1"]["state"] == "leaving"
    again, moves = apply(state, {"op": "instance_leave", "app": "A", "instance": "PR1"})
    assert moves == [] and again["version"] == state["version"]
    state, moves = run(state, {"op": "instance_gone", "app": "A", "instance": "PR1"})
    assert moves == [] and "PR1" not in state["apps"]["A"]["instances"]
    assert instance_loads(state, "A") == {"PR2": 7.0, "PR3": 9.0}


def test_crash_reassigns_at_once() -> None:
    state, moves = run(pool("load_aware", 3, 6), {"op": "instance_crash", "app": "A", "instance": "PR2"})
    assert moves == [Move("PS2", "A", "PR2", "PR1"), Move("PS5", "A", "PR2", "PR3")]
    state, moves = run(pool("round_robin", 3, 6), {"op": "instance_crash", "app": "A", "instance": "PR2"})
    assert by_instance(state) == {"PR1": ["PS1", "PS3", "PS5"], "PR3": ["PS2", "PS4", "PS6"]}


def test_last_instance_leaving_keeps_its_connections_until_another_joins() -> None:
    state, _ = run(pool("load_aware", 1, 2), {"op": "instance_leave", "app": "A", "instance": "PR1"})
    assert by_instance(state) == {"PR1": ["PS1", "PS2"]}
    state, _ = run(state, inst("PR2"))
    assert by_instance(state) == {"PR2": ["PS1", "PS2"]}


def test_interest_balance_load_and_term() -> None:
    state = pool("load_aware", 2, 2)
    state, _ = run(state, app("round_robin", name="B", types=("ims",)), inst("X1", "B"), cons("PS9", ("ims", "cell")))
    assert interested(state, "PS9") == ["A", "B"] and interested(state, "PS1") == ["A"]
    assert state["connections"]["PS9"] == {"A": "PR1", "B": "X1"}
    version = state["version"]
    state, moves = apply(state, {"op": "load", "consumer": "PS1", "app": "A", "rate": 7.0, "term": 3})
    assert moves == [] and state["version"] == version and state["term"] == 3
    assert balance(state, "A") == pytest.approx(8.0 / 4.5)     # PR1: PS1 7 + PS9 1 (no report), PR2: PS2 1
    again, moves = apply(state, cons("PS1"))                     # registering again with the same record
    assert moves == [] and again == state
    state, moves = run(state, cons("PS1", ("ims",)))             # new types: new interest, the old load goes
    assert moves == [Move("PS1", "A", "PR1", None), Move("PS1", "B", None, "X1")]
    assert "PS1" not in state["load"] and state["version"] == version + 1


BAD = [
    ({"op": "dance"}, "unknown op"),
    ({"op": "instance_join", "app": "Z", "instance": "I", "node": "n1"}, "unknown app"),
    ({"op": "instance_join", "app": "A", "instance": "PR1", "node": "n1"}, "exists already"),
    ({"op": "instance_join", "app": "A", "instance": "PR9", "node": "bad node"}, "node"),
    ({"op": "instance_leave", "app": "A", "instance": "PR9"}, "unknown instance"),
    ({"op": "instance_gone", "app": "A", "instance": "PR1"}, "announced first"),
    ({"op": "consumer_leave", "consumer": "PS9"}, "unknown consumer"),
    ({"op": "consumer_join", "consumer": "PS9", "node": "n1", "types": []}, "types"),
    ({"op": "consumer_join", "consumer": "a.b", "node": "n1", "types": ["cell"]}, "consumer"),
    ({"op": "load", "consumer": "PS1", "app": "A", "rate": -1}, "rate"),
    ({"op": "load", "consumer": "PS1", "app": "A", "rate": float("nan")}, "rate"),
    ({"op": "load", "consumer": "PS1", "app": "A", "rate": 10 ** 400}, "rate"),
    ({"op": "define_app", "app": "B", "algorithm": "random", "move_share": 0.5, "types": ["x"]}, "algorithm"),
    *[({"op": "define_app", "app": "B", "algorithm": "load_aware", "move_share": s, "types": ["x"]}, "move_share")
      for s in (0, 1.5, -0.1, True, "0.5", float("inf"))],
    ({"op": "load", "consumer": "PS1", "app": "A", "rate": 1, "term": 1}, "stale term"),
    ({"op": "load", "consumer": "PS1", "app": "A", "rate": 1, "term": "2"}, "term"),
    ("not a dict", "JSON object"),
]


@pytest.mark.parametrize("command,reason", BAD)
def test_bad_commands_are_refused_and_change_nothing(command, reason: str) -> None:
    state, _ = apply(pool("load_aware", 2, 2), {"op": "load", "consumer": "PS2", "app": "A", "rate": 1, "term": 2})
    before = copy.deepcopy(state)
    with pytest.raises(BadCommand, match=reason):
        apply(state, command)
    assert state == before


# --- random sequences -------------------------------------------------------------------------------------

NAMES = {"app": ["A", "B"], "instance": ["I1", "I2", "I3", "I4"], "consumer": ["C1", "C2", "C3", "C4", "C5"]}
TYPES = st.lists(st.sampled_from(["t1", "t2", "t3"]), min_size=1, max_size=2)


def commands() -> st.SearchStrategy[dict]:
    a, i, c = (st.sampled_from(NAMES[k]) for k in ("app", "instance", "consumer"))
    return st.one_of(
        st.builds(lambda a, alg, s, t: {"op": "define_app", "app": a, "algorithm": alg, "move_share": s, "types": t},
                  a, st.sampled_from(["round_robin", "load_aware"]), st.sampled_from([0.25, 0.5, 1.0]), TYPES),
        *[st.builds(lambda a, i, op=op: {"op": op, "app": a, "instance": i, "node": "n1"}, a, i)
          for op in ("instance_join", "instance_join", "instance_leave", "instance_gone", "instance_crash")],
        *[st.builds(lambda c, t: {"op": "consumer_join", "consumer": c, "node": "n2", "types": t}, c, TYPES)] * 3,
        st.builds(lambda c: {"op": "consumer_leave", "consumer": c}, c),
        st.builds(lambda c, a, r: {"op": "load", "consumer": c, "app": a, "rate": r}, c, a,
                  st.sampled_from([0, 0.5, 3, 40])),
    )


# a populated start, so that most random commands apply (from an empty state most would be refused)
START = [app("load_aware", 0.5, "A", ("t1", "t2")), app("round_robin", 1.0, "B", ("t2", "t3")),
         inst("I1"), inst("I2"), inst("I1", "B"), cons("C1", ("t1",)), cons("C2", ("t2",)), cons("C3", ("t3",))]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(commands(), min_size=10, max_size=40))
def test_random_sequences_keep_the_invariants(cmds: list[dict]) -> None:
    state, _ = run(empty_state(), *START)
    for cmd in cmds:
        before = copy.deepcopy(state)
        try:
            new, moves = apply(state, cmd)
        except BadCommand:
            assert state == before
            continue
        assert state == before, "apply mutated its input"
        assert apply(state, cmd) == (new, moves), "apply is not deterministic"
        assert check_invariants(new) == [], cmd
        changed = any(new[k] != state[k] for k in ("apps", "consumers", "connections"))
        assert new["version"] == state["version"] + changed
        assert all((m.old, m.new) == (state["connections"].get(m.consumer, {}).get(m.app),
                                      new["connections"].get(m.consumer, {}).get(m.app)) for m in moves)
        state = new
