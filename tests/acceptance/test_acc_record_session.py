"""Acceptance: a support engineer's recording session, played end to end as a user types it.

A loop disk (mq-deadline, small max_sectors_kb) with a partition table and ext4 on partition 1.
`ioscope record -d DISK -o FILE` is started on the whole disk (so partition remaps are recorded),
left idle for two seconds (so the capture's first chunk holds no block event), then a known
workload runs: direct reads and writes with prime counts, buffered writes and `sync`, buffered
reads after drop_caches (readahead), direct 1 MiB writes larger than max_sectors_kb (splits).
Ctrl-C ends the recording. Then, as the user would type them: parse, report, report --json,
export, the real blkparse and btt on the export, import of the export, report of the import.

Every command must exit 0 without a traceback, and the counts must agree with the kernel's own
/proc/diskstats for the disk and the partition, with record's summary, between report's text
and JSON, between the original and the re-imported export, and with real blkparse.

Requeues (R) are not provoked: the loop driver never returns BLK_STS_RESOURCE/DEV_RESOURCE
(the only ways the block layer requeues a request to a driver on this kernel), and the flush
state machine moves requests on its own list without the block_rq_requeue tracepoint. There is no
null_blk or scsi_debug on these machines (docs/environment.md). The test still checks that R
counts agree between the capture, record's summary and blkparse (all zero).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from acc_util import blkparse_totals, btt_part, record_summary, report_iostat_json, report_iostat_text

import blk_scenarios as bs
from conftest import ioscope_cmd, run_ioscope, unreported_bound, unreported_completions
from ioscope import devices

NDIRECT_READS = 1009   # direct 4 KiB random reads (fio): primes, so no other count matches by chance
NDIRECT_WRITES = 211   # direct 4 KiB random overwrites (fio)
NBUF_WRITES = 997      # buffered 4 KiB appends, then sync
NBIG = 7               # direct 1 MiB writes, split at max_sectors_kb
MAX_SECTORS_KB = 64
READ_FILE_MB = 24      # read back buffered after drop_caches: readahead


@pytest.fixture
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ioscope-acc-rec-", dir="/dev/shm"))
    try:
        yield d
    finally:
        for f in sorted(d.rglob("*"), reverse=True):
            if f.is_dir():
                f.rmdir()
            else:
                f.unlink()
        d.rmdir()


@pytest.fixture
def ext4(loopdev: Callable[..., Any]) -> Iterator[tuple[Any, str]]:
    """A 320 MiB loop disk, mq-deadline, one 300 MiB partition with ext4 on it, mounted."""
    ld = loopdev(size_mb=320, scheduler="mq-deadline", partitions_mb=[300])
    p1 = ld.partition(1)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", p1], check=True)
    mnt = tempfile.mkdtemp(prefix="ioscope-acc-mnt-")
    mounted = False
    try:
        # commit=600: no periodic journal commit in the middle of the idle start
        subprocess.run(["mount", "-o", "commit=600", p1, mnt], check=True)
        mounted = True
        yield ld, mnt
    finally:
        if mounted:
            subprocess.run(["umount", mnt], check=True)
        os.rmdir(mnt)


def _sh(*cmd: str) -> None:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (cmd, p.stderr)


def _fio(filename: str, rw: str, bs_: str, n: int, iodepth: int) -> dict[str, Any]:
    out = subprocess.run(["fio", "--name=acc", f"--filename={filename}", f"--rw={rw}", f"--bs={bs_}",
                          f"--iodepth={iodepth}", "--ioengine=libaio", "--direct=1", "--size=8M",
                          f"--number_ios={n}", "--randrepeat=0", "--norandommap=0", "--output-format=json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    job: dict[str, Any] = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    return job


def _workload(mnt: str) -> dict[str, Any]:
    """The known workload, on the mounted file system. Returns what the workload itself counted."""
    done: dict[str, Any] = {}
    # direct I/O: one bio, one request each (4 KiB, aligned, fio's random map: no block twice)
    done["fio_read"] = _fio(f"{mnt}/direct", "randread", "4k", NDIRECT_READS, 8)["read"]["total_ios"]
    done["fio_write"] = _fio(f"{mnt}/direct", "randwrite", "4k", NDIRECT_WRITES, 4)["write"]["total_ios"]
    # buffered appends, then the user's sync: writeback merges them
    with open(f"{mnt}/appended", "wb") as f:
        for _ in range(NBUF_WRITES):
            f.write(b"a" * 4096)
    _sh("sync")
    # buffered reads of a file not in the page cache: readahead
    _sh("sh", "-c", "echo 3 > /proc/sys/vm/drop_caches")
    _sh("dd", f"if={mnt}/toread", "of=/dev/null", "bs=64k", "status=none")
    # 1 MiB direct writes over max_sectors_kb: split by the block layer
    _sh("dd", "if=/dev/zero", f"of={mnt}/direct", "bs=1M", f"count={NBIG}", "oflag=direct", "conv=notrunc",
        "status=none")
    _sh("sync")
    return done


def _no_traceback(p: subprocess.CompletedProcess[str], what: str) -> None:
    assert p.returncode == 0, f"{what} exited {p.returncode}: {p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr, f"{what}: {p.stderr[-3000:]}"


def _capture_counts(path: str, dev: int, part_lo: int, part_hi: int) -> dict[str, Any]:
    """Counts straight from the capture file (ioscope's reader, not a CLI tool)."""
    from ioscope.trace.capture import open_capture
    from ioscope.trace.events import ACTION_LETTERS, TA_COMPLETE, TA_QUEUE, TA_REMAP, TC_AHEAD, TC_READ, TC_WRITE
    with open_capture(path) as cap:
        assert not cap.truncated and cap.end is not None
        ev = cap.read_all()
        meta = cap.meta
        end = cap.end
    blk = ev[ev["action"] != 0]
    acts, n = np.unique(blk["action"], return_counts=True)
    c = blk[blk["action"] == TA_COMPLETE]
    data = c[c["bytes"] > 0]
    rd = (data["category"] & TC_READ) != 0
    wr = (data["category"] & TC_WRITE) != 0
    in_part = (data["sector"] >= part_lo) & (data["sector"] + (data["bytes"] >> 9) <= part_hi)
    q = blk[blk["action"] == TA_QUEUE]
    a = blk[blk["action"] == TA_REMAP]
    return {
        "meta": meta, "end": end,
        "actions": {ACTION_LETTERS[int(x)]: int(k) for x, k in zip(acts, n)},
        "devs": set(blk["dev"].tolist()),
        "c": len(c), "c_flush": int(np.count_nonzero(c["bytes"] == 0)),
        "c_read": int(np.count_nonzero(rd)), "c_write": int(np.count_nonzero(wr)),
        "sec_read": int((data["bytes"][rd] >> 9).sum()), "sec_write": int((data["bytes"][wr] >> 9).sum()),
        "part_read": int(np.count_nonzero(rd & in_part)), "part_write": int(np.count_nonzero(wr & in_part)),
        "part_sec_read": int((data["bytes"][rd & in_part] >> 9).sum()),
        "part_sec_write": int((data["bytes"][wr & in_part] >> 9).sum()),
        "q_data": int(np.count_nonzero(q["bytes"] > 0)),
        "remaps": a, "q_ahead": int(np.count_nonzero((q["category"] & TC_AHEAD) != 0)),
        "first_block_ts": int(blk["ts"][0]) if len(blk) else 0, "first_ts": int(ev["ts"][0]),
    }


def test_support_recording_session(ext4: tuple[Any, str], workdir: Path) -> None:
    ld, mnt = ext4
    dev = ld.device
    key = f"{dev.major},{dev.minor}"
    part = Path(ld.partition(1)).name
    sysp = Path(f"/sys/block/{ld.name}/{part}")
    part_start = int((sysp / "start").read_text())
    part_end = part_start + int((sysp / "size").read_text())
    part_mm = (sysp / "dev").read_text().strip()
    ld.set_queue("max_sectors_kb", str(MAX_SECTORS_KB))

    # files the workload uses, laid out before the recording, then everything on disk
    _fio(f"{mnt}/direct", "write", "1M", 8, 1)
    _sh("dd", "if=/dev/urandom", f"of={mnt}/toread", "bs=1M", f"count={READ_FILE_MB}", "status=none")
    _sh("sync")
    time.sleep(0.5)

    cap = workdir / "case.ioscope"
    disk0, part0 = ld.diskstats(), devices.read_diskstats()[part]
    rec = subprocess.Popen(ioscope_cmd("record", "-d", ld.name, "-o", str(cap)), stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        assert rec.stderr is not None
        first = rec.stderr.readline()
        assert first.startswith(f"Recording block I/O events on {ld.name} to {cap}"), first + rec.stderr.read()
        assert "until Ctrl-C" in first, first
        time.sleep(2.0)   # idle: the first chunks hold no block event
        done = _workload(mnt)
        time.sleep(0.3)
    finally:
        os.killpg(rec.pid, signal.SIGINT)   # Ctrl-C: the terminal signals the foreground process group
        _, rest = rec.communicate(timeout=60)
    disk1 = ld.diskstats()
    part1 = devices.read_diskstats()[part]
    err = first + rest
    assert rec.returncode == 0, err
    assert "Traceback" not in err, err
    assert done == {"fio_read": NDIRECT_READS, "fio_write": NDIRECT_WRITES}

    # ---- ground truth: the kernel's counters over the recording window
    k_read, k_write = disk1.reads - disk0.reads, disk1.writes - disk0.writes
    k_flush, k_discard = disk1.flushes - disk0.flushes, disk1.discards - disk0.discards
    k_sec_read = disk1.sectors_read - disk0.sectors_read
    k_sec_write = disk1.sectors_written - disk0.sectors_written
    kp_read, kp_write = part1.reads - part0.reads, part1.writes - part0.writes
    kp_sec_read = part1.sectors_read - part0.sectors_read
    kp_sec_write = part1.sectors_written - part0.sectors_written
    k_total = k_read + k_write + k_flush + k_discard
    assert k_read >= NDIRECT_READS and k_write >= NDIRECT_WRITES + NBIG * 1024 // MAX_SECTORS_KB
    assert k_sec_read >= READ_FILE_MB * 2048

    # ---- record's summary and the capture's own check
    summ = record_summary(err)
    assert summ["file"] == str(cap) and summ["lost"] == 0 and summ["stopped"] == "interrupted", summ
    got = _capture_counts(str(cap), dev.dev, part_start, part_end)
    assert got["devs"] == {dev.dev}
    idle_ns = got["first_block_ts"] - got["meta"]["attached_mono_ns"]
    assert idle_ns >= 1_500_000_000, f"the recording did not start idle: first block event after {idle_ns} ns"
    assert summ["actions"] == got["actions"], (summ["actions"], got["actions"])
    assert summ["events"] == sum(got["actions"].values())
    missing = unreported_completions(str(cap), dev.major, dev.minor)
    # the recorder read /proc/diskstats just before attaching and after detaching: nothing else ran
    assert got["end"]["completions_check"][key]["kernel"] == k_total, (got["end"]["completions_check"], k_total)
    warn = [ln for ln in err.splitlines() if ln.startswith("ioscope record: warning:") and "/proc/diskstats" in ln]
    if missing:
        assert len(warn) == 1 and f"{missing:,} were not" in warn[0], err
    else:
        assert not warn, err

    # completions per direction and sectors == /proc/diskstats (exact unless the kernel skipped
    # the completion program: that gap is reported in the capture and bounded)
    assert got["c"] + missing == k_total, (got["c"], missing, k_total)
    assert summ["actions"]["C"] == got["c"]
    assert got["c_flush"] <= k_flush + k_discard
    assert k_read - missing <= got["c_read"] <= k_read, (got["c_read"], k_read, missing)
    assert k_write - missing <= got["c_write"] <= k_write, (got["c_write"], k_write, missing)
    maxsec = MAX_SECTORS_KB * 2
    assert k_sec_read - missing * maxsec <= got["sec_read"] <= k_sec_read, (got["sec_read"], k_sec_read)
    assert k_sec_write - missing * maxsec <= got["sec_write"] <= k_sec_write, (got["sec_write"], k_sec_write)
    if missing == 0:
        assert (got["c_read"], got["c_write"], got["c_flush"]) == (k_read, k_write, k_flush + k_discard)
        assert (got["sec_read"], got["sec_write"]) == (k_sec_read, k_sec_write)
    # the partition: its completions are the disk's completions inside its sector range
    assert kp_read - missing <= got["part_read"] <= kp_read, (got["part_read"], kp_read)
    assert kp_write - missing <= got["part_write"] <= kp_write, (got["part_write"], kp_write)
    if missing == 0:
        assert (got["part_sec_read"], got["part_sec_write"]) == (kp_sec_read, kp_sec_write)
    # remaps: every data bio of the file system was remapped from the partition
    remaps = got["remaps"]
    pmaj, pmin = (int(x) for x in part_mm.split(":"))
    assert len(remaps) > 0
    assert set(remaps["aux_dev"].tolist()) == {(pmaj << 20) | pmin}
    assert bool(((remaps["aux"] + part_start) == remaps["sector"]).all()), "remap sector != source + start"
    assert len(remaps) == got["q_data"], (len(remaps), got["q_data"])
    # splits: each 1 MiB direct write became 1024/MAX_SECTORS_KB pieces, so at least that many - 1 X each
    assert got["actions"].get("X", 0) >= NBIG * (1024 // MAX_SECTORS_KB - 1), got["actions"]
    # the scheduler's phases, readahead, merges, plugs
    for letter in ("Q", "G", "I", "D", "C", "M", "P", "U", "A", "X"):
        assert got["actions"].get(letter, 0) > 0, (letter, got["actions"])
    assert got["q_ahead"] > 0, "no readahead bio"
    assert got["actions"].get("R", 0) == 0   # see the module docstring

    # ---- ioscope parse CAPTURE
    parse = run_ioscope("parse", str(cap), timeout=120)
    _no_traceback(parse, "ioscope parse")
    # ---- ioscope report CAPTURE, report --json CAPTURE
    rep = run_ioscope("report", str(cap), timeout=120)
    _no_traceback(rep, "ioscope report")
    repj = run_ioscope("report", "--json", str(cap), timeout=120)
    _no_traceback(repj, "ioscope report --json")
    doc = json.loads(repj.stdout)
    # ---- ioscope export --format blktrace -o X CAPTURE
    exp = workdir / "case.blktrace"
    ex = run_ioscope("export", "--format", "blktrace", "-o", str(exp), str(cap), timeout=120)
    _no_traceback(ex, "ioscope export")
    # ---- the real blkparse and btt on the export (blkparse 1.2.0 takes a dump on stdin: docs/export.md)
    bp_text = bs.run_blkparse(str(exp))
    avg = bs.run_btt(str(exp), str(workdir), "-A")
    # ---- ioscope import X -o Y; ioscope report Y
    imp = workdir / "imported.ioscope"
    im = run_ioscope("import", str(exp), "-o", str(imp), timeout=120)
    _no_traceback(im, "ioscope import")
    rep2 = run_ioscope("report", str(imp), timeout=120)
    _no_traceback(rep2, "ioscope report (imported)")
    rep2j = run_ioscope("report", "--json", str(imp), timeout=120)
    _no_traceback(rep2j, "ioscope report --json (imported)")
    doc2 = json.loads(rep2j.stdout)

    # blkparse's totals == the capture == the kernel
    bp = blkparse_totals(bp_text)
    assert set(bp) == {key}, set(bp)
    b = bp[key]
    assert b["Reads Completed"] + b["Writes Completed"] == got["c"]
    assert b.get("Reads Requeued", 0) + b.get("Writes Requeued", 0) == got["actions"].get("R", 0)
    assert b["Reads Queued"] + b["Writes Queued"] == got["actions"]["Q"]
    assert b["Read Dispatches"] + b["Write Dispatches"] == got["actions"]["D"]
    assert b["Read Merges"] + b["Write Merges"] == got["actions"].get("M", 0) + got["actions"].get("F", 0)
    # blkparse counts data-less completions (flushes) on the read side, as the kernel's category says
    assert b["Writes Completed"] == got["c_write"]
    assert b["Reads Completed"] == got["c_read"] + got["c_flush"]
    assert (b["Reads Completed KiB"] * 2, b["Writes Completed KiB"] * 2) == (got["sec_read"], got["sec_write"])
    assert k_write - missing <= b["Writes Completed"] <= k_write
    # ioscope parse prints what blkparse prints, line for line
    assert parse.stdout == bp_text

    # report: text == JSON == the capture == the kernel
    t_io = report_iostat_text(rep.stdout)
    j_io = report_iostat_json(doc)
    assert list(j_io) == [key], list(j_io)
    assert len(t_io) == 1, list(t_io)
    (t_name, t), = t_io.items()
    j = j_io[key]
    assert key in t_name and ld.name in t_name, t_name
    for k in ("r", "w", "rsec", "wsec", "rows"):
        assert round(t[k], 2) == round(j[k], 6), (k, t[k], j[k])
    assert (round(j["r"]), round(j["w"])) == (got["c_read"], got["c_write"]), (j, got)
    assert (round(j["rsec"]), round(j["wsec"])) == (got["sec_read"], got["sec_write"]), (j, got)
    assert k_read - missing <= round(j["r"]) <= k_read and k_write - missing <= round(j["w"]) <= k_write
    d = doc["devices"][key]
    assert d["merge"]["q"] == got["actions"]["Q"] and d["merge"]["d"] == got["actions"]["D"]
    # every sector completed, in 512-byte blocks (btt counts the requests it saw issued and completed)
    assert d["merge"]["blk_total"] <= got["sec_read"] + got["sec_write"]
    # the report's btt part is btt's own output on the export
    assert btt_part(rep.stdout) == avg
    rows = bs.btt_table(avg, "All Devices")
    for label in ("Q2C", "D2C", "Q2Q", "Q2G", "G2I", "I2D", "Q2M", "M2D"):
        if label in rows:
            ph = doc["phases"][label.lower()]
            assert (ph["n"], f"{ph['avg']:.9f}") == (rows[label][3], f"{rows[label][1]:.9f}"), label

    # the re-imported export reports the same numbers as the original
    assert btt_part(rep2.stdout) == btt_part(rep.stdout)
    assert doc2["phases"] == doc["phases"]
    assert doc2["devices"][key]["phases"] == d["phases"] and doc2["devices"][key]["merge"] == d["merge"]
    assert report_iostat_json(doc2) == j_io
    t2 = report_iostat_text(rep2.stdout)
    assert len(t2) == 1 and next(iter(t2.values())) == t, t2
    assert doc2["events"] == doc["events"]

    assert missing <= unreported_bound(k_total)
