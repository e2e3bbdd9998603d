"""Acceptance: a support engineer's recording session, played end to end as a user types it.

A loop disk (mq-deadline, so G/I/M phases exist; max_sectors_kb 64) with a partition table and
ext4 on partition 1. `ioscope record -d DISK -o FILE` is started on the whole disk (so partition
remaps are recorded) and left idle for two seconds (so the capture's first chunks hold no block
event); then a known workload: direct 4 KiB random reads and writes with prime counts (fio),
buffered appends and `sync` (writeback, merges, the journal's FUA/PREFLUSH commit), buffered reads
after drop_caches (readahead), direct 1 MiB writes over max_sectors_kb (splits). Ctrl-C ends the
recording. Then, as the user types them: `ioscope parse FILE`, `ioscope report FILE`, `ioscope
report --json FILE`, `ioscope export --format blktrace -o X FILE`, the real `blkparse` and `btt`
on X, `ioscope import X -o Y`, `ioscope report Y`.

The session runs once (module fixture); each test checks one part of it, so that one failing
step does not hide the others. Every command must exit 0 with no traceback, and the numbers must
agree with the kernel's /proc/diskstats for the disk and the partition over the recording window,
with record's summary, between report's text and JSON, between the original and the re-imported
export, and with real blkparse and btt.

How C events relate to /proc/diskstats on this disk (kernel behaviour, the same for the kernel's
own blk tracer): the loop disk has a volatile write cache and no FUA, so a write with
REQ_PREFLUSH or REQ_FUA goes through the block layer's flush state machine: a flush request
(C "FN", counted in diskstats' flushes), the data request (a C with its bytes: its sectors are
counted, the I/O is not yet), possibly a second flush, and then the original request is ended
again (a C of 0 bytes: diskstats counts it as one write). An empty flush bio (`sync`) gives a
flush request and a 0-byte write C, both counted. So, per the kernel's accounting:
  reads   = read C events with data
  writes  = write C events - data C events of FUA/PREFLUSH writes (= Qs of such bios with data)
  flushes = data-less, non-write C events (the flush requests)
  sectors = the bytes of all C events, per direction.

Requeues (R) are not provoked: block_rq_requeue fires when a driver's queue_rq returns
BLK_STS_RESOURCE/DEV_RESOURCE (or the driver requeues itself, as SCSI and NVMe do on errors); the
loop driver's queue_rq returns only OK or IOERR, blk-mq puts back a request it could not get a
driver tag or budget for without that tracepoint, and the flush state machine moves requests on
its own list without it.
There is no null_blk or scsi_debug on these machines (the test VMs' kernels lack both modules). The tests still check
that the R counts of the capture, record's summary and blkparse agree (all zero).

IOSCOPE_ACC_KEEP=DIR copies the session's files (capture, export, import, btt's output) to DIR.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from acc_util import blkparse_totals, btt_part, record_summary, report_iostat_json, report_iostat_text

import blk_scenarios as bs
from conftest import ioscope_cmd, run_ioscope, unreported_bound, unreported_completions
from ioscope.base import devices

NDIRECT_READS = 1009   # direct 4 KiB random reads (fio): primes, so that no other count matches by chance
NDIRECT_WRITES = 211   # direct 4 KiB random overwrites (fio)
NBUF_WRITES = 997      # buffered 4 KiB appends, then sync
NBIG = 7               # direct 1 MiB writes (dd), split at max_sectors_kb
MAX_SECTORS_KB = 64
READ_FILE_MB = 24      # read back buffered after drop_caches: readahead
IDLE_S = 2.0           # the recorder runs idle this long before the workload


@dataclass
class Session:
    workdir: Path
    disk: str
    dev: devices.BlockDevice
    part: str
    part_dev: int          # kernel dev_t of partition 1
    part_start: int        # its first sector on the disk
    part_end: int
    cap: str
    exp: str
    imp: str
    workload: dict[str, Any]
    k: dict[str, int]      # /proc/diskstats deltas of the disk over the recording
    in_flight_after: int   # the disk's I/Os in flight at the end of the workload (before Ctrl-C)
    kp: dict[str, int]     # and of the partition
    window: tuple[int, int]  # CLOCK_MONOTONIC ns: first and second reading of /proc/diskstats
    rec: subprocess.CompletedProcess[str]
    runs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.dev.major},{self.dev.minor}"


def _sh(*cmd: str) -> None:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (cmd, p.stderr)


def _fio(filename: str, rw: str, bs_: str, n: int, iodepth: int) -> int:
    out = subprocess.run(["fio", "--name=acc", f"--filename={filename}", f"--rw={rw}", f"--bs={bs_}",
                          f"--iodepth={iodepth}", "--ioengine=libaio", "--direct=1", "--size=8M",
                          f"--number_ios={n}", "--randrepeat=0", "--norandommap=0", "--output-format=json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    return int(job["read"]["total_ios"] + job["write"]["total_ios"])


def _workload(mnt: str) -> dict[str, Any]:
    """The known workload, on the mounted file system. Returns what the workload itself counted."""
    done: dict[str, Any] = {}
    # direct I/O: one bio and one request each (4 KiB, aligned, fio's random map: no block twice)
    done["fio_read"] = _fio(f"{mnt}/direct", "randread", "4k", NDIRECT_READS, 8)
    done["fio_write"] = _fio(f"{mnt}/direct", "randwrite", "4k", NDIRECT_WRITES, 4)
    # buffered appends, then the user's sync: writeback merges them, the journal commits
    with open(f"{mnt}/appended", "wb") as f:
        for _ in range(NBUF_WRITES):
            f.write(b"a" * 4096)
    _sh("sync")
    # buffered reads of a file no longer in the page cache: readahead
    _sh("sh", "-c", "echo 3 > /proc/sys/vm/drop_caches")
    _sh("dd", f"if={mnt}/toread", "of=/dev/null", "bs=64k", "status=none")
    # 1 MiB direct writes, over max_sectors_kb: split by the block layer
    _sh("dd", "if=/dev/zero", f"of={mnt}/direct", "bs=1M", f"count={NBIG}", "oflag=direct", "conv=notrunc",
        "status=none")
    _sh("sync")
    return done


def _delta(a: devices.DiskStats, b: devices.DiskStats) -> dict[str, int]:
    return {"reads": b.reads - a.reads, "writes": b.writes - a.writes, "flushes": b.flushes - a.flushes,
            "discards": b.discards - a.discards, "sec_read": b.sectors_read - a.sectors_read,
            "sec_write": b.sectors_written - a.sectors_written}


def _umount(mnt: str) -> None:
    for _ in range(10):
        if subprocess.run(["umount", mnt], capture_output=True).returncode == 0:
            return
        time.sleep(0.5)   # a process of the workload may still hold a file open
    # detach it at least, so that the loop device can go; and say so
    subprocess.run(["umount", "-l", mnt], check=True)
    raise AssertionError(f"{mnt} was busy: unmounted lazily")


def _rmtree(d: Path) -> None:
    for f in sorted(d.rglob("*"), reverse=True):
        if f.is_dir():
            f.rmdir()
        else:
            f.unlink()
    d.rmdir()


@pytest.fixture(scope="module")
def session(live: None) -> Iterator[Session]:
    from ioscope.base.testbed import LoopDevice
    workdir = Path(tempfile.mkdtemp(prefix="ioscope-acc-rec-", dir="/dev/shm"))
    mnt = tempfile.mkdtemp(prefix="ioscope-acc-mnt-")
    mounted = False
    try:
        with LoopDevice(size_mb=320, scheduler="mq-deadline", partitions_mb=[300]) as ld:
            try:
                ld.set_queue("max_sectors_kb", str(MAX_SECTORS_KB))
                p1 = ld.partition(1)
                part = Path(p1).name
                sysp = Path(f"/sys/block/{ld.name}/{part}")
                start = int((sysp / "start").read_text())
                pmaj, pmin = (int(x) for x in (sysp / "dev").read_text().split(":"))
                _sh("mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0", p1)
                # no I/O of the file system's own during the idle start: no periodic journal commit,
                # no block bitmap prefetch by ext4lazyinit after mounting
                _sh("mount", "-o", "noatime,commit=600,no_prefetch_block_bitmaps", p1, mnt)
                mounted = True
                # the workload's files, laid out before the recording, and everything on disk
                _fio(f"{mnt}/direct", "write", "1M", 8, 1)
                _sh("dd", "if=/dev/urandom", f"of={mnt}/toread", "bs=1M", f"count={READ_FILE_MB}", "status=none")
                _sh("sync")
                time.sleep(0.5)
                s = _record_session(ld, mnt, workdir, part)
                s.part_dev, s.part_start = (pmaj << 20) | pmin, start
                s.part_end = start + int((sysp / "size").read_text())
                _offline_tools(s)
                yield s
            finally:
                if mounted:
                    _umount(mnt)
                    mounted = False
    finally:
        os.rmdir(mnt)
        if os.environ.get("IOSCOPE_ACC_KEEP"):
            subprocess.run(["cp", "-r", str(workdir), os.environ["IOSCOPE_ACC_KEEP"]])
        _rmtree(workdir)


def _quiet(ld: Any, still_s: float = 1.0, timeout_s: float = 15.0) -> None:
    """Wait until the disk has done no I/O for still_s: the counts before the recording must not
    include the tail of the set-up's own writeback (a journal commit)."""
    deadline = time.monotonic() + timeout_s
    last, since = ld.diskstats(), time.monotonic()
    while time.monotonic() - since < still_s:
        assert time.monotonic() < deadline, "the disk never went quiet before the recording"
        time.sleep(0.1)
        now = ld.diskstats()
        if (now.reads, now.writes, now.flushes, now.in_flight) != (last.reads, last.writes, last.flushes,
                                                                   last.in_flight):
            last, since = now, time.monotonic()


