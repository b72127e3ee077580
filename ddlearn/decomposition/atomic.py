"""Atomic file writes: a crash or an interrupt leaves the old file or the new one, never half
of either. Torch-free, so that every layer (the learned models' checkpoints, the benchmark
harness's results) writes through this one copy."""
from __future__ import annotations

import json
import os
import tempfile

__all__ = ["atomic_write", "atomic_write_json"]


def atomic_write(path: str, write) -> None:
    """Call ``write(fileobj)`` on a temporary file beside ``path`` (same directory, so the same
    file system), flush it to disk, then rename it onto ``path`` (:func:`os.replace` is atomic
    on POSIX). On any exception the temporary file is removed and ``path`` is untouched."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, data) -> None:
    """``data`` as indented JSON at ``path``, through :func:`atomic_write`."""
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=1).encode()))
