"""A slow disk without device-mapper, for the flight recorder's tests: its requests take ~1/iops s each.

How it works: a "lower" loop device over a tmpfs file (ioscope.base.testbed.LoopDevice), an "upper" loop
device whose backing file is the lower block device itself (`losetup --direct-io=on /dev/loopL`), and a
cgroup throttle of `iops` read and `iops` write IOPS on the LOWER device, set in a test cgroup that the
workload runs in (run/popen). A request on the upper is handed to a loop worker, which submits it to the
lower as a direct I/O charged to the cgroup of the task that issued it (per-cgroup loop workers since
5.12; before that, 4.15-5.11, the loop's direct-I/O path did kthread_associate_blkcg() to the request's
cgroup), so it waits in the lower's throttle and completes on the upper only then: the upper's D->C
(and Q->C) is the throttle's wait, ~1/iops s per request, while the lower's own D->C stays ~0.

Measured on this project's VM (6.18, cgroup v1 blkio, lower scheduler none), 4 KiB O_DIRECT reads on the
upper by processes in the cgroup, one at a time (dd: one dd process a read; diskstats: the upper's read
ticks / reads in /proc/diskstats, which is what the flight recorder sees as the upper's D2C and Q2C):
  - iops=4, the first read after setting a fresh rule: 265-287 ms by dd, 254-263 ms in diskstats; an
    immediate second one the same (263 / 254 ms); one after 1.5-2 s idle the same (263 / 255 ms): with
    iops < 10 there is no initial budget, the first I/O waits 1/iops like the others.
  - iops=4, 8 dd reads in a row: 2119-2123 ms (265 ms a read, dd's own start-up is 3-15 ms), diskstats
    2036-2046 ms for the 8 (254-256 ms each). But the throttle keeps an average rate, not a minimum gap:
    when one dispatch runs late (the timer fired at 280-290 ms), the next request may pass at once:
    6 of 64 dd reads and 1 of 40 fio psync reads took 0 ms (a run of 8 dd reads: 1656 ms in all, 196 ms
    a read). With iops=2 none did: 0 of 94 dd reads and 0 of 40 fio reads were fast, 504-560 ms each
    (diskstats 504-536 ms). iops=5: one read of each 8 after 1 s idle (the 1st or 2nd) passed at once.
    So pass iops=2 when every request must be slow; iops=4 (the default) when ~1 in 10-40 fast ones do
    not matter.
  - 4 KiB O_DIRECT writes, iops=4: 4 in 1031-1083 ms (diskstats 255-267 ms each).
  - fio libaio iodepth=4, iops=4: requests wait in turn, clat mean 964 ms (~iodepth/iops), 12 in 3.1 s.
  - The lower's diskstats: ~0 ms a request (the wait is before the lower's queue, in the throttle). The
    same reads without a rule, or by a process outside the cgroup: 0 ms in diskstats, 2-3 ms a dd.
  - Setting up takes ~290 ms at iops=4 (~550 ms at 2): one probe read in the cgroup checks that the
    lower's I/O is charged to it, then the rules are written again (reset_throttle()), which starts a
    new throttle slice: without that the test's first read passed at once in 1 of 2 tries; with it, the
    first read after entering was slow in 12 of 12 (254-275 ms) at iops=4 and 12 of 12 (504-535 ms)
    at iops=2. __exit__ with a popen()'d dd still reading takes ~55 ms (it is killed).
What did not work, or does not matter:
  - The rule in the v1 ROOT cgroup only: no effect (0 ms a read): the lower's I/O is charged to the test
    cgroup (blkio.throttle.io_serviced counts it there, not in the root) and v1 throttling is flat. So the
    root rule is only a fallback, set (v1) when the probe read on entry finds the lower's I/O not charged
    to the test cgroup (kernels before 4.15, where the loop kthread's root cgroup is charged); simulated
    here with the workload in the root cgroup: 262 ms a read. It is not set where it is not needed because
    a leftover one (SIGKILL) would outlive losetup -d and slow the next user of the device number.
  - --direct-io=off on the upper: reads are still throttled on 6.18 (263-274 ms each), but writes go to the
    lower's page cache and complete at once (4 in 17 ms): the upper must use direct I/O, checked on entry.
  - iops=20: the first floor(iops / 10) I/Os of each 100 ms throttle slice pass at once (first read 0 ms,
    8 reads in 414 ms, 44 ms each in diskstats).
Caveats: with N requests in flight each takes ~N/iops s; a request larger than the lower's max_sectors_kb
(1280 KiB) is split and counted as several I/Os. The throttle is on the lower device, so `ioscope record`
on the upper lists no io_limits. The loop worker's I/O to the lower is the cgroup's on 5.12+ (per-cgroup
loop workers) and, with direct I/O, on 4.15-5.11 (lo_rw_aio's kthread_associate_blkcg), so the matrix's
5.10 should take the same path (not run there yet). Cgroup v2 (io.max in the test cgroup, when the io
controller is enabled in the root's subtree_control; no root fallback there, v2's root has no io.max) is
written but untested: this host has the io controller on v1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from ioscope.base.errors import IoscopeError
from ioscope.base.testbed import LoopDevice

V1 = Path("/sys/fs/cgroup/blkio")
V2 = Path("/sys/fs/cgroup")


def _sh_in(procs: Path, argv: list[str]) -> list[str]:
    """argv, run by a shell that first moves itself into the cgroup of procs (cgroup.procs)."""
    return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *argv]


class SlowDisk:
    """A loop device whose requests each take ~1/iops s (see the module). Use as a context manager; run
    the workload with run() or popen(), which put it in the throttled cgroup."""

    def __init__(self, iops: int = 4, size_mb: int = 64) -> None:
        if iops < 1:
            raise ValueError("iops must be at least 1")
        self.iops = iops
        self.size_mb = size_mb
        self.lower = LoopDevice(size_mb=size_mb)
        self.upper = ""
        self.upper_path = ""
        self.cgroup: Path | None = None
        self.hierarchy = ""          # "v1 blkio" or "v2 io"
        self.root_rule = False       # v1 fallback: the rule is (also) in the root cgroup
        self._rules: list[Path] = []

    # ---- set up

    def __enter__(self) -> SlowDisk:
        try:
            self.lower.__enter__()
            self.upper_path = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", self.lower.path],
                                             check=True, capture_output=True, text=True).stdout.strip()
            self.upper = os.path.basename(self.upper_path)
            dio = Path(f"/sys/block/{self.upper}/loop/dio").read_text().strip()
            if dio != "1":
                raise IoscopeError(f"{self.upper} over {self.lower.path}: direct I/O is off, the throttle "
                                   "would not hold its writes")
            self._make_cgroup()
            self._probe()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _make_cgroup(self) -> None:
        mm = self.lower.device.majmin
        name = f"ioscope-slow-{os.getpid()}-{self.lower.name}"
        if (V1 / "blkio.throttle.read_iops_device").exists():
            self.hierarchy = "v1 blkio"
            self.cgroup = V1 / name
            self.cgroup.mkdir()
            self._set_v1(self.cgroup)
        elif "io" in (V2 / "cgroup.subtree_control").read_text().split():
            self.hierarchy = "v2 io"
            self.cgroup = V2 / name
            self.cgroup.mkdir()
            rule = self.cgroup / "io.max"
            rule.write_text(f"{mm} riops={self.iops} wiops={self.iops}\n")
            self._rules.append(rule)
        else:
            raise IoscopeError("no blkio v1 hierarchy and no io controller enabled in cgroup v2: cannot throttle")

    def _set_v1(self, cg: Path) -> None:
        for f in ("blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"):
            rule = cg / f
            self._rules.append(rule)
            rule.write_text(f"{self.lower.device.majmin} {self.iops}\n")

    def charged_ios(self) -> int:
        """I/Os on the lower device charged to the test cgroup so far."""
        assert self.cgroup is not None
        mm = self.lower.device.majmin
        if self.hierarchy == "v1 blkio":
            for line in (self.cgroup / "blkio.throttle.io_serviced").read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == mm and parts[1] == "Total":
                    return int(parts[2])
            return 0
        for line in (self.cgroup / "io.stat").read_text().splitlines():
            parts = line.split()
            if parts and parts[0] == mm:
                kv = dict(p.split("=", 1) for p in parts[1:])
                return int(kv.get("rios", 0)) + int(kv.get("wios", 0))
        return 0

    def _probe(self) -> None:
        """One direct read on the upper in the cgroup: its I/O on the lower must be charged to the cgroup
        (else, v1, the rule goes in the root cgroup too, where the loop worker's I/O is charged)."""
        before = self.charged_ios()
        self.run(["dd", f"if={self.upper_path}", "of=/dev/null", "iflag=direct", "bs=4k", "count=1"], check=True,
                 capture_output=True)
        if self.charged_ios() == before:
            if self.hierarchy != "v1 blkio":
                raise IoscopeError(f"the loop worker's I/O on {self.lower.name} is not charged to {self.cgroup}: "
                                   "cannot throttle it with io.max (the v2 root cgroup has none)")
            self.root_rule = True
            self._set_v1(V1)
        self.reset_throttle()

    def reset_throttle(self) -> None:
        """Write the rules again: the throttle starts a new slice with nothing dispatched, so the next
        request waits a whole 1/iops (after the probe, or earlier requests, it might pass at once)."""
        mm = self.lower.device.majmin
        for rule in self._rules:
            on = f"{mm} riops={self.iops} wiops={self.iops}\n" if rule.name == "io.max" else f"{mm} {self.iops}\n"
            rule.write_text(on)

    # ---- the workload

    @property
    def procs(self) -> Path:
        assert self.cgroup is not None, "SlowDisk is not entered"
        return self.cgroup / "cgroup.procs"

    def run(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        """subprocess.run(argv) in the throttled cgroup (text mode)."""
        p: subprocess.CompletedProcess[str] = subprocess.run(_sh_in(self.procs, argv), text=True, **kw)
        return p

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[str]:
        """subprocess.Popen(argv) in the throttled cgroup (text mode); __exit__ kills it if it still runs."""
        p: subprocess.Popen[str] = subprocess.Popen(_sh_in(self.procs, argv), text=True, **kw)
        return p

    # ---- tear down

    def _remove_rules(self) -> None:
        mm = self.lower.device.majmin
        for rule in reversed(self._rules):
            off = f"{mm} riops=max wiops=max\n" if rule.name == "io.max" else f"{mm} 0\n"
            try:
                rule.write_text(off)
            except OSError:
                pass
        self._rules.clear()
        self.root_rule = False

    def _empty_cgroup(self) -> None:
        """Kill what run()/popen() started and still runs in the cgroup, and remove it."""
        cg = self.cgroup
        if cg is None:
            return
        deadline = time.monotonic() + 10
        while True:
            try:
                pids = [int(x) for x in (cg / "cgroup.procs").read_text().split()]
            except FileNotFoundError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                cg.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.cgroup = None

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        try:
            # rules first: a killed process's throttled I/O, and the detach, then complete at once
            if self.lower.path:
                self._remove_rules()
            self._empty_cgroup()
        finally:
            if self.upper_path:
                subprocess.run(["losetup", "-d", self.upper_path], capture_output=True)
                self.upper_path = self.upper = ""
            self.lower.__exit__(None, None, None)
