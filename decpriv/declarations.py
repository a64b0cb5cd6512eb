"""What each plugin's keys accept, kept between runs so that a bad value is refused before torch loads.

:mod:`decpriv.validation` reads a key's declaration from the signature of the callable its ``_target_``
names, which means importing the plugin's module, and with it torch (seconds). The declarations found
are pickled here (``$XDG_CACHE_HOME/decpriv/declarations.pickle``) under a stamp of decpriv's sources
(each module's path, size and modification time), so the next command line's check reads them without
importing anything: ``decpriv run protocol.lr=-1`` is refused in the time Hydra takes to compose. A stale
or missing record only means the slow path: the plugin is imported and checked as before.
"""

import contextlib
import hashlib
import os
import pickle
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SOURCES = Path(__file__).parent


@dataclass(frozen=True)
class Declaration:
    """A plugin's keys as validation reads them: its parameters (name -> annotation, declared constraints
    kept) in order, whether it takes ``**kwargs``, and its name for the refusal."""

    name: str
    params: dict[str, Any]
    takes_kwargs: bool


def cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "decpriv" / "declarations.pickle"


@cache
def stamp() -> str:
    """decpriv's sources as they are now: any edit or reinstall gives another stamp."""
    digest = hashlib.sha256()
    for path in sorted(SOURCES.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(SOURCES)}:{info.st_size}:{info.st_mtime_ns};".encode())
    return digest.hexdigest()


@cache
def _stored() -> dict[str, Declaration]:
    with contextlib.suppress(Exception):  # missing, unreadable or from another version: start afresh
        saved = pickle.loads(cache_file().read_bytes())
        if saved.get("stamp") == stamp():
            return saved["declarations"]
    return {}


def known(target: str) -> Declaration | None:
    """The declaration recorded for ``target`` by an earlier check of the same sources, if any."""
    return _stored().get(target)


PLAIN = {"builtins", "typing", "types", "collections.abc", "decpriv.config_types", "inspect"}
UNRECORDED = "unrecorded"  # a key whose declaration names a class that would load torch: left to the build


def _plain(annotation: Any) -> bool:
    """Whether ``annotation`` is built of types that load nothing (int, Literal, Range ...): a
    declaration naming a tensor or a network would import torch when read back."""
    for part in (annotation, *getattr(annotation, "__metadata__", ()), *typing.get_args(annotation)):
        if part is annotation:
            origin = typing.get_origin(annotation) or annotation
            if getattr(origin, "__module__", "builtins") not in PLAIN and not isinstance(
                origin, str | int | float
            ):
                return False
        elif not isinstance(part, str | int | float | bool | type(None)) and not _plain(part):
            return False
    return True


def recordable(found: Declaration) -> Declaration:
    """``found`` with each key that names a heavy class marked :data:`UNRECORDED`."""
    params = {k: a if _plain(a) else UNRECORDED for k, a in found.params.items()}
    return Declaration(found.name, params, found.takes_kwargs)


def remember(found: dict[str, Declaration]) -> None:
    """Add declarations of packaged plugins (``decpriv.*`` targets) to the record; a user's own plugin
    under ./conf is always imported (its source is not stamped)."""
    found = {t: recordable(d) for t, d in found.items() if t.startswith("decpriv.")}
    new = {t: d for t, d in found.items() if _stored().get(t) != d}
    if not new:
        return
    _stored().update(new)
    with contextlib.suppress(Exception):  # a read-only home only costs the slow path next time
        path = cache_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(pickle.dumps({"stamp": stamp(), "declarations": _stored()}))
        temporary.replace(path)
