#!/usr/bin/env python3
"""The corpus of real-format blktrace traces in tests/traces/: how it is recorded and built.

    make_corpus.py record     # live, root, under flock /tmp/ioscope-live.lock: src/*.blk.txt
    make_corpus.py build      # no root: every trace file from src/*.blk.txt (deterministic)

`record` runs small workloads on tmpfs-backed loop devices while the kernel's own ftrace blk
tracer (the same kernel code that fills blktrace's relay files, printing blkparse-format lines
with `options/blk_classic`: device, CPU, nanosecond time, pid, action, RWBS, details) traces the
disk; it keeps those lines, the tracer's pid -> command table (saved_cmdlines) and one
(CLOCK_MONOTONIC, CLOCK_REALTIME) pair. `build` turns the lines back into what blktrace writes
(docs/capture-format.md's blktrace section; struct blk_io_trace version 7): per-CPU files
NAME.blktrace.CPU whose records keep the kernel's absolute times, numbered per (traced device,
CPU) from 1 as the kernel numbers them, each task's process note (BLK_TN_PROCESS) before its first
record on the CPU it first ran on (pid 0, the idle task, once per CPU: swapper/0, swapper/1), the
timestamp note (BLK_TN_TIMESTAMP) first, and payloads big-endian (unplug and split: u64; remap:
device_from, device_to, sector_from). Dumps are made from those files by the real `blkparse -d`.
The variations (a partition traced directly, dm over a partition, no timestamp note, pids without
a note, a pid renamed, a missing CPU file, big-endian, a dump under a per-CPU name) are what real
traces from other hosts look like; README.md lists each file and what it covers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"

MAGIC = 0x65617407
TC = {"READ": 1 << 0, "WRITE": 1 << 1, "FLUSH": 1 << 2, "SYNC": 1 << 3, "QUEUE": 1 << 4, "REQUEUE": 1 << 5,
      "ISSUE": 1 << 6, "COMPLETE": 1 << 7, "FS": 1 << 8, "PC": 1 << 9, "NOTIFY": 1 << 10, "AHEAD": 1 << 11,
      "META": 1 << 12, "DISCARD": 1 << 13, "DRV_DATA": 1 << 14, "FUA": 1 << 15}
# action letter -> (code, the category bit the kernel adds for it: BLK_TA_* in blktrace_api.h)
ACTIONS = {"Q": (1, "QUEUE"), "M": (2, "QUEUE"), "F": (3, "QUEUE"), "G": (4, "QUEUE"), "S": (5, "QUEUE"),
           "R": (6, "REQUEUE"), "D": (7, "ISSUE"), "C": (8, "COMPLETE"), "P": (9, "QUEUE"), "U": (10, "QUEUE"),
           "UT": (11, "QUEUE"), "I": (12, "QUEUE"), "X": (13, None), "B": (14, None), "A": (15, "QUEUE")}
TN_PROCESS, TN_TIMESTAMP, TN_MESSAGE = 0, 1, 2


def kdev(major: int, minor: int) -> int:
    return (major << 20) | minor


# ----------------------------------------------------------------------------- the trace's records

@dataclass
class Rec:
    """One record as the kernel fills struct blk_io_trace (pdu: the payload, already encoded)."""

    time: int
    cpu: int
    pid: int
    dev: int
    code: int = 0
    cat: int = 0
    sector: int = 0
    nbytes: int = 0
    error: int = 0
    pdu: bytes = b""
    note: int | None = None          # TN_PROCESS / TN_TIMESTAMP for notify records
    seq: int = 0
    comm: str = ""                   # the process's command (from the line or saved_cmdlines)

    def pack(self, order: str) -> bytes:
        action = (TC["NOTIFY"] << 16) | self.note if self.note is not None else self.code | (self.cat << 16)
        head = struct.pack(order + "IIQQIIIIIHH", MAGIC, self.seq, self.time, self.sector, self.nbytes, action,
                           self.pid, self.dev, self.cpu, self.error, len(self.pdu))
        return head + self.pdu


def rwbs_category(rwbs: str) -> int:
    """The category bits behind blkparse's RWBS letters: [F] D|W|R|N [F][A][S][M] (R and N: a read)."""
    cat = 0
    i = 0
    if rwbs.startswith("F") and len(rwbs) > 1 and rwbs[1] in "DWRN":
        cat |= TC["FLUSH"]
        i = 1
    op = rwbs[i]
    cat |= TC["DISCARD"] if op == "D" else TC["WRITE"] if op == "W" else TC["READ"]
    for ch in rwbs[i + 1:]:
        cat |= {"F": TC["FUA"], "A": TC["AHEAD"], "S": TC["SYNC"], "M": TC["META"]}[ch]
    return cat