def _record_session(ld: Any, mnt: str, workdir: Path, part: str) -> Session:
    cap = str(workdir / "case.ioscope")
    _quiet(ld)
    # what the user types, in a terminal of its own: the recorder leads its process group
    rec = subprocess.Popen(ioscope_cmd("record", "-d", ld.name, "-o", cap), stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    first = ""
    window = (0, 0)
    try:
        assert rec.stderr is not None
        first = rec.stderr.readline()   # printed once every program is attached
        if first.startswith("Recording block I/O events"):
            # The ground truth's window lies inside the recording (read after attaching, before
            # Ctrl-C), so that I/O anyone makes on the disk while the recorder starts or stops
            # (another root process probing block devices on a shared kernel) is in both or in
            # neither; gap() checks that no block event falls outside it.
            t0 = time.monotonic_ns()
            d0, p0 = ld.diskstats(), devices.read_diskstats()[part]
            time.sleep(IDLE_S)
            done = _workload(mnt)
            time.sleep(0.3)
            d1, p1 = ld.diskstats(), devices.read_diskstats()[part]
            window = (t0, time.monotonic_ns())
    finally:
        os.killpg(rec.pid, signal.SIGINT)   # Ctrl-C: the terminal signals the foreground process group
        _, rest = rec.communicate(timeout=60)
    assert first.startswith("Recording block I/O events"), first + rest
    return Session(workdir=workdir, disk=ld.name, dev=ld.device, part=part, part_dev=0, part_start=0, part_end=0,
                   cap=cap, exp=str(workdir / "case.blktrace"), imp=str(workdir / "imported.ioscope"),
                   workload=done, k=_delta(d0, d1), kp=_delta(p0, p1), in_flight_after=d1.in_flight,
                   window=window, rec=subprocess.CompletedProcess(rec.args, rec.returncode, "", first + rest))


def _offline_tools(s: Session) -> None:
    """Every command the user runs after the recording; results kept, judged by the tests."""
    s.runs["parse"] = run_ioscope("parse", s.cap, timeout=120)
    s.runs["report"] = run_ioscope("report", s.cap, timeout=120)
    s.runs["report --json"] = run_ioscope("report", "--json", s.cap, timeout=120)
    s.runs["export"] = run_ioscope("export", "--format", "blktrace", "-o", s.exp, s.cap, timeout=120)
    if os.path.exists(s.exp):
        # blkparse 1.2.0 reads a single dump only on its standard input (docs/export.md)
        with open(s.exp, "rb") as f:
            p = subprocess.run(["blkparse", "-i", "-"], stdin=f, capture_output=True, timeout=300)
        s.runs["blkparse"] = subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(errors="replace"),
                                                         p.stderr.decode(errors="replace"))
        # btt writes *_iops_fp.dat and *_mbps_fp.dat into its working directory
        s.runs["btt"] = subprocess.run(["btt", "-A", "-i", s.exp, "-o", str(s.workdir / "btt")],
                                       capture_output=True, text=True, timeout=300, cwd=s.workdir)
        s.runs["import"] = run_ioscope("import", s.exp, "-o", s.imp, timeout=120)
    if os.path.exists(s.imp):
        s.runs["report imported"] = run_ioscope("report", s.imp, timeout=120)
        s.runs["report --json imported"] = run_ioscope("report", "--json", s.imp, timeout=120)


