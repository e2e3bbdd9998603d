"""A process slow because its memory is in swap, as a user finds it: `ioscope top -b -s swapin_pct 1` started
in the background from a script, a process in a memory cgroup reading back the 48 MiB it touched with a
limit of 16 MiB (swap on a loop disk), top stopped with kill -INT. top exits 0; its screen has the SWAPIN
column, and the process's row says it swapped in (SWAPIN > 0, no more than its IO>) in an interval where
its own major-fault count (/proc/PID/stat) grew."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from acc_util import ScriptJob

from conftest import PY
from ioscope.base.cgroups import memory_cgroup_root
from ioscope.base.testbed import SWAPPER, LoopSwap, TestCgroups


def majflt(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[9])


def test_a_process_reading_back_swapped_memory_shows_in_swapin() -> None:
    mem = memory_cgroup_root()
    assert mem is not None, "no memory controller mounted"
    with tempfile.TemporaryDirectory() as t, LoopSwap(256):
        d = Path(t)
        cg = TestCgroups(mem, "ioscope-acc-swapin", ["svc"], controllers="memory")
        work = None
        try:
            (cg.root / "svc" / ("memory.max" if cg.v2 else "memory.limit_in_bytes")).write_text(f"{16 << 20}\n")
            work = subprocess.Popen(cg.shell("svc", f"{PY} -c '{SWAPPER}' 48 private"), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            assert work.stdout is not None and work.stdin is not None
            assert work.stdout.readline().strip() == "filled"
            job = ScriptJob(d, "top -b -s swapin_pct 1")
            try:
                job.wait_for("out", "PID COMM")   # its first report: attached
                before = majflt(work.pid)
                work.stdin.write("go\n")
                work.stdin.flush()
                assert work.stdout.readline().startswith("done")
                faults = majflt(work.pid) - before
                time.sleep(2.5)                    # a report that closed the interval of the reading back
                rc = job.stop()
                out, err = job.out(), job.err()
            finally:
                job.kill()
            work.stdin.close()
            assert work.wait(timeout=60) == 0
        finally:
            if work is not None and work.poll() is None:
                work.kill()
                work.wait()
            cg.remove()
    assert rc == "0", err
    assert faults > 4096, faults   # two thirds of 48 MiB read back from swap, a page a fault
    rows = []
    for block in out.split("ioscope top - ")[1:]:
        lines = block.splitlines()
        head = next((ln for ln in lines if ln.split()[:2] == ["PID", "COMM"]), None)
        if head is None or "SWAPIN" not in head.split():
            continue
        cols = head.split()
        for ln in lines[lines.index(head) + 1:]:
            f = ln.split()
            if len(f) == len(cols) and f[0] == str(work.pid):
                rows.append((float(f[cols.index("SWAPIN")]), float(f[cols.index("IO>")])))
    assert rows and max(s for s, _ in rows) > 0, out[-3000:]
    assert all(s <= io + 0.01 for s, io in rows), rows
