"""Experiments: turn a scenario into run directories (workload, faults, sweeps, summaries)."""
