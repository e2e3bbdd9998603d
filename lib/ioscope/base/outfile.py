"""Output files: created private (0600), never overwritten without -f.

Captures, exports and their text forms name processes, disks and the host
(docs/capture-format.md), so every file ioscope writes goes through
create_private: created with O_EXCL and mode 0600 whatever the umask, or, with
force, truncated and set to 0600 with fchmod (an overwritten file keeps its
mode otherwise). One refusal text for every tool (record, export, import).
"""

from __future__ import annotations

import argparse
import os
import stat
from typing import IO, Any

from ioscope.base.errors import IoscopeError

PRIVATE_MODE = 0o600


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--force", action="store_true", help="overwrite the output file if it exists")


def exists_error(path: str) -> IoscopeError:
    return IoscopeError(f"{path} exists", "choose another file or overwrite it with -f")


def check_output(path: str, force: bool) -> None:
    """Refuse early, in one line, an output file that exists (without -f) or whose directory does not.

    A tool calls this before its slow start (loading BPF, reading a capture); create_private
    checks again, atomically, when the file is made."""
    if os.path.lexists(path) and not force:
        raise exists_error(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise IoscopeError(f"directory {parent} does not exist", "create it or write the file elsewhere")


def create_private(path: str, force: bool) -> int:
    """Open path for writing, owner-only (0600); returns the file descriptor.

    Without force an existing file (or symlink) is refused (O_EXCL); with force it is
    truncated and, if it is a regular file, its mode set to 0600 (a device or a pipe keeps its own)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, PRIVATE_MODE)
    except FileExistsError:
        raise exists_error(path) from None
    except OSError as exc:
        raise IoscopeError(f"cannot write {path}: {exc.strerror}", "check the directory and free space") from None
    try:
        # a regular file only: -f -o /dev/null, a named pipe or /dev/stdout are not ours to change
        # (an earlier version made /dev/null root-only for every other user)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, PRIVATE_MODE)
    except OSError as exc:
        os.close(fd)
        raise IoscopeError(f"cannot make {path} private: {exc.strerror}", "check who owns the file") from None
    return fd


def open_private(path: str, mode: str = "w", *, force: bool, **kw: Any) -> IO[Any]:
    """open(path, mode) on a file made by create_private."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_private writes new files: mode 'w' or 'wb', not {mode!r}")
    return os.fdopen(create_private(path, force), mode, **kw)
