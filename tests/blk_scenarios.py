"""Synthetic block-event scenarios (EVENT arrays) for the offline tools' tests.

Each builder returns (events, comms) with events in time order, like a capture.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ioscope.devices import kdev
from ioscope.trace.events import (
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
    from ioscope.trace.capture import CaptureWriter
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
