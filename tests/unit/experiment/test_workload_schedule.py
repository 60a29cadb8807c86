"""workload.schedule: distributions (fixed seeds, tolerances of 4 standard errors), determinism, files."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from node.errors import UserError
from testbed.experiment import workload
from testbed.experiment.workload import PlannedSubmission
from testbed.scenario.loader import ScenarioError
from experiment_scenarios import names, ring_scenario, write_scenario

pytestmark = pytest.mark.timeout(60)


def gaps(plan: list[PlannedSubmission], node: str, start: float = 0.0) -> list[float]:
    times = [p.at for p in plan if p.node == node]
    return [b - a for a, b in zip([start] + times[:-1], times)]


def mean_sd(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def ks_statistic(xs: list[float], cdf) -> float:
    """Kolmogorov-Smirnov D of a sample against a continuous CDF."""
    xs = sorted(xs)
    n = len(xs)
    return max(max((i + 1) / n - cdf(x), cdf(x) - i / n) for i, x in enumerate(xs))


def ks_critical(n: int) -> float:
    # alpha = 0.001: c(alpha) = sqrt(-ln(alpha/2) / 2) = 1.949
    return 1.949 / math.sqrt(n)


# ---- interarrivals -------------------------------------------------------------------------

def test_normal_interarrival_matches_thesis_default() -> None:
    # thesis section 6.2.1: Normal(mean 50 s); sd defaults to mean/4 = 12.5
    s = ring_scenario([{"interarrival": {"dist": "normal", "mean": 50}}], n=2, duration=100_000)
    g = gaps(workload.schedule(s, names(2)), "n1")
    n = len(g)
    assert n > 1900   # ~2000 expected
    m, sd = mean_sd(g)
    assert abs(m - 50) < 4 * 12.5 / math.sqrt(n)               # 4 standard errors of the mean
    assert abs(sd - 12.5) < 4 * 12.5 / math.sqrt(2 * (n - 1))  # 4 standard errors of the sd (normal data)
    d = ks_statistic(g, lambda x: 0.5 * (1 + math.erf((x - 50) / (12.5 * math.sqrt(2)))))
    assert d < ks_critical(n)
    assert min(g) > 0


def test_normal_explicit_sd_and_truncation_positive() -> None:
    # sd as large as the mean: about 16% of raw draws are negative; every gap must still be positive
    s = ring_scenario([{"interarrival": {"dist": "normal", "mean": 10, "sd": 10}}], n=2, duration=20_000)
    g = gaps(workload.schedule(s, names(2)), "n1")
    assert min(g) >= 10 * workload.NORMAL_MIN_FRACTION
    assert len(g) > 1000


def test_exponential_interarrival() -> None:
    s = ring_scenario([{"interarrival": {"dist": "exponential", "mean": 5}}], n=2, duration=10_000)
    g = gaps(workload.schedule(s, names(2)), "n2")
    n = len(g)
    m, sd = mean_sd(g)
    assert abs(m - 5) < 4 * 5 / math.sqrt(n)        # exponential: sd = mean
    # sd of the sample sd for exponential data: sqrt((mu4 - sigma^4) / (4 sigma^2 n)) = sigma * sqrt(2 / n)
    assert abs(sd - 5) < 4 * 5 * math.sqrt(2 / n)
    assert ks_statistic(g, lambda x: 1 - math.exp(-x / 5)) < ks_critical(n)


def test_constant_interarrival() -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 30}}], n=3, duration=300)
    plan = workload.schedule(s, names(3))
    assert [p.at for p in plan if p.node == "n1"] == pytest.approx([30.0 * k for k in range(1, 10)])
    assert len(plan) == 27      # 9 per node: 300 itself is outside [0, 300)


def test_piecewise_bursty_period() -> None:
    # MQ paper style: exponential mean 10 s, a burst at mean 1 s from 1000 to 2000 s
    s = ring_scenario([{"interarrival": {"dist": "exponential", "mean": 10,
                                         "schedule": [{"from": 1000, "to": 2000, "mean": 1}]}}],
                      n=2, duration=3000)
    times = [p.at for p in workload.schedule(s, names(2)) if p.node == "n1"]
    inside = sum(1 for t in times if 1000 <= t < 2000)
    outside = len(times) - inside
    # Poisson counts: expected 1000 inside, 200 outside; sd = sqrt(expected)
    assert abs(inside - 1000) < 4 * math.sqrt(1000)
    assert abs(outside - 200) < 4 * math.sqrt(200)
    # the burst starts at its boundary (exponential gaps restart there)
    assert min(t for t in times if t >= 1000) < 1000 + 10


def test_piecewise_dist_is_silent_outside_its_periods() -> None:
    s = ring_scenario([{"interarrival": {"dist": "piecewise", "mean": 5,
                                         "schedule": [{"from": 100, "to": 200, "dist": "constant", "mean": 10},
                                                      {"from": 500, "to": 600, "dist": "constant", "mean": 25}]}}],
                      n=2, duration=1000)
    times = [p.at for p in workload.schedule(s, names(2)) if p.node == "n1"]
    assert times == pytest.approx([110, 120, 130, 140, 150, 160, 170, 180, 190, 525, 550, 575])


def test_generator_start_stop_and_duration_bound() -> None:
    s = ring_scenario([{"interarrival": {"dist": "exponential", "mean": 2}, "start": 100, "stop": 400},
                       {"interarrival": {"dist": "exponential", "mean": 2}, "start": 900}], n=3, duration=1000)
    plan = workload.schedule(s, names(3))
    assert plan, "expected submissions"
    assert all(100 <= p.at < 400 or 900 <= p.at < 1000 for p in plan)
    assert any(p.at >= 900 for p in plan) and any(p.at < 400 for p in plan)
    assert [p.at for p in plan] == sorted(p.at for p in plan)


def test_generator_node_subset_and_priority() -> None:
    s = ring_scenario([{"nodes": ["n2", "n4"], "priority": 5, "interarrival": {"dist": "constant", "mean": 100}}],
                      n=5, duration=1000)
    plan = workload.schedule(s, names(5))
    assert {p.node for p in plan} == {"n2", "n4"}
    assert {p.priority for p in plan} == {5}


# ---- sizes ---------------------------------------------------------------------------------

def test_thesis_size_mix_table_6_1() -> None:
    # thesis Table 6.1: 1 fragment .70, 2-30 .20, 31-100 .10, uniform within a range
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 1}, "size": {"dist": "thesis",
                                                                             "fragment_size": 1000}}],
                      n=2, duration=10_000)
    plan = workload.schedule(s, names(2))
    frags = [p.size // 1000 for p in plan]
    assert all(p.size % 1000 == 0 for p in plan)
    n = len(frags)
    assert n == 2 * 9999
    for (p, low, high) in workload.THESIS_SIZE_MIX:
        k = sum(1 for f in frags if low <= f <= high)
        assert abs(k / n - p) < 4 * math.sqrt(p * (1 - p) / n), (low, high, k / n)
    assert min(frags) == 1 and max(frags) == 100
    mid = [f for f in frags if 2 <= f <= 30]
    # uniform 2..30: mean 16, variance (29^2 - 1) / 12 = 70
    assert abs(sum(mid) / len(mid) - 16) < 4 * math.sqrt(70 / len(mid))
    # chi-square of the 1..100 range split: every value 31..100 appears, none outside the ranges
    top = Counter(f for f in frags if f >= 31)
    assert set(top) == set(range(31, 101))


def test_thesis_fragment_size_scales_bytes() -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 10}, "size": {"fragment_size": "4KiB"}}],
                      n=2, duration=2000)
    assert all(p.size % 4096 == 0 and 4096 <= p.size <= 100 * 4096 for p in workload.schedule(s, names(2)))


def test_fixed_size() -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 10}, "size": {"dist": "fixed", "bytes": "5kB"}}],
                      n=2, duration=100)
    assert {p.size for p in workload.schedule(s, names(2))} == {5000}


def test_empirical_sizes_relative_to_scenario_file(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sizes.txt").write_text("# measured\n100\n\n2000  # a comment\n64KiB\n")
    s = write_scenario(tmp_path / "s.yaml", {
        "name": "emp", "seed": 3, "duration": 5000, "topology": {"generator": "ring", "params": {"n": 3}},
        "workload": {"generators": [{"interarrival": {"dist": "constant", "mean": 1},
                                     "size": {"dist": "empirical", "file": "data/sizes.txt"}}]}})
    plan = workload.schedule(s, names(3))
    counts = Counter(p.size for p in plan)
    assert set(counts) == {100, 2000, 65536}
    n = len(plan)
    for c in counts.values():      # each of 3 values with p = 1/3
        assert abs(c / n - 1 / 3) < 4 * math.sqrt((1 / 3) * (2 / 3) / n)


@pytest.mark.parametrize("content,needle", [
    (None, "does not exist"),
    ("100\nbig\n", ":2: expected a message size"),
    ("# nothing\n\n", "lists no sizes"),
    ("100\n0\n", "above zero"),
    ("-5\n", "expected a message size"),
])
def test_empirical_file_errors_are_one_sentence(tmp_path: Path, content: str | None, needle: str) -> None:
    if content is not None:
        (tmp_path / "sizes.txt").write_text(content)
    s = write_scenario(tmp_path / "s.yaml", {
        "name": "emp", "duration": 100, "topology": {"generator": "ring", "params": {"n": 3}},
        "workload": {"generators": [{"size": {"dist": "empirical", "file": "sizes.txt"}}]}})
    with pytest.raises(ScenarioError) as info:
        workload.schedule(s, names(3))
    assert isinstance(info.value, UserError)
    text = str(info.value)
    assert needle in text and "\n" not in text and text.endswith(".")


def test_empirical_file_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "sizes.txt").mkdir()
    with pytest.raises(ScenarioError, match="is a directory"):     # refused when the scenario is loaded
        write_scenario(tmp_path / "s.yaml", {
            "name": "emp", "duration": 100, "topology": {"generator": "ring", "params": {"n": 3}},
            "workload": {"generators": [{"size": {"dist": "empirical", "file": "sizes.txt"}}]}})


# ---- recipients ----------------------------------------------------------------------------

def test_uniform_recipients_never_self_and_uniform() -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 1}}], n=5, duration=4001)
    plan = workload.schedule(s, names(5))
    assert all(len(p.recipients) == 1 and p.recipients[0] != p.node for p in plan)
    picks = Counter(p.recipients[0] for p in plan if p.node == "n1")
    n = sum(picks.values())
    assert set(picks) == {"n2", "n3", "n4", "n5"}
    # chi-square, 3 degrees of freedom: 16.27 is the 0.999 quantile
    chi2 = sum((c - n / 4) ** 2 / (n / 4) for c in picks.values())
    assert chi2 < 16.27


def test_fixed_recipients_are_all_listed_nodes_except_self() -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 10},
                        "recipients": {"choice": "fixed", "nodes": ["n1", "n3"]}}], n=4, duration=100)
    plan = workload.schedule(s, names(4))
    by_node = {p.node: p.recipients for p in plan}
    assert by_node == {"n1": ("n3",), "n2": ("n1", "n3"), "n3": ("n1",), "n4": ("n1", "n3")}


def test_fixed_recipient_only_itself_submits_nothing() -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 10},
                        "recipients": {"choice": "fixed", "nodes": ["n1"]}}], n=3, duration=100)
    plan = workload.schedule(s, names(3))
    assert {p.node for p in plan} == {"n2", "n3"}


def test_weighted_recipients() -> None:
    s = ring_scenario([{"nodes": ["n1"], "interarrival": {"dist": "constant", "mean": 1},
                        "recipients": {"choice": "weighted", "weights": {"n2": 3, "n3": 1, "n4": 0}}}],
                      n=4, duration=8001)
    picks = Counter(p.recipients[0] for p in workload.schedule(s, names(4)))
    n = sum(picks.values())
    assert "n4" not in picks
    assert abs(picks["n2"] / n - 0.75) < 4 * math.sqrt(0.75 * 0.25 / n)


def test_single_node_uniform_has_nobody_to_send_to() -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 10}}], n=3, duration=100)
    assert workload.schedule(s, ["n1"]) == []


# ---- determinism ---------------------------------------------------------------------------

def test_same_seed_same_schedule_different_seed_different() -> None:
    gen = [{"interarrival": {"dist": "normal", "mean": 50}}]
    a = workload.schedule(ring_scenario(gen, seed=11), names(5))
    b = workload.schedule(ring_scenario(gen, seed=11), names(5))
    c = workload.schedule(ring_scenario(gen, seed=12), names(5))
    assert a == b and len(a) > 100
    assert a != c
    assert [p.at for p in a] != [p.at for p in c[:len(a)]]


def test_adding_a_node_keeps_the_others_schedules() -> None:
    gen = [{"interarrival": {"dist": "exponential", "mean": 20}}]
    five = workload.schedule(ring_scenario(gen, n=6), names(5))
    six = workload.schedule(ring_scenario(gen, n=6), names(6))
    for node in names(5):
        a = [(p.at, p.size) for p in five if p.node == node]
        b = [(p.at, p.size) for p in six if p.node == node]
        assert a == b and a
    # with fixed recipients the whole per-node schedule is unchanged
    fixed = [{"interarrival": {"dist": "exponential", "mean": 20}, "recipients": {"choice": "fixed", "nodes": ["n1"]}}]
    five = workload.schedule(ring_scenario(fixed, n=6), names(5))
    six = workload.schedule(ring_scenario(fixed, n=6), names(6))
    assert [p for p in six if p.node != "n6"] == five


def test_adding_a_generator_keeps_the_first_generators_submissions() -> None:
    g1 = {"interarrival": {"dist": "exponential", "mean": 20}, "priority": 1}
    g2 = {"interarrival": {"dist": "constant", "mean": 7}, "priority": 2}
    one = workload.schedule(ring_scenario([g1]), names(5))
    two = workload.schedule(ring_scenario([g1, g2]), names(5))
    assert [p for p in two if p.priority == 1] == one


def test_size_change_keeps_arrival_times() -> None:
    base = {"interarrival": {"dist": "exponential", "mean": 20}}
    a = workload.schedule(ring_scenario([base]), names(5))
    b = workload.schedule(ring_scenario([{**base, "size": {"dist": "fixed", "bytes": 10}}]), names(5))
    assert [(p.at, p.node, p.recipients) for p in a] == [(p.at, p.node, p.recipients) for p in b]


def test_derive_seed_is_stable_across_processes() -> None:
    # a fixed value: Python's hash() is salted per process, this must not be
    assert workload.derive_seed(1, "generator", 0, "n1", "time") == 10428530200406605157
    assert random.Random(workload.derive_seed(1, "x")).random() == random.Random(workload.derive_seed(1, "x")).random()
    assert workload.derive_seed(1, "a") != workload.derive_seed(2, "a")


def test_runaway_plan_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload, "MAX_SUBMISSIONS", 1000)
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 0.1}}], n=2, duration=1000)
    with pytest.raises(ScenarioError, match="more than 1000 submissions"):
        workload.schedule(s, names(2))


def test_no_generators_no_plan() -> None:
    assert workload.schedule(ring_scenario([]), names(5)) == []


def test_runaway_single_generator_stops_early(monkeypatch: pytest.MonkeyPatch) -> None:
    # the cap applies while generating, so a huge plan fails fast instead of exhausting memory
    monkeypatch.setattr(workload, "MAX_SUBMISSIONS", 500)
    s = ring_scenario([{"interarrival": {"dist": "exponential", "mean": 0.001}}], n=3, duration=1e9)
    with pytest.raises(ScenarioError, match="more than 500"):
        workload.schedule(s, names(3))
    s = ring_scenario([{"interarrival": {"dist": "exponential", "mean": 10,
                                         "schedule": [{"from": 0, "to": 1e9, "mean": 0.001}]}}], n=3, duration=1e9)
    with pytest.raises(ScenarioError, match="more than 500"):
        workload.schedule(s, names(3))


@pytest.mark.parametrize("mean", [0.0, -3.0, float("nan")])
def test_nonpositive_mean_in_code_is_a_user_error(mean: float) -> None:
    s = ring_scenario([{"interarrival": {"dist": "constant", "mean": 10}}], n=3, duration=100)
    s.workload.generators[0].interarrival.mean = mean       # only possible in code; the loader refuses it
    with pytest.raises(ScenarioError, match=r"generators\[0\].interarrival.mean: expected a positive duration"):
        workload.schedule(s, names(3))


def test_same_schedule_in_another_process() -> None:
    # another interpreter has another str-hash salt: the plan must not depend on it
    code = ("import json; from experiment_scenarios import ring_scenario, names; "
            "from testbed.experiment import workload; "
            "s = ring_scenario([{'interarrival': {'dist': 'normal', 'mean': 50}}], seed=5); "
            "print(json.dumps([[p.at, p.node, list(p.recipients), p.size] for p in workload.schedule(s, names(5))]))")
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONHASHSEED": "random",
                              "PYTHONPATH": str(Path(__file__).resolve().parent)}, check=True).stdout
    here = workload.schedule(ring_scenario([{"interarrival": {"dist": "normal", "mean": 50}}], seed=5), names(5))
    assert json.loads(out) == [[p.at, p.node, list(p.recipients), p.size] for p in here]