LINE = re.compile(r"^\s*(\d+),(\d+)\s+(\d+)\s+(\d+)\.(\d{9})\s+(\d+)\s+(\S+)\s+(\S+)\s*(.*)$")


def parse_lines(text: str, comms: dict[int, str]) -> list[Rec]:
    """blk_classic lines -> records (no notes yet; seq 0)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError(f"not a blk_classic line: {line!r}")
        ma, mi, cpu, sec, nsec, pid, act, rwbs, rest = m.groups()
        code, catname = ACTIONS[act]
        cat = rwbs_category(rwbs) | (TC[catname] if catname else 0)
        r = Rec(int(sec) * 1_000_000_000 + int(nsec), int(cpu), int(pid), kdev(int(ma), int(mi)), code, cat,
                comm=comms.get(int(pid), ""))
        tail = rest
        bracket = re.search(r"\[([^\]]*)\](?:\s+(\d+))?$", rest)
        if act in ("C", "R"):
            mm = re.match(r"(\d+)(?: \+ (\d+))? \[(-?\d+)\]$", rest)
            assert mm, line
            r.sector, r.nbytes, r.error = int(mm.group(1)), int(mm.group(2) or 0) * 512, int(mm.group(3)) & 0xFFFF
        elif act == "A":
            mm = re.match(r"(\d+) \+ (\d+) <- \((\d+),(\d+)\) (\d+)$", rest)
            assert mm, line
            r.sector, r.nbytes = int(mm.group(1)), int(mm.group(2)) * 512
            frm = kdev(int(mm.group(3)), int(mm.group(4)))
            r.pdu = struct.pack(">IIQ", frm, r.dev, int(mm.group(5)))
        elif act == "X":
            mm = re.match(r"(\d+) / (\d+) \[(.*)\]$", rest)
            assert mm, line
            r.sector = int(mm.group(1))
            r.pdu = struct.pack(">Q", int(mm.group(2)))
            r.comm = mm.group(3)
        elif act in ("U", "UT"):
            assert bracket and bracket.group(2), line
            r.pdu = struct.pack(">Q", int(bracket.group(2)))
            r.comm = bracket.group(1)
        else:
            mm = re.match(r"(?:(\d+) \+ (\d+) )?\[(.*)\]$", tail)
            assert mm, line
            if mm.group(1) is not None:
                r.sector, r.nbytes = int(mm.group(1)), int(mm.group(2)) * 512
            r.comm = mm.group(3)
        out.append(r)
    return out


@dataclass
class Source:
    name: str
    recs: list[Rec]
    mono_ns: int
    wall_ns: int
    comms: dict[int, str] = field(default_factory=dict)


def read_source(path: Path) -> Source:
    text = path.read_text()
    head = json.loads(text.splitlines()[0].lstrip("# "))
    comms = {int(k): v for k, v in head["comms"].items()}
    recs = parse_lines("\n".join(text.splitlines()[1:]), comms)
    return Source(path.name.split(".")[0], recs, head["mono_ns"], head["wall_ns"], comms)


def with_notes(recs: list[Rec], traced: int, stamp: tuple[int, int, int, int] | None,
               unnamed: set[int] | frozenset[int] = frozenset(),
               per_cpu: set[int] | frozenset[int] = frozenset()) -> dict[int, list[Rec]]:
    """Per CPU, the records as that CPU's relay file holds them: the timestamp note (cpu, pid, mono, wall)
    first, each task's process note before its first record, on the CPU it first traced on (the idle
    task, pid 0, is one task per CPU: swapper/N), sequence numbers per CPU from 1. unnamed: pids given
    no note; per_cpu: pids noted on each CPU they run on, with the command of their first record there
    (a pid reused by another task on another CPU)."""
    per: dict[int, list[Rec]] = {}
    noted: set[tuple[int, int]] = set()
    seq: dict[int, int] = {}
    if stamp is not None:
        cpu, pid, mono, wall = stamp
        sec, ns = divmod(wall, 1_000_000_000)
        per.setdefault(cpu, []).append(Rec(mono, cpu, pid, traced, note=TN_TIMESTAMP,
                                           pdu=struct.pack("<II", sec, ns)))
    for r in recs:
        if r.pid not in unnamed:
            key = (r.pid, r.cpu if r.pid == 0 or r.pid in per_cpu else -1)
            if key not in noted:
                noted.add(key)
                comm = f"swapper/{r.cpu}" if r.pid == 0 else r.comm
                per.setdefault(r.cpu, []).append(Rec(r.time - 1, r.cpu, r.pid, traced, note=TN_PROCESS,
                                                     pdu=comm.encode()[:15].ljust(16, b"\0")))
        seq[r.cpu] = seq.get(r.cpu, 0) + 1
        per.setdefault(r.cpu, []).append(replace(r, seq=seq[r.cpu]))
    return per


def with_messages(per: dict[int, list[Rec]]) -> dict[int, list[Rec]]:
    """The I/O scheduler's messages, as CFQ writes them (blk_add_trace_msg: a BLK_TN_MESSAGE record of the
    text, no sequence number, on the CPU and in the name of the task at hand) after each insert, dispatch
    and completion: what a CentOS 7 host's traces are full of."""
    out: dict[int, list[Rec]] = {}
    for cpu, recs in per.items():
        lst = out.setdefault(cpu, [])
        for r in recs:
            lst.append(r)
            if r.note is not None or r.code not in (12, 7, 8) or not r.nbytes:
                continue
            rw = ("W" if r.cat & TC["WRITE"] else "R") + ("S" if r.cat & TC["SYNC"] else "")
            text = {12: f"cfq{r.pid}{rw} insert_request", 7: f"cfq{r.pid}{rw} dispatched a request",
                    8: f"cfq{r.pid}{rw} complete rqnoidle 0"}[r.code]
            lst.append(Rec(r.time + 1, r.cpu, r.pid, r.dev, note=TN_MESSAGE, pdu=text.encode()))
    return out


