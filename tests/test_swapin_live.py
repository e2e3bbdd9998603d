"""Live: top's SWAPIN (bpf/iowait.bpf.h: an I/O wait with a swap-in function on the blocked thread's kernel
stack, iotop's SWAPIN column) on a real swap-in: swap on a loop device, a process in a memory cgroup whose
limit is a third of what it touched, then reading it all back.

Ground truth: the process's own major faults (/proc/PID/stat; with vm.page-cluster=0 each is one page read
from swap, and /proc/vmstat's pswpin says the pages came from swap), that its I/O waits while it reads its
memory back are swap-ins, and the kernel's delay accounting of its time blocked (taskstats: every swap-in
wait is an I/O wait there too). A process that reads its disk with
O_DIRECT waits as often and swaps nothing in: its SWAPIN is 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import PY, ioscope_cmd, json_lines
from ioscope.base.cgroups import memory_cgroup_root
from ioscope.base.testbed import SWAPPER, LoopFS, LoopSwap, TestCgroups
from iowait_util import EPS_NS, delay_accounting, taskstats
from top_live_util import top_past

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

TOUCHED_MB = 48   # (small: the kernel matrix's emulated guests run it too)
LIMIT_MB = 16

# the control: n O_DIRECT 4 KiB reads of a file (each one waits for the disk, whatever the page cache
# holds), on a line from stdin
READER = r"""
import mmap, os, sys
path, n = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
buf = mmap.mmap(-1, 4096)
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
for i in range(n):
    os.preadv(fd, [buf], i * 4096)
