"""Acceptance: a support engineer compares two recordings around a setting change with `ioscope diff`.

An ext4 loop disk; a 48 MiB file read sequentially through the page cache (dd bs=64k after
drop_caches) while `ioscope record -d DISK -o before.ioscope` runs, stopped with Ctrl-C; then, as the
user would, `echo 4096 > /sys/block/DISK/queue/read_ahead_kb` and the same again into after.ioscope;
then `ioscope diff before.ioscope after.ioscope` and `-j`. The diff must show the setting change
(128 -> 4096, up, x32), and per op I/Os and bytes equal to /proc/diskstats over each recording and
to each capture's own `ioscope report --json`; MB/s and IOPS are those counts over the durations it
printed, their ratio after/before as printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from acc_util import report_iostat_json

from conftest import assert_counted, ioscope_cmd, run_ioscope, unreported_completions

FILE_MB = 48


def _record(disk: Any, path: str, workload: Any) -> dict[str, int]:
    """`ioscope record` around workload(); the disk's /proc/diskstats deltas inside the recording."""
    rec = subprocess.Popen(ioscope_cmd("record", "-d", disk.name, "-o", path), stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        assert rec.stderr is not None
        first = rec.stderr.readline()
        assert first.startswith("Recording block I/O events"), first + rec.stderr.read()
        d0 = disk.diskstats()
        workload()
        time.sleep(0.3)
        d1 = disk.diskstats()
    finally:
        os.killpg(rec.pid, signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0 and "Traceback" not in err, err
    return {"reads": d1.reads - d0.reads, "sec_read": d1.sectors_read - d0.sectors_read,
            "writes": d1.writes - d0.writes, "flushes": d1.flushes - d0.flushes}


def test_diff_shows_the_readahead_change(live: None, tmp_path: Path) -> None:
    from ioscope.ra.fs import LoopFS, drop_caches

    with LoopFS(size_mb=128, read_ahead_kb=128) as fs:
        bdev = fs.loop.device   # its numbers, for the completions check once the disk is gone
        data = Path(fs.mnt, "data")
        subprocess.run(["dd", "if=/dev/urandom", f"of={data}", "bs=1M", f"count={FILE_MB}", "conv=fsync"],
                       check=True, stderr=subprocess.DEVNULL)

        def read_file() -> None:
            drop_caches()
            subprocess.run(["dd", f"if={data}", "of=/dev/null", "bs=64k"], check=True, stderr=subprocess.DEVNULL)

        drop_caches()
        time.sleep(0.5)
        before, after = str(tmp_path / "before.ioscope"), str(tmp_path / "after.ioscope")
        k_before = _record(fs.loop, before, read_file)
        Path(f"/sys/block/{fs.loop.name}/queue/read_ahead_kb").write_text("4096")
        k_after = _record(fs.loop, after, read_file)

    text = run_ioscope("diff", before, after)
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    js = run_ioscope("diff", "-j", before, after)
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    disk = fs.loop.name
    (ra,) = [c for c in doc["changes"] if c["setting"] == "read_ahead_kb"]
    assert (ra["disk"], ra["before"], ra["after"], ra["direction"], ra["ratio"]) == (disk, 128, 4096, "up", 32.0)
    line = [ln for ln in text.stdout.splitlines() if "read_ahead_kb" in ln]
    assert line and line[0].split() == [disk, "read_ahead_kb", "128", "4096", "up", "x32.00"], line
    (rd,) = [o for o in doc["ops"] if o["disk"] == disk and o["op"] == "read"]
    m = rd["metrics"]
    for side, k, cap in (("before", k_before, before), ("after", k_after, after)):
        assert k["reads"] > 0, k
        # diff counts the I/Os that completed: the kernel's, less the completions that ran no BPF program,
        # as many as the capture's completions check reports (exact when none)
        miss = unreported_completions(cap, bdev.major, bdev.minor)
        assert_counted(m["I/Os"][side], k["reads"], miss)
        # drop_caches' sync may write an inode or a journal block: those are counted too, as writes
        wr = [o["metrics"]["I/Os"][side] or 0 for o in doc["ops"] if o["disk"] == disk and o["op"] == "write"]
        assert_counted(sum(wr), k["writes"], miss)
        # MB/s is the capture's read bytes over the duration diff printed for it (a missing completion
        # takes a request of any size away: exact only when none is reported)
        dur = doc[side]["duration_s"]
        if not miss:
            assert m["MB/s"][side] == k["sec_read"] * 512 / 1e6 / dur
        else:
            assert m["MB/s"][side] * dur * 1e6 <= k["sec_read"] * 512 + 1, (side, m["MB/s"], k, miss)
        assert m["IOPS"][side] == m["I/Os"][side] / dur
        # the capture's own report: the same reads and read sectors (its iostat table, summed)
        (io,) = report_iostat_json(json.loads(run_ioscope("report", "--json", cap).stdout)).values()
        if not miss:
            assert (round(io["r"]), round(io["rsec"])) == (k["reads"], k["sec_read"]), (side, io, k)
        else:
            assert_counted(round(io["r"]), k["reads"], miss)
            assert round(io["rsec"]) <= k["sec_read"], (side, io, k, miss)
    assert m["MB/s"]["ratio"] == m["MB/s"]["after"] / m["MB/s"]["before"]
    # a larger readahead window reads the same file in fewer, larger requests
    assert m["I/Os"]["after"] < m["I/Os"]["before"]
    assert k_before["sec_read"] >= FILE_MB * 2048 and k_after["sec_read"] >= FILE_MB * 2048
