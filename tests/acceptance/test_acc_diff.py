"""Acceptance: a support engineer compares two recordings around a setting change with `ioscope diff`.

An ext4 loop disk; a 48 MiB file read sequentially through the page cache (dd bs=64k after
drop_caches) while `ioscope record -d DISK -o before.ioscope` runs, stopped with Ctrl-C; then, as the
user would, `echo 4096 > /sys/block/DISK/queue/read_ahead_kb` and the same again into after.ioscope;
then `ioscope diff before.ioscope after.ioscope` and `-j`. The diff must show the setting change
(128 -> 4096, up, x32), and per op I/Os and bytes equal to /proc/diskstats over each recording and
to each capture's own `ioscope report --json`; MB/s and IOPS are those counts over the active spans it
printed, their ratio after/before as printed. And one rate for every tool: a recording with an idle
second before and after a fio run gives, in diff and in fleet, the same IOPS, fio's own within 2%.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from acc_util import report_iostat_json

from conftest import assert_counted, ioscope_cmd, run_ioscope, unreported_completions
from ioscope.base.hist import RELATIVE_ERROR
from ioscope.base.rate import BASIS
from ioscope.base.testbed import run_fio

FILE_MB = 48
RATE_IOPS = 20_000


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
    # what the capture holds is the whole workload: record lost nothing (it says so in its last line)
    assert re.search(r"; lost 0; stopped", err), err
    return {"reads": d1.reads - d0.reads, "sec_read": d1.sectors_read - d0.sectors_read,
            "writes": d1.writes - d0.writes, "flushes": d1.flushes - d0.flushes, "io_ms": d1.io_ms - d0.io_ms}


def test_diff_shows_the_readahead_change(live: None, tmp_path: Path) -> None:
    from ioscope.base.testbed import LoopFS, drop_caches

    with LoopFS(size_mb=128, read_ahead_kb=128) as fs:
        # requests as large as the readahead window: a loop disk may cap them at 64 KiB (max_sectors_kb; it
        # did on a fresh machine), which made 128 KiB and 4 MiB windows the same 768 requests of the file
        fs.loop.set_queue("max_sectors_kb", Path(f"/sys/block/{fs.loop.name}/queue/max_hw_sectors_kb").read_text())
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
        # MB/s is the capture's read bytes over the active span diff printed for it (ioscope.base.rate; a
        # missing completion takes a request of any size away: exact only when none is reported)
        dur = doc[side]["active_s"]
        assert 0 < dur < doc[side]["duration_s"]
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


def test_diff_and_fleet_give_fio_its_own_iops(loopdev: Any, tmp_path: Path) -> None:
    """A recording idle for a second, then fio's 4 KiB random reads for 2 s, then idle for a second:
    diff (agg's capture engine) and fleet (SQL over the per-I/O table) divide by the same active span,
    so both print fio's IOPS (its I/Os over the span of its run), not its I/Os over the 4 s recorded; and
    both say so."""
    disk = loopdev(size_mb=64, scheduler="none")
    cap = str(tmp_path / "fio.ioscope")
    job: dict[str, Any] = {}

    wall: list[float] = []

    def workload() -> None:
        time.sleep(1.0)
        t0 = time.monotonic()
        # paced at 20,000 IOPS: the test is about the divisor, not the disk's top speed, and unpaced (over
        # 100,000 IOPS here, 600,000 events a second) a recorder starved of CPU by a loaded host can fall
        # behind its rings; paced, fio's I/Os also start with its clock
        job.update(run_fio(disk.path, rw="randread", bs="4k", iodepth=4, runtime=2, size="64m",
                           extra=["--norandommap=0", f"--rate_iops={RATE_IOPS}"]))
        wall.append(time.monotonic() - t0)
        time.sleep(0.7)   # and _record's 0.3 s: a second idle after the run

    k = _record(disk, cap, workload)
    fio_iops = float(job["read"]["iops"])
    assert k["reads"] >= int(job["read"]["total_ios"]) > 1000
    # fio kept its pace (what it did is what is divided; a host too loaded to keep it is still measured)
    assert fio_iops <= 1.02 * RATE_IOPS, fio_iops
    d = run_ioscope("diff", "-j", cap, cap, timeout=120)
    assert d.returncode == 0, d.stderr
    doc = json.loads(d.stdout)
    (rd,) = [o for o in doc["ops"] if o["op"] == "read"]
    diff_iops = rd["metrics"]["IOPS"]["before"]
    f = run_ioscope("fleet", "-j", cap, timeout=120)
    assert f.returncode == 0, f.stderr
    fleet = json.loads(f.stdout)
    (frd,) = [r for r in fleet["per_disk_op"] if r["op"] == "read"]
    assert frd["ios"] == rd["metrics"]["I/Os"]["before"]        # the same I/Os counted
    assert abs(frd["iops"] - diff_iops) <= 1e-6 * diff_iops, (frd["iops"], diff_iops)
    # the span both divide by is the active span (first I/O queued to last completed), and it is fio's run:
    # no longer than the fio command took from start to exit (CI of 2026-11-29, with two emulated guests
    # beside: the span was 9 % longer than fio's own runtime, its IOPS' divisor, which the 2 % asked of the
    # IOPS before could not take), and no shorter than that runtime but for fio's clock starting before its
    # first I/O (0.05 % of it on a quiet host; 2 % allowed)
    ios, active_s = rd["metrics"]["I/Os"]["before"], doc["before"]["active_s"]
    # every read the kernel completed on the disk is in the count divided (the capture's completions check)
    assert_counted(ios, k["reads"], unreported_completions(cap, disk.device.major, disk.device.minor))
    assert diff_iops == ios / active_s, (diff_iops, ios, active_s)
    runtime_s = float(job["read"]["runtime"]) / 1000
    # and no shorter than the time the kernel saw the disk busy (/proc/diskstats' io_ticks: it counts no
    # idle time, so it is a lower bound, 1,276 to 1,580 ms of the 2 s here at 100,000 IOPS, less the two
    # jiffies at its ends that it rounds to, 8 ms at Debian's HZ=250) and no shorter than fio's runtime less
    # 2 % (the gap from fio's clock starting to its first I/O, 0.05 % of it here)
    assert active_s >= k["io_ms"] / 1000 - 0.008, (active_s, k["io_ms"])
    assert 0.98 * runtime_s <= active_s <= wall[0], (active_s, runtime_s, wall[0], fio_iops)
    # the recording's duration (from its first event, which may come late in the first idle second) holds
    # the idle second after the run at least: left out of the rates
    assert doc["before"]["duration_s"] - doc["before"]["active_s"] >= 0.9, doc["before"]
    assert doc["rates"] == fleet["rates"] == BASIS
    # and the same latencies: diff's llquantize percentiles within a bucket (12.5%) of fleet's exact ones
    # (a completion the capture missed once gave every later read at its sector the queue time of the
    # one before: diff's p99.9 1.11 ms where fleet's was 460 us)
    for phase in ("q2c", "d2c"):
        for p, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
            got, exact = rd["metrics"][f"{phase} {label}"]["before"], frd[f"{phase}_{p}"]
            assert abs(got - exact) <= RELATIVE_ERROR * exact, (phase, p, got, exact)
    text = run_ioscope("diff", cap, cap, timeout=120).stdout
    assert f"MB/s and IOPS: {BASIS}" in text
    assert BASIS in run_ioscope("fleet", cap, timeout=120).stdout.replace("\n", " ")
