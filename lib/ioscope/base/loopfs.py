"""A throw-away filesystem on a tmpfs-backed loop device, for the demo scenario, tests and bench."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from ioscope.base.errors import IoscopeError
from ioscope.base.testbed import LoopDevice


def drop_caches() -> None:
    """Write back dirty pages and empty the page cache (echo 3 > /proc/sys/vm/drop_caches)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3")
    except OSError as exc:
        raise IoscopeError(f"cannot drop the page cache: {exc.strerror}", "run as root") from None


class LoopFS:
    """ext4 on a tmpfs-backed loop device, mounted noatime in a temporary directory.

    mkfs initialises inode tables and the journal up front, so no background
    thread writes to the device later.
    """

    # Always set read_ahead_kb, so runs do not depend on the device's history; LoopDevice puts
    # every queue setting it changed back on exit.
    DEFAULT_READ_AHEAD_KB = 128

    def __init__(self, size_mb: int = 256, read_ahead_kb: int | None = None, scheduler: str | None = None) -> None:
        self.loop = LoopDevice(size_mb=size_mb, read_ahead_kb=read_ahead_kb or self.DEFAULT_READ_AHEAD_KB,
                               scheduler=scheduler)
        self.mnt = ""

    def __enter__(self) -> LoopFS:
        self.loop.__enter__()
        try:
            cmd = ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.loop.path]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                raise IoscopeError(f"mkfs.ext4 failed: {p.stderr.strip()}", "install e2fsprogs")
            self.mnt = tempfile.mkdtemp(prefix="ioscope-ra-")
            p = subprocess.run(["mount", "-o", "noatime", self.loop.path, self.mnt], capture_output=True, text=True)
            if p.returncode:
                os.rmdir(self.mnt)
                self.mnt = ""
                raise IoscopeError(f"cannot mount {self.loop.path}: {p.stderr.strip()}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @property
    def name(self) -> str:
        return self.loop.name

    def path(self, name: str) -> str:
        return os.path.join(self.mnt, name)

    def make_file(self, name: str, size: int) -> str:
        """A file of size bytes of non-zero data, written back to the device."""
        path = self.path(name)
        chunk = bytes(range(256)) * 4096  # 1 MiB
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            left = size
            while left > 0:
                left -= os.write(fd, chunk[: min(left, len(chunk))])
            os.fsync(fd)
        finally:
            os.close(fd)
        return path

    def set_read_ahead_kb(self, kb: int) -> None:
        self.loop.set_queue("read_ahead_kb", str(kb))

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        if self.mnt:
            subprocess.run(["umount", self.mnt], capture_output=True)
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass
            self.mnt = ""
        self.loop.__exit__(t, v, tb)
