"""Privacy attacks. Each reads only the adversary's View; ground truth is used by ``evaluate`` alone."""
