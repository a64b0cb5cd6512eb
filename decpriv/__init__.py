"""decpriv: experiment runner for privacy in decentralized machine learning."""

__version__ = "0.1.0"
