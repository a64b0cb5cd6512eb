"""Metrics: training progress per round, and scoring of attacks against the truth."""
