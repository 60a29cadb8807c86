"""node.natural.natural_key serves route tie-breaks and reproduction tables: each reader's inputs in the
other's order, and node names in exactly the order route tie-breaks have always used."""
from __future__ import annotations

import random
import re

from node.natural import natural_key
from node.names import is_node_name
from node.routing import spf
from testbed.reproduce import table


def route_order_key(name: str) -> tuple:
    """The order spf has always given node names (kept here, written out, as the reference)."""
    parts = re.split(r"([0-9]+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def test_spf_and_the_table_use_this_key() -> None:
    assert spf.natural_key is natural_key
    assert table.natural_key is natural_key


def test_node_names_keep_their_route_order() -> None:
    alphabet = "ab09-_eE1"       # digits, signs and exponent letters: where a numeric reading could differ
    rng = random.Random(7)
    names = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10))) for _ in range(4000)}
    names |= {"-1", "1e3", "1e-05", "2", "b02", "b2", "b10", "0", "00", "007", "cgl1", "England", "a_1", "a-1"}
    assert all(is_node_name(n) for n in names)
    names_list = sorted(names)
    assert sorted(names_list, key=natural_key) == sorted(names_list, key=route_order_key)
    for a, b in zip(names_list, names_list[1:]):
        assert (natural_key(a) < natural_key(b)) == (route_order_key(a) < route_order_key(b))


def test_table_values_sort_numerically_with_decimals_and_units() -> None:
    assert sorted(["0.5", "0.25", "1", "0.125"], key=spf.natural_key) == ["0.125", "0.25", "0.5", "1"]
    assert sorted(["16000bit", "2667bit", "1.5bit", "4000bit"], key=spf.natural_key) == \
        ["1.5bit", "2667bit", "4000bit", "16000bit"]
    assert sorted([0.5, 0.25, 2, -1, 1e-05], key=natural_key) == [-1, 1e-05, 0.25, 0.5, 2]
    assert sorted(["0.5", 0.25, 1], key=natural_key) == [0.25, "0.5", 1]        # strings and numbers mixed
    assert sorted(["101+", "11-20", "2-10", "1"], key=natural_key) == ["1", "2-10", "11-20", "101+"]
    assert sorted([None, 3, "x", True], key=natural_key) == [3, None, True, "x"]  # text after numbers
    assert natural_key("0.5") != natural_key("0.50")                              # distinct values never tie


def test_node_names_sort_naturally_in_a_table() -> None:
    names = ["b20", "england", "b11", "cgl2", "b2", "b10", "cgl1", "a", "a1"]
    assert sorted(names, key=table.natural_key) == ["a", "a1", "b2", "b10", "b11", "b20", "cgl1", "cgl2", "england"]
    assert sorted(["rep10", "rep2", "rep1"], key=natural_key) == ["rep1", "rep2", "rep10"]
