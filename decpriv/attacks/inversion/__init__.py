"""Gradient inversion: turn a leaked gradient (or gradient difference) into data.

Public API, shared by the centralised attacks (``dlg``, ``idlg``, ``inverting_gradients``), PDMM's
differential gradient attack, the peer-to-peer attacks and the knowledge-matrix attack:

- :func:`invert` with :class:`InversionConfig` -> :class:`Inversion` (engine.py)
- :func:`infer_labels`, :func:`candidate_labels` (labels.py)
- :func:`match` (matching.py), and image scores in :mod:`decpriv.metrics.images`;
- :func:`~decpriv.attacks.inversion.scoring.score_batches` and `reconstruction_grid` (scoring.py) for `evaluate`.
"""

from decpriv.attacks.inversion.engine import Inversion, InversionConfig, dummy_gradient, invert
from decpriv.attacks.inversion.labels import candidate_labels, infer_labels
from decpriv.attacks.inversion.matching import match

__all__ = [
    "Inversion",
    "InversionConfig",
    "candidate_labels",
    "dummy_gradient",
    "infer_labels",
    "invert",
    "match",
]
