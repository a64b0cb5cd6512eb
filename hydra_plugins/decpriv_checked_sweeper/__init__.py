"""decpriv's Hydra sweeper, found by Hydra's plugin discovery in the ``hydra_plugins`` namespace package."""
