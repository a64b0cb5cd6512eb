"""The run folder (README, "The run folder"): run.json status, tidy CSV tables, PNG pictures.

Tables are written atomically (temporary file + rename) and only after every computation has finished;
a failure while writing removes the tables already written, so none looks complete beside a failed
run.json. Each table's mark (rows, bytes, SHA-256) goes into run.json's ``tables``, written after the
tables, and run.json carries the SHA-256 of its own fields (``run_json_sha256``), so an edited status or
mark is found too. Every reader goes through :func:`read_status`, which checks run.json and each marked
table: a run whose table is cut, changed or gone, or whose run.json was edited, reads ``damaged`` with one
sentence naming the damage (:func:`damage`), never ``completed``; the readers that show a result refuse it
(:func:`read_intact`), and ``resume=true`` reruns it in place. run.json says ``running`` until the end, then ``completed`` or ``failed`` with the error; it
also holds the host, the process id and a heartbeat, so a run killed outright (SIGKILL, power loss) reads
as ``interrupted`` rather than ``running`` forever (:func:`read_status`).
"""

import hashlib
import io
import json
import os
import platform
import re
import socket
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from decpriv.errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PACKAGES = (
    "decpriv",
    "torch",
    "numpy",
    "pandas",
    "networkx",
    "hydra-core",
    "omegaconf",
    "scipy",
    "scikit-learn",
)


def package_versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0  # a run on another host whose heartbeat is this old is taken for dead


def write_atomic(path: Path, text: str, create: bool = True) -> None:
    """``text`` into ``path`` through a temporary file and a rename; ``create``: make the folder when
    absent (a run's own files are not: a run folder removed under a running run is not made again)."""
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    if _holds(path, text):  # the same bytes: not written, so its mtime stays (a resume with nothing to do)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _holds(path: Path, text: str) -> bool:
    try:
        return path.stat().st_size == len(text.encode()) and path.read_bytes() == text.encode()
    except OSError:
        return False


def claim_folder(path: Path | str) -> Path:
    """Create a new, empty run folder at ``path``, or at ``path-2``, ``path-3`` ... when it exists.

    ``os.mkdir`` is atomic, so two runs started in the same second never share a folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, 10_000):
        candidate = path if k == 1 else path.with_name(f"{path.name}-{k}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{path}: 10000 folders of that name exist; choose another name")


CLAIM = ".decpriv-claim"  # marks a folder the user named as taken by one run (or sweep)


def claim_named_folder(path: Path | str) -> Path:
    """Take the folder the user named (``hydra.run.dir=...``) for one run or sweep: created if absent,
    refused (ConfigError) when it holds anything, a run, a sweep or another run starting now. The claim
    is a file created with O_EXCL, so of two runs started together exactly one gets the folder."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        raise ConfigError("it holds another run (or one is starting there)") from None
    others = [p.name for p in path.iterdir() if p.name != CLAIM]
    if others:
        (path / CLAIM).unlink()
        raise ConfigError(f"it is not empty ({', '.join(sorted(others)[:3])})")
    return path


def write_csv(path: Path, table: pd.DataFrame, create: bool = True) -> dict[str, Any]:
    """Write ``table`` as CSV at ``path`` (atomically); returns its mark (rows, bytes, SHA-256)."""
    text = table.to_csv(index=False, float_format="%.10g", lineterminator="\n")
    write_atomic(path, text, create)
    data = text.encode()
    return {"rows": len(table), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_table_name(name: str) -> None:
    """A table is ``<name>.csv`` in the run folder itself: a name with a path in it (``../x``, ``a/b``)
    would write elsewhere, and is refused."""
    if not isinstance(name, str) or not TABLE_NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            f"table name {name!r}: a table is written as <name>.csv in the run folder itself, so its name "
            "is a plain file name (letters, digits, '_', '-' and '.', no '/' or '..'); rename the table"
        )


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


