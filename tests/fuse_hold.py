"""A FUSE file system of one file, disk.img, whose reads and writes can be held: a device that stops
answering, for tests/test_hung_live.py (a loop device over disk.img).

    python fuse_hold.py BACKING MOUNTPOINT GATE

BACKING is the real file behind disk.img. While the file GATE exists, every read and write of disk.img
waits (the daemon stops replying: the kernel keeps the request in flight); once GATE is removed they
complete. Served until unmounted."""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from typing import Any

from fuse import FUSE, FuseOSError, Operations

NAME = "/disk.img"


class Hold(Operations):  # type: ignore[misc]
    def __init__(self, backing: str, gate: str) -> None:
        self.backing, self.gate = backing, gate
        self.fd = os.open(backing, os.O_RDWR)

    def _wait(self) -> None:
        while os.path.exists(self.gate):
            time.sleep(0.01)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        if path != NAME:
            raise FuseOSError(errno.ENOENT)
        st = os.fstat(self.fd)
        return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": st.st_size,
                "st_mtime": st.st_mtime, "st_atime": st.st_atime, "st_ctime": st.st_ctime}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", NAME[1:]]

    def open(self, path: str, flags: int) -> int:
        if path != NAME:
            raise FuseOSError(errno.ENOENT)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._wait()
        return os.pread(self.fd, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._wait()
        return os.pwrite(self.fd, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        os.ftruncate(self.fd, length)

    def flush(self, path: str, fh: int) -> None:
        return None

    def fsync(self, path: str, datasync: bool, fh: int) -> None:
        self._wait()
        os.fsync(self.fd)


if __name__ == "__main__":
    backing, mnt, gate = sys.argv[1:4]
    # direct_io: every read of disk.img reaches the daemon (no page cache in between)
    FUSE(Hold(backing, gate), mnt, foreground=True, direct_io=True)
