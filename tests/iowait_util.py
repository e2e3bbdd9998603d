"""Helpers of the I/O-wait tests (host and kernel matrix): a process that waits on I/O and stays alive
until told, the kernel's own delay accounting of a thread, and a process's waits in top's reports."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conftest import ioscope_cmd, json_lines, unreported_bound
from top_live_util import top_past

if TYPE_CHECKING:
    from ioscope.base.testbed import TestCgroups

DELAYACCT = Path("/proc/sys/kernel/task_delayacct")
EPS_NS = 50_000  # the most top's and delay accounting's clock reads of one wait may differ by (test_iowait_live)

# A process that waits on I/O (python -c WORKLOAD MODE PATH N), then says "done" and waits for stdin to
# close, so that its taskstats can be read while it lives. MODE fsync: N 8 KiB O_DIRECT writes, each
# followed by fdatasync; read: N buffered 4 KiB reads 8 KiB apart (misses where the file is not cached and
# readahead is off); direct: N 4 KiB O_DIRECT reads.
WORKLOAD = r"""
import mmap, os, sys
mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "fsync":
    buf = mmap.mmap(-1, 8192)
    buf.write(b"x" * 8192)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    for i in range(n):
        os.pwrite(fd, buf, i * 8192)
        os.fdatasync(fd)
elif mode == "read":
    fd = os.open(path, os.O_RDONLY)
    for i in range(n):
        os.pread(fd, 4096, i * 8192)
else:
    buf = mmap.mmap(-1, 4096)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    for i in range(n):
        os.preadv(fd, [buf], i * 4096)
os.close(fd)
print("done", flush=True)
sys.stdin.read()
"""




class Tools:
    """ioscope tools (argv lists: top, agg, ...) run with -j 0.5 beside a workload: started, and attached
    once they return (top: its first report; the others: their "Tracing" line); end(t) reads each one's
    reports up to the first whose interval closed after wall time t, stops it with SIGINT (exit 0 asserted)
    and returns each one's reports. Killed on any other path (close)."""

    def __init__(self, *tools: list[str]) -> None:
        self.procs = [subprocess.Popen(ioscope_cmd(*t, "-j", "0.5"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True) for t in tools]
        self.firsts: list[str] = []
        try:
            for t, p in zip(tools, self.procs):
                assert p.stdout is not None and p.stderr is not None
                if t[0] == "top":  # its first report: the programs are attached
                    self.firsts.append(p.stdout.readline())
                    assert self.firsts[-1].startswith("{"), self.firsts[-1] + (p.stderr.read() if p.poll() is not None
                                                                               else "")
                else:  # "Tracing ...": attached
                    self.firsts.append("")
                    line = p.stderr.readline()
                    assert line.startswith("Tracing"), line + (p.stderr.read() if p.poll() is not None else "")
        except BaseException:
            self.close()
            raise

    def end(self, t: float) -> list[list[dict[str, Any]]]:
        lines = [first + top_past(p, t) for first, p in zip(self.firsts, self.procs)]
        out = []
        for p, got in zip(self.procs, lines):
            p.send_signal(signal.SIGINT)
            rest, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            out.append(json_lines(got + rest))
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def __enter__(self) -> Tools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def delay_accounting() -> Iterator[None]:
    """Delay accounting on (off by default since 5.14: kernel.task_delayacct), as it was found afterwards;
    before 5.14 there is no switch, and it is on unless the kernel was booted with nodelayacct."""
    if not DELAYACCT.exists():
        yield
        return
    was = DELAYACCT.read_text()
    DELAYACCT.write_text("1\n")
    try:
        yield
    finally:
        DELAYACCT.write_text(was)


def taskstats(pid: int) -> dict[str, Any]:
    """The kernel's delay accounting of one thread (TASKSTATS_CMD_GET by pid, over generic netlink)."""
    from pyroute2 import TaskStats

    ts = TaskStats()
    try:
        ts.bind()
        msg = ts.get_pid_stat(pid)[0]
        return dict(msg.get_attr("TASKSTATS_TYPE_AGGR_PID").get_attr("TASKSTATS_TYPE_STATS"))
    finally:
        ts.close()


def waited(reports: list[dict[str, Any]], pid: int) -> tuple[float, int, list[float], int, float]:
    """(seconds, waits ended, IO> of each interval, waits whose dequeue was delayed, their seconds) of pid
    over top's reports."""
    s, n, pct, dl, dl_s = 0.0, 0, [], 0, 0.0
    for r in reports:
        for w in r["waits"]:
            if w["pid"] == pid:
                s += w["waited_s"]
                n += w["waits"]
                pct.append(w["io_pct"])
                dl += w["dequeue_delayed"]
                dl_s += w["dequeue_delayed_s"]
    return s, n, pct, dl, dl_s


def check_against_delayacct(waits: int, ns: float, delayed: int, delayed_ns: float, truth: dict[str, Any]) -> None:
    """waits and ns (of one thread, as ioscope counted them) against the kernel's delay accounting.

    The same waits, but those whose dequeue the scheduler delayed (EEVDF, 6.12+: bpf/iowait.bpf.h), which
    it counts from the delayed dequeue or not at all. The time: ioscope's wait begins at the switch, after
    the accounting's start in the dequeue, and ends when the thread is woken (sched_waking), where the
    accounting ends for a wakeup that moves the thread to another CPU and before it otherwise (it ends
    on the thread's CPU, after the interrupt that hands it the wakeup). So ioscope's time is never more
    than the accounting's by more than EPS_NS a wait (and the delayed waits' time before their dequeue).
    It is less by that interrupt's latency: 1.5-9 us a wait on a quiet host, 190 us beside two emulated
    guests (CI of 2026-11-29), milliseconds in them; the callers bound it from below by what the
    workload imposes (a limit's minimum wait)."""
    # one more in the kernel's count: a wait whose switch ran no BPF program (this VM skips a program run in
    # tens of thousands: conftest.unreported_bound; 172 against 173 once, beside two emulated guests)
    assert waits - delayed <= truth["blkio_count"] <= waits + unreported_bound(waits), (
        waits, delayed, truth["blkio_count"])
    theirs = truth["blkio_delay_total"]
    assert ns - theirs <= EPS_NS * waits + delayed_ns, (ns, theirs, delayed_ns)
    assert ns > 0


@contextlib.contextmanager
def limited(majmin: str, key: str, iops: int) -> Iterator[TestCgroups]:
    """A test cgroup "svc" limited to iops (key: "r" or "w") on the disk majmin by blk-throttle (v1
    blkio.throttle.*_iops_device, v2 io.max), removed afterwards."""
    from ioscope.base.cgroups import io_cgroup_root
    from ioscope.base.testbed import TestCgroups

    io = io_cgroup_root()
    assert io is not None
    cg = TestCgroups(io[0], "ioscope-iowait", ["svc"])
    limit = cg.root / "svc" / ("io.max" if cg.v2 else f"blkio.throttle.{'read' if key == 'r' else 'write'}_iops_device")
    on, off = (f"{key}iops={iops}", f"{key}iops=max") if cg.v2 else (str(iops), "0")
    try:
        limit.write_text(f"{majmin} {on}\n")
        yield cg
    finally:
        limit.write_text(f"{majmin} {off}\n")
        cg.remove()
