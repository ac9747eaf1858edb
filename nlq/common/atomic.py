"""Atomic file writes: every file the project writes (checkpoints, config.json, metrics trims, datasets'
meta.json) goes through here.

The content goes to a temporary file with a unique name in the same directory (two processes never share
one), is synced, and is renamed over the target: a crash, SIGKILL or full disk at any moment leaves the
old file or the new one, never a partial file under the final name. A failed write removes its temporary
file and raises WriteError naming the path, the reason and, for a full disk, the space free and needed.
"""

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import uuid
from pathlib import Path

from nlq.common.errors import UserError


class WriteError(UserError):
    """A file could not be written; the previous version, if any, is intact."""


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def remove_stale_temps(directory) -> list[Path]:
    """Remove what killed writers left in directory: temporary files (temp_path) and export directories
    (hf_export) whose writing process no longer runs. Those of a live process are never touched."""
    removed = []
    for p in Path(directory).glob(".*"):
        m = re.fullmatch(r"\..+\.(\d+)\.[0-9a-z_]{8}(\.tmp)?", p.name)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def fsync_dir(directory: Path) -> None:
    """Make a rename in directory durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a write: the file is as it was before the write began."""


@contextlib.contextmanager
def sigint_noted():
    """A list that holds SIGINT once one arrives inside the block, which it still interrupts (in the main
    thread; elsewhere the list stays empty). torch.save turns the KeyboardInterrupt raised in its writer into a
    RuntimeError ('[enforce fail ...]'), which would read as a disk fault."""
    seen = []
    before = signal.getsignal(signal.SIGINT)  # None: a handler installed outside Python, which is left alone
    if threading.current_thread() is not threading.main_thread() or before is None:
        yield seen
        return

    def noted(signum, frame):
        if before is signal.SIG_IGN:
            return
        seen.append(signum)
        (before if callable(before) else signal.default_int_handler)(signum, frame)

    signal.signal(signal.SIGINT, noted)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, before)


def atomic_write(path, write, needed_bytes: int | None = None) -> None:
    """Call write(binary file) on a temporary file, then rename it to path."""
    path = Path(path)
    tmp = temp_path(path)
    with sigint_noted() as sigint:
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except BaseException as e:
            _discard(tmp)
            previous = "the previous version is kept" if path.exists() else "nothing was written"
            if sigint or isinstance(e, KeyboardInterrupt):
                raise Interrupted(f"while writing {path.name}, which was left as it was ({previous})") from None
            if not isinstance(e, (OSError, RuntimeError)):  # torch.save: a failed write is a RuntimeError
                raise
            raise WriteError(f"could not write {path} ({_reason(path, e, needed_bytes)}); {previous}") from None


def _discard(tmp: Path) -> None:
    """Remove a temporary file; a failure here must not hide the error that led to it."""
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass


def _reason(path: Path, e: Exception, needed_bytes: int | None) -> str:
    """Why a write failed, in words; for a full disk (or a torch write error on a nearly full one) the
    space free and needed."""
    reason = getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0]
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return reason
    full = getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
    if full or (isinstance(e, RuntimeError) and needed_bytes and free < needed_bytes):
        need = f", about {size(needed_bytes)} needed" if needed_bytes else ""
        reason += f": {size(free)} free in {path.parent}{need}; free space there"
    return reason


def size(n: int) -> str:
    """Bytes in the unit that shows them (a nearly full disk has KiB free, not '0 MiB')."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} bytes"


def atomic_write_text(path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path, obj, indent: int = 1, **dumps) -> None:
    """obj as indented JSON with a final newline (json.dumps options in dumps), written atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent, **dumps) + "\n")


def check_writable(option: str, path) -> None:
    """Refuse, before any work, an output path that cannot be written, in one line naming the option."""
    path = Path(path)
    parent = path.resolve().parent
    if path.is_dir():
        problem = "is a directory: name a file"
    elif not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        problem = "its directory does not exist or is not writable"
    elif path.exists() and not os.access(path, os.W_OK):
        problem = "exists and is not writable"
    elif not creates_files(parent):  # permissions can say yes where the filesystem says no (/proc, as root)
        problem = "its directory does not take new files"
    else:
        return
    raise WriteError(f"{option} {path}: {problem}; choose another path")


def creates_files(directory: Path) -> bool:
    """Whether a file can be made in directory: one is, and removed (what an atomic write will do)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".write-check-", dir=directory)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True
