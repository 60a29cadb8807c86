"""The testbed: scenarios, topologies, host runtimes, link shaping, faults, experiments and the CLI."""

__version__ = "0.1.0"

# Everything the testbed creates on the machine (namespaces, interfaces,
# containers, state files) starts with this prefix followed by the run id,
# so `testbed clean` can find exactly what is ours and nothing else.
PREFIX = "tb"
