"""timescale.to_wall: every model-time quantity converted, rates divided, the input untouched."""
from __future__ import annotations

import copy

import pytest
import yaml

from testbed.experiment import timescale
from testbed.scenario.loader import load_text
from testbed.scenario.spec import Scenario

pytestmark = pytest.mark.timeout(30)

K = 0.05     # wall seconds per model second


def build(time_scale: float = K) -> Scenario:
    """Every time-like quantity set to a distinct value, through the real loader."""
    data = {"name": "ts", "seed": 1, "duration": 3600, "time_scale": time_scale,
            "topology": {"generator": "ring", "params": {"n": 4}},
            "link_defaults": {"delay": "100ms", "jitter": "10ms", "rate": "4800bit", "loss": 0.01},
            "links": [{"a": "n1", "b": "n2", "a_to_b": {"delay": "2s", "rate": "9600bit"}, "b_to_a": {"jitter": "1s"}}],
            "nodes": {"all": {"mode": "fragmenting", "fragment_size": 1000,
                              "resources": {"rbsad": 400, "removal_interval": 50, "reservation_timeout": 600,
                                            "transit_buffers": 100, "rbsad_probability": 0.1}},
                      "n3": {"resources": {"rbsad": 800}}},
            "workload": {"warmup": 120, "drain": 300, "generators": [
                {"interarrival": {"dist": "normal", "mean": 50, "sd": 10,
                                  "schedule": [{"from": 100, "to": 200, "dist": "exponential", "mean": 5, "sd": 2}]},
                 "start": 20, "stop": 3000},
                {"interarrival": {"dist": "exponential", "mean": 40}}]},
            "faults": [{"at": 600, "action": "link_set", "target": "n1-n2",
                        "params": {"delay": "1s", "jitter": "200ms", "rate": "4800bit", "loss": 0.1}},
                       {"at": 900, "action": "kill", "target": "n3"}]}
    return load_text(yaml.safe_dump(data), "ts.yaml")


def test_every_listed_quantity_is_scaled() -> None:
    model = build()
    wall = timescale.to_wall(model)
    assert wall.time_scale == 1.0
    assert wall.duration == pytest.approx(3600 * K)
    assert wall.workload.warmup == pytest.approx(120 * K)
    assert wall.workload.drain == pytest.approx(300 * K)
    g0, g1 = wall.workload.generators
    assert (g0.start, g0.stop) == pytest.approx((20 * K, 3000 * K))
    assert g1.stop is None and g1.start == 0
    assert (g0.interarrival.mean, g0.interarrival.sd) == pytest.approx((50 * K, 10 * K))
    period = g0.interarrival.schedule[0]
    assert (period["from"], period["to"], period["mean"], period["sd"]) == pytest.approx((100 * K, 200 * K, 5 * K, 2 * K))
    assert period["dist"] == "exponential"
    assert g1.interarrival.mean == pytest.approx(40 * K)
    # links: delay and jitter multiplied, rate divided (t seconds per fragment stays t model seconds)
    assert wall.link_defaults.delay == pytest.approx(0.1 * K)
    assert wall.link_defaults.jitter == pytest.approx(0.01 * K)
    assert wall.link_defaults.rate == pytest.approx(4800 / K)
    assert wall.link_defaults.loss == pytest.approx(0.01)
    o = wall.links[0]
    assert o.a_to_b.delay == pytest.approx(2 * K) and o.a_to_b.rate == pytest.approx(9600 / K)
    assert o.b_to_a.jitter == pytest.approx(1 * K)
    # faults
    f_set, f_kill = wall.faults
    assert f_set.at == pytest.approx(600 * K) and f_kill.at == pytest.approx(900 * K)
    assert f_set.params["delay"] == pytest.approx(1 * K)
    assert f_set.params["jitter"] == pytest.approx(0.2 * K)
    assert f_set.params["rate"] == pytest.approx(4800 / K)
    assert f_set.params["loss"] == pytest.approx(0.1)
    # node resources: time-like keys scaled, counts and probabilities not
    res = wall.nodes.all["resources"]
    assert res["rbsad"] == pytest.approx(400 * K)
    assert res["removal_interval"] == pytest.approx(50 * K)
    assert res["reservation_timeout"] == pytest.approx(600 * K)
    assert res["transit_buffers"] == 100 and res["rbsad_probability"] == 0.1
    assert wall.nodes.all["fragment_size"] == 1000
    assert wall.nodes.per_node["n3"]["resources"]["rbsad"] == pytest.approx(800 * K)


def test_input_is_not_changed() -> None:
    model = build()
    before = copy.deepcopy(model)
    timescale.to_wall(model)
    assert model == before
    assert model.time_scale == K


def test_identity_and_idempotent_at_one() -> None:
    model = build(time_scale=1.0)
    wall = timescale.to_wall(model)
    assert wall == model and wall is not model
    assert timescale.to_wall(wall) == wall
    # converting an already-converted scenario changes nothing more
    converted = timescale.to_wall(build())
    assert timescale.to_wall(converted) == converted


def test_slower_than_real_time() -> None:
    wall = timescale.to_wall(build(time_scale=2.0))
    assert wall.duration == pytest.approx(7200)
    assert wall.link_defaults.rate == pytest.approx(2400)


def test_schedule_times_scale_like_to_wall() -> None:
    # the driver submits at `at * time_scale`; a wall generator mean is the model mean times K
    from testbed.experiment import workload
    model = build()
    plan = workload.schedule(model, ["n1", "n2", "n3", "n4"])
    assert plan and all(p.at < model.duration for p in plan)
    assert timescale.model_to_wall(100.0, K) == pytest.approx(5.0)
    assert timescale.wall_to_model(5.0, K) == pytest.approx(100.0)


def test_explicit_topology_links_are_scaled() -> None:
    data = {"name": "ex", "duration": 100, "time_scale": 0.5,
            "topology": {"generator": "explicit", "nodes": ["a", "b", "c"],
                         "links": [{"a": "a", "b": "b", "delay": "2s", "rate": "1Mbit"}, {"a": "b", "b": "c"}]}}
    model = load_text(yaml.safe_dump(data), "ex.yaml")
    wall = timescale.to_wall(model)
    first = wall.topology.links[0]
    assert first.a_to_b is not None and first.a_to_b.delay == pytest.approx(1.0)
    assert first.a_to_b.rate == pytest.approx(2e6)
    assert model.topology.links[0].a_to_b.delay == pytest.approx(2.0)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan")])
def test_bad_time_scale_is_a_user_error(bad: float) -> None:
    from node.errors import UserError
    model = build(time_scale=1.0)
    model.time_scale = bad                  # only possible in code; the loader refuses it
    with pytest.raises(UserError, match="time_scale: expected a positive number"):
        timescale.to_wall(model)
