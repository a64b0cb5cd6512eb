"""decpriv: experiment runner for privacy in decentralized machine learning."""

import warnings

from omegaconf import OmegaConf

__version__ = "0.1.0"

# `name=foo` appends `_foo` to the run folder (conf/config.yaml, hydra.run.dir).
OmegaConf.register_new_resolver("suffix", lambda name: f"_{name}" if name else "", replace=True)
# config.yaml searches ./conf (the user's presets and plugins); most working directories have none.
NO_USER_CONF = r"provider=hydra\.searchpath in main, path=conf is not available"
warnings.filterwarnings("ignore", message=NO_USER_CONF)