def _ok(s: Session, what: str) -> subprocess.CompletedProcess[str]:
    assert what in s.runs, f"{what} did not run: an earlier step left no input for it"
    p = s.runs[what]
    assert "Traceback" not in p.stderr, f"{what}: {p.stderr[-3000:]}"
    assert p.returncode == 0, f"{what} exited {p.returncode}: {p.stderr[-3000:]}"
    return p


def _btt_avg(s: Session) -> str:
    p = _ok(s, "btt")
    assert p.stderr == "", p.stderr
    return (s.workdir / "btt.avg").read_text()


# ----------------------------------------------------------------------------- the capture itself

@dataclass
class Counts:
    actions: dict[str, int]
    devs: set[int]
    meta: dict[str, Any]
    end: dict[str, Any]
    c: int
    c_flushrq: int       # data-less, non-write completions: the flush requests
    c_read: int          # read completions with data
    c_write: int         # write completions, with data or not
    c_write_data: int
    c_write_nodata: int
    c_fseq_data: int     # data completions of FUA/PREFLUSH writes (not counted as I/Os by the kernel)
    sec_read: int
    sec_write: int
    part_c_read: int
    part_sec_read: int
    part_sec_write: int
    q_data: int
    q_fio_read: int
    q_fio_write: int
    q_dd_big: int
    q_ahead: int
    remaps: np.ndarray
    splits: np.ndarray
    first_block_ts: int
    outside: int         # block events before the first or after the second diskstats reading


