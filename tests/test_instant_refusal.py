"""Refusals are instant: once a check has recorded the plugins' declarations (decpriv/config/declarations.py),
a bad value on the command line is refused without importing torch, pandas or the plugin's module; an
edited source invalidates the record (the slow path then checks, and records again)."""

import os
import subprocess
import sys
import time

from decpriv.config import declarations

REFUSE = (
    "import sys; from decpriv.cli import main; code = main(['run', 'protocol.lr=-1']); "
    "print(code, sorted(m for m in ('torch', 'pandas', 'decpriv.protocols.dsgd') if m in sys.modules))"
)
RECORD = (
    "from decpriv.api import compose_config; from decpriv.config.validation import validate; "
    "validate(compose_config([])[0])"
)


def python(code: str, cache: str) -> tuple[str, str, float]:
    env = {**os.environ, "XDG_CACHE_HOME": cache}
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return proc.stdout.strip(), proc.stderr.strip(), time.perf_counter() - began


def test_a_bad_value_is_refused_before_torch_loads_once_declarations_are_recorded(tmp_path):
    python(RECORD, str(tmp_path))  # a check that imports every plugin of the default run records them
    warm, why, seconds = python(REFUSE, str(tmp_path))
    assert warm == "2 []"
    assert why == "error: protocol.lr=-1: the learning rate must be positive; use e.g. protocol.lr=0.1."
    _, _, bare = python("pass", str(tmp_path))
    print(f"refusal {seconds:.2f} s, python -c pass {bare:.2f} s")  # docs/speed.md: under 1 s idle


def test_the_record_follows_the_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for cached in (declarations.stamp, declarations._stored):
        cached.cache_clear()
    found = declarations.Declaration("f", {"lr": float, "network": declarations.Declaration}, False)
    declarations.remember({"decpriv.x.f": found, "mine.g": found})
    declarations._stored.cache_clear()
    kept = declarations.known("decpriv.x.f")
    assert kept.params == {
        "lr": float,
        "network": declarations.UNRECORDED,
    }  # a class of decpriv: not read back
    assert declarations.known("mine.g") is None  # a user's plugin is always imported
    monkeypatch.setattr(declarations, "stamp", lambda: "another version")
    declarations._stored.cache_clear()
    assert declarations.known("decpriv.x.f") is None
    declarations._stored.cache_clear()
