"""Topology model (nodes, links, impairments) and its generators."""
