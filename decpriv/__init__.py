"""decpriv: experiment runner for privacy in decentralized machine learning."""

from omegaconf import OmegaConf

__version__ = "0.1.0"

# `name=foo` appends `_foo` to the run folder (conf/config.yaml, hydra.run.dir).
OmegaConf.register_new_resolver("suffix", lambda name: f"_{name}" if name else "", replace=True)
