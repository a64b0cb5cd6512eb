"""Attacks on PDMM/ADMM: leakage extraction from Delta z (Yu 2023, Theorem 1) and what it enables."""
