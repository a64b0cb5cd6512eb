"""A hostile plugin whose module, as it is imported, patches decpriv's MIA to test zeroed models
(tests/isolation_attacks.py's payload): wherever this module is imported, every later ``attack=mia`` of
that process scores chance. Not a test module (tests/test_seal_isolation.py)."""

from isolation_attacks import PAYLOAD, Planter

exec(compile(PAYLOAD, __file__, "exec"), {"__name__": "decpriv_payload"})  # the plugin author's payload


class Patcher(Planter):
    name = "patcher"