_counts: dict[str, Counts] = {}


def counts(s: Session) -> Counts:
    """Counts straight from the capture file, with ioscope's reader (no command line tool)."""
    if s.cap in _counts:
        return _counts[s.cap]
    from ioscope.capture.events import (
        ACTION_LETTERS,
        TA_COMPLETE,
        TA_QUEUE,
        TA_REMAP,
        TA_SPLIT,
        TC_AHEAD,
        TC_FLUSH,
        TC_FUA,
        TC_WRITE,
    )
    from ioscope.capture.store import open_capture
    with open_capture(s.cap) as cap:
        assert not cap.truncated and cap.end is not None
        ev = cap.read_all()
        meta, end, comms = cap.meta, cap.end, cap.comms
    blk = ev[ev["action"] != 0]
    acts, n = np.unique(blk["action"], return_counts=True)
    c = blk[blk["action"] == TA_COMPLETE]
    w = (c["category"] & TC_WRITE) != 0
    data = c["bytes"] > 0
    in_part = (c["sector"] >= s.part_start) & (c["sector"] + (c["bytes"] >> 9) <= s.part_end)
    q = blk[blk["action"] == TA_QUEUE]
    qw = (q["category"] & TC_WRITE) != 0
    qcomm = np.array([comms.get(int(p), "") for p in q["pid"]], dtype=object)
    res = Counts(
        actions={ACTION_LETTERS[int(x)]: int(k) for x, k in zip(acts, n)},
        devs=set(blk["dev"].tolist()), meta=meta, end=end, c=len(c),
        c_flushrq=int(np.count_nonzero(~w & ~data)),
        c_read=int(np.count_nonzero(~w & data)), c_write=int(np.count_nonzero(w)),
        c_write_data=int(np.count_nonzero(w & data)), c_write_nodata=int(np.count_nonzero(w & ~data)),
        c_fseq_data=int(np.count_nonzero(qw & (q["bytes"] > 0) & ((q["category"] & (TC_FLUSH | TC_FUA)) != 0))),
        sec_read=int((c["bytes"][~w] >> 9).sum()), sec_write=int((c["bytes"][w] >> 9).sum()),
        part_c_read=int(np.count_nonzero(~w & data & in_part)),
        part_sec_read=int((c["bytes"][~w & in_part] >> 9).sum()),
        part_sec_write=int((c["bytes"][w & in_part] >> 9).sum()),
        q_data=int(np.count_nonzero(q["bytes"] > 0)),
        q_fio_read=int(np.count_nonzero((qcomm == "fio") & ~qw)),
        q_fio_write=int(np.count_nonzero((qcomm == "fio") & qw)),
        q_dd_big=int(np.count_nonzero((qcomm == "dd") & qw & (q["bytes"] == 1 << 20))),
        q_ahead=int(np.count_nonzero((q["category"] & TC_AHEAD) != 0)),
        remaps=blk[blk["action"] == TA_REMAP], splits=blk[blk["action"] == TA_SPLIT],
        first_block_ts=int(blk["ts"][0]) if len(blk) else 0,
        outside=int(np.count_nonzero((blk["ts"] < s.window[0]) | (blk["ts"] > s.window[1]))),
    )
    _counts[s.cap] = res
    return res


