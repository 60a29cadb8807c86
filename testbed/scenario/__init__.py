"""Scenario files: YAML loading with line numbers, validation, defaults, overrides."""
from testbed.scenario.loader import ScenarioError, dump_resolved, load, load_text

__all__ = ["ScenarioError", "dump_resolved", "load", "load_text"]
