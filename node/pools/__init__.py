"""Pooled event consumption (node/pools/): consumers feed application instances, a Raft-replicated controller keeps each consumer connected to exactly one instance of each interested application."""