def kernel_ios(k: Counts) -> int:
    """I/Os the kernel counts in /proc/diskstats (reads + writes + discards + flushes) for these C events:
    every C but the data completions of FUA/PREFLUSH writes (module docstring)."""
    return k.c - k.c_fseq_data


def gap(s: Session) -> int:
    """Completions the kernel made that the capture lacks (the kernel sometimes runs no BPF program for
    a completion: conftest.unreported_bound); exactly 0 when none was skipped."""
    k = counts(s)
    assert k.outside == 0, f"{k.outside} block events outside the window of the diskstats readings {s.window}"
    total = s.k["reads"] + s.k["writes"] + s.k["flushes"] + s.k["discards"]
    missing = total - kernel_ios(k)
    assert 0 <= missing <= unreported_bound(total), (total, kernel_ios(k), k.c, k.c_fseq_data)
    return missing


# ----------------------------------------------------------------------------- tests

def test_record_ends_cleanly_on_ctrl_c(session: Session) -> None:
    s = session
    assert "Traceback" not in s.rec.stderr, s.rec.stderr
    assert s.rec.returncode == 0, s.rec.stderr
    first = s.rec.stderr.splitlines()[0]
    assert first.startswith(f"Recording block I/O events on {s.disk} to {s.cap} (") and "until Ctrl-C" in first
    summ = record_summary(s.rec.stderr)
    assert summ["file"] == s.cap and summ["lost"] == 0 and summ["stopped"] == "interrupted", summ
    k = counts(s)
    assert dict(summ["actions"]) == k.actions
    assert summ["events"] == sum(k.actions.values())
    assert k.devs == {s.dev.dev}
    assert k.meta["lost"]["total"] == 0
    # the recording started idle: nothing on the disk until the workload, IDLE_S later
    idle_ns = k.first_block_ts - k.meta["attached_mono_ns"]
    assert idle_ns >= (IDLE_S - 0.5) * 1e9, f"first block event {idle_ns} ns after attaching"
    assert s.workload == {"fio_read": NDIRECT_READS, "fio_write": NDIRECT_WRITES}


def test_capture_counts_equal_diskstats(session: Session) -> None:
    s, k = session, counts(session)
    missing = gap(s)
    # sanity of the ground truth itself: the workload is in it
    assert s.k["reads"] >= NDIRECT_READS and s.k["sec_read"] >= READ_FILE_MB * 2048
    assert s.k["writes"] >= NDIRECT_WRITES + NBIG * 1024 // MAX_SECTORS_KB and s.k["flushes"] > 0
    assert s.k["discards"] == 0
    assert k.c_fseq_data > 0, "no FUA/PREFLUSH write: the journal did not commit"
    # per direction, exact unless completions were skipped (then within that gap)
    assert s.k["reads"] - missing <= k.c_read <= s.k["reads"], (k.c_read, s.k, missing)
    assert s.k["writes"] - missing <= k.c_write - k.c_fseq_data <= s.k["writes"], (k.c_write, k.c_fseq_data, s.k)
    assert s.k["flushes"] - missing <= k.c_flushrq <= s.k["flushes"], (k.c_flushrq, s.k)
    maxsec = MAX_SECTORS_KB * 2
    assert s.k["sec_read"] - missing * maxsec <= k.sec_read <= s.k["sec_read"], (k.sec_read, s.k)
    assert s.k["sec_write"] - missing * maxsec <= k.sec_write <= s.k["sec_write"], (k.sec_write, s.k)
    if missing == 0:
        assert (k.c_read, k.c_write - k.c_fseq_data, k.c_flushrq) == (s.k["reads"], s.k["writes"], s.k["flushes"])
        assert (k.sec_read, k.sec_write) == (s.k["sec_read"], s.k["sec_write"])
    # the workload's own counts: every direct I/O fio did is one Q of fio's
    assert (k.q_fio_read, k.q_fio_write) == (NDIRECT_READS, NDIRECT_WRITES)
    assert k.q_dd_big == NBIG
    assert record_summary(s.rec.stderr)["actions"]["C"] == k.c


