"""The Scenario is built from the sections registry: a new section needs no edit of spec.py."""
import dataclasses

from testbed.scenario.sections import SECTIONS
from testbed.scenario.spec import RoutingSpec, Scenario


def test_every_section_is_a_scenario_attribute_and_nothing_else():
    names = [f.name for f in dataclasses.fields(Scenario)]
    assert sorted(names) == sorted([s.key for s in SECTIONS] + ["source", "origins"])


def test_each_scenario_gets_its_own_section_defaults():
    a, b = Scenario(name="a"), Scenario(name="b")
    a.workload.generators.append("x")
    a.faults.append("y")
    assert b.workload.generators == [] and b.faults == []
    for section in SECTIONS:
        if section.default is not None:
            assert getattr(b, section.key) == section.default()


def test_a_short_form_given_to_the_constructor_is_coerced():
    assert Scenario(name="t", routing="delay").routing == RoutingSpec(policy="delay")
    assert Scenario(name="t") == Scenario(name="t", source="elsewhere.yaml")     # the source is not compared
