"""Scenario files: YAML loading with line numbers, validation, defaults, overrides."""