def test_completions_check_reports_the_real_gap(session: Session) -> None:
    """The recorder's completions check (end record, warning line) must report what the kernel
    completed and the capture lacks: the same gap as the kernel's own accounting gives."""
    s, k = session, counts(session)
    missing = gap(s)
    check = k.end["completions_check"][s.key]
    total = s.k["reads"] + s.k["writes"] + s.k["flushes"] + s.k["discards"]
    assert check["kernel"] == total, (check, s.k)   # nothing else ran between its reads and ours
    warn = [ln for ln in s.rec.stderr.splitlines() if ln.startswith("ioscope record: warning:")]
    assert check["kernel"] - check["recorded"] == missing, (
        f"completions check {check} says {check['kernel'] - check['recorded']} not seen, but the capture "
        f"lacks {missing}: it has {k.c} C events of which {k.c_fseq_data} are data completions of "
        f"FUA/PREFLUSH writes that the kernel ends a second time (a 0-byte C) and counts once")
    assert len(warn) == (1 if missing else 0), s.rec.stderr
    assert unreported_completions(s.cap, s.dev.major, s.dev.minor) == missing


def test_partition_remaps_and_counts(session: Session) -> None:
    s, k = session, counts(session)
    missing = gap(s)
    r = k.remaps
    assert len(r) > 0
    assert set(r["aux_dev"].tolist()) == {s.part_dev}, "remaps from another device"
    assert bool(((r["aux"] + s.part_start) == r["sector"]).all()), "A: sector != source sector + partition start"
    assert bool((r["dev"] == s.dev.dev).all())
    # every bio with data was queued through the partition (data-less flushes are not remapped)
    assert len(r) == k.q_data, (len(r), k.q_data)
    # the partition's own counters: its completions are the disk's inside its sector range
    assert s.kp["reads"] - missing <= k.part_c_read <= s.kp["reads"], (k.part_c_read, s.kp)
    maxsec = MAX_SECTORS_KB * 2
    assert s.kp["sec_read"] - missing * maxsec <= k.part_sec_read <= s.kp["sec_read"], (k.part_sec_read, s.kp)
    assert s.kp["sec_write"] - missing * maxsec <= k.part_sec_write <= s.kp["sec_write"], (k.part_sec_write, s.kp)
    if missing == 0:
        assert (k.part_c_read, k.part_sec_read, k.part_sec_write) == \
            (s.kp["reads"], s.kp["sec_read"], s.kp["sec_write"])
    # report's stacked-device view: the disk, and the bios and bytes its partition sent to it (A
    # events), the bytes being what the partition's own counters moved
    doc = json.loads(_ok(s, "report --json").stdout)
    (st,) = [x for x in doc["stacks"] if x["kind"] == "partitions"]
    assert st["name"] == s.disk and st["source"] == "remaps"
    (mem,) = st["members"]
    assert (mem["name"], mem["ios"], mem["share_bytes"]) == (s.part, len(r), 1.0)
    assert mem["bytes"] == int(r["bytes"].sum()) == (s.kp["sec_read"] + s.kp["sec_write"]) * 512, (mem, s.kp)


def test_splits_readahead_merges_and_phases(session: Session) -> None:
    k = counts(session)
    for letter in ("Q", "G", "I", "D", "C", "M", "P", "U", "A", "X"):
        assert k.actions.get(letter, 0) > 0, (letter, k.actions)
    # each 1 MiB direct write is cut at max_sectors_kb: X events name where the rest starts
    pieces = 1024 // MAX_SECTORS_KB
    assert k.actions["X"] >= NBIG * (pieces - 1), k.actions
    x = k.splits
    assert bool((x["aux"] > x["sector"]).all())
    assert bool(((x["aux"] - x["sector"]) % (MAX_SECTORS_KB * 2) == 0).all()), "split not at max_sectors_kb"
    assert k.q_ahead > 0, "no readahead bio"
    assert k.actions.get("R", 0) == 0   # requeues: see the module docstring