def with_idle_timers(per: dict[int, list[Rec]], slice_idle_ns: int, ncpus: int, kworker: int,
                     work_ns: int = 500_000) -> dict[int, list[Rec]]:
    """CFQ idling, on a host of ncpus (4) CPUs: a sync queue's completion arms the idle slice timer
    (`arm_idle`, on the completing CPU); when no block event comes within slice_idle_ns the timer fires on
    another CPU (an idle CPU's timer migrated to a busy one), in softirq (pid 0), which expires the slice and
    schedules a dispatch; kblockd's worker (pid kworker) runs it work_ns later on yet another CPU. The
    timer and the worker go to CPUs (2, 3), (3, 0), (1, 0) in turn. So groups of messages written on
    CPUs that have no block event, with no block event between them, each on the CPU (and in the pid, at
    the time) that wrote it; a later group on a lower-numbered CPU than the one before it, and on a higher
    one: blkparse prints them merged by time, not in its files' order. The last completion's groups come
    after the trace's last block event (the trace's last record is a message)."""
    out = {cpu: list(recs) for cpu, recs in per.items()}
    for cpu in range(ncpus):
        out.setdefault(cpu, [])
    blocks = sorted((r for recs in per.values() for r in recs if r.note is None), key=lambda r: r.time)
    fired_n = 0
    owner: dict[int, int] = {}   # sector -> the pid that queued it (CFQ's queue is the submitter's)
    for i, r in enumerate(blocks):
        if r.code == 1:
            owner[r.sector] = r.pid
        if r.code != 8 or not r.nbytes or not r.cat & TC["SYNC"]:
            continue
        nxt = blocks[i + 1].time if i + 1 < len(blocks) else None
        q = f"cfq{owner.get(r.sector, r.pid)}{'W' if r.cat & TC['WRITE'] else 'R'}S"
        armed = [Rec(r.time + 2, r.cpu, r.pid, r.dev, note=TN_MESSAGE,
                     pdu=f"{q} arm_idle: {slice_idle_ns // 1_000_000} group_idle: 0".encode())]
        fired = r.time + slice_idle_ns
        if nxt is None or nxt > fired + work_ns + 100_000:
            tcpu, wcpu = ((ncpus - 2, ncpus - 1), (ncpus - 1, 0), (1, 0))[fired_n % 3]
            fired_n += 1
            texts = ["cfq idle timer fired", f"{q} idle_slice_timer", f"{q} slice expired t=0",
                     f"{q} sl_used={slice_idle_ns // 1_000_000} disp=1 charge=2 iops=0 sect={r.nbytes // 512}",
                     f"{q} del_from_rr", "cfq schedule dispatch"]
            armed += [Rec(fired + 1000 * j, tcpu, 0, r.dev, note=TN_MESSAGE, pdu=t.encode())
                      for j, t in enumerate(texts)]
            armed.append(Rec(fired + work_ns, wcpu, kworker, r.dev, note=TN_MESSAGE, pdu=f"{q} put_queue".encode()))
        for m in armed:   # into its CPU's file where its time goes (after a record of the same time)
            lst = out[m.cpu]
            at = len(lst)
            while at and lst[at - 1].time > m.time:
                at -= 1
            lst.insert(at, m)
    return out


