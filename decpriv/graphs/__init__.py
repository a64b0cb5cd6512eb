"""Topologies (graph builders) and gossip matrices."""