def test_parse_equals_blkparse(session: Session) -> None:
    parse = _ok(session, "parse")
    bp = _ok(session, "blkparse")
    assert bp.stderr == "", bp.stderr
    assert parse.stdout == bp.stdout


def test_export_through_real_blkparse_and_btt(session: Session) -> None:
    s, k = session, counts(session)
    _ok(s, "export")
    bp = _ok(s, "blkparse")
    assert bp.stderr == "", bp.stderr
    _btt_avg(s)
    missing = gap(s)
    tot = blkparse_totals(bp.stdout)
    assert set(tot) == {s.key}, set(tot)
    b = tot[s.key]
    assert b["Reads Queued"] + b["Writes Queued"] == k.actions["Q"]
    assert b["Read Dispatches"] + b["Write Dispatches"] == k.actions["D"]
    assert b["Reads Requeued"] + b["Writes Requeued"] == k.actions.get("R", 0)
    assert b["Read Merges"] + b["Write Merges"] == k.actions.get("M", 0) + k.actions.get("F", 0)
    assert b["Reads Completed"] + b["Writes Completed"] == k.c
    # blkparse puts a completion on the write side by its category: the flush requests are on the read side
    assert (b["Reads Completed"], b["Writes Completed"]) == (k.c_read + k.c_flushrq, k.c_write)
    assert (b["Reads Completed KiB"] * 2, b["Writes Completed KiB"] * 2) == (k.sec_read, k.sec_write)
    # and the kernel's counters
    assert s.k["reads"] + s.k["flushes"] - missing <= b["Reads Completed"] <= s.k["reads"] + s.k["flushes"]
    assert s.k["writes"] - missing <= b["Writes Completed"] - k.c_fseq_data <= s.k["writes"]
    if missing == 0:
        assert (b["Reads Completed KiB"] * 2, b["Writes Completed KiB"] * 2) == (s.k["sec_read"], s.k["sec_write"])


def test_report_text_json_and_btt_agree(session: Session) -> None:
    s, k = session, counts(session)
    rep, repj = _ok(s, "report"), _ok(s, "report --json")
    doc = json.loads(repj.stdout)
    missing = gap(s)
    t_io, j_io = report_iostat_text(rep.stdout), report_iostat_json(doc)
    assert list(j_io) == [s.key] and len(t_io) == 1, (list(j_io), list(t_io))
    (t_name, t), = t_io.items()
    j = j_io[s.key]
    assert s.disk in t_name and s.key in t_name, t_name
    for col in ("r", "w", "rsec", "wsec", "rows"):
        assert round(t[col], 2) == round(j[col], 2), (col, t[col], j[col])
    # report's iostat counts the completions with data, per direction (docs/report.md)
    assert (round(j["r"]), round(j["w"])) == (k.c_read, k.c_write_data), (j, k)
    assert (round(j["rsec"]), round(j["wsec"])) == (k.sec_read, k.sec_write), (j, k)
    # and the kernel's counters: it counts the data-less write requests (empty flush bios) as writes too
    empty_flush_writes = k.c_write_nodata - k.c_fseq_data
    assert s.k["reads"] - missing <= round(j["r"]) <= s.k["reads"]
    assert s.k["writes"] - missing <= round(j["w"]) + empty_flush_writes <= s.k["writes"]
    assert s.k["sec_read"] - missing * MAX_SECTORS_KB * 2 <= round(j["rsec"]) <= s.k["sec_read"]
    assert s.k["sec_write"] - missing * MAX_SECTORS_KB * 2 <= round(j["wsec"]) <= s.k["sec_write"]
    if missing == 0:
        assert (round(j["r"]), round(j["w"]) + empty_flush_writes) == (s.k["reads"], s.k["writes"])
        assert (round(j["rsec"]), round(j["wsec"])) == (s.k["sec_read"], s.k["sec_write"])
    assert doc["events"] == sum(k.actions.values())
    # the btt part of the text is btt's own output on the export, and the JSON has its numbers
    avg = _btt_avg(s)
    rows = bs.btt_table(avg, "All Devices")
    assert {"Q2C", "D2C", "Q2Q", "Q2G", "G2I", "I2D", "Q2M", "M2D"} <= set(rows), rows
    for label, (_mn, av, _mx, n) in rows.items():
        # the phases split bios change: btt gives every piece's G, I and D to the one bio it keeps
        if label in ("Q2C", "D2C", "I2D", "G2I"):
            continue
        ph = doc["phases"][label.lower()]
        assert (ph["n"], f"{ph['avg']:.9f}") == (n, f"{av:.9f}"), label
    # where btt and report part ways (split bios: btt keeps each as one I/O no piece completes),
    # report says so, and the difference in N is what it says
    d = doc["devices"][s.key]
    assert d["split_bios"] > 0 and d["btt"]["ios_paired_differently"]["total"] > 0, d
    assert "Where btt differs (ioscope)" in rep.stdout
    # the N report says btt prints are the ones the real btt printed
    assert (rows["Q2C"][3], rows["D2C"][3]) == (d["btt"]["q2c_n"], d["btt"]["d2c_n"]), d["btt"]
    for title in ("Device Merge Information", "Device Q2Q Seek Information", "Device D2D Seek Information",
                  "Plug Information", "Active Requests At Q Information"):
        assert bs.section(rep.stdout, title) == bs.section(avg, title), title


