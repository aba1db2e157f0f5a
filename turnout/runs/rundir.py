"""The run folder: one experiment's units, checkpoints and tables, owned by one process at a time.

Layout (``DIR.partial`` while the run is going on, renamed to ``DIR`` when every unit is done)::

    lock                      held (flock) by the process running the experiment; holds its pid
    experiment.json           the experiment as given (file + --set overrides): what resume re-reads
    config.yaml               every variant's resolved config, seeds, versions
    units/v00-NAME/seed-0/    one folder per (variant, seed) unit:
        rounds.jsonl            one row per finished round, appended and flushed as rounds complete
        checkpoint/             the unit's latest checkpoint (see turnout.runs.checkpoint)
        clients.jsonl, summary.json   written when the unit finishes (summary.json = done)
    logs/                     full tracebacks of unexpected errors
    baselines/                centralised baselines, computed once per population by whichever worker
                              needs one first (a lock file per population), read by the others
    rounds.csv, clients.csv, comparison.csv, summary.json, *.png   built from the units at the end

Creation is atomic and exclusive: the folder is made under a temporary name, its lock taken, and
then renamed to ``DIR.partial`` — a rename that fails if another run got there first — so two
runs can never share a folder, and a lock left by a dead process is released by the OS.
``--out`` is checked before any work: an existing file, a non-empty folder, a parent that is a
file, a name that is too long, a symbolic link (refused rather than followed, so the run folder
is where the user reads it is) or a place that cannot be written is one line, exit 2.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from ..core.errors import ConfigError

PARTIAL = ".partial"
LOCK = "lock"

# The run folder's names, defined once (README, "The run folder"): the folder's own files and folders ...
CONFIG, EXPERIMENT, SUMMARY = "config.yaml", "experiment.json", "summary.json"
UNITS, LOGS, SCRATCH, BASELINES = "units", "logs", "scratch", "baselines"
# ... and each unit's (``units/vNN-VARIANT/seed-S/``)
UNIT_ROWS, UNIT_CLIENTS, UNIT_SUMMARY, UNIT_IDENTITY = "rounds.jsonl", "clients.jsonl", "summary.json", "unit.json"
UNIT_GLOB = "*/seed-*"


def unit_path(root: Path, index: int, variant: str, seed: int) -> Path:
    """Where unit (variant number ``index``, ``variant``, ``seed``) lives in the run folder ``root``."""
    return Path(root) / UNITS / f"v{index:02d}-{slug(variant)}" / f"seed-{seed}"


def partial_of(out: Path) -> Path:
    return out.with_name(out.name + PARTIAL)


def default_out_dir(name: str) -> Path:
    """``runs/NAME-YYYYmmdd-HHMMSS-xxxx``: unique even for runs of one experiment started in the same second."""
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def check_out(out: Path, key: str = "--out") -> None:
    """Refuse an output path that cannot become a new run folder (before any work is done)."""
    out = Path(out)
    try:
        name_max = os.pathconf(_existing_ancestor(out), "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    too_long = [part for part in partial_of(out).absolute().parts if len(part.encode()) > name_max]
    if too_long or len(str(partial_of(out).absolute()).encode()) >= 4096:
        raise ConfigError(key, _short(out), f"is too long (a name over {name_max} bytes or a path over 4095); "
                                            "choose a shorter name")
    for p in (out, partial_of(out)):
        if p.is_symlink():
            raise ConfigError(key, str(p), "is a symbolic link; give the real path of a new folder")
    if out.exists():
        if not out.is_dir():
            raise ConfigError(key, str(out), "is an existing file; give the path of a new folder")
        if any(out.iterdir()):
            raise ConfigError(key, str(out), "already exists and is not empty; choose a new directory")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(key, str(out), f"cannot be created: {parent} is a file, not a folder")
            break


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 60 else text[:30] + "…" + text[-20:]


def _existing_ancestor(path: Path) -> Path:
    for p in [*path.absolute().parents]:
        try:
            if p.exists():
                return p
        except OSError:
            continue
    return Path("/")


class FolderBusy(ConfigError):
    """Another live process holds the run folder."""


def _lock(fd: int, folder: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise FolderBusy("--out", str(folder), f"is in use by another turnout run (pid {holder}); "
                                               "wait for it or choose another folder") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _os_error(key: str, path: Path, exc: OSError) -> ConfigError:
    return ConfigError(key, str(path), f"cannot be created ({exc.strerror or exc}); choose a folder you can write")


class RunFolder:
    """An experiment's run folder, locked by this process for as long as the object lives."""

    def __init__(self, out: Path, path: Path, lock_fd: int, made: tuple[Path, ...] = ()):
        self.out, self.path, self._lock_fd = Path(out), Path(path), lock_fd
        self._made = made  # parent folders create() made, deepest first: discard() removes them again

    # ---- creating and reopening ----------------------------------------------------------------
    @classmethod
    def create(cls, out: Path) -> "RunFolder":
        """A new, locked ``OUT.partial`` (one line, exit 2, when that cannot be done)."""
        out = Path(out)
        check_out(out)
        target = partial_of(out)
        if target.exists():
            cls.reopen(out)._release()  # busy → FolderBusy naming the holder; else a leftover:
            raise ConfigError("--out", str(out), f"{target.name} holds an unfinished run; resume it with "
                                                 f"`turnout resume {out}` or remove it")
        made = tuple(p for p in [target.parent, *target.parent.parents] if not p.exists())
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name[:100]}.starting-", dir=target.parent))
        except OSError as exc:
            raise _os_error("--out", out, exc) from None
        fd = os.open(tmp / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        _lock(fd, tmp)
        try:
            os.rename(tmp, target)  # fails when OUT.partial appeared meanwhile (it is never empty)
        except OSError as exc:
            os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                cls.reopen(out)._release()
                raise ConfigError("--out", str(out), f"{target.name} was just created by another run") from None
            raise _os_error("--out", out, exc) from None
        return cls(out, target, fd, made)

    @classmethod
    def reopen(cls, given: Path) -> "RunFolder":
        """Lock an existing unfinished run folder (``DIR`` or ``DIR.partial``) to resume it."""
        given = Path(given)
        if given.name.endswith(PARTIAL):
            out, path = given.with_name(given.name[: -len(PARTIAL)]), given
        else:
            out, path = given, partial_of(given)
        if not path.is_dir():
            if (out / SUMMARY).is_file() and not (out / UNITS).is_dir():
                raise ConfigError("resume", str(given), "is a finished run folder; there is nothing to resume")
            if out.is_dir() and (out / UNITS).is_dir() and not path.exists():
                raise ConfigError("resume", str(given), "is a finished run folder; there is nothing to resume")
            raise ConfigError("resume", str(given), "is not an unfinished turnout run folder (no "
                                                    f"{path.name}/ with a lock); give the folder `turnout run` wrote")
        if not (path / LOCK).is_file():
            raise ConfigError("resume", str(given), "is not a turnout run folder (no lock file)")
        fd = os.open(path / LOCK, os.O_RDWR)
        _lock(fd, path)
        return cls(out, path, fd)

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def release(self) -> None:
        """Give up the lock (the process exiting does the same)."""
        self._release()

    def discard(self) -> None:
        """Remove the folder (a run that failed before any unit ran leaves nothing behind)."""
        shutil.rmtree(self.path, ignore_errors=True)
        for parent in self._made:  # an --out under new folders leaves none of them
            try:
                parent.rmdir()
            except OSError:
                break
        self._release()

    def complete(self) -> Path:
        """Rename ``DIR.partial`` to ``DIR`` (every unit done, tables built) and release the lock."""
        (self.path / LOCK).unlink(missing_ok=True)
        if self.out.exists():
            self.out.rmdir()  # an empty folder the user made for us
        os.rename(self.path, self.out)
        self.path = self.out
        self._release()
        return self.out

    # ---- contents ----------------------------------------------------------------------------------
    def unit_dir(self, index: int, variant: str, seed: int) -> Path:
        return unit_path(self.path, index, variant, seed)

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    def write_json(self, name: str, doc) -> None:
        atomic_write_text(self.path / name, json.dumps(doc, indent=2, sort_keys=False) + "\n")

    def read_json(self, name: str):
        return json.loads((self.path / name).read_text())


def slug(name: str) -> str:
    """A folder-safe form of a variant name (its index in front keeps slugs unique)."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", name)[:60].strip("_") or "variant"


def atomic_write_text(path: Path, text: str) -> None:
    """Write a whole file or nothing: a temp file in the same folder, fsync'ed, renamed over ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
