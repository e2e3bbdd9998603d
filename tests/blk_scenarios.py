"""Synthetic block-event scenarios (EVENT arrays) for the offline tools' tests.

Each builder returns (events, comms) with events in time order, like a capture.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ioscope.base.devices import kdev
from ioscope.capture.events import (
    EVENT,
    TA_BACKMERGE,
    TA_COMPLETE,
    TA_FRONTMERGE,
    TA_GETRQ,
    TA_INSERT,
    TA_ISSUE,
    TA_PLUG,
    TA_QUEUE,
    TA_REMAP,
    TA_REQUEUE,
    TA_SPLIT,
    TA_UNPLUG_IO,
    TA_UNPLUG_TIMER,
    TC_COMPLETE,
    TC_ISSUE,
    TC_QUEUE,
    TC_READ,
    TC_REQUEUE,
    TC_SYNC,
    TC_WRITE,
)

CAT_FOR = {TA_QUEUE: TC_QUEUE, TA_ISSUE: TC_ISSUE, TA_COMPLETE: TC_COMPLETE, TA_REQUEUE: TC_REQUEUE}
LOOP0 = kdev(7, 0)
LOOP1 = kdev(7, 1)


@dataclass
class Scenario:
    rows: list[tuple[int, ...]] = field(default_factory=list)
    comms: dict[int, str] = field(default_factory=dict)

    def add(self, ts: int, action: int, sector: int, nbytes: int, *, dev: int = LOOP0, pid: int = 100,
            cpu: int = 0, write: bool = False, sync: bool = False, aux: int = 0, aux_dev: int = 0,
            error: int = 0) -> None:
        cat = (TC_WRITE if write else TC_READ) | (TC_SYNC if sync else 0) | CAT_FOR.get(action, 0)
        self.rows.append((ts, sector, aux, nbytes, dev, aux_dev, pid, pid, cpu, error, action, cat, 0))

    def io(self, t: int, sector: int, nbytes: int, *, q2g: int = 1000, g2i: int = 500, i2d: int = 2000,
           d2c: int = 50_000, **kw: object) -> int:
        """A plain Q G I D C sequence starting at t; returns the completion time."""
        self.add(t, TA_QUEUE, sector, nbytes, **kw)  # type: ignore[arg-type]
        self.add(t + q2g, TA_GETRQ, sector, nbytes, **kw)  # type: ignore[arg-type]
        self.add(t + q2g + g2i, TA_INSERT, sector, nbytes, **kw)  # type: ignore[arg-type]
        d = t + q2g + g2i + i2d
        self.add(d, TA_ISSUE, sector, nbytes, **kw)  # type: ignore[arg-type]
        self.add(d + d2c, TA_COMPLETE, sector, nbytes, **kw)  # type: ignore[arg-type]
        return d + d2c

    def events(self) -> npt.NDArray[np.void]:
        arr = np.array(self.rows, dtype=EVENT) if self.rows else np.zeros(0, dtype=EVENT)
        return arr[np.argsort(arr["ts"], kind="stable")]


def mixed() -> Scenario:
    """Every feature the offline tools must handle, on two devices and several processes."""
    s = Scenario(comms={100: "fio", 101: "dd", 102: "kworker/0:1", 0: "swapper"})
    base = 1_000_000_000_000
    t = base
    # plain reads and writes, two processes, two cpus
    for i in range(7):
        s.io(t + i * 100_000, 2048 + 8 * i * 16, 4096, pid=100 + (i % 2), cpu=i % 2, d2c=40_000 + 3_000 * i)
    t += 1_000_000
    # back merge and front merge into one request: Q G I, Q M, Q F, then D/C of the whole range
    s.add(t, TA_PLUG, 0, 0, pid=101)
    s.add(t + 10, TA_QUEUE, 100_000, 4096, pid=101, write=True)
    s.add(t + 20, TA_GETRQ, 100_000, 4096, pid=101, write=True)
    s.add(t + 30, TA_INSERT, 100_000, 4096, pid=101, write=True)
    s.add(t + 40, TA_QUEUE, 100_008, 4096, pid=101, write=True)
    s.add(t + 50, TA_BACKMERGE, 100_008, 4096, pid=101, write=True)
    s.add(t + 60, TA_QUEUE, 99_992, 4096, pid=101, write=True)
    s.add(t + 70, TA_FRONTMERGE, 99_992, 4096, pid=101, write=True)
    s.add(t + 80, TA_UNPLUG_IO, 0, 0, pid=101, aux=1)
    s.add(t + 9_000, TA_ISSUE, 99_992, 12288, pid=101, write=True)
    s.add(t + 99_000, TA_COMPLETE, 99_992, 12288, pid=0, write=True)
    t += 1_000_000
    # requeue: Q G I D R I D C
    s.add(t, TA_QUEUE, 300_000, 8192, pid=100)
    s.add(t + 100, TA_GETRQ, 300_000, 8192, pid=100)
    s.add(t + 200, TA_INSERT, 300_000, 8192, pid=100)
    s.add(t + 300, TA_ISSUE, 300_000, 8192, pid=100)
    s.add(t + 5_000, TA_REQUEUE, 300_000, 8192, pid=102)
    s.add(t + 5_100, TA_INSERT, 300_000, 8192, pid=102)
    s.add(t + 6_000, TA_ISSUE, 300_000, 8192, pid=102)
    s.add(t + 70_000, TA_COMPLETE, 300_000, 8192, pid=0)
    t += 1_000_000
    # a split event of a bio queued before the trace (no Q in it: nothing to pair, by ioscope or
    # btt; split bios whose Q is seen are where the two differ: split_bios() below)
    s.add(t + 10, TA_SPLIT, 400_000, 1 << 20, pid=101, write=True, aux=401_024)
    t += 1_000_000
    # remap from partition (7,1) onto (7,0), then a normal life on (7,0)
    s.add(t, TA_REMAP, 502_048, 4096, pid=100, aux=500_000, aux_dev=LOOP1)
    s.io(t + 100, 502_048, 4096, pid=100)
    t += 1_000_000
    # partial completion: 16 KiB request completed in two 8 KiB pieces
    s.add(t, TA_QUEUE, 600_000, 8192, pid=100)
    s.add(t + 5, TA_QUEUE, 600_016, 8192, pid=100)
    s.add(t + 10, TA_GETRQ, 600_000, 8192, pid=100)
    s.add(t + 20, TA_INSERT, 600_000, 8192, pid=100)
    s.add(t + 25, TA_BACKMERGE, 600_016, 8192, pid=100)
    s.add(t + 30, TA_ISSUE, 600_000, 16384, pid=100)
    s.add(t + 20_000, TA_COMPLETE, 600_000, 8192, pid=0)
    s.add(t + 40_000, TA_COMPLETE, 600_016, 8192, pid=0)
    t += 1_000_000
    # second device with a timer unplug and its own process
    s.add(t, TA_PLUG, 0, 0, dev=LOOP1, pid=101)
    s.io(t + 10, 7000, 65536, dev=LOOP1, pid=101, write=True, sync=True, d2c=123_457)
    s.add(t + 50, TA_UNPLUG_TIMER, 0, 0, dev=LOOP1, pid=102, aux=1)
    s.io(t + 200_000, 9000, 4096, dev=LOOP1, pid=101, cpu=1, d2c=77_777)
    # in flight at the end: queued and issued, never completed
    t += 1_000_000
    s.add(t, TA_QUEUE, 800_000, 4096, pid=100)
    s.add(t + 10, TA_GETRQ, 800_000, 4096, pid=100)
    s.add(t + 20, TA_INSERT, 800_000, 4096, pid=100)
    s.add(t + 30, TA_ISSUE, 800_000, 4096, pid=100)
    return s


def inflight_at_start() -> Scenario:
    """A capture that begins with I/Os already issued (their D and C without a Q), then normal I/O."""
    s = Scenario(comms={100: "fio"})
    t = 5_000_000_000
    s.add(t, TA_COMPLETE, 10_000, 4096, pid=0)
    s.add(t + 100, TA_ISSUE, 20_000, 4096, pid=100)
    s.add(t + 20_000, TA_COMPLETE, 20_000, 4096, pid=0)
    for i in range(11):
        s.io(t + 50_000 + i * 30_000, 40_000 + 8 * i, 4096, pid=100, d2c=10_000 + i * 1_000)
    return s


def split_bios(n: int = 5, pieces: int = 3) -> Scenario:
    """n bios of `pieces` x 256 KiB, each split as the kernel does it (Q, then X per extra piece, G I D C
    per piece: every request completes on its own), then a 4 KiB read inside the first bio's range."""
    s = Scenario(comms={101: "dd", 100: "fio"})
    t = 2_000_000_000_000
    size = 256 << 10
    for b in range(n):
        start = 1_000_000 + b * 10_000
        s.add(t, TA_QUEUE, start, pieces * size, pid=101, write=True)
        for p in range(pieces):
            sec = start + p * (size >> 9)
            if p < pieces - 1:
                s.add(t + 10 + p * 100, TA_SPLIT, sec, (pieces - p) * size, pid=101, write=True,
                      aux=sec + (size >> 9))
            s.add(t + 20 + p * 100, TA_GETRQ, sec, size, pid=101, write=True)
            s.add(t + 30 + p * 100, TA_INSERT, sec, size, pid=101, write=True)
            s.add(t + 40 + p * 100, TA_ISSUE, sec, size, pid=101, write=True)
            s.add(t + 90_000 + p * 1000, TA_COMPLETE, sec, size, pid=0, write=True)
        t += 1_000_000
    # a later read inside the first bio's range: btt may give it to the stale bio
    s.io(t, 1_000_000 + 8, 4096, pid=100)
    return s


