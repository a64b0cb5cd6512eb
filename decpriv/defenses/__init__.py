"""Defenses: how nodes privatise what they compute and what they send."""
