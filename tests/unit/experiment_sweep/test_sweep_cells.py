"""Sweep expansion, cell names and derived seeds (no root, no network)."""
from __future__ import annotations

import os
import re

import pytest

from testbed.experiment import sweep
from testbed.scenario import ScenarioError, load_text

BASE = """\
name: sw
seed: 7
topology: {generator: ring, params: {n: 4}}
workload:
  generators: [{nodes: all}]
"""


def scenario(extra: str = "", sets: tuple[str, ...] = ()):
    return load_text(BASE + extra, overrides=sets)


def test_no_grid_gives_one_default_cell():
    cells = sweep.expand(scenario())
    assert [(c.name, c.overrides) for c in cells] == [("default", {})]


def test_grid_is_the_full_product_in_file_order():
    s = scenario("sweep:\n  grid: {nodes.all.mode: [fragmenting, non-fragmenting], nodes.all.rbsad: [0, 400, 1600]}\n")
    cells = sweep.expand(s)
    assert len(cells) == 6
    assert cells[0].overrides == {"nodes.all.mode": "fragmenting", "nodes.all.rbsad": 0}
    assert cells[1].overrides == {"nodes.all.mode": "fragmenting", "nodes.all.rbsad": 400}
    assert cells[-1].overrides == {"nodes.all.mode": "non-fragmenting", "nodes.all.rbsad": 1600}
    assert cells[1].name == "mode-fragmenting_rbsad-400"
    assert len({c.name for c in cells}) == 6


def test_exclude_leaves_out_the_matching_points():
    s = scenario("sweep:\n  grid: {nodes.all.mode: [fragmenting, non-fragmenting], nodes.all.rbsad: [0, 400, 1600]}\n"
                 "  exclude: [{nodes.all.mode: non-fragmenting, nodes.all.rbsad: 400}, {nodes.all.rbsad: 1600}]\n")
    assert [tuple(c.overrides.values()) for c in sweep.expand(s)] == [
        ("fragmenting", 0), ("fragmenting", 400), ("non-fragmenting", 0)]


@pytest.mark.parametrize("exclude,message", [
    ("[{nodes.all.colour: red}]", "not a key of sweep.grid"),
    ("[{nodes.all.rbsad: 3}]", "is not one of the grid's values"),
    ("[{}]", "expected a mapping of swept keys"),
    ("[{nodes.all.rbsad: 0}, {nodes.all.rbsad: 400}]", "leaves no grid point"),
])
def test_bad_exclude_is_one_error(exclude: str, message: str):
    with pytest.raises(ScenarioError) as info:
        scenario(f"sweep:\n  grid: {{nodes.all.rbsad: [0, 400]}}\n  exclude: {exclude}\n")
    assert message in str(info.value)


def test_per_rep_seeds_give_every_cell_of_a_rep_the_same_seed():
    grid = "sweep:\n  grid: {nodes.all.mode: [fragmenting, non-fragmenting]}\n"
    per_cell, per_rep = scenario(grid), scenario(grid + "  seeds: per_rep\n")
    a, b = sweep.expand(per_cell)
    assert sweep.rep_seed(per_cell, a, 1) != sweep.rep_seed(per_cell, b, 1)      # the default, as before
    assert sweep.rep_seed(per_cell, a, 1) == sweep.derive_seed(7, a.name, 1)
    assert sweep.rep_seed(per_rep, a, 1) == sweep.rep_seed(per_rep, b, 1) != sweep.rep_seed(per_rep, a, 2)
    with pytest.raises(ScenarioError, match="per_cell, per_rep"):
        scenario(grid + "  seeds: sometimes\n")


def test_names_are_filesystem_safe_and_stable():
    s = scenario('sweep:\n  grid: {link_defaults.delay: ["10 ms", 50ms], nodes.all.weird: ["a/b c", {x: 1}]}\n')
    names = [c.name for c in sweep.expand(s)]
    assert names == [c.name for c in sweep.expand(s)]        # same scenario, same names
    for n in names:
        assert re.fullmatch(r"[A-Za-z0-9.+~_-]+", n), n
        assert os.sep not in n and n not in (".", "..") and len(n) <= sweep.MAX_NAME
    assert len(set(names)) == len(names)


def test_colliding_last_segments_keep_more_of_the_key():
    name = sweep.cell_name({"nodes.all.mode": "fragmenting", "nodes.n1.mode": "non-fragmenting"})
    assert name == "all.mode-fragmenting_n1.mode-non-fragmenting"


def test_values_that_sanitize_alike_still_get_distinct_names():
    s = scenario('sweep:\n  grid: {nodes.all.tag: ["a b", "a-b", "a/b"]}\n')
    names = [c.name for c in sweep.expand(s)]
    assert len(set(names)) == 3 and names[0] == "tag-a-b"


def test_long_names_are_shortened_with_a_digest():
    long_a = {"nodes.all.x": "v" * 300}
    long_b = {"nodes.all.x": "v" * 299 + "w"}
    a, b = sweep.cell_name(long_a), sweep.cell_name(long_b)
    assert len(a) <= sweep.MAX_NAME and len(b) <= sweep.MAX_NAME and a != b


def test_derive_seed_is_stable_distinct_and_in_range():
    seeds = {sweep.derive_seed(7, c, r) for c in ("a", "b", "c") for r in range(1, 11)}
    assert len(seeds) == 30
    assert all(0 <= s < 2 ** 63 for s in seeds)
    assert sweep.derive_seed(7, "a", 1) == sweep.derive_seed(7, "a", 1)
    assert sweep.derive_seed(7, "a", 1) != sweep.derive_seed(8, "a", 1)
    # known value: a change of the derivation would silently change every experiment's workload
    assert sweep.derive_seed(1, "default", 1) == 7680802942641446524


def test_set_arguments_round_trip_through_the_loader():
    overrides = {"nodes.all.mode": "non-fragmenting", "nodes.all.rbsad": 400, "link_defaults.delay": 0.5,
                 "nodes.all.flag": True}
    s = scenario(sets=tuple(sweep.set_arguments(overrides)))
    assert s.nodes.all == {"mode": "non-fragmenting", "rbsad": 400, "flag": True}
    assert s.link_defaults.delay == 0.5
