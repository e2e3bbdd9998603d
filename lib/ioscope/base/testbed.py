"""Test devices and known workloads: tmpfs-backed loop devices, cgroups to run a workload in, and fio.

Used by `ioscope demo`, the live tests and bench/. Everything created here is
removed on exit, also when the body raises.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from ioscope.base import devices
from ioscope.base.errors import IoscopeError


def _run(cmd: list[str], what: str) -> str:
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise IoscopeError(f"{cmd[0]} is not installed, needed to {what}",
                           f"install it (apt-get install {cmd[0]})") from None
    except subprocess.CalledProcessError as exc:
        msg = (exc.stderr or exc.stdout or "").strip().splitlines()
        raise IoscopeError(f"cannot {what}: {' '.join(cmd)} failed: {msg[-1] if msg else exc.returncode}") from None
    return out.stdout


class LoopDevice:
    """A loop device over a file on tmpfs (fast, blk-mq). Use as a context manager."""

    def __init__(self, size_mb: int = 256, scheduler: str | None = None, directory: str = "/dev/shm",
                 nr_requests: int | None = None, read_ahead_kb: int | None = None,
                 partitions_mb: list[int] | None = None) -> None:
        self.size_mb = size_mb
        self.partitions_mb = partitions_mb or []
        self.scheduler = scheduler
        self.directory = directory
        self.nr_requests = nr_requests
        self.read_ahead_kb = read_ahead_kb
        self.backing: str | None = None
        self._saved_queue: dict[str, str] = {}
        self.path = ""
        self.name = ""

    def __enter__(self) -> LoopDevice:
        fd, self.backing = tempfile.mkstemp(prefix="ioscope-loop-", dir=self.directory)
        try:
            os.ftruncate(fd, self.size_mb << 20)
            if self.partitions_mb:
                os.pwrite(fd, mbr(self.partitions_mb, self.size_mb), 0)
        finally:
            os.close(fd)
        try:
            scan = ["-P"] if self.partitions_mb else []
            self.path = _run(["losetup", "-f", "--show", *scan, self.backing], "create a loop device").strip()
            self.name = os.path.basename(self.path)
            if self.partitions_mb and not Path(f"/sys/block/{self.name}/{self.name}p1").exists():
                # kernels without the DOS partition parser: add them explicitly (BLKPG)
                _run(["partx", "-a", self.path], "add the partitions")
            if self.scheduler:
                self.set_queue("scheduler", self.scheduler)
            if self.nr_requests:
                self.set_queue("nr_requests", str(self.nr_requests))
            if self.read_ahead_kb is not None:
                self.set_queue("read_ahead_kb", str(self.read_ahead_kb))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def set_queue(self, key: str, value: str) -> None:
        """Change a queue setting; the first value seen is put back on exit (loop devices keep
        their queue settings after losetup -d, and the next user of the number would inherit them)."""
        path = Path(f"/sys/block/{self.name}/queue/{key}")
        try:
            if key not in self._saved_queue:
                old = path.read_text().strip()
                # the scheduler file lists them all: "none [mq-deadline] kyber"
                cur = [w[1:-1] for w in old.split() if w.startswith("[")]
                self._saved_queue[key] = cur[0] if cur else old
            path.write_text(value)
        except OSError as exc:
            raise IoscopeError(f"cannot set {key}={value} on {self.name}: {exc.strerror}") from None

    def _restore_queue(self) -> None:
        # scheduler last: nr_requests depends on it
        for key in sorted(self._saved_queue, key=lambda k: k == "scheduler"):
            try:
                Path(f"/sys/block/{self.name}/queue/{key}").write_text(self._saved_queue[key])
            except OSError:
                pass
        self._saved_queue.clear()

    def partition(self, n: int) -> str:
        """/dev path of partition n (1-based), waiting for udev-less device nodes to appear."""
        path = f"{self.path}p{n}"
        for _ in range(100):
            if os.path.exists(path):
                return path
            time.sleep(0.02)
        raise IoscopeError(f"partition {path} did not appear")

    @property
    def device(self) -> devices.BlockDevice:
        return devices.resolve_disk(self.name)

    def diskstats(self) -> devices.DiskStats:
        return devices.read_diskstats()[self.name]

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        if self.path:
            self._restore_queue()
            if self.partitions_mb:
                subprocess.run(["partx", "-d", self.path], capture_output=True)
            subprocess.run(["losetup", "-d", self.path], capture_output=True)
            self.path = ""
        if self.backing:
            try:
                os.unlink(self.backing)
            except FileNotFoundError:
                pass
            self.backing = None


class TestCgroups:
    """Cgroups made for a test or a bench: `top` (a cgroup path, "/ioscope-NAME-PID") and one child per
    name ("a", "a/b": made in order, so a parent comes first), under `mount` (a hierarchy's mount point:
    the io controller's, for I/O charged to them);
    remove() takes them away, waiting for their last processes to leave."""

    __test__ = False  # not a pytest test class

    def __init__(self, mount: Path, prefix: str, names: list[str], controllers: str = "io") -> None:
        """controllers: comma-separated, enabled for the children (v2); "" for none (a v2 cgroup's own files:
        cgroup.procs, io.pressure)."""
        self.top = f"/{prefix}-{os.getpid()}"
        self.root = mount / self.top.lstrip("/")
        # cgroup v2: a child has a controller's state of its own only when its parent enables it for its
        # children (cgroup.subtree_control); without it, its I/O is charged to the nearest ancestor
        # that has it. Processes then go in leaves only (v2's "no internal processes").
        self.v2 = (mount / "cgroup.controllers").exists()
        # a controller the hierarchy has but its root does not pass down (the unified hierarchy beside v1,
        # memory bound to no v1 hierarchy): enabled at the root for the test, disabled again by remove()
        self.enabled_at_root: list[str] = []
        wanted = [c for c in controllers.split(",") if c]
        if self.v2:
            on = (mount / "cgroup.subtree_control").read_text().split()
            self.enabled_at_root = [c for c in wanted if c not in on]
            if self.enabled_at_root:
                (mount / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in self.enabled_at_root))
        self.mount = mount
        try:
            self.root.mkdir()
            for n in names:
                d = self.root / n
                if self.v2 and wanted:
                    (d.parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
                d.mkdir()
        except BaseException:
            self.remove()
            raise

    def shell(self, group: str, cmd: str) -> list[str]:
        """sh that moves itself into the group, then runs cmd in its place (exec)."""
        return ["sh", "-c", f"echo $$ > {self.root / group / 'cgroup.procs'} && exec {cmd}"]

    def remove(self, timeout: float = 30.0) -> None:
        """rmdir the children, then the top; a cgroup is busy until its last process has exited, which a
        loaded host can take seconds to finish: tried again until timeout."""
        deadline = time.monotonic() + timeout
        # the deepest first: a cgroup with a child cannot be removed
        dirs = sorted((d for d in self.root.rglob("*") if d.is_dir()), key=lambda d: (len(d.parts), str(d)),
                      reverse=True) if self.root.exists() else []
        for d in [*dirs, self.root]:
            while d.exists():
                try:
                    d.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        if self.enabled_at_root:
            try:
                (self.mount / "cgroup.subtree_control").write_text(" ".join(f"-{c}" for c in self.enabled_at_root))
            except OSError:
                pass   # another cgroup uses it now: left on
            self.enabled_at_root = []


class LoopSwap:
    """A loop disk (size_mb, on tmpfs) as swap of the highest priority, with vm.page-cluster set to
    page_cluster while it is on (0: a fault reads one page, no swap readahead); all undone at exit
    (swapoff reads back what is on it). Use as a context manager; path is the disk."""

    def __init__(self, size_mb: int = 256, page_cluster: int = 0) -> None:
        self.loop = LoopDevice(size_mb)
        self.page_cluster = page_cluster
        self.path = ""
        self._cluster_was: str | None = None

    def __enter__(self) -> LoopSwap:
        self.loop.__enter__()
        try:
            _run(["mkswap", self.loop.path], "mkswap")
            _run(["swapon", "-p", "32767", self.loop.path], "swapon")
            self.path = self.loop.path
            cluster = Path("/proc/sys/vm/page-cluster")
            self._cluster_was = cluster.read_text()
            cluster.write_text(f"{self.page_cluster}\n")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        if self._cluster_was is not None:
            Path("/proc/sys/vm/page-cluster").write_text(self._cluster_was)
            self._cluster_was = None
        if self.path:
            subprocess.run(["swapoff", self.path], capture_output=True)
            self.path = ""
        self.loop.__exit__(t, v, tb)


# python3 -c SWAPPER MB KIND: touches MB of anonymous memory a page at a time and says "filled"; on a line
# from stdin reads it all back a page at a time and says "done"; lives until stdin closes. KIND private:
# the process's own memory (swapped back in by do_swap_page); shared: shared memory (tmpfs's pages, by
# shmem_swapin_folio; Python's mmap(-1) is that). In a memory cgroup limited below MB, what does not fit
# goes to swap, and the reading back swaps it in.
SWAPPER = r"""
import mmap, sys
n = int(sys.argv[1]) << 20
flags = mmap.MAP_ANONYMOUS | (mmap.MAP_PRIVATE if sys.argv[2] == "private" else mmap.MAP_SHARED)
m = mmap.mmap(-1, n, flags=flags)
for i in range(0, n, 4096):
    m[i] = 1
print("filled", flush=True)
sys.stdin.readline()
s = 0
for i in range(0, n, 4096):
    s += m[i]
print("done", s, flush=True)
sys.stdin.read()
"""


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


def mbr(partitions_mb: list[int], disk_mb: int) -> bytes:
    """A DOS partition table (first sector) with Linux partitions of the given sizes, 1 MiB aligned."""
    if len(partitions_mb) > 4 or 1 + sum(partitions_mb) > disk_mb:
        raise ValueError("at most 4 partitions that fit on the disk after its first MiB")
    sec = bytearray(512)
    start = 2048
    for i, size in enumerate(partitions_mb):
        n = size * 2048
        chs = bytes([0, 0xFE, 0xFF, 0xFF, 0x83, 0xFE, 0xFF, 0xFF])  # not bootable, CHS unused, type Linux
        entry = chs + start.to_bytes(4, "little") + n.to_bytes(4, "little")
        sec[446 + 16 * i: 462 + 16 * i] = entry
        start += n
    sec[510:512] = b"\x55\xaa"
    return bytes(sec)


def have_fio() -> bool:
    return shutil.which("fio") is not None


def fio_terse_read_iops(out: str) -> float:
    """The read IOPS of fio's terse output (--minimal: field 8, version 3), 0 when fio printed none."""
    terse = out.split(";")
    return float(terse[7]) if len(terse) > 7 else 0.0


def run_fio(filename: str, *, rw: str = "randread", bs: str = "4k", iodepth: int = 1, runtime: float | None = None,
            number_ios: int | None = None, size: str | None = None, direct: bool = True, ioengine: str = "libaio",
            numjobs: int = 1, extra: list[str] | None = None) -> dict[str, Any]:
    """Run fio on filename and return its parsed JSON report (first job, or the group when numjobs > 1)."""
    cmd = ["fio", "--name=ioscope", f"--filename={filename}", f"--rw={rw}", f"--bs={bs}", f"--iodepth={iodepth}",
           f"--ioengine={ioengine}", f"--direct={int(direct)}", f"--numjobs={numjobs}", "--group_reporting",
           "--output-format=json", "--randrepeat=0", "--norandommap"]
    if runtime is not None:
        cmd += [f"--runtime={runtime}", "--time_based"]
    if number_ios is not None:
        cmd += [f"--number_ios={number_ios}"]
    if size is not None:
        cmd += [f"--size={size}"]
    cmd += extra or []
    out = _run(cmd, "run the fio workload")
    doc: dict[str, Any] = json.loads(out[out.index("{"):])
    job: dict[str, Any] = doc["jobs"][0]
    return job
