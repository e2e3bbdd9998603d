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
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import PY
from ioscope.base.cgroups import memory_cgroup_root
from ioscope.base.testbed import SWAPPER, LoopFS, LoopSwap, TestCgroups
from iowait_util import EPS_NS, Tools, delay_accounting, taskstats

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


def waits_beside(cmd: list[str], before: str, go: str, *tools: list[str],
                 ready: Callable[[int], object] = lambda pid: None,
                 finished: Callable[[int], object] = lambda pid: None,
                 ) -> tuple[list[list[dict[str, Any]]], dict[str, Any], int, int, dict[str, Any]]:
    """Run cmd (a workload that prints before, then, given the line go, does the part measured and prints a
    line starting "done"); each ioscope tool (-j 0.5; iowait_util.Tools) from before's line until a report
    past "done" (ready(pid) called once they are attached, before go; finished(pid) once it said "done",
    while it waits, doing nothing, to be told to exit). Returns each tool's reports, the
    taskstats then and before the measured part, the workload's pid and its major faults in the measured
    part."""
    work = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert work.stdout is not None and work.stdin is not None
        assert work.stdout.readline().strip() == before
        with Tools(*tools) as running:
            ready(work.pid)
            before_ts, flt0 = taskstats(work.pid), majflt(work.pid)
            work.stdin.write(go + "\n")
            work.stdin.flush()
            assert work.stdout.readline().startswith("done")
            done = time.time()
            finished(work.pid)
            after, flt = taskstats(work.pid), majflt(work.pid) - flt0
            reports = running.end(done)
        work.stdin.close()
        assert work.wait(timeout=60) == 0
        return reports, after, work.pid, flt, before_ts
    finally:
        if work.poll() is None:
            work.kill()
            work.wait()


TOP = ["top", "-b"]


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
            (reports,), after, pid, faults, before = waits_beside(
                cg.shell("svc", f"{PY} -c '{SWAPPER}' {TOUCHED_MB} {kind}"), "filled", "go", TOP)
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
        (reports,), _after, pid, _f, _b = waits_beside([sys.executable, "-c", READER, str(path), str(n)], "ready",
                                                       "go", TOP)
        reads = fs.loop.diskstats().reads - reads
    got = mine(reports, pid)
    assert got["waits"] >= n // 2 and got["waited_s"] > 0, (got, f"{reads} reads on the disk")
    assert got["swapins"] == 0 and got["swapin_s"] == 0 and got["swapin_pct"] == 0, got


def test_agg_swapin_is_tops_swapin() -> None:
    """agg's swapin value (a wait's time when it was a swap-in; absent from the other waits) beside top on
    the same swap-ins: the same waits seen by two objects' programs, the same count; swapin within
    iowait, and within delay accounting's time blocked."""
    mem = memory_cgroup_root()
    assert mem is not None, "no memory controller mounted"
    exprs = ["sum(swapin) by tgid", "quantize(swapin) by tgid", "sum(iowait) by tgid",
             "count() by tgid where swapin > 0"]
    with LoopSwap(256), delay_accounting():
        cg = TestCgroups(mem, "ioscope-swapin", ["svc"], controllers="memory")
        try:
            limit = cg.root / "svc" / ("memory.max" if cg.v2 else "memory.limit_in_bytes")
            limit.write_text(f"{LIMIT_MB << 20}\n")
            (aggs, tops), after, pid, faults, before = waits_beside(
                cg.shell("svc", f"{PY} -c '{SWAPPER}' {TOUCHED_MB} private"), "filled", "go",
                ["agg", "--cumulative", *(a for e in exprs for a in ("-e", e))], TOP)
        finally:
            cg.remove()
    # --cumulative: the last report holds every wait since the start. (Beside the hogs the quantize once had one
    # wait fewer than the count in the same object, 12,381 against 12,382: two expressions of one record that
    # saw two records, when agg.bpf.c built every wait's record in one per-CPU slot that a wakeup program in
    # an interrupt could overwrite; it now has a slot per nesting level)
    rows = {e: [r for a in aggs[-1]["aggs"] if a["expr"] == e for r in a["rows"]
                if int(r["keys"]["tgid"]) == pid] for e in exprs}
    swapin_ns = sum(r["sum"] for r in rows[exprs[0]])
    swapins = sum(b[2] for r in rows[exprs[1]] for b in r["buckets"])
    iowait_ns = sum(r["sum"] for r in rows[exprs[2]])
    counted = sum(r["count"] for r in rows[exprs[3]])
    top = mine(tops, pid)
    kernel_s = (after["blkio_delay_total"] - before["blkio_delay_total"]
                + after["swapin_delay_total"] - before["swapin_delay_total"]) / 1e9
    # (a program skipped on its CPU, counted as recursion_misses by its tool, is one way two objects differ)
    misses = {name: sum(int((d.get("lost_detail") or {}).get("recursion_misses", 0)) for d in docs)
              for name, docs in (("agg", aggs), ("top", tops))}
    print(f"agg: {swapins} swap-ins {swapin_ns / 1e9:.6f} s of {iowait_ns / 1e9:.6f} s waited; top: {top}; "
          f"faults {faults}; delay accounting {kernel_s:.6f} s; recursion misses {misses}")
    # the same swap-in waits as top's (two objects' programs on the same switches), counted by the quantize and
    # by the condition alike. Exact on a quiet host (12,385 = 12,385); in the 1-vCPU emulated 6.1 guest agg
    # counted 11 more of 12,373, and the exporter (agg's object) 15-19 fewer of ~12,380 beside the hogs, with
    # no program run skipped, before and after the per-level record: cause not found. 0.5 %
    assert swapins == counted > 0, (swapins, counted)
    assert abs(swapins - top["swapins"]) <= max(2, 0.005 * top["swapins"]), (swapins, top, misses)
    assert swapins <= faults + 2 * (TOUCHED_MB << 8), (swapins, faults)
    # their time: within what the process waited in all (both ended by the same wake-ups), and within the
    # kernel's time blocked (each wait begins after delay accounting's and ends at most EPS_NS after it)
    assert 0 < swapin_ns <= iowait_ns, (swapin_ns, iowait_ns)
    assert swapin_ns / 1e9 <= kernel_s + EPS_NS * swapins / 1e9, (swapin_ns, kernel_s)
    # (not compared with top's time: two objects read the clock at different points of the same switches, and
    # in an emulated guest a stack read takes ~100 us: 22 ms apart over 232 waits in the 6.12 guest; each is
    # held to delay accounting's instead)


