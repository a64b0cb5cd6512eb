"""Poisoning: Byzantine nodes that send poisoned models (model poisoning) or train on poisoned data (data
poisoning), read by the honest nodes' accuracy beside the same run without Byzantine nodes
(docs/poisoning.md)."""