class RunFolder:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._identity = _identity(self.path)
        self.meta: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self.warnings: list[str] = []
        self.written: list[Path] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self, seed: int, device: str, config_digest: str) -> None:
        """Mark the run ``running``; an earlier run's tables and pictures in this folder (a resumed job
        that failed, changed or was damaged, or whose run.json is gone) are removed first, so the folder
        never shows two runs' files."""
        for stale in [*self.path.glob("*.csv"), *self.path.glob("plots/**/*.png"), *self.path.glob("*.png")]:
            stale.unlink(missing_ok=True)
        self.meta = {
            "status": "running",
            "config_digest": config_digest,
            "started": _now(),
            "seed": seed,
            "device": device,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "heartbeat": _now(),
            "versions": package_versions(),
            "argv": sys.argv,
        }
        self._write_meta()
        threading.Thread(target=self._beat, name="decpriv-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            self.meta["heartbeat"] = _now()
            try:
                self._write_meta()
            except (OSError, RuntimeError):  # a full disk, or the main thread updating meta: next beat
                continue

    def warn(self, message: str) -> None:
        """A warning raised during the run (each distinct message once), kept in run.json."""
        if message not in self.warnings:
            self.warnings.append(message)

    @contextmanager
    def phase(self, name: str):
        """Time one pipeline step; the wall time lands in run.json under ``wall_seconds``."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(time.perf_counter() - begin, 4)

    def write_table(self, name: str, table: pd.DataFrame) -> None:
        """``<name>.csv``, its mark kept for run.json (rewritten now when the run has already ended: a
        failed run's summary is written after its run.json)."""
        check_table_name(name)
        if table.attrs.get("keys"):  # declared by report.findings.keyed; read back by decpriv diff
            self.meta.setdefault("table_keys", {})[name] = list(table.attrs["keys"])
        self.check_folder()
        self.written.append(self.path / f"{name}.csv")
        mark = write_csv(self.path / f"{name}.csv", table, create=False)
        self.meta.setdefault("tables", {})[f"{name}.csv"] = mark
        if self.meta.get("status") in ("completed", "failed"):
            self._write_meta()

    def write_figure(self, relative: str, figure: "Figure") -> None:
        """Save a figure as PNG at ``relative`` and close it."""
        import matplotlib.pyplot as plt

        target = self.path / relative
        self.check_folder()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.stem}.tmp.png")
        self.written.append(target)
        try:
            figure.savefig(tmp, dpi=110)  # laid out by its maker: no second layout here (docs/speed.md)
            os.replace(tmp, target)
        finally:
            plt.close(figure)
            tmp.unlink(missing_ok=True)

    def complete(self, extra: dict[str, Any] | None = None) -> None:
        self.meta.update(status="completed", **(extra or {}))
        self._finish()

    def fail(self, error: BaseException) -> None:
        """Mark the run failed and remove the tables and pictures it had written: a half-written set
        (a full disk during ``write``) must not look like a result."""
        for file in self.written:
            file.unlink(missing_ok=True)
        self.written = []
        self.meta.pop("tables", None)
        self.meta.update(status="failed", error=error_text(error))
        try:
            self._finish()
        except RunFolderGone as gone:  # nothing can say failed where the run was: the error says it
            raise gone from error

    def _finish(self) -> None:
        self._stop.set()
        self.meta["finished"] = _now()
        self.meta["wall_seconds"] = {**self.timings, "total": round(sum(self.timings.values()), 4)}
        if self.warnings:
            self.meta["warnings"] = list(self.warnings)
        self._write_meta()

    def _write_meta(self) -> None:
        with self._lock:
            self.check_folder()
            write_atomic(self.path / "run.json", sealed_json(self.meta), create=False)

    def check_folder(self) -> None:
        """Refuse to write once the run's folder is gone (removed, or removed and made again): a run never
        completes into a folder it did not start in."""
        if _identity(self.path) != self._identity:
            raise RunFolderGone(
                f"the run folder {self.path} was removed while the run ran, so nothing of this run is kept "
                "(its folder is not made again without its .hydra/ config); run it again"
            )


class RunFolderGone(OSError):
    """The run's folder was removed (or replaced) under the running run."""


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


SELF_DIGEST = "run_json_sha256"  # run.json's own fields, hashed: an edited status or mark is found


def own_digest(meta: dict[str, Any]) -> str:
    """SHA-256 of run.json's fields but :data:`SELF_DIGEST`, in one canonical JSON encoding (sorted keys,
    no spaces): the same bytes whether computed on the run's dict or on run.json read back."""
    body = {k: v for k, v in meta.items() if k != SELF_DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def sealed_json(meta: dict[str, Any]) -> str:
    """run.json's text: ``meta`` as JSON read back (``default=str`` values as the readers see them), with
    the digest of its own fields."""
    body = json.loads(json.dumps(meta, default=str))
    body[SELF_DIGEST] = own_digest(body)
    return json.dumps(body, indent=2) + "\n"


def error_text(error: BaseException) -> str:
    """``interrupted: SIGTERM`` for a signal, else ``<Type>: <message>``."""
    if isinstance(error, KeyboardInterrupt):
        return f"interrupted: {error.args[0] if error.args else 'SIGINT'}"
    return f"{type(error).__name__}: {str(error) or type(error).__name__}"


def _alive(meta: dict[str, Any]) -> bool:
    """Whether the process that wrote a ``running`` run.json still runs: its pid on this host, or a
    recent heartbeat when it ran elsewhere (a Slurm node)."""
    try:
        beat = datetime.fromisoformat(str(meta.get("heartbeat") or meta.get("started")))
    except ValueError:
        return False
    fresh = (datetime.now() - beat).total_seconds() < STALE_SECONDS
    if meta.get("host") != socket.gethostname() or not isinstance(meta.get("pid"), int):
        return fresh
    try:
        os.kill(meta["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return fresh  # a process of another user holds that pid
    return fresh


FIELD_TYPES = {  # run.json fields the readers rely on, with their types
    "status": str,
    "config_digest": str,
    "started": str,
    "heartbeat": str,
    "host": str,
    "metrics": list,
    "wall_seconds": dict,
    "table_keys": dict,
    "warnings": list,
    "tables": dict,
    "repeatable_within": dict,
}


def read_status(path: Path) -> dict[str, Any]:
    """run.json as a dict (``{}`` without one). A ``running`` run whose process is gone reads as
    ``interrupted``; a corrupt file is refused in one sentence (ConfigError)."""
    file = Path(path) / "run.json"
    if not file.is_file():
        return {}
    try:
        meta = json.loads(file.read_text())
    except OSError as error:
        raise unreadable(file, error) from None
    except ValueError as error:
        raise corrupt(file, error) from None
    if not isinstance(meta, dict):
        raise corrupt(file, ValueError("not a JSON object"))
    if "status" not in meta:  # every run.json a run wrote says its status from its first write
        raise corrupt(file, ValueError("no status: not a run's run.json"))
    wrong = next((k for k, kind in FIELD_TYPES.items() if k in meta and not isinstance(meta[k], kind)), None)
    if wrong is not None:
        raise corrupt(file, ValueError(f"field {wrong!r} is {type(meta[wrong]).__name__}"))
    found = damage(Path(path), meta)
    if found is not None:
        return {
            **meta,
            "recorded_status": meta.get("status"),
            "status": "damaged",
            "error": f"damaged: {found}",
        }
    if meta.get("status") == "running" and not _alive(meta):
        meta.update(
            status="interrupted",
            error=f"interrupted: process {meta.get('pid')} on "
            f"{meta.get('host')} stopped without finishing (killed, or its machine went down)",
        )
    return meta


_HASHED: dict[tuple, str] = {}  # (path, device, inode, size, mtime) -> SHA-256: each table hashed once


def _sha256(file: Path) -> str:
    """The SHA-256 of ``file``'s bytes (OSError when it cannot be read), kept while the file is unchanged."""
    found = os.stat(file)
    key = (str(file), found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = hashlib.sha256(file.read_bytes()).hexdigest()
    return _HASHED[key]


def damage(folder: Path, meta: dict[str, Any]) -> str | None:
    """How a run folder differs from what its run wrote, in one clause, None when it does not: run.json
    edited (its fields no longer hash to the digest written with them), or a table it marked cut, changed,
    gone or unreadable."""
    if SELF_DIGEST in meta and meta[SELF_DIGEST] != own_digest(meta):
        return "its run.json was edited since the run wrote it (its fields no longer match their SHA-256)"
    marks = meta.get("tables") or {}
    sealed = SELF_DIGEST in meta and meta.get("status") in ("completed", "failed")
    if marks and sealed:  # a table the run did not write (a run.json from before the digest: not checked)
        stranger = next((f.name for f in sorted(folder.glob("*.csv")) if f.name not in marks), None)
        if stranger is not None:
            return f"its {stranger} is not a table the run wrote (run.json marks none of that name)"
    for name, mark in marks.items():
        if not isinstance(mark, dict) or not TABLE_NAME.fullmatch(name) or ".." in name:
            return f"its run.json marks {name!r}, which is not a table a run writes"
        file = folder / name
        try:
            digest = _sha256(file)
        except FileNotFoundError:
            return f"its {name} is gone"
        except OSError as error:
            return f"its {name} cannot be read ({error.strerror or error})"
        if digest == mark.get("sha256"):
            continue
        return _changed(file, name, mark)
    return None


def _changed(file: Path, name: str, mark: dict[str, Any]) -> str:
    """How a table differs from its mark: cut (fewer bytes and fewer lines than it wrote), else changed."""
    try:
        data = file.read_bytes()
    except OSError as error:
        return f"its {name} cannot be read ({error.strerror or error})"
    wrote, rows = mark.get("bytes"), mark.get("rows")
    if isinstance(wrote, int) and isinstance(rows, int) and len(data) < wrote and data.count(b"\n") <= rows:
        return f"its {name} is cut ({len(data)} of the {wrote} bytes the run wrote)"
    return f"its {name} was changed since the run wrote it (its SHA-256 is not the one run.json marks)"


def rerun_fix(folder: Path) -> str:
    """How to rerun a run in place: its sweep's command with resume=true for a sweep's job, else the run's
    own command line (its .hydra/overrides.yaml) with its folder and resume=true."""
    folder = Path(folder)
    if (folder.parent / "ledger.json").is_file() or (folder.parent / "multirun.yaml").is_file():
        return (
            f"rerun it in place with its sweep's command line and hydra.sweep.dir={folder.parent} resume=true"
        )
    import yaml

    try:
        overrides = [str(o) for o in yaml.safe_load((folder / ".hydra" / "overrides.yaml").read_text())]
    except (OSError, TypeError, yaml.YAMLError):
        overrides = ["<its overrides>"]
    return (
        f"rerun it in place: decpriv run {' '.join([*overrides, f'hydra.run.dir={folder}', 'resume=true'])}"
    )


def holds_orphan_run(folder: Path) -> bool:
    """A run's folder whose run.json is gone: a table of its run, no run.json, no sweep."""
    folder = Path(folder)
    if any((folder / name).exists() for name in ("run.json", "ledger.json", "multirun.yaml")):
        return False
    if any(folder.glob("*/run.json")) or any(folder.glob("*/.hydra")):  # a sweep whose plan files are gone
        return False
    # its summary.csv, or its .hydra/ beside a table (.hydra/ alone: a job that never began its run)
    return (folder / "summary.csv").is_file() or (folder / ".hydra").is_dir() and any(folder.glob("*.csv"))


def read_intact(folder: Path | str) -> dict[str, Any]:
    """run.json of a run whose result is shown (``show``, ``report``, ``diff``, ``plot``, ``api.load``): a
    damaged run, or a run folder whose run.json is gone, is refused in one sentence (ConfigError) with the
    command that reruns it in place."""
    folder = Path(folder)
    if holds_orphan_run(folder):
        raise ConfigError(
            f"{folder}: its run.json is gone, so nothing in it can be told from a partial or another run's "
            f"result; {rerun_fix(folder)} (or restore run.json)."
        )
    meta = read_status(folder)
    if meta.get("status") == "damaged":
        _refuse_unreadable(folder, meta)
        raise ConfigError(
            f"{folder}: {meta['error']}, so it is not shown as a result; {rerun_fix(folder)} "
            "(or restore what was changed)."
        )
    return meta


def _refuse_unreadable(folder: Path, meta: dict[str, Any]) -> None:
    """A marked table that exists and cannot be read has lost nothing a rerun would make again: its fix is
    the permission's or the disk's (:func:`unreadable`), never a restore or a rerun."""
    for name in meta.get("tables") or {}:
        file = folder / str(name)
        try:
            _sha256(file)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise unreadable(file, error) from None


def corrupt(file: Path, error: BaseException) -> ConfigError:
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    if file.name == "run.json":  # the run's own record: rerunning it in place makes it again
        return ConfigError(
            f"{file}: unreadable or corrupt ({detail}); {rerun_fix(file.parent)} (or restore it)."
        )
    return ConfigError(
        f"{file}: unreadable or corrupt ({detail}); restore the file or delete the run folder."
    )


def read_table(file: Path) -> pd.DataFrame:
    """A CSV table of a run folder, checked against its mark in run.json (when the run wrote one); a
    corrupt, cut or unreadable one is refused in one sentence."""
    file = Path(file)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as error:
        raise unreadable(file, error) from None
    check_mark(file, data)
    try:
        return pd.read_csv(io.BytesIO(data))
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise corrupt(file, error) from None


def read_summary(folder: Path | str) -> pd.Series:
    """The one row of a run's summary.csv; a summary with no row (cut inside its header) is refused."""
    file = Path(folder) / "summary.csv"
    table = read_table(file)
    if table.empty:
        raise ConfigError(
            f"{file}: holds no row (cut inside its header, or not a run's summary), so there is no result "
            "to show; rerun the run (its command with resume=true reruns it) or restore the file."
        )
    return table.iloc[0]


def _mark_of(file: Path) -> dict[str, Any] | None:
    """The mark run.json beside ``file`` keeps for it; None without one (a run that is still writing, a
    run from before the marks, a sweep's table): a corrupt run.json is refused by its own readers."""
    try:
        marks = json.loads((file.parent / "run.json").read_text()).get("tables")
    except (OSError, ValueError, AttributeError):
        return None
    mark = marks.get(file.name) if isinstance(marks, dict) else None
    return mark if isinstance(mark, dict) else None


def check_mark(file: Path, data: bytes) -> None:
    """Refuse a table whose bytes are not those its run wrote (run.json's mark: rows, bytes, SHA-256)."""
    mark = _mark_of(file)
    if mark is None or hashlib.sha256(data).hexdigest() == mark.get("sha256"):
        return
    wrote = mark.get("bytes")
    how = (
        f"cut: it holds {len(data)} of the {wrote} bytes ({mark.get('rows')} rows) the run wrote"
        if isinstance(wrote, int) and len(data) < wrote
        else "changed since the run wrote it: its SHA-256 is not the one run.json records"
    )
    raise ConfigError(
        f"{file}: {how}, so it is not shown as a result; rerun the run (its command with resume=true "
        "reruns it) or restore the file."
    )


def unreadable(file: Path, error: OSError) -> ConfigError:
    """A file that exists and cannot be read (permissions, an I/O error): its fix is not a restore."""
    fix = (
        "give yourself read permission (chmod u+r)"
        if isinstance(error, PermissionError)
        else "check the disk"
    )
    return ConfigError(f"{file}: cannot be read ({error.strerror or error}); {fix}.")


def completed_summary(folder: Path | str, meta: dict[str, Any] | None = None) -> pd.DataFrame | None:
    """The one-row summary.csv of a run that run.json says completed, or None when it is not completed or
    its summary is missing, unreadable or not a completed run's (one row, ``status`` completed): a garbage
    summary.csv never passes for a result (sweep tables, resume)."""
    folder = Path(folder)
    meta = read_status(folder) if meta is None else meta
    if meta.get("status") != "completed":
        return None
    try:
        table = read_table(folder / "summary.csv")
    except (OSError, ConfigError):
        return None
    ok = len(table) == 1 and "status" in table and table["status"].iloc[0] == "completed"
    return table if ok else None
