"""Atomic file writes: every file the project writes (checkpoints, config.json, metrics trims, datasets'
meta.json) goes through here.

The content goes to a temporary file with a unique name in the same directory (two processes never share
one), is synced, and is renamed over the target: a crash, SIGKILL or full disk at any moment leaves the
old file or the new one, never a partial file under the final name. A failed write removes its temporary
file and raises WriteError naming the path, the reason and, for a full disk, the space free and needed.
"""

import errno
import os
import shutil
import uuid
from pathlib import Path

from errors import UserError


class WriteError(UserError):
    """A file could not be written; the previous version, if any, is intact."""


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def fsync_dir(directory: Path) -> None:
    """Make a rename in directory durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path, write, needed_bytes: int | None = None) -> None:
    """Call write(binary file) on a temporary file, then rename it to path."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        reason = e.strerror or type(e).__name__
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            free = shutil.disk_usage(path.parent).free
            need = f", about {needed_bytes / 2**20:,.0f} MiB needed" if needed_bytes else ""
            reason += f": {free / 2**20:,.0f} MiB free in {path.parent}{need}; free space there"
        previous = "the previous version is kept" if path.exists() else "nothing was written"
        raise WriteError(f"could not write {path} ({reason}); {previous}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
