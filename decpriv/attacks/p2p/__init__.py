"""Attacks on peer-to-peer decentralized learning (Pasquini, Raynal, Troncoso, S&P 2023)."""