def write_capture(path: str, s: Scenario, meta: dict[str, object] | None = None) -> None:
    """The scenario as an ioscope capture (CaptureWriter, as ioscope record writes them)."""
    from ioscope.capture.store import CaptureWriter
    m: dict[str, object] = {"devices": {"7,0": {"name": "loop0", "major": 7, "minor": 0},
                                        "7,1": {"name": "loop1", "major": 7, "minor": 1}}}
    m.update(meta or {})
    w = CaptureWriter(path, m)
    w.add_comms(s.comms)
    w.write(s.events())
    w.close()


def run_btt(path: str, workdir: str, *extra: str) -> str:
    """Real btt on a blktrace dump; returns its .avg text (fails on any complaint)."""
    import os
    import subprocess
    out = os.path.join(workdir, "btt")
    # btt also writes *_iops_fp.dat and *_mbps_fp.dat into its working directory
    p = subprocess.run(["btt", "-i", os.path.abspath(path), "-o", out, *extra], capture_output=True, text=True,
                       timeout=300, cwd=workdir)
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", p.stderr
    with open(out + ".avg") as f:
        return f.read()


def run_blkparse(path: str, *extra: str) -> str:
    """Real blkparse reading a blktrace dump on its standard input (fails on any complaint)."""
    import subprocess
    with open(path, "rb") as f:
        p = subprocess.run(["blkparse", *extra, "-i", "-"], stdin=f, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr == b"", p.stderr
    return p.stdout.decode()


def btt_table(text: str, section: str) -> dict[str, tuple[float, float, float, int]]:
    """Rows NAME -> (min, avg, max, n) of one of btt's MIN AVG MAX N tables, e.g. 'All Devices'."""
    rows: dict[str, tuple[float, float, float, int]] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("====="):
            inside = section in line
            continue
        parts = line.split()
        if inside and len(parts) == 5 and parts[0][:1].isalpha() and parts[0] != "ALL":
            try:
                rows[parts[0]] = (float(parts[1]), float(parts[2]), float(parts[3]), int(parts[4]))
            except ValueError:
                continue
    return rows


def section(text: str, title: str) -> str:
    """The lines of one btt/ioscope section, header included, up to the next section."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("=====") and " ==" in line and "|" not in line:  # not the Q2D table's rule
            if inside:
                break
            inside = title in line
        if inside:
            out.append(line)
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- raw blktrace files
# Written record by record with struct, independent of ioscope's own writer (blktrace.encode), so that
# the import is tested against bytes laid out as the kernel lays them, not as ioscope would.

DM0 = kdev(253, 0)
SDA = kdev(8, 0)
SDA2 = kdev(8, 2)
SDB = kdev(8, 16)
_NOTIFY = 1 << 10   # BLK_TC_NOTIFY
_TN_PROCESS, _TN_TIMESTAMP, _TN_MESSAGE = 0, 1, 2


def raw_record(order: str, seq: int, t: int, sector: int, nbytes: int, action: int, pid: int, dev: int, cpu: int,
               error: int = 0, pdu: bytes = b"") -> bytes:
    """One struct blk_io_trace (version 7) and its payload, in byte order '<' or '>'."""
    import struct
    head = struct.pack(order + "IIQQIIIIIHH", 0x65617407, seq, t, sector, nbytes, action, pid, dev, cpu, error,
                       len(pdu))
    return head + pdu


def remap_pdu(dev_from: int, dev_to: int, sector_from: int) -> bytes:
    """struct blk_io_trace_remap: big-endian whatever the file's order (the kernel writes cpu_to_be*)."""
    import struct
    return struct.pack(">IIQ", dev_from, dev_to, sector_from)


@dataclass
class RawTrace:
    """blktrace's per-CPU files of one or more traced devices: {NAME: {cpu: bytes}}."""

    order: str = "<"
    files: dict[str, dict[int, bytearray]] = field(default_factory=dict)
    seq: dict[tuple[str, int], int] = field(default_factory=dict)
    procs: set[tuple[str, int, int]] = field(default_factory=set)
    comms: dict[int, str] = field(default_factory=dict)

    def _out(self, name: str, cpu: int) -> bytearray:
        return self.files.setdefault(name, {}).setdefault(cpu, bytearray())

    def note(self, name: str, cpu: int, t: int, kind: int, pid: int, dev: int, pdu: bytes) -> None:
        self._out(name, cpu).extend(raw_record(self.order, 0, t, 0, 0, (_NOTIFY << 16) | kind, pid, dev, cpu, 0, pdu))

    def ev(self, name: str, bt_dev: int, cpu: int, t: int, action: int, sector: int, nbytes: int, *, dev: int,
           pid: int, cat: int, pdu: bytes = b"", error: int = 0) -> None:
        """A block event in NAME's trace (whose own device is bt_dev) on cpu: the kernel names a new
        pid first (BLK_TN_PROCESS on that CPU), then numbers the event per (trace, CPU)."""
        if pid and (name, cpu, pid) not in self.procs:
            self.procs.add((name, cpu, pid))
            self.note(name, cpu, t, _TN_PROCESS, pid, bt_dev, self.comms[pid].encode().ljust(16, b"\0"))
        k = (name, cpu)
        self.seq[k] = self.seq.get(k, 0) + 1
        self._out(name, cpu).extend(raw_record(self.order, self.seq[k], t, sector, nbytes, action | (cat << 16), pid,
                                               dev, cpu, error, pdu))

    def write(self, d: str) -> list[str]:
        import os
        out = []
        for name, cpus in self.files.items():
            for cpu in range(max(cpus) + 1):
                p = os.path.join(d, f"{name}.blktrace.{cpu}")
                with open(p, "wb") as f:
                    f.write(bytes(cpus.get(cpu, b"")))
                out.append(p)
        return out


def lvm_on_partition(order: str = "<", n: int = 60, split_dm: bool = False) -> RawTrace:
    """XFS on LVM on a partition, as blktrace records it on a CentOS 7 host: dm 253,0 on 8,2 of disk 8,0.

    Each write is queued on 253,0, remapped to the partition 8,2 (A on 8,2 <- (253,0)), then to the disk
    (A on 8,0 <- (8,2)), then queued, given a request, inserted, issued and completed on 8,0 and completed
    on 253,0; a read now and then; messages from the I/O scheduler (BLK_TN_MESSAGE), process notes,
    a wall-clock note. Two CPUs. With split_dm, 253,0's own events are in a trace of their own (dm-0, as
    `blktrace -d /dev/dm-0 -d /dev/sda` writes them), and a second disk 8,16 (sdb) has reads of its own.
    """
    r = RawTrace(order=order, comms={2231: "xfsaild/dm-0", 4410: "dd", 517: "kworker/1:1H", 4411: "cat"})
    dmname = "dm-0" if split_dm else "sda"
    dmbt = DM0 if split_dm else SDA
    t0 = 88_412_305_117_000   # kernel monotonic time at the start (not zero based)
    wall = 1_700_000_000_123_456_789
    sec, nsec = divmod(wall, 1_000_000_000)
    import struct
    for name, bt in dict([(dmname, dmbt), ("sda", SDA)]).items():
        r.note(name, 0, t0, _TN_TIMESTAMP, 0, bt, struct.pack(order + "II", sec, nsec))
    r.files.setdefault("sda", {}).setdefault(1, bytearray())
    t = t0 + 5_000
    w = TC_WRITE | TC_SYNC
    for i in range(n):
        cpu = i % 2
        pid = (2231, 4410)[(i // 2) % 2]
        read = i % 7 == 3
        cat = TC_READ if read else w
        if read:
            pid = 4411
        nbytes = 81920 if not read else 4096
        s_dm = 20_481_880 + 160 * i
        s_part = s_dm
        s_disk = s_part + 3_909_632
        r.ev(dmname, dmbt, cpu, t, TA_QUEUE, s_dm, nbytes, dev=DM0, pid=pid, cat=cat | TC_QUEUE)
        # every fourth as a 5.x kernel records it: the record on the traced disk, device_to the partition
        r.ev("sda", SDA, cpu, t + 700, TA_REMAP, s_part, nbytes, dev=SDA if i % 4 == 1 else SDA2, pid=pid, cat=cat,
             pdu=remap_pdu(DM0, SDA2, s_dm))
        r.ev("sda", SDA, cpu, t + 1_300, TA_REMAP, s_disk, nbytes, dev=SDA, pid=pid, cat=cat,
             pdu=remap_pdu(SDA2, SDA, s_part))
        r.ev("sda", SDA, cpu, t + 1_900, TA_QUEUE, s_disk, nbytes, dev=SDA, pid=pid, cat=cat | TC_QUEUE)
        r.ev("sda", SDA, cpu, t + 2_600, TA_GETRQ, s_disk, nbytes, dev=SDA, pid=pid, cat=cat)
        r.ev("sda", SDA, cpu, t + 3_100, TA_INSERT, s_disk, nbytes, dev=SDA, pid=pid, cat=cat)
        if i % 5 == 0:
            msg = f"cfq{pid}{'R' if read else 'W'}S insert_request".encode()
            r.note("sda", cpu, t + 3_200, _TN_MESSAGE, pid, SDA, msg)
        r.ev("sda", SDA, cpu, t + 4_000, TA_ISSUE, s_disk, nbytes, dev=SDA, pid=pid, cat=cat | TC_ISSUE)
        ccpu = (cpu + i // 3) % 2
        tc = t + 190_000 + 7_000 * (i % 4)
        r.ev("sda", SDA, ccpu, tc, TA_COMPLETE, s_disk, nbytes, dev=SDA, pid=0, cat=cat | TC_COMPLETE)
        r.ev(dmname, dmbt, ccpu, tc + 900, TA_COMPLETE, s_dm, nbytes, dev=DM0, pid=0, cat=cat | TC_COMPLETE)
        if split_dm and i % 3 == 0:
            r.ev("sdb", SDB, 1 - cpu, t + 500, TA_QUEUE, 1_000 + 8 * i, 4096, dev=SDB, pid=4411,
                 cat=TC_READ | TC_QUEUE)
            r.ev("sdb", SDB, 1 - cpu, t + 1_500, TA_GETRQ, 1_000 + 8 * i, 4096, dev=SDB, pid=4411, cat=TC_READ)
            r.ev("sdb", SDB, 1 - cpu, t + 2_500, TA_ISSUE, 1_000 + 8 * i, 4096, dev=SDB, pid=4411,
                 cat=TC_READ | TC_ISSUE)
            r.ev("sdb", SDB, 1 - cpu, t + 95_000, TA_COMPLETE, 1_000 + 8 * i, 4096, dev=SDB, pid=0,
                 cat=TC_READ | TC_COMPLETE)
        t += 230_000
    return r
