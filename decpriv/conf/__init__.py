"""Hydra config groups of decpriv (one yaml per plugin)."""