def test_import_of_the_export_reports_the_same(session: Session) -> None:
    s = session
    _ok(s, "import")
    rep, repj = _ok(s, "report"), _ok(s, "report --json")
    rep2, rep2j = _ok(s, "report imported"), _ok(s, "report --json imported")
    doc, doc2 = json.loads(repj.stdout), json.loads(rep2j.stdout)
    assert btt_part(rep2.stdout) == btt_part(rep.stdout)
    assert doc2["events"] == doc["events"]
    assert doc2["phases"] == doc["phases"]
    assert doc2["devices"][s.key]["phases"] == doc["devices"][s.key]["phases"]
    assert doc2["devices"][s.key]["merge"] == doc["devices"][s.key]["merge"]
    assert report_iostat_json(doc2) == report_iostat_json(doc)
    t1, t2 = report_iostat_text(rep.stdout), report_iostat_text(rep2.stdout)
    assert list(t2.values()) == list(t1.values()), (t1, t2)


def test_report_completes_split_bios(session: Session) -> None:
    """Every bio queued during the recording was completed before Ctrl-C (sync, then the kernel's
    in-flight counter is 0), so the report must count no I/O as in flight at the end. A split bio
    (one Q, then X and one request per piece, each with its own C) is paired piece by piece, each
    piece from the bio's Q: Q2C counts requests, as /proc/diskstats does. (btt ignores X and never
    completes such a bio: test_report_text_json_and_btt_agree checks the difference report states.)"""
    s, k = session, counts(session)
    assert s.in_flight_after == 0
    # completions the kernel made that ran no BPF program (the capture's completions check says how
    # many): the request's bios stay in flight, or a later Q at their sectors finds them there. Which,
    # and how many bios a request carried, are not known: the checks below that such a request changes
    # hold exactly only when the capture reports no missing completion
    missing = gap(s)
    doc = json.loads(_ok(s, "report --json").stdout)
    d = doc["devices"][s.key]
    assert d["ignored_at_start"] == 0, d
    if not missing:
        assert d["duplicate_q"] == 0 and d["overlapping_q"] == 0, d
    assert d["split_pieces"] == k.actions["X"] > 0 and 0 < d["split_bios"] <= k.actions["X"], d
    # Q2C covers every request with data: the bios with data and the extra pieces of the split ones
    if not missing:
        assert (d["in_flight_at_end"], d["phases"]["q2c"]["n"]) == (0, k.q_data + k.actions["X"]), (
            f"report: {d['in_flight_at_end']} Qs in flight at the end and Q2C n={d['phases']['q2c']['n']}, "
            f"but all {k.actions['Q']} Qs ({k.q_data} with data, {k.actions['X']} X) completed")
    else:
        assert d["phases"]["q2c"]["n"] <= k.q_data + k.actions["X"], (d["phases"]["q2c"], k.q_data, missing)
