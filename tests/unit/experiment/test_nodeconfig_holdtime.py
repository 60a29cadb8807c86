"""Session hold times on slow links: a whole batch (and a whole non-fragmenting message) must cross the
slowest link within the hold time, or the receiver ends the session mid-transfer and the transfer restarts
for ever (the livelock seen on Fig. 6.4's ring at 40 kbit/s)."""
from experiment_scenarios import node_configs_of as configs
from node import registry
from testbed.experiment import holdtime, timescale
from testbed.scenario import load_text
from testbed.topology import generators

BRACHMAN = """topology: {generator: ring, params: {n: 4}}
time_scale: 0.1
link_defaults: {rate: 4000bit}
nodes: {all: {mode: MODE, fragment_size: 1000}}
workload:
  generators:
    - {nodes: all, size: {dist: thesis, fragment_size: 1000}}
"""


def test_non_fragmenting_on_a_slow_link_covers_the_largest_message_three_times() -> None:
    out = configs(BRACHMAN.replace("MODE", "non-fragmenting"))
    # 40 kbit/s on the wire; a 16 KiB batch ending in a 100-fragment (100 kB) message: 23.3 s
    wire = (16384 + 100_000) * 8 / 40_000
    for cfg in out.values():
        assert cfg["session"]["hold_time"] >= 3 * wire
        assert registry.config_from_dict(cfg).session.hold_time == cfg["session"]["hold_time"]


def test_fragmenting_needs_only_a_batch_of_fragments() -> None:
    hold = configs(BRACHMAN.replace("MODE", "fragmenting"))["n1"]["session"]["hold_time"]
    assert 3 * (16384 + 1000) * 8 / 40_000 <= hold < 20


def test_fast_links_keep_the_default_and_the_scenario_wins() -> None:
    fast = BRACHMAN.replace("MODE", "non-fragmenting").replace("4000bit", "100Mbit")
    assert all("session" not in cfg for cfg in configs(fast).values())
    mine = BRACHMAN.replace("MODE", "non-fragmenting").replace(
        "mode: non-fragmenting, fragment_size: 1000}", "mode: non-fragmenting, fragment_size: 1000, session: {hold_time: 7}}")
    assert {cfg["session"]["hold_time"] for cfg in configs(mine).values()} == {7}


def test_unknown_sizes_leave_the_default() -> None:
    s = timescale.to_wall(load_text(BRACHMAN.replace("MODE", "non-fragmenting")))
    s.workload.generators[0].size.dist = "empirical"
    assert holdtime.largest_message(s) is None
    assert holdtime.session_settings(s, generators.from_scenario(s), ["n1"]) == {}
