"""User-facing errors: bad input is refused in one sentence before any computation."""


class ConfigError(ValueError):
    """Invalid configuration. The CLI prints the message alone and exits with status 2.

    Build it with :func:`bad` so every message names the key, the value and the fix.
    """


def bad(key: str, value: object, problem: str, fix: str) -> ConfigError:
    """``bad("topology.n", 15, "a torus needs a perfect square", "use 16")`` ->
    "topology.n=15: a torus needs a perfect square; use 16."."""
    return ConfigError(f"{key}={value!r}: {problem}; {fix}.")
