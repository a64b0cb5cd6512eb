"""The formal guarantee on a run's first screen: the tightest sound epsilon an accountant found, at its delta,
the method that gave it, the neighbouring relation it protects, and the other methods' values beside it.

Each accountant writes ``epsilon`` (its tightest), ``delta``, ``epsilon_method`` and, where they apply,
``accounted_sampler``, ``adjacency`` and ``threat`` into summary.csv; this module only reads them, so a new accountant
is shown by writing the same keys.
"""

from typing import Any

# the other methods' epsilon at the same delta, as summary.csv names them
ALSO = {
    "epsilon_decpriv_rdp": "RDP (decpriv)",
    "epsilon_dp_accounting_rdp": "RDP (dp-accounting)",
    "epsilon_dp_accounting_pld": "PLD (dp-accounting)",
    "epsilon_mironov": "Mironov's conversion",
    "epsilon_renyi_slope": "Renyi slope (Mironov's conversion)",
}
# the neighbouring relation the epsilon protects, by summary key and the word it is shown with (``sampler``
# alone is the protocol's batch sampler, which user-level accounting does not depend on)
SETTING = {"accounted_sampler": "sampler", "adjacency": "adjacency", "threat": "threat"}


def guarantee_line(summary: Any) -> str | None:
    """``privacy: epsilon 4.911 at delta 1e-05 by PLD (dp-accounting); sampler poisson, adjacency
    add_remove; also RDP (decpriv) 5.695, ...``; None for a run without an accountant."""
    from decpriv.report.text import fmt

    epsilon, delta = summary.get("epsilon"), summary.get("delta")
    if not _number(epsilon):
        return None
    line = f"privacy: epsilon {fmt(round(float(epsilon), 4))}"
    line += f" at delta {float(delta):g}" if _number(delta) else ""
    method = summary.get("epsilon_method")
    line += f" by {method}" if isinstance(method, str) else ""
    target = summary.get("epsilon_target")
    line += f" (target {fmt(float(target))})" if _number(target) else ""
    setting = [f"{word} {summary[key]}" for key, word in SETTING.items() if isinstance(summary.get(key), str)]
    line += "; " + ", ".join(setting) if setting else ""
    also = [
        f"{name} {fmt(round(float(summary[key]), 4))}"
        for key, name in ALSO.items()
        if name != method and _number(summary.get(key))
    ]
    return line + ("; also " + ", ".join(also) if also else "")


def _number(value: Any) -> bool:
    try:
        return float(value) == float(value)
    except (TypeError, ValueError):
        return False
