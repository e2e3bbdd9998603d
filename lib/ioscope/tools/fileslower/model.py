"""fileslower's model (pure): the collector's sample -> what the views show.

Each slow call's time is split into what the thread did during it: on its CPU, blocked in I/O waits
(io_schedule: a page, a buffer, a bio, blk-throttle), waiting for a CPU after a preemption, and blocked
otherwise (a wait that is not an I/O wait: ext4's wait for the jbd2 journal's commit, a mutex), which
includes the time between an I/O wait's wakeup and the thread's return to a CPU. The parts add up to the
call's latency. Its bios are the ones the thread queued during the call, and their device time the sum of
their queue-to-completion times for those that completed before the call returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ioscope.base.hist import Hist
from ioscope.base.losses import Losses


@dataclass(frozen=True)
class CallRecord:
    """One slow call as the kernel sent it (times in ns of CLOCK_MONOTONIC)."""

    start_ns: int
    end_ns: int
    call: str
    ret: int            # bytes, or -errno
    tid: int
    pid: int
    comm: str
    file: str           # its path ('-' for none: io_uring_enter)
    dev: str            # the file's device (a partition, a disk, or a file system's number)
    cgroup: str | None  # its cgroup of the io controller
    iowait_ns: int
    iowaits: int
    offcpu_ns: int
    runq_ns: int
    dev_ns: int
    bios_done: int
    rbios: int
    wbios: int
    obios: int
    rbytes: int
    wbytes: int
    flushes: int
    fua: int
    sync: int


@dataclass(frozen=True)
class HistRow:
    """One in-kernel histogram: a call on a file (of a process, or a cgroup, when asked)."""

    call: str
    file: str
    hist: Hist
    pid: int | None = None
    comm: str | None = None
    cgroup: str | None = None


@dataclass
class FileSlowerSample:
    records: list[CallRecord]
    hists: list[HistRow]
    losses: Losses
    started: float        # wall time the interval began
    now: float            # wall time of the sample
    mono_to_wall: float   # wall seconds = mono_to_wall + ns / 1e9


@dataclass(frozen=True)
class SlowCall:
    """A slow call and its breakdown: lat_ns = oncpu_ns + iowait_ns + runq_ns + other_ns."""

    rec: CallRecord
    end_time: float   # wall time it returned
    lat_ns: int
    oncpu_ns: int
    iowait_ns: int
    runq_ns: int
    other_ns: int
    bios: int
    bio_bytes: int

    @property
    def bytes(self) -> int:
        return max(self.rec.ret, 0)


@dataclass(frozen=True)
class HistSummary:
    row: HistRow
    p50_ns: float
    p99_ns: float


@dataclass
class FileSlowerReport:
    time: float
    interval_s: float
    min_ns: int
    calls: list[SlowCall] = field(default_factory=list)
    hists: list[HistSummary] = field(default_factory=list)
    losses: Losses = field(default_factory=Losses)


def breakdown(rec: CallRecord, mono_to_wall: float) -> SlowCall:
    """A record's parts. The kernel's counters come from several CPUs (a wait's end in the waker's
    context): each part is clamped so that none is negative and they add up to the latency."""
    lat = max(rec.end_ns - rec.start_ns, 0)
    off = min(rec.offcpu_ns, lat)
    iowait = min(rec.iowait_ns, off)
    runq = min(rec.runq_ns, off - iowait)
    return SlowCall(rec=rec, end_time=mono_to_wall + rec.end_ns / 1e9, lat_ns=lat, oncpu_ns=lat - off,
                    iowait_ns=iowait, runq_ns=runq, other_ns=off - iowait - runq,
                    bios=rec.rbios + rec.wbios + rec.obios, bio_bytes=rec.rbytes + rec.wbytes)


def build_report(sample: FileSlowerSample, min_ns: int) -> FileSlowerReport:
    """The calls at or above the threshold in the order they returned, and the histograms, the most
    frequent first."""
    calls = sorted((breakdown(r, sample.mono_to_wall) for r in sample.records if r.end_ns - r.start_ns >= min_ns),
                   key=lambda c: c.rec.end_ns)
    hists = [HistSummary(row, row.hist.percentile(50), row.hist.percentile(99))
             for row in sorted(sample.hists, key=lambda h: (-h.hist.count, h.call, h.file))
             if row.hist.count]
    return FileSlowerReport(time=sample.now, interval_s=max(sample.now - sample.started, 0.0), min_ns=min_ns,
                            calls=calls, hists=hists, losses=sample.losses)
