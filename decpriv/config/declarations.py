"""What each plugin's keys accept, kept between runs so that a bad value is refused before torch loads.

:mod:`decpriv.config.validation` reads a key's declaration from the signature of the callable its ``_target_``
names, which means importing the plugin's module, and with it torch (seconds). The declarations found
are written here as JSON (``$XDG_CACHE_HOME/decpriv/declarations.json``) under a stamp of decpriv's
sources (each module's path, size and modification time), so the next command line's check reads them
without importing anything: ``decpriv run protocol.lr=-1`` is refused in the time Hydra takes to compose.
A stale or missing record only means the slow path: the plugin is imported and checked as before.

The record is data, never code: the user's cache is writable by anything the user runs, so it is read
as JSON and each annotation rebuilt from an allow-list of names (:data:`TYPES`; typing's Literal, Union,
Annotated, generic aliases, :class:`~decpriv.config.types.Range`), nothing imported or called by name.
A record that does not read so is refused in one warning and rebuilt. (An older decpriv's
``declarations.pickle`` is never read.)
"""

import contextlib
import hashlib
import inspect
import json
import operator
import os
import typing
import warnings
from dataclasses import asdict, dataclass, fields
from functools import cache, reduce
from pathlib import Path
from typing import Annotated, Any, Literal

from decpriv.config.types import Range

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
    return Path(root) / "decpriv" / "declarations.json"


@cache
def stamp() -> str:
    """decpriv's sources as they are now: any edit or reinstall gives another stamp."""
    digest = hashlib.sha256()
    for path in sorted(SOURCES.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(SOURCES)}:{info.st_size}:{info.st_mtime_ns};".encode())
    return digest.hexdigest()


RECORD_BYTES = 1 << 22  # the record of every packaged plugin is about 40 kB


@cache
def _stored() -> dict[str, Declaration]:
    path = cache_file()
    try:
        if path.stat().st_size > RECORD_BYTES:
            return _refused(path, f"{path.stat().st_size} bytes, past the {RECORD_BYTES} a record takes")
        saved = json.loads(path.read_text(encoding="utf-8"))
    except OSError:  # missing or unreadable: start afresh
        return {}
    except (ValueError, RecursionError) as error:  # bad UTF-8 included
        return _refused(path, f"it is not JSON ({str(error)[:80]})")
    if type(saved) is not dict or saved.get("stamp") != stamp():  # another version's: start afresh
        return {}
    try:
        return {target: _declaration(found) for target, found in saved["declarations"].items()}
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as error:
        return _refused(path, f"{type(error).__name__}: {error}")


def _refused(path: Path, why: str) -> dict[str, Declaration]:
    warnings.warn(
        f"decpriv's record of plugin declarations {path} does not read as one ({why[:200]}): it is ignored "
        "and rebuilt; nothing in it was run",
        stacklevel=3,
    )
    return {}


def known(target: str) -> Declaration | None:
    """The declaration recorded for ``target`` by an earlier check of the same sources, if any."""
    return _stored().get(target)


UNRECORDED = "unrecorded"  # a key whose declaration names a class that would load torch: left to the build

# the only names an annotation in the record may use: builtins types, typing's forms and decpriv's Range
TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "None": type(None),
    "list": list,
    "tuple": tuple,
    "dict": dict,
    "Any": Any,
    "empty": inspect.Parameter.empty,
    "...": ...,
}
NAMES = {id(kind): name for name, kind in TYPES.items()}
VALUES = (str, int, float, bool, type(None))  # a Literal's choices, an Annotated's plain metadata


def encoded(annotation: Any) -> Any:
    """``annotation`` as JSON data, or None when it names anything outside :data:`TYPES` (a tensor, a
    network: reading it back would import torch)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return {"literal": list(args)} if all(type(a) in VALUES for a in args) else None
    if origin is Annotated:
        meta = [{"range": asdict(m)} if type(m) is Range else {"value": m} for m in annotation.__metadata__]
        values = [v for m in meta for v in (m["range"].values() if "range" in m else [m["value"]])]
        ok = all(type(m) in (Range, *VALUES) for m in annotation.__metadata__)
        ok = ok and all(type(v) in VALUES for v in values)
        base = encoded(args[0])
        return {"annotated": base, "metadata": meta} if ok and base is not None else None
    if origin in (typing.Union, types_union()) or (origin is not None and id(origin) in NAMES):
        parts = [encoded(a) for a in args]
        kind = "union" if origin in (typing.Union, types_union()) else NAMES[id(origin)]
        return None if None in parts else {"of": kind, "args": parts}
    if id(annotation) in NAMES and TYPES[NAMES[id(annotation)]] is annotation:
        return NAMES[id(annotation)]
    return None


def types_union() -> type:
    return type(int | None)


def decoded(data: Any) -> Any:
    """The annotation ``data`` stands for, built from :data:`TYPES` only (ValueError when it names
    anything else)."""
    if type(data) is str:
        if data not in TYPES:
            raise ValueError(f"an annotation names {data[:40]!r}")
        return TYPES[data]
    if type(data) is not dict:
        raise ValueError(f"an annotation of type {type(data).__name__}")
    if "literal" in data:
        if any(type(a) not in VALUES for a in data["literal"]):
            raise ValueError("a Literal of other than plain values")
        return Literal[tuple(data["literal"])]
    if "annotated" in data:
        meta = [_metadata(m) for m in data["metadata"]]
        return Annotated[(decoded(data["annotated"]), *meta)]
    args = tuple(decoded(a) for a in data["args"])
    if data["of"] == "union":
        return reduce(operator.or_, args)
    return decoded(data["of"])[args]


def _metadata(data: dict) -> Any:
    if "range" in data:
        known = {f.name for f in fields(Range)}
        values = data["range"]
        if set(values) - known or any(type(v) not in VALUES for v in values.values()):
            raise ValueError("a Range with other fields")
        return Range(**values)
    if type(data["value"]) not in VALUES:
        raise ValueError("metadata that is not a plain value")
    return data["value"]


def recordable(found: Declaration) -> Declaration:
    """``found`` with each key that names a heavy class marked :data:`UNRECORDED`."""
    params = {
        k: a if a == UNRECORDED or encoded(a) is not None else UNRECORDED for k, a in found.params.items()
    }
    return Declaration(found.name, params, found.takes_kwargs)


def _record(found: Declaration) -> dict[str, Any]:
    params = {k: None if a == UNRECORDED else encoded(a) for k, a in found.params.items()}
    return {"name": found.name, "params": params, "takes_kwargs": found.takes_kwargs}


def _declaration(data: dict[str, Any]) -> Declaration:
    if type(data["name"]) is not str or type(data["takes_kwargs"]) is not bool:
        raise ValueError("a declaration of another form")
    params = {str(k): UNRECORDED if a is None else decoded(a) for k, a in data["params"].items()}
    return Declaration(data["name"], params, data["takes_kwargs"])


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
        record = {t: _record(d) for t, d in _stored().items()}
        temporary.write_text(json.dumps({"stamp": stamp(), "declarations": record}), encoding="utf-8")
        temporary.replace(path)
