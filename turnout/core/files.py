"""Writing a file whole or not at all, for the files turnout converts once and reads many times (traces,
device profiles): a reader never sees half a file, and a failed write leaves no temp file behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def replaced_atomically(path: str | os.PathLike, mode: str = "wb", **open_kwargs):
    """Yield a temp file beside ``path`` (its folder is made); when the block ends it replaces ``path`` with
    the permissions a plainly created file gets; when the block raises it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **open_kwargs) as f:
            yield f
        _default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _default_mode(path) -> None:
    """Give a ``mkstemp`` file (0600) the permissions a plainly created file would get."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
