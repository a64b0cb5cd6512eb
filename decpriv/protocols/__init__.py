"""Decentralized (and federated baseline) protocols, vectorised over all nodes."""