print("done", flush=True)
sys.stdin.read()
"""


def vmstat(name: str) -> int:
    return next(int(ln.split()[1]) for ln in Path("/proc/vmstat").read_text().splitlines() if ln.split()[0] == name)


def majflt(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[9])


def top_waits(cmd: list[str], before_top: str, go: str) -> tuple[list[dict[str, Any]], dict[str, Any], int, int,
                                                                dict[str, Any]]:
    """Run cmd (a workload that prints before_top, then, given the line go, does the part measured and
    prints a line starting "done"); top -b -j 0.5 from before_top's line until a report past
    "done". Returns top's reports, the taskstats then and before the measured part, the workload's pid and
    its major faults in the measured part."""
    work = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    top = None
    try:
        assert work.stdout is not None and work.stdin is not None
        assert work.stdout.readline().strip() == before_top
        top = subprocess.Popen(ioscope_cmd("top", "-b", "-j", "0.5"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        assert top.stdout is not None
        first = top.stdout.readline()
        assert first.startswith("{"), first
        before, flt0 = taskstats(work.pid), majflt(work.pid)
        work.stdin.write(go + "\n")
        work.stdin.flush()
        assert work.stdout.readline().startswith("done")
        done = time.time()
        after, flt = taskstats(work.pid), majflt(work.pid) - flt0
        lines = first + top_past(top, done)
        top.send_signal(signal.SIGINT)
        rest, err = top.communicate(timeout=60)
        assert top.returncode == 0, err
        work.stdin.close()
        assert work.wait(timeout=60) == 0
        return json_lines(lines + rest), after, work.pid, flt, before
    finally:
        for p in (work, top):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def mine(reports: list[dict[str, Any]], pid: int) -> dict[str, float]:
    """pid's waits over top's reports: seconds, waits, swap-in seconds and swap-in waits; its SWAPIN and
    IO> on its process rows."""
    out = {"waited_s": 0.0, "waits": 0.0, "swapin_s": 0.0, "swapins": 0.0, "swapin_pct": 0.0, "io_pct": 0.0}
    for r in reports:
        for w in r["waits"]:
            if w["pid"] == pid:
                for k in ("waited_s", "waits", "swapin_s", "swapins"):
                    out[k] += w[k]
        for p in r["procs"]:
            if p["pid"] == pid:
                out["swapin_pct"] = max(out["swapin_pct"], p["swapin_pct"])
                out["io_pct"] = max(out["io_pct"], p["io_pct"])
    return out


@pytest.mark.parametrize("kind", ["private", "shared"])
def test_a_process_reading_back_its_swapped_out_memory_shows_swapin(kind: str) -> None:
    """kind private: its own memory, swapped in by do_swap_page; shared: shared memory, by
    shmem_swapin_folio (shmem_swapin_page before 6.0)."""
    mem = memory_cgroup_root()
    assert mem is not None, "no memory controller mounted"
    with LoopSwap(256), delay_accounting():
        cg = TestCgroups(mem, "ioscope-swapin", ["svc"], controllers="memory")
        try:
            limit = cg.root / "svc" / ("memory.max" if cg.v2 else "memory.limit_in_bytes")
            limit.write_text(f"{LIMIT_MB << 20}\n")
            pswpin, pswpout = vmstat("pswpin"), vmstat("pswpout")
            reports, after, pid, faults, before = top_waits(
                cg.shell("svc", f"{PY} -c '{SWAPPER}' {TOUCHED_MB} {kind}"), "filled", "go")
            pswpin, pswpout = vmstat("pswpin") - pswpin, vmstat("pswpout") - pswpout
        finally:
            cg.remove()
    got = mine(reports, pid)
    kernel_s = (after["blkio_delay_total"] - before["blkio_delay_total"]
                + after["swapin_delay_total"] - before["swapin_delay_total"]) / 1e9
    print(f"major faults {faults}, pswpin {pswpin}, pswpout {pswpout}; top: {got}; delay accounting {kernel_s:.6f} s")
    # two thirds of what it touched could not stay in memory: read back from swap, a page a fault
    assert pswpin >= faults >= (TOUCHED_MB - LIMIT_MB) * 256 // 2, (pswpin, faults)
    # while it read its memory back, its I/O waits were swap-ins (all of them on this host): the others are
    # its cgroup's reclaim waiting for pages being written out, deeper under the fault than is looked at.
    # How many of its faults wait at all is the scheduler's business: on the host nearly every one (12,385
    # waits for 12,366 faults, 2026-11-29), in the 1-CPU 6.1-rt guest 726 of 12,389 (the loop disk's
    # worker preempts the faulting thread and reads the page before it sleeps; delay accounting counts as
    # few). A wait for a page still being written out adds one, at most one for each page written to swap
    assert got["swapins"] >= max(1.0, 0.8 * got["waits"]), got
    assert got["swapins"] <= faults + pswpout, (got, faults, pswpout)
    assert 0 < got["swapin_s"] <= got["waited_s"] + 1e-6
    # every swap-in wait is an I/O wait in the kernel's delay accounting too (ours begins after its
    # start and ends at most EPS_NS after its end: iowait_util.check_against_delayacct)
    assert got["swapin_s"] <= kernel_s + EPS_NS * got["swapins"] / 1e9, (got, kernel_s)
    assert got["swapin_pct"] > 0 and got["swapin_pct"] <= got["io_pct"] + 1e-6


def test_a_direct_reader_waits_and_swaps_nothing_in() -> None:
    """The control: the same top, a process whose every read waits for the disk (O_DIRECT): IO>, no
    SWAPIN."""
    n = 400
    with LoopFS(256) as fs:
        path = fs.make_file("data.db", n * 4096)
        reads = fs.loop.diskstats().reads
        reports, _after, pid, _f, _b = top_waits([sys.executable, "-c", READER, str(path), str(n)], "ready", "go")
        reads = fs.loop.diskstats().reads - reads
    got = mine(reports, pid)
    assert got["waits"] >= n // 2 and got["waited_s"] > 0, (got, f"{reads} reads on the disk")
    assert got["swapins"] == 0 and got["swapin_s"] == 0 and got["swapin_pct"] == 0, got