def write_set(out: Path, name: str, per: dict[int, list[Rec]], order: str = "<", skip: tuple[int, ...] = (),
              ncpus: int | None = None) -> list[Path]:
    """NAME.blktrace.CPU files (every CPU up to the highest; skip: CPUs whose file is left out)."""
    files = []
    for cpu in range(ncpus or max(per) + 1):
        if cpu in skip:
            continue
        p = out / f"{name}.blktrace.{cpu}"
        p.write_bytes(b"".join(r.pack(order) for r in per.get(cpu, [])))
        files.append(p)
    return files


def blkparse_dump(out: Path, name: str, dump: str) -> None:
    """The real blkparse -d: NAME's per-CPU files merged into one stream (what btt reads)."""
    subprocess.run(["blkparse", "-q", "-O", "-i", name, "-d", dump], cwd=out, check=True, capture_output=True)


# ----------------------------------------------------------------------------- the corpus

def retarget(recs: list[Rec], traced: int) -> list[Rec]:
    """The same I/O as blktrace run on a partition records it: every record carries the traced device
    (bt->dev), a remap's payload still says where the bio went (the whole disk)."""
    return [replace(r, dev=traced) for r in recs]


def dm_over_partition(recs: list[Rec], dm: int, part: int, disk: int) -> list[Rec]:
    """dm-0 (a linear target over the partition) and the disk both traced, as on a CentOS 7 host with
    XFS on LVM on sda2: each bio is queued on dm-0 (Q), remapped to the partition (A on the disk's
    trace: dm-0 -> sda2), remapped again to the disk (A: sda2 -> sda), queued there (Q ...), and
    completed on dm-0 (C) once the disk completed all of it. The partition trace's own remaps (A from
    the loop partition) become the sda2 -> sda ones; dm's Q and A are added 2 and 1 us before them."""
    out: list[Rec] = []
    bios: list[list[int]] = []   # dm bios in flight: [disk start, disk end, bytes left, dm sector, Q index]
    for r in recs:
        if r.code == 15:   # A: partition -> disk
            _frm, _to, psec = struct.unpack(">IIQ", r.pdu)
            out.append(replace(r, time=r.time - 2000, dev=dm, code=1, sector=psec, pdu=b""))   # Q on dm-0
            bios.append([r.sector, r.sector + r.nbytes // 512, r.nbytes, psec, len(out) - 1])
            out.append(replace(r, time=r.time - 1000, dev=disk, pdu=struct.pack(">IIQ", dm, part, psec), sector=psec))
            out.append(replace(r, dev=disk, pdu=struct.pack(">IIQ", part, disk, psec)))
            continue
        out.append(replace(r, dev=disk))
        if r.code == 8 and r.nbytes:   # C on the disk: dm completes its bio when all of it is done
            for b in bios:
                if b[0] <= r.sector < b[1]:
                    b[2] -= r.nbytes
                    if b[2] <= 0:
                        q = out[b[4]]
                        out.append(replace(q, time=r.time + 1500, code=8, cat=r.cat, pid=r.pid, comm=r.comm))
                        bios.remove(b)
                    break
    out.sort(key=lambda x: x.time)
    return out


def build(out: Path) -> None:
    splits = read_source(SRC / "splits.blk.txt")
    part = read_source(SRC / "partition.blk.txt")
    for f in out.glob("*.blktrace.*"):
        f.unlink()
    for f in out.glob("*.dump"):
        f.unlink()
    disk = splits.recs[0].dev
    stamp = (0, 1, splits.mono_ns, splits.wall_ns)   # blktrace (pid 1 stands in for it) starts the trace on CPU 0
    # splits: Q X G G I D I D C C, merges, flushes, plugs, two CPUs, absolute kernel times
    write_set(out, "splits", with_notes(splits.recs, disk, stamp))
    blkparse_dump(out, "splits", "splits.dump")
    # the same without its timestamp note, and that set's dump
    write_set(out, "nostamp", with_notes(splits.recs, disk, None))
    blkparse_dump(out, "nostamp", "nostamp.dump")
    # pids without a process note (a trace started while they were running: their note went before),
    # and a pid noted twice under two names on two CPUs (a pid reused by another command)
    pids = sorted({r.pid for r in splits.recs})
    busiest = max(pids, key=lambda p: sum(r.pid == p for r in splits.recs))
    unnamed = {p for p in pids if p not in (0, busiest)}
    write_set(out, "unnamed", with_notes(splits.recs, disk, stamp, unnamed=unnamed))
    # the last dd (on CPU 1) given the pid of the first (on CPU 0), under another command: a pid reused
    first_dd, last_dd = sorted(p for p in pids if splits.comms.get(p) == "dd")[:2]
    reused = [replace(r, pid=first_dd, comm="reused") if r.pid == last_dd else r for r in splits.recs]
    write_set(out, "renamed", with_notes(reused, disk, stamp, per_cpu={first_dd}))
    # the I/O scheduler's messages (CFQ's), in the files and in their dump
    write_set(out, "messages", with_messages(with_notes(splits.recs, disk, stamp)))
    blkparse_dump(out, "messages", "messages.dump")
    # CFQ idling on a 4-CPU host: message groups of CPUs with no block event, between block events and after
    # the last one, a later group on a lower-numbered CPU (blkparse prints them merged by time)
    write_set(out, "cfqidle", with_idle_timers(with_messages(with_notes(splits.recs, disk, stamp)), 1_000_000, 4,
                                               next(p for p, c in splits.comms.items() if c.startswith("kworker"))))
    blkparse_dump(out, "cfqidle", "cfqidle.dump")
    # big-endian (a POWER or s390 host's files)
    write_set(out, "bigend", with_notes(splits.recs, disk, stamp), order=">")
    blkparse_dump(out, "bigend", "bigend.dump")
    # direct writes submitted eight at a time, each split in four: fewer Qs than Ds, and Qs that come while
    # others wait (btt raises its Q count to the D count in its merge table, and divides "Avg Reqs @ Q" by it)
    batch = read_source(SRC / "batched.blk.txt")
    write_set(out, "batched", with_notes(batch.recs, batch.recs[0].dev, (0, 1, batch.mono_ns, batch.wall_ns)))
    # a CPU file missing: the host had 4 CPUs, CPU 2's file was not copied
    spread = [replace(r, cpu=r.cpu * 3) for r in splits.recs]   # CPUs 0 and 3
    write_set(out, "missing", with_notes(spread, disk, stamp), ncpus=4, skip=(2,))
    # a dump stored under a per-CPU name (one stream of every CPU's records)
    shutil.copyfile(out / "splits.dump", out / "misnamed.blktrace.0")
    # a partition: its remaps as this kernel records them (on the disk traced), and as blktrace on
    # the partition itself records them (on the partition, the payload saying the bio went to the disk)
    pdisk = part.recs[0].dev
    pstamp = (0, 1, part.mono_ns, part.wall_ns)
    write_set(out, "partition", with_notes(part.recs, pdisk, pstamp))
    blkparse_dump(out, "partition", "partition.dump")
    ppart = next(struct.unpack(">IIQ", r.pdu)[0] for r in part.recs if r.code == 15)
    write_set(out, "parttraced", with_notes(retarget(part.recs, ppart), ppart, pstamp))
    blkparse_dump(out, "parttraced", "parttraced.dump")
    # dm (253,0) over a partition (8,2) of a disk (8,0), both traced: two file sets
    dm, sda2, sda = kdev(253, 0), kdev(8, 2), kdev(8, 0)
    stacked = dm_over_partition(part.recs, dm, sda2, sda)
    write_set(out, "dm-0", with_notes([r for r in stacked if r.dev == dm], dm, pstamp))
    write_set(out, "sda", with_notes([r for r in stacked if r.dev == sda], sda, pstamp))
    subprocess.run(["blkparse", "-q", "-O", "-i", "dm-0", "-i", "sda", "-d", "dm.dump"], cwd=out, check=True,
                   capture_output=True)


# ----------------------------------------------------------------------------- recording (live)

def record(out: Path, only: list[str]) -> None:
    sys.path.insert(0, str(HERE.parent))
    import mmap

    from blk_tracer import BlkTracer
    from ioscope.base.testbed import LoopDevice

    def direct(path: str, ops: list[tuple[str, int, int]], cpu: int, wait: bool = True) -> int:
        pid = os.fork()
        if pid == 0:
            try:
                os.sched_setaffinity(0, {cpu})
                fd = os.open(path, os.O_RDWR | os.O_DIRECT)
                for op, off, size in ops:
                    buf = mmap.mmap(-1, size)
                    if op == "w":
                        os.pwritev(fd, [buf], off)
                    else:
                        os.preadv(fd, [buf], off)
                os.close(fd)
            finally:
                os._exit(0)
        if wait:
            os.waitpid(pid, 0)
        return pid

    def session(name: str, ld: LoopDevice, work: object) -> None:
        if only and name not in only:
            return
        opt = Path("/sys/kernel/tracing/options/blk_classic")
        with BlkTracer(ld.name) as bt:
            opt.write_text("1")
            try:
                mono, wall = time.monotonic_ns(), time.time_ns()
                work()   # type: ignore[operator]
                time.sleep(0.3)
                bt.stop()
            finally:
                opt.write_text("0")
            cmdlines = Path("/sys/kernel/tracing/saved_cmdlines").read_text()
        comms = {int(p): c for p, c in (ln.split(" ", 1) for ln in cmdlines.splitlines() if " " in ln)}
        lines = [ln for ln in bt.text.splitlines() if ln and not ln.startswith("#")]
        pids = {int(LINE.match(ln).group(6)) for ln in lines if LINE.match(ln)}   # type: ignore[union-attr]
        head = {"mono_ns": mono, "wall_ns": wall, "comms": {str(p): comms.get(p, "") for p in sorted(pids)}}
        (out / f"{name}.blk.txt").write_text("# " + json.dumps(head) + "\n" + "\n".join(lines) + "\n")

    out.mkdir(parents=True, exist_ok=True)
    with LoopDevice(64, scheduler="mq-deadline") as ld:
        ld.set_queue("max_sectors_kb", "64")

        def splits() -> None:
            direct(ld.path, [("w", 0, 256 << 10), ("r", 1 << 20, 128 << 10), ("r", 3 << 20, 4096),
                             ("r", 5 << 20, 8192)], 0)
            direct(ld.path, [("r", 0, 4096), ("w", 8 << 20, 192 << 10), ("r", 8 << 20, 4096)], 1)
            subprocess.run(["dd", "if=/dev/zero", f"of={ld.path}", "bs=4k", "count=24", "seek=4096",
                            "conv=fsync"], check=True, capture_output=True)
            subprocess.run(["taskset", "-c", "1", "dd", f"if={ld.path}", "of=/dev/null", "bs=4k", "count=5",
                            "iflag=direct", "skip=300"], check=True, capture_output=True)
        session("splits", ld, splits)
    with LoopDevice(64, scheduler="mq-deadline", partitions_mb=[32]) as ld:
        ld.set_queue("max_sectors_kb", "64")
        p1 = ld.partition(1)

        def partition() -> None:
            direct(p1, [("w", 0, 192 << 10), ("r", 1 << 20, 8192), ("r", 2 << 20, 4096)], 0)
            direct(p1, [("r", 0, 4096), ("w", 4 << 20, 16 << 10)], 1)
        session("partition", ld, partition)
    with LoopDevice(64, scheduler="mq-deadline") as ld:
        ld.set_queue("max_sectors_kb", "64")

        def batched() -> None:
            # 256 KiB direct writes submitted eight at a time (one io_submit, one plug), each split in four:
            # Qs come while others wait, and there are more Ds than Qs
            subprocess.run(["fio", "--name=batched", f"--filename={ld.path}", "--rw=write", "--bs=256k", "--size=4M",
                            "--direct=1", "--ioengine=libaio", "--iodepth=8", "--iodepth_batch_submit=8",
                            "--iodepth_batch_complete_min=8", "--cpus_allowed=0"], check=True, capture_output=True)
        session("batched", ld, batched)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("record", "build"))
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="record only this session (splits, partition, batched); repeatable")
    ap.add_argument("--out", default=None, help="where to write (default: src/ for record, this directory for build)")
    a = ap.parse_args()
    if a.step == "record":
        record(Path(a.out) if a.out else SRC, a.only)
    else:
        build(Path(a.out) if a.out else HERE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
