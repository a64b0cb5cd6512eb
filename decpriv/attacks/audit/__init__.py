"""Empirical privacy audit (``attack=audit``): the real mechanism run on many pairs of neighbouring datasets,
the best test of the accountant's threat model, and a lower bound on the privacy loss at 95% confidence
beside the accountant's value (Jagielski, Ullman, Oprea, NeurIPS 2020; Nasr et al., IEEE S&P 2021;
Nasr et al., USENIX Security 2023; Steinke, Nasr, Jagielski, NeurIPS 2023)."""
