"""Pooled event consumption: consumers feed one instance of each interested application, kept so by a Raft-replicated controller."""
