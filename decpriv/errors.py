"""User-facing errors: bad input is refused in one sentence before any computation."""


class ConfigError(ValueError):
    """Invalid configuration. The CLI prints the message alone and exits with status 2.

    Build it with :func:`bad_value` so every message names the key, the value and the fix; ``key`` is
    the key it names (None for a refusal of no single key).
    """

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def bad_value(key: str, value: object, problem: str, fix: str) -> ConfigError:
    """``bad_value("topology.n", 15, "a torus needs a perfect square", "use 16")`` ->
    "topology.n=15: a torus needs a perfect square; use 16."."""
    shown = "null" if value is None else repr(value)  # what the user typed: YAML's null, not Python's None
    return ConfigError(f"{key}={shown}: {problem}; {fix}.", key)


class Diverged(RuntimeError):
    """Training produced a non-finite loss or parameter: the run stops and is marked failed (exit 1)."""

    def __init__(self, diverged_at: int, what: str):
        super().__init__(
            f"{what} became non-finite (nan or inf) at round {diverged_at}: training diverged; "
            "lower protocol.lr or check the data"
        )
        self.diverged_at = diverged_at  # the first round whose loss or parameters are not finite