def test_the_exporter_exports_the_swapins_top_sees() -> None:
    """The exporter's swap-in series (agg's sum(swapin) by tgid,comm) on the same swap-ins as top, from the
    moment top was attached: the process's series and the other series together grew by top's swap-in
    waits (a series starts at 0 and the read that made it put what it held in other); its swap-in seconds
    within its I/O wait seconds. Scraped when the process says it is done, as top's last report: its
    interpreter's exit swaps in pages again (the heap it frees: ~576 waits more, counted by the exporter
    after top stopped)."""
    from test_exporter_live import free_port, pick, scrape, start, stop

    mem = memory_cgroup_root()
    assert mem is not None, "no memory controller mounted"
    other = {"pid": "", "comm": "(other processes)"}
    at: dict[str, float] = {}
    with LoopSwap(256):
        port = free_port()
        exporter = start(port, "--per-process", "1000", "--process-pid")
        try:
            cg = TestCgroups(mem, "ioscope-swapin", ["svc"], controllers="memory")
            try:
                limit = cg.root / "svc" / ("memory.max" if cg.v2 else "memory.limit_in_bytes")
                limit.write_text(f"{LIMIT_MB << 20}\n")

                def ready(pid: int) -> None:
                    m0 = scrape(port)
                    at["other0"] = pick(m0, "ioscope_process_swapins_total", **other)
                    at["mine0"] = pick(m0, "ioscope_process_swapins_total", pid=str(pid))
                    at["skipped0"] = pick(m0, "ioscope_lost_events_total", reason="recursion_misses")

                def finished(pid: int) -> None:   # (a scrape reads the kernel's maps then)
                    got.update(scrape(port))
                got: dict[Any, float] = {}
                (tops,), _after, pid, _faults, _before = waits_beside(
                    cg.shell("svc", f"{PY} -c '{SWAPPER}' {TOUCHED_MB} private"), "filled", "go", TOP, ready=ready,
                    finished=finished)
            finally:
                cg.remove()
        finally:
            assert stop(exporter) == 0
    top = mine(tops, pid)
    m = got
    n = pick(m, "ioscope_process_swapins_total", pid=str(pid)) - at["mine0"]
    s = pick(m, "ioscope_process_swapin_seconds_total", pid=str(pid))
    waited_s = pick(m, "ioscope_process_io_wait_seconds_total", pid=str(pid))
    to_other = pick(m, "ioscope_process_swapins_total", **other) - at["other0"]
    # what either object's programs were skipped for (the kernel's recursion_misses: a program already running
    # on that CPU, interrupted; each tool reports them). Beside the hogs the exporter counted 16 fewer than
    # top's 12,389 once, 15 fewer of 12,378 and (with agg's per-level wait record) 19 fewer of 12,383, with
    # none skipped: cause not found (test_agg_swapin_is_tops_swapin); 0.5 %
    slack = 0.005 * top["swapins"]
    skipped = pick(m, "ioscope_lost_events_total", reason="recursion_misses") - at["skipped0"]
    top_skipped = sum(int((d.get("lost_detail") or {}).get("recursion_misses", 0)) for d in tops)
    print(f"exporter: {n:.0f} swap-ins, {s:.6f} s of {waited_s:.6f} s waited (+{to_other:.0f} in other, "
          f"{skipped:.0f} program runs skipped); top {top}, {top_skipped} skipped")
    assert top["swapins"] > 0 and n > 0
    # its swap-ins since top started all counted, in its series or in other's (other: also any other
    # process's swap-ins meanwhile), and none twice, but for what either reported skipped
    assert n - top_skipped - slack <= top["swapins"] <= n + to_other + skipped + slack, (n, to_other, skipped,
                                                                                         top_skipped, top)
    assert 0 < s <= waited_s, (s, waited_s)
