"""Test devices and known workloads: tmpfs-backed loop devices and fio.

Used by `ioscope demo`, the live tests and bench/. Everything created here is
removed on exit, also when the body raises.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from ioscope import devices
from ioscope.errors import IoscopeError


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
                 nr_requests: int | None = None, read_ahead_kb: int | None = None) -> None:
        self.size_mb = size_mb
        self.scheduler = scheduler
        self.directory = directory
        self.nr_requests = nr_requests
        self.read_ahead_kb = read_ahead_kb
        self.backing: str | None = None
        self.path = ""
        self.name = ""

    def __enter__(self) -> LoopDevice:
        fd, self.backing = tempfile.mkstemp(prefix="ioscope-loop-", dir=self.directory)
        try:
            os.ftruncate(fd, self.size_mb << 20)
        finally:
            os.close(fd)
        try:
            self.path = _run(["losetup", "-f", "--show", self.backing], "create a loop device").strip()
            self.name = os.path.basename(self.path)
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
        try:
            Path(f"/sys/block/{self.name}/queue/{key}").write_text(value)
        except OSError as exc:
            raise IoscopeError(f"cannot set {key}={value} on {self.name}: {exc.strerror}") from None

    @property
    def device(self) -> devices.BlockDevice:
        return devices.resolve_disk(self.name)

    def diskstats(self) -> devices.DiskStats:
        return devices.read_diskstats()[self.name]

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        if self.path:
            subprocess.run(["losetup", "-d", self.path], capture_output=True)
            self.path = ""
        if self.backing:
            try:
                os.unlink(self.backing)
            except FileNotFoundError:
                pass
            self.backing = None


def have_fio() -> bool:
    return shutil.which("fio") is not None


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
