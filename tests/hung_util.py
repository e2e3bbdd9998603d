"""A loop disk whose I/O hangs on demand, for the hung-I/O tests (tests/test_hung_live.py, the acceptance
scenario tests/acceptance/test_acc_hung.py): a loop device over a file on a FUSE file system (tests/fuse_hold.py)
whose daemon stops replying while a gate file exists."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ioscope.base import devices

HERE = Path(__file__).resolve().parent
SIZE_MB = 16


def fuse_problem() -> str | None:
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse"
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as e:   # fusepy, or libfuse2 (its library) missing
        return f"fusepy cannot load: {e}"
    return None


class HeldDisk:
    """The FUSE daemon (a process), its file system mounted, and a loop device over its file. hold() makes
    the daemon stop replying, release() makes it answer again; close() undoes everything, the daemon
    released first (a held request would keep the loop device from detaching)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ioscope-hung-"))
        self.mnt = self.dir / "mnt"
        self.mnt.mkdir()
        self.gate = self.dir / "hold"
        fd, self.backing = tempfile.mkstemp(prefix="ioscope-hung-", dir="/dev/shm")
        os.ftruncate(fd, SIZE_MB << 20)
        os.close(fd)
        self.daemon: subprocess.Popen[str] | None = None
        self.loop = ""
        self.mounted = False

    def __enter__(self) -> HeldDisk:
        try:
            self.daemon = subprocess.Popen([sys.executable, str(HERE / "fuse_hold.py"), self.backing, str(self.mnt),
                                            str(self.gate)], stderr=subprocess.PIPE, text=True)
            end = time.monotonic() + 10
            while not (self.mnt / "disk.img").exists():
                assert self.daemon.poll() is None, self.daemon.stderr.read() if self.daemon.stderr else ""
                assert time.monotonic() < end, "the FUSE file system did not come up"
                time.sleep(0.05)
            self.mounted = True
            self.loop = subprocess.run(["losetup", "-f", "--show", "--direct-io=off", str(self.mnt / "disk.img")],
                                       check=True, capture_output=True, text=True).stdout.strip()
            if shutil.which("udevadm"):   # udev's probe of the new disk reads it: done before the hold
                subprocess.run(["udevadm", "settle", "--timeout=10"], check=False, capture_output=True)
            return self
        except BaseException:
            self.close()
            raise

    @property
    def name(self) -> str:
        return os.path.basename(self.loop)

    def hold(self) -> None:
        self.gate.touch()

    def held_read(self) -> subprocess.Popen[str]:
        """hold(), then dd reads one 4 KiB block at sector 8000 with O_DIRECT: it blocks until release()."""
        self.hold()
        return subprocess.Popen(["dd", f"if={self.loop}", "of=/dev/null", "bs=4k", "count=1", "iflag=direct",
                                 "skip=1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def release(self) -> None:
        self.gate.unlink(missing_ok=True)

    def in_flight(self) -> int:
        return devices.read_diskstats()[self.name].in_flight

    def close(self) -> None:
        self.release()
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], check=False, capture_output=True)
            self.loop = ""
        if self.mounted:
            if subprocess.run(["umount", str(self.mnt)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(self.mnt)], check=False, capture_output=True)
            self.mounted = False
        if self.daemon is not None:
            try:
                self.daemon.wait(timeout=10)   # it ends when unmounted
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
            self.daemon = None
        if os.path.exists(self.backing):
            os.unlink(self.backing)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()
