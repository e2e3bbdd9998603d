"""btt's analysis of block events, as a streaming function over EVENT chunks: btt's own numbers, and
ioscope's corrected view of the same events.

Two pairings run over every chunk, in one C loop (_tracecore: tracecore/pairing.c driving the pairing
engine tracecore/bios.c and btt's rules tracecore/bttsim.c):

- btt's view (BttView): btt's rules to the byte, what `btt -A` prints for the same blktrace file
  (tracecore/bttsim.c lists them): remaps on the record's own device; X ignored, so a split bio is one
  I/O that is never issued nor completed, whose pieces' G and I go to it (a second G overwriting the
  first's time); a Q at the start sector of one in flight takes its place; a device's records ignored
  until its first Q or A; a pid named by the first process note read, else pid%09u; times counted
  from the trace's time zero (the file's 0 for a dump, blkparse's genesis for per-CPU files, just
  before the first event for a capture, whose export starts there).
- ioscope's view (stats, proc_stats, ...): the pairing engine every user-space pairing shares (agg -r and
  snoop too; engines/pairing/bios.py lists its rules, the kernel agg object's): each bio an I/O, each
  piece of a split bio its own I/O with the bio's Q time; a D issues its request's chain of bios (from
  its sector, one direction) and a C completes it; a Q at the start sector of a bio in flight is a bio of
  its own (counted as `dup_q`; btt would replace the older); G, S, I and M go to the bio queued at their
  sector not yet issued (else to an issued one that has not had that event); a requeued request is timed
  from its first issue (its second I and D are the request's, as in the kernel's objects). What report
  adds: remaps on the device they went to (Q2A: the bio queued at the remap's source sector), each I/O
  under the name its process had when it was queued; a device's events before its first Q or A are
  `culled`; events with no data are ignored except R and A (so a write is timed to its data's
  completion, as btt times it, not through the flush that follows); a delta that is zero or negative
  counts as 1 ns; device-mapper/md devices (majors 9, 253, 254) are "remappers": their Q2Q, Q2A and Q2C
  go to the *dm rows.

The core compares the two at every G and C: DevState.btt_diff_* count the I/Os ioscope completes that
btt does not complete with the same C, btt_g_* the G events btt gives to another I/O, by reason (a split
bio or piece, an I/O inside a split bio's range, anything else); overlap_q the Qs that overlap one btt
holds at another start sector; BttDev says what btt's view counted otherwise (split pieces it ignored,
Qs whose place a later Q took, remaps on another device). Tests check both views against the real btt.

btt's view is accumulated in C (btt's own min/max/total/n per phase, device and process). ioscope's view
comes back as one record per measured interval, turned into counters, min/max/sum and log-linear
histograms with numpy (percentiles), so memory stays bounded whatever the capture's size; only I/Os in
flight (in C) are carried from chunk to chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base.devices import kdev_split
from ioscope.base.hist import NBUCKETS, Hist, bucket_indexes
from ioscope.capture import _tracecore
from ioscope.capture.blktrace import EXPORT_BASE_OFFSET
from ioscope.capture.events import (
    EV_MESSAGE,
    EV_NOTE_PROCESS,
    TA_BACKMERGE,
    TA_COMPLETE,
    TA_FRONTMERGE,
    TA_REMAP,
    TC_READ,
    FirstNames,
    join_events,
    select_events,
)

PHASES = ("q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c", "q2d",
          "q2q_dm", "q2a_dm", "q2c_dm")
NPH = len(PHASES)
# btt's ALL table rows (q2d is ioscope's addition: btt prints it only as a histogram)
ALL_ROWS = ("q2q_dm", "q2a_dm", "q2c_dm", "q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c")
REMAPPER_MAJORS = (9, 253, 254)
REC = np.dtype([("kind", "<i4"), ("dev", "<i4"), ("proc", "<i4"), ("rd", "<i4"),
                ("t", "<u8"), ("v", "<u8"), ("sector", "<u8")])
assert REC.itemsize == _tracecore.REC_SIZE
Q2D_EDGES_MS = (5, 10, 25, 50, 75, 100, 250, 500, 1000)


def bit_time(t_ns: int) -> float:
    """btt's BIT_TIME(): seconds as a double, the whole seconds and the rest converted apart
    (not t_ns / 1e9, which rounds differently now and then)."""
    return float(t_ns // 1_000_000_000) + float(t_ns % 1_000_000_000) / 1.0e9


def is_remapper(dev: int) -> bool:
    return kdev_split(dev)[0] in REMAPPER_MAJORS


def process_name(pid: int, comms: dict[int, str]) -> str:
    """The name btt gives a process: 'kernel' for pid 0, the command up to a '/', else pidNNNNNNNNN."""
    if pid == 0:
        return "kernel"
    comm = comms.get(pid)
    if comm is None:
        return f"pid{pid:09d}"
    return comm.split("/")[0]


@dataclass
class Stat:
    """min/avg/max/n of one phase (ns), plus its histogram for percentiles."""

    n: int = 0
    total: int = 0
    min: int = 0
    max: int = 0
    counts: npt.NDArray[np.uint64] = field(default_factory=lambda: np.zeros(NBUCKETS, dtype=np.uint64))

    def add(self, v: npt.NDArray[Any], buckets: npt.NDArray[Any] | None = None) -> None:
        """Add values (ns); buckets: their bucket indexes, if already known."""
        if not len(v):
            return
        mn, mx = int(v.min()), int(v.max())
        self.min = mn if not self.n else min(self.min, mn)
        self.max = mx if not self.n else max(self.max, mx)
        self.n += len(v)
        self.total += int(v.sum(dtype=np.uint64))
        b = bucket_indexes(v) if buckets is None else buckets
        self.counts += np.bincount(b, minlength=NBUCKETS).astype(np.uint64)

    @property
    def avg(self) -> float:
        """Mean in seconds, computed like btt (total seconds / n)."""
        return (self.total / 1e9) / self.n if self.n else 0.0

    def hist(self) -> Hist:
        return Hist(self.counts.copy(), self.n, self.total, self.min, self.max)

    def to_json(self, pcts: Iterable[float] = (50, 90, 99, 99.9)) -> dict[str, Any]:
        h = self.hist()
        out: dict[str, Any] = {"min": self.min / 1e9, "avg": self.avg, "max": self.max / 1e9, "n": self.n,
                               "total": self.total / 1e9}
        for p in pcts:
            out[f"p{p:g}"] = h.percentile(p) / 1e9 if self.n else 0.0
        return out


@dataclass
class CgroupIOs:
    """The I/Os of one cgroup (the one its bio was charged to when queued): completed I/Os (each piece
    of a split bio one, as Q2C counts them), their bytes, their Q2C and D2C; unfinished: queued but not
    completed (in flight at the end, or replaced by a newer Q at their sector)."""

    ios: int = 0
    bytes: int = 0
    unfinished: int = 0
    q2c: Stat = field(default_factory=Stat)
    d2c: Stat = field(default_factory=Stat)


@dataclass
class Seeks:
    """Seek distances (sectors) between consecutive Qs or Ds of a device, as btt measures them.

    median is the true median distance; btt_median and modes are what btt
    prints (they depend on btt's tree of distances, rebuilt the same way in C).
    """

    n: int = 0
    total: float = 0.0
    median: int = 0
    btt_median: int = 0
    modes: list[int] = field(default_factory=list)   # the first 16 modes, in btt's order
    nmodes: int = 0                                    # how many distances share the top count
    most: int = 0
    distinct: int = 0

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0


@dataclass(frozen=True)
class Avg:
    """btt's struct avg_info: one phase's n, min, max and total, in ns."""

    n: int = 0
    min: int = 0
    max: int = 0
    total: int = 0

    @property
    def avg(self) -> float:
        """Mean in seconds, as btt computes it: BIT_TIME(total) / n."""
        return bit_time(self.total) / self.n if self.n else 0.0


# the averages btt keeps (tracecore/bttsim.h: BP_*), in its order
BTT_AVGS = ("q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c", "q2q_dm", "q2a_dm", "q2c_dm",
            "blks")


def _avgs(raw: list[tuple[int, int, int, int]]) -> dict[str, Avg]:
    return {k: Avg(*v) for k, v in zip(BTT_AVGS, raw)}


def live_summary(live: tuple[int, int, int]) -> tuple[int, float, float, float]:
    """btt's I/O Active Period row from (periods, ns active, end of the last, from the time zero):
    (# live, avg active s, avg inactive s, % live). As in btt, the observed span runs from the time
    zero (its start time stays 0), and one period is 100% live with an average of 0."""
    n, tot, end = live
    if n == 0:
        return 0, 0.0, 0.0, 0.0
    if n == 1:
        return 1, 0.0, 0.0, 100.0
    t_time, tot_live = bit_time(end), bit_time(tot)
    return n, tot_live / n, (t_time - tot_live) / (n - 1), 100.0 * (tot_live / t_time)


N_HIST_BKTS = 1025   # btt's request-size buckets: 1 to 1024 blocks of 512 bytes, and more


def ranges(raw: bytes) -> npt.NDArray[np.uint64]:
    """btt's activity ranges as kept (bytes: comparable) -> (n, 2) [start, end] ns."""
    return np.frombuffer(raw, dtype=np.uint64).reshape(-1, 2)


def hist_counts(raw: bytes) -> npt.NDArray[np.uint64]:
    """btt's request-size histogram as kept (bytes; none: all 0) -> N_HIST_BKTS counts."""
    return np.frombuffer(raw, dtype=np.uint64) if raw else np.zeros(N_HIST_BKTS, dtype=np.uint64)


@dataclass
class BttDev:
    """One device as btt sees it (its struct d_info), in the trace's time base (from the time zero)."""

    dev: int
    avgs: dict[str, Avg]
    start_time: int                  # its first record btt set up
    end_time: int                    # its last record past the culling
    n_qs: int
    n_ds: int
    t_act_q: int
    plugged: int                     # still plugged at the end (btt closes it at end_time)
    last_plug: float                 # BIT_TIME of that plug
    plugged_s: float                 # time plugged as btt sums it: differences of BIT_TIME()s
    nplugs: int
    nplugs_t: int
    nios_up: int
    nios_upt: int
    q2d_hist: list[int]
    q2q_seek: Seeks
    d2d_seek: Seeks
    live: tuple[int, int, int]       # active periods: (n, ns active, end)
    in_flight: int                   # Qs btt still holds at the end
    split_events: int                # X records btt ignored (each a piece ioscope pairs as an I/O)
    split_bios: int                  # the bios they split
    split_never_completed: int       # of which btt still holds the Q at the end (no D or C covers it)
    q_replaced: int                  # Qs whose place a later Q at the same start sector took
    remaps_elsewhere: int            # remaps counted here (the record's device) that went to another
    # btt's activity ranges of its Qs and Cs (bytes of [start, end] ns pairs: ranges()) and its per-second
    # count of completions still open at the end (the second, completions, blocks: its files' last line)
    qranges: bytes = b""
    cranges: bytes = b""
    rstat: tuple[int, int, int] = (-1, 0, 0)
    # btt's -m buckets of seeks per second still open at the end, of the Q2Q and D2D streams: (the first seek's
    # time in ns, seeks, the value btt prints; 0 seeks: none)
    sps_q2q: tuple[int, int, float] = (0, 0, 0.0)
    sps_d2d: tuple[int, int, float] = (0, 0, 0.0)
    # btt's -u histogram: its unplugs (UNPLUG_IO) by requests unplugged, buckets of 5 (0-4 ... 95-99, 100 or more)
    unplug_hist: list[int] = field(default_factory=list)
    # btt's -L periods still open at the end, by BL_Q2D, BL_D2C, BL_Q2C: (latencies, middle time stamp, mean)
    plat: list[tuple[int, float, float]] = field(default_factory=list)
    # btt's -I counters of the whole trace, as its last dump reads them: merges (written, read), ios, sectors, wait
    # and svctm (ns), tot_qusz, idle_time (s)
    iostat: tuple[int, int, int, int, int, int, int, int, float, float] = (0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0)


@dataclass
class BttView:
    """Everything btt -A prints, from btt's own pairing of the same records."""

    devices: list[BttDev]                          # in btt's order (first set up first)
    processes: list[tuple[str, dict[str, Avg]]]    # in btt's order (its names sorted as strcmp does)
    all: dict[str, Avg]
    live: tuple[int, int, int]
    time_zero: int
    # what btt's other files hold (NAME.dat, NAME_qhist.dat, NAME_dhist.dat, sys_*_fp.dat): the system's
    # activity ranges, each process's (in the order of processes), the request-size histograms of Qs and
    # Ds (hist_counts()), the system's open per-second count
    qranges: bytes = b""
    cranges: bytes = b""
    proc_ranges: list[tuple[bytes, bytes]] = field(default_factory=list)
    qhist: bytes = b""
    dhist: bytes = b""
    rstat: tuple[int, int, int] = (-1, 0, 0)
    iostat_last_stamp: int = 0                     # btt's -I: the last record's time stamp

    def device(self, dev: int) -> BttDev | None:
        return next((d for d in self.devices if d.dev == dev), None)


@dataclass
class DevState:
    """One device in ioscope's view, and how btt's pairing of its events differed."""

    dev: int
    start_time: int = 0
    end_time: int = 0
    dup_q: int = 0
    culled: int = 0
    overlap_q: int = 0
    split_pieces: int = 0
    split_bios: int = 0
    # I/Os ioscope completes that btt does not complete at the same C (by reason), and G events btt
    # gives to another I/O (by reason): the core compares the two pairings event by event
    btt_diff_split: int = 0
    btt_diff_range: int = 0
    btt_diff_other: int = 0
    btt_g_split: int = 0
    btt_g_range: int = 0
    btt_g_other: int = 0
    inflight: int = 0
    inflight_issued: int = 0


class HeatMap:
    """Counts per (time bin, log-linear latency bucket of hist.py), the time bins widening as the capture
    grows. report_model banded them with top's quantisation (ioscope.base.heat)."""

    NLAT = NBUCKETS

    def __init__(self, max_bins: int = 2048) -> None:
        self.width = 1_000_000  # 1 ms to start with
        self.t0: int | None = None
        self.max_bins = max_bins
        self.grid = np.zeros((0, self.NLAT), dtype=np.int64)

    def add(self, t: npt.NDArray[Any], lat: npt.NDArray[Any]) -> None:
        if not len(t):
            return
        t = t.astype(np.int64)
        if self.t0 is None:
            self.t0 = int(t.min())
        rel = np.maximum(t - self.t0, 0)
        while int(rel.max()) // self.width >= self.max_bins:
            self._widen()
        col = rel // self.width
        lb = bucket_indexes(lat)
        need = int(col.max()) + 1
        if need > len(self.grid):
            self.grid = np.vstack([self.grid, np.zeros((need - len(self.grid), self.NLAT), dtype=np.int64)])
        np.add.at(self.grid, (col, lb), 1)

    def _widen(self) -> None:
        g = self.grid
        if len(g) % 2:
            g = np.vstack([g, np.zeros((1, self.NLAT), dtype=np.int64)])
        self.grid = g.reshape(-1, 2, self.NLAT).sum(axis=1)
        self.width *= 2


@dataclass
class BttResult:
    devices: dict[int, DevState]                  # ioscope's view, per device
    stats: dict[tuple[str, int], Stat]            # (phase, dev) -> Stat; dev -1 = all devices
    proc_stats: dict[tuple[str, str], Stat]       # (phase, process name) -> Stat
    first_ts: int
    last_ts: int
    n_events: int
    heat: HeatMap
    iostat: dict[tuple[int, int], npt.NDArray[np.float64]]   # (dev, interval from the first event) -> counters
    iostat_interval: int
    time_zero: int = 0                            # the trace's time zero (btt's reference for its times)
    # (from device, to device) -> [bios, bytes] remapped (A events: a partition's or dm/md device's I/O
    # sent to the device below it)
    remaps: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    btt: BttView | None = None                    # btt's view of the same records (None: not kept)
    # cgroup id (ios.NO_CGROUP: a Q that carries none) -> its I/Os; empty when not asked for
    # (ios.CgroupSink) or the capture holds no cgroups
    cgroups: dict[int, CgroupIOs] = field(default_factory=dict)

    def stat(self, phase: str, dev: int = -1) -> Stat:
        return self.stats.get((phase, dev), Stat())

    @property
    def inflight_end(self) -> dict[int, int]:
        return {dev: d.inflight for dev, d in self.devices.items()}

    @property
    def inflight_end_issued(self) -> dict[int, int]:
        return {dev: d.inflight_issued for dev, d in self.devices.items()}


# iostat counters per (device, interval)
IO_R, IO_W, IO_RSEC, IO_WSEC, IO_RM, IO_WM, IO_Q2C_SUM, IO_Q2C_N = range(8)
LatencySink = Callable[[str, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any],
                        npt.NDArray[Any]], None]
# One record per I/O from the core (struct iorec_t): ordinals of its Q and C events among the events fed,
# the times of Q G I M D C (NO_TIME where absent), its range, device and process indexes, requeues, IO_* flags
IOREC = np.dtype([("ord_q", "<u8"), ("ord_c", "<u8"), ("t", "<u8"), ("g", "<u8"), ("i", "<u8"), ("m", "<u8"),
                  ("d", "<u8"), ("c", "<u8"), ("s", "<u8"), ("e", "<u8"), ("dev", "<i4"), ("proc", "<i4"),
                  ("rq", "<u4"), ("flags", "<u4")])
assert IOREC.itemsize == _tracecore.IOREC_SIZE
NO_TIME = np.uint64(2**64 - 1)
# One row of btt's per-I/O latency files from btt's own pairing (tracecore/bttsim.h's blat_t): kind (BL_*), the
# device's index (Btt.dev_of), btt's time stamp for the row and the latency, in ns from the time zero. In btt's
# order: a Q2D row per Q a D issues (stamped at the D; D - Q as unsigned, as btt subtracts), a Q2C row (stamped at
# the Q) and, for a Q that was issued, a D2C row (stamped at the C) per Q a C completes.
BLAT = np.dtype([("kind", "<i4"), ("dev", "<i4"), ("t", "<u8"), ("v", "<u8"), ("w", "<u8")])
assert BLAT.itemsize == _tracecore.BLAT_SIZE
# the kinds of btt's rows (bttsim.h's blat_t): the latency files' (t, v: time stamp and latency), a message
# printed (t its time, v its row in the chunk), a second's line of the iops/mbps files (t the second, v the
# completions, w their blocks; dev -1: the system's)
# completions, w their blocks; dev -1: the system's); with btt's -Q/-s/-m/-B (Btt's btt_extra): a change of
# the active queue depth (v the depth before it, w 1 at a D, 0 at a C), a seek of the Q2Q or D2D stream (v the
# signed distance as u64), a D's blocks (v start, w end), a bucket of seeks per second ended (t its first seek,
# v the seeks, w the bits of the float64 btt prints); BL_READ added to a seek's or a D's kind for a read
BL_Q2D, BL_D2C, BL_Q2C, BL_MSG, BL_RATE = 0, 1, 2, 3, 4
BL_AQD, BL_SEEK_Q, BL_SEEK_D, BL_BNO, BL_SPS_Q, BL_SPS_D = 5, 6, 7, 8, 9, 10
# with btt's -p, at each C a track per Q it completes: the Q (v its sector, w its sectors), its G, I, M (t only,
# when it had one), its D (v, w: the D's sector and sectors; when issued), the C (v, w: the C's), then the C's end
BL_PIO_Q, BL_PIO_G, BL_PIO_I, BL_PIO_M, BL_PIO_D, BL_PIO_C, BL_PIO_END = 11, 12, 13, 14, 15, 16, 17
# with btt's -P, at each C: the time of each Q it completes (BL_PIT_Q), then BL_PIT_END (t the C's time, v the D
# time of the last of them that was issued, NO_TIME when none was)
BL_PIT_Q, BL_PIT_END = 18, 19
# with btt's -L, a period of a device's latencies ended: BL_PLAT + BL_Q2D, BL_D2C or BL_Q2C (t, v: the bits of the
# float64s btt prints, the period's middle time stamp and its mean latency)
BL_PLAT = 20
# with btt's -I, at the end of each interval, per device btt set up: five rows of its counters (BL_IOS_1: t the
# record's time, v, w its merges written, read; BL_IOS_2: t the interval's start, ios written, read; BL_IOS_3:
# sectors written, read; BL_IOS_4: wait, svctm ns; BL_IOS_5: the bits of tot_qusz, idle_time), then BL_IOS_END
BL_IOS_1, BL_IOS_2, BL_IOS_3, BL_IOS_4, BL_IOS_5, BL_IOS_END = 23, 24, 25, 26, 27, 28
BL_READ = 0x100
# (rows, dev_of, texts): the rows of a chunk, device numbers by index, the chunk's message texts by row
BttRowSink = Callable[[npt.NDArray[np.void], list[int], dict[int, str]], None]
IO_SPLIT, IO_DUP, IO_END, IO_START = 1, 2, 4, 8


class IoSink:
    """Receives the per-I/O records (Btt(on_io=...)): io() after each chunk with the events the core was fed
    (ev[k] has ordinal base + k) and the names known then; done() once at the end with the I/Os still in
    flight (ev None). dev_of maps the records' device indexes to device numbers."""

    def io(self, recs: npt.NDArray[np.void], ev: npt.NDArray[np.void] | None, base: int, comms: dict[int, str],
           dev_of: list[int], min_ord: int) -> None:
        raise NotImplementedError


class Btt:
    """Feed EVENT chunks in the order btt reads them with feed(); result() gives the analysis.

    on_latency(phase, dev, proc, t_ns, value_ns, sector) receives each chunk's per-I/O values of
    q2c, d2c and q2d (dev: device numbers, proc: indexes into proc_names), for latency dumps.
    """

    def __init__(self, comms: dict[int, str] | None = None, iostat_interval_ns: int = 1_000_000_000,
                 on_latency: LatencySink | None = None, time_zero: int | None = None,
                 on_io: IoSink | None = None, stats: bool = True, first_names: bool = False,
                 on_btt_rows: BttRowSink | None = None, btt_latencies: bool = False,
                 range_delta: float = 0.1, time_window: tuple[float, float] | None = None,
                 btt_extra: tuple[bool, ...] = (False, False, False, False, False, False),
                 plat_freq: float = 0.0, btt_iostat: int | None = None) -> None:
        """time_zero: the time btt's times count from: 0 for a blktrace dump, blkparse's genesis for per-CPU
        files; None for a capture, whose export counts from just before its first event
        (blktrace.EXPORT_BASE_OFFSET). stats=False: only ioscope's pairing, for on_io (no statistics,
        histograms, heat map, iostat, nor btt's view: result() has none). first_names: btt's view names
        each pid as the capture's export does (the name it had at its first block event, the notes
        themselves ignored), for a capture recorded by ioscope; else from the process notes in the
        stream, as btt reads a blktrace file. on_btt_rows(rows, dev_of, texts): the rows of the files btt
        writes as it reads (BLAT, from btt's pairing: its messages, its per-second lines and, with
        btt_latencies, its per-I/O latency rows) after each chunk; range_delta: btt's -d, the gap that
        ends an activity range; time_window: btt's -t/-T (seconds from the time zero; btt reads nothing
        after the first record past the end); btt_extra: the rows of btt's -Q, -s, -m, -B (and -p, -P) files
        too; plat_freq: btt's -L period in seconds (0 or less: none), the rows of its periodic latency files;
        btt_iostat: btt's -S interval in seconds for the rows of its -I file (None: no -I)."""
        self.core = _tracecore.Core()
        self.on_btt_rows = on_btt_rows
        if on_btt_rows is not None:
            self.core.set_btt_files(True, range_delta)
            self.core.set_btt_latencies(btt_latencies)
            aqd, seeks, sps, bno, per_io, per_io_times = (*btt_extra, False, False)[:6]
            self.core.set_btt_extra(aqd, seeks, sps, bno, per_io, per_io_times, plat_freq)
            if btt_iostat is not None:
                self.core.set_btt_iostat(True, btt_iostat)
        if time_window is not None:
            self.core.set_btt_window(*time_window)
        self.time_zero = time_zero
        if time_zero is not None:
            self.core.set_time_zero(time_zero)
        self.comms: dict[int, str] = dict(comms or {})
        self.dev_idx: dict[int, int] = {}
        self.dev_of: list[int] = []
        self.stats: dict[tuple[str, int], Stat] = {}
        self.proc_stats: dict[tuple[str, str], Stat] = {}
        self.proc_ids: dict[str, int] = {}
        self.proc_names: list[str] = []
        self.pid_proc: dict[int, int] = {}
        self.first_ts: int | None = None
        self.last_ts = 0
        self.remaps: dict[tuple[int, int], list[int]] = {}
        self.n_events = 0
        self.heat = HeatMap()
        self.on_latency = on_latency
        self.on_io = on_io
        self.want_stats = stats
        # first_names: each pid's name as the capture's export gives it (events.FirstNames)
        self.first_names = FirstNames(self.comms) if first_names else None
        self.btt_name_ids: dict[str, int] = {}          # btt's process names, by the id the core knows them by
        self.btt_names: list[str] = []
        self.n_fed = 0   # events fed to the core: the ordinal of the next one
        self._io_flushed = False
        if on_io is not None:
            self.core.set_io_records(True)
        if not stats:
            self.core.set_btt(False)
        self.iostat_interval = iostat_interval_ns
        self.iostat: dict[tuple[int, int], npt.NDArray[np.float64]] = {}
        # the pids seen (sorted) and each one's process index: as many entries as distinct pids, whatever
        # their values (a table indexed by pid would be 16 GiB for a damaged file's pid 0xffffffff)
        self._pid_keys = np.zeros(0, dtype=np.uint32)
        self._pid_vals = np.zeros(0, dtype=np.int32)

    def _devs(self, devs: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
        first = int(devs[0])
        if first in self.dev_idx and bool((devs == devs[0]).all()):   # the common case: one disk
            return np.full(len(devs), self.dev_idx[first], dtype=np.int32)
        u, inv = np.unique(devs, return_inverse=True)
        lut = np.empty(len(u), dtype=np.int32)
        for j, dv in enumerate(u.tolist()):
            i = self.dev_idx.get(dv)
            if i is None:
                i = self.dev_idx[dv] = len(self.dev_of)
                self.dev_of.append(dv)
                self.core.set_remapper(i, is_remapper(dv))
            lut[j] = i
        return lut[inv.reshape(-1)].astype(np.int32)

    def _proc_index(self, pid: int, comm: str | None) -> int:
        name = process_name(pid, {pid: comm} if comm is not None else {})
        p = self.proc_ids.get(name)
        if p is None:
            p = self.proc_ids[name] = len(self.proc_names)
            self.proc_names.append(name)
        return p

    def _pid_pos(self, pids: npt.NDArray[Any]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Each pid's place in the sorted table of pids seen, and whether it is there."""
        keys = self._pid_keys
        pos = np.searchsorted(keys, pids)
        hit = pos < len(keys)
        hit[hit] = keys[pos[hit]] == pids[hit]
        return pos, hit

    def _procs(self, pids: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
        """Process index of each pid (ioscope's naming, the names known now), through the sorted table of the
        pids seen (memory grows with the distinct pids, not with their values)."""
        pids = np.asarray(pids, dtype=np.uint32)
        pos, hit = self._pid_pos(pids)
        if not hit.all():
            # a set, not np.unique: numpy 2 imports numpy.ma for a plain unique (~10 ms of start-up)
            new = sorted(set(pids[~hit].tolist()))
            for pid in new:
                self.pid_proc[pid] = self._proc_index(pid, self.comms.get(pid))
            keys = np.concatenate([self._pid_keys, np.array(new, dtype=np.uint32)])
            vals = np.concatenate([self._pid_vals, np.array([self.pid_proc[p] for p in new], dtype=np.int32)])
            o = np.argsort(keys, kind="stable")
            self._pid_keys, self._pid_vals = keys[o], vals[o]
            pos, hit = self._pid_pos(pids)
        return np.asarray(self._pid_vals[pos], dtype=np.int32)

    def _btt_name(self, pid: int, comm: str) -> int:
        """The core's id of the name btt gives a pid from a note: 'kernel' for pid 0, the command up to a '/'."""
        name = "kernel" if pid == 0 else comm.split("/")[0]
        i = self.btt_name_ids.get(name)
        if i is None:
            i = self.btt_name_ids[name] = len(self.btt_names)
            self.btt_names.append(name)
        return i

    def _names(self, ev: npt.NDArray[np.void], proc: npt.NDArray[np.int32]) -> npt.NDArray[np.int32] | None:
        """Apply the chunk's process notes: ioscope's view renames a pid from its note on (exec, prctl: its
        events before keep the name they were done under, in proc); btt's view gets, per event, a note's
        name id (with first_names, each pid's name for its first block event instead), -1 elsewhere."""
        from ioscope.capture.events import note_comm
        name: npt.NDArray[np.int32] | None = None
        if self.first_names is not None:
            for k, pid, at in self.first_names.chunk(ev):
                if at is not None:
                    if name is None:
                        name = np.full(len(ev), -1, dtype=np.int32)
                    name[k] = self._btt_name(pid, at)
        pids = ev["pid"]
        for k in np.flatnonzero((ev["flags"] & EV_NOTE_PROCESS) != 0).tolist():
            pid = int(pids[k])
            comm = note_comm(ev[k])
            if self.first_names is None:
                if name is None:
                    name = np.full(len(ev), -1, dtype=np.int32)
                name[k] = self._btt_name(pid, comm)
            if self.comms.get(pid) != comm:
                self.comms[pid] = comm
                p = self._proc_index(pid, comm)
                proc[k + 1:][pids[k + 1:] == pid] = p
                self.pid_proc[pid] = p
                place, known = self._pid_pos(np.array([pid], dtype=np.uint32))
                if known[0]:
                    self._pid_vals[place[0]] = p
        return name

    def feed(self, ev: npt.NDArray[np.void], own_dev: npt.NDArray[Any] | None = None,
             texts: dict[int, str] | None = None) -> None:
        """One chunk: block events, and process notes (EV_NOTE_PROCESS) and messages (EV_MESSAGE) where they
        were read. own_dev: each record's own device, where btt counts it (default: its device; a remap
        recorded on the traced disk whose bio went to another device has its device_to in dev). texts: the
        messages' texts by row, for on_btt_rows."""
        n = len(ev)
        if not n:
            return
        blk = (ev["flags"] & (EV_NOTE_PROCESS | EV_MESSAGE)) == 0
        nblk = int(blk.sum())
        only_blk = nblk == n   # the common case: no selection (a copy of the events) needed
        if nblk:
            bts = ev["ts"] if only_blk else ev["ts"][blk]
            if self.first_ts is None:
                self.first_ts = int(bts[0])
                if self.time_zero is None:
                    self.time_zero = self.first_ts - EXPORT_BASE_OFFSET
                    self.core.set_time_zero(self.time_zero)
            self.last_ts = max(self.last_ts, int(bts.max()))
        self.n_events += nblk
        dev = self._devs(ev["dev"])
        auxdev = np.full(n, -1, dtype=np.int32)
        rm = (ev["action"] == TA_REMAP) & blk
        if rm.any():
            auxdev[rm] = self._devs(ev["aux_dev"][rm])
            a = ev[rm]
            pairs, inv = np.unique(np.stack([a["aux_dev"], a["dev"]]).astype(np.int64), axis=1, return_inverse=True)
            inv = inv.reshape(-1)
            nbios = np.bincount(inv)
            nbytes = np.bincount(inv, weights=a["bytes"].astype(np.float64))
            for j in range(pairs.shape[1]):
                acc = self.remaps.setdefault((int(pairs[0, j]), int(pairs[1, j])), [0, 0])
                acc[0] += int(nbios[j])
                acc[1] += int(nbytes[j])
        proc = self._procs(ev["pid"])
        name = self._names(ev, proc)
        bdev = None if own_dev is None else self._devs(np.asarray(own_dev))
        raw = self.core.feed(np.ascontiguousarray(ev), dev=dev, auxdev=auxdev, proc=proc, bdev=bdev, name=name)
        per_kind = [np.frombuffer(b, dtype=REC) for b in raw]
        if self.on_btt_rows is not None:
            rows = np.frombuffer(self.core.take_btt_latencies(), dtype=BLAT)
            if len(rows):
                self.on_btt_rows(rows, self.dev_of, texts or {})
        if self.on_io is not None:
            self.on_io.io(np.frombuffer(self.core.take_io(), dtype=IOREC), ev, self.n_fed, self.comms, self.dev_of,
                          self.core.min_ord())
        self.n_fed += n
        if self.want_stats and nblk:
            self._absorb(per_kind)
            if only_blk:
                self._iostat(ev, dev, per_kind[PHASES.index("q2c")])
            else:
                self._iostat(select_events(ev, blk), dev[blk], per_kind[PHASES.index("q2c")])

    def _absorb(self, per_kind: list[npt.NDArray[np.void]]) -> None:
        dev_of = np.array(self.dev_of, dtype=np.int64)
        for k, r in enumerate(per_kind):
            if not len(r):
                continue
            name = PHASES[k]
            v = np.ascontiguousarray(r["v"])
            rdev, rproc = np.ascontiguousarray(r["dev"]), np.ascontiguousarray(r["proc"])
            if name in ("q2q", "q2q_dm"):
                self._add(name, -1, v[(rdev < 0) & (rproc < 0)])
                for di in _present(rdev):
                    self._add(name, self.dev_of[di], v[rdev == di])
                for pi in _present(rproc):
                    self._addp(name, pi, v[rproc == pi])
                continue
            b = bucket_indexes(v)
            self._add(name, -1, v, b)
            devs = _present(rdev)
            if len(devs) == 1:
                self._add(name, self.dev_of[devs[0]], v, b)
            else:
                for di in devs:
                    m = rdev == di
                    self._add(name, self.dev_of[di], v[m], b[m])
            procs = _present(rproc)
            if len(procs) == 1:
                self._addp(name, procs[0], v, b)
            else:
                for pi in procs:
                    m = rproc == pi
                    self._addp(name, pi, v[m], b[m])
            if name == "q2c":
                self.heat.add(r["t"], v)
            if self.on_latency is not None and name in ("d2c", "q2c", "q2d"):
                self.on_latency(name, dev_of[rdev], rproc, r["t"], v, r["sector"])

    def _iostat(self, ev: npt.NDArray[np.void], dev: npt.NDArray[np.int32], recs: npt.NDArray[np.void]) -> None:
        """Counters per (device, interval): completions, sectors, merges (from events), Q2C (records).

        Interval k covers [first event + k * interval, first event + (k + 1) * interval).
        """
        ival = self.iostat_interval
        t0 = self.first_ts or 0
        act = ev["action"]
        sel = ((act == TA_COMPLETE) | (act == TA_BACKMERGE) | (act == TA_FRONTMERGE)) & (ev["bytes"] > 0)
        di_parts: list[npt.NDArray[Any]] = []
        iv_parts: list[npt.NDArray[Any]] = []
        col_parts: list[npt.NDArray[Any]] = []
        w_parts: list[npt.NDArray[Any]] = []
        if sel.any():
            rd = (ev["category"][sel] & TC_READ) != 0
            comp = ev["action"][sel] == TA_COMPLETE
            d_sel = dev[sel].astype(np.int64)
            iv = (ev["ts"][sel].astype(np.int64) - t0) // ival
            di_parts += [d_sel, d_sel[comp]]
            iv_parts += [iv, iv[comp]]
            col_parts += [np.where(comp, np.where(rd, IO_R, IO_W), np.where(rd, IO_RM, IO_WM)),
                          np.where(rd[comp], IO_RSEC, IO_WSEC)]
            w_parts += [np.ones(len(iv)), (ev["bytes"][sel][comp] >> 9).astype(np.float64)]
        if len(recs):
            q = recs[recs["kind"] == PHASES.index("q2c")]
            if len(q):
                done = ((q["t"] + q["v"]).astype(np.int64) - t0) // ival
                qd = q["dev"].astype(np.int64)
                di_parts += [qd, qd]
                iv_parts += [done, done]
                col_parts += [np.full(len(q), IO_Q2C_SUM), np.full(len(q), IO_Q2C_N)]
                w_parts += [q["v"].astype(np.float64), np.ones(len(q))]
        if not di_parts:
            return
        di = np.concatenate(di_parts)
        iv = np.concatenate(iv_parts)
        col = np.concatenate(col_parts).astype(np.int64)
        w: npt.NDArray[np.float64] = np.concatenate(w_parts).astype(np.float64)
        # (device, interval) slots of this batch, numbered densely (times can be far apart)
        slot_key = di * (1 << 40) + (iv - int(iv.min()))
        uk, inv = np.unique(slot_key, return_inverse=True)
        acc = np.asarray(np.bincount(inv.reshape(-1) * 8 + col, weights=w, minlength=len(uk) * 8),
                         dtype=np.float64).reshape(len(uk), 8)
        lo = int(iv.min())
        for key, row in zip(uk.tolist(), acc):
            slot = (self.dev_of[key >> 40], lo + (key & ((1 << 40) - 1)))
            cur = self.iostat.get(slot)
            if cur is None:
                self.iostat[slot] = row.copy()
            else:
                cur += row

    def _add(self, phase: str, dev: int, v: npt.NDArray[Any], b: npt.NDArray[Any] | None = None) -> None:
        if len(v):
            s = self.stats.get((phase, dev))
            if s is None:
                s = self.stats[(phase, dev)] = Stat()
            s.add(v, b)

    def _addp(self, phase: str, proc: int, v: npt.NDArray[Any], b: npt.NDArray[Any] | None = None) -> None:
        if len(v):
            key = (phase, self.proc_names[proc])
            s = self.proc_stats.get(key)
            if s is None:
                s = self.proc_stats[key] = Stat()
            s.add(v, b)

    def finish_io(self) -> None:
        """Hand the I/Os still in flight to the per-I/O sink (once; result() does it too)."""
        if self.on_io is not None and not self._io_flushed:
            self._io_flushed = True
            self.core.io_flush()
            self.on_io.io(np.frombuffer(self.core.take_io(), dtype=IOREC), None, self.n_fed, self.comms,
                          self.dev_of, -1)

    def result(self) -> BttResult:
        self.finish_io()
        devices: dict[int, DevState] = {}
        tz = self.time_zero or 0
        for info in self.core.devices():
            dev = self.dev_of[info["idx"]]
            devices[dev] = DevState(dev, **{k: info[k] for k in (
                "start_time", "end_time", "dup_q", "culled", "overlap_q", "split_pieces", "split_bios",
                "btt_diff_split", "btt_diff_range", "btt_diff_other", "btt_g_split", "btt_g_range", "btt_g_other",
                "inflight", "inflight_issued")})
        view = self._btt_view(tz) if self.want_stats else None
        return BttResult(devices, self.stats, self.proc_stats, self.first_ts or 0, self.last_ts, self.n_events,
                         self.heat, self.iostat, self.iostat_interval, tz, self.remaps, view)

    def _btt_view(self, tz: int) -> BttView:
        raw = self.core.btt()
        devs = []
        for i in raw["devices"]:
            n, tot, end = i["live"]
            devs.append(BttDev(
                self.dev_of[i["idx"]], _avgs(i["avg"]), i["start_time"], i["end_time"], i["n_qs"], i["n_ds"],
                i["t_act_q"], i["plugged"], i["last_plug"], i["plugged_s"], i["nplugs"], i["nplugs_t"], i["nios_up"],
                i["nios_upt"], i["q2d_hist"], Seeks(**i["seek_q2q"]), Seeks(**i["seek_d2d"]), (n, tot, end),
                i["in_flight"], i["split_events"], i["split_bios"], i["split_never_completed"], i["q_replaced"],
                i["remaps_elsewhere"], i["qranges"], i["cranges"], i["rstat"], i["sps_q2q"], i["sps_d2d"],
                i["unplug_hist"], i["plat"], i["iostat"]))
        procs = []
        for key, avg, qr, cr in raw["processes"]:
            pname = self.btt_names[key] if key >= 0 else f"pid{-key - 1:09d}"
            procs.append((pname, _avgs(avg), qr, cr))
        procs.sort(key=lambda x: x[0].encode(errors="surrogateescape"))
        n, tot, end = raw["live"]
        return BttView(devs, [(p[0], p[1]) for p in procs], _avgs(raw["all"]), (n, tot, end), tz,
                       raw["qranges"], raw["cranges"], [(p[2], p[3]) for p in procs], raw["qhist"], raw["dhist"],
                       raw["rstat"], raw["iostat_last_stamp"])


def _present(idx: npt.NDArray[Any]) -> list[int]:
    """The distinct non-negative small integers in idx (device or process indexes)."""
    ok = idx[idx >= 0]
    if not len(ok):
        return []
    return [int(x) for x in np.flatnonzero(np.bincount(ok))]


def analyse(chunks: Iterable[npt.NDArray[np.void]], comms: dict[int, str] | None = None,
            **kw: Any) -> BttResult:
    """Run the analysis over time-ordered EVENT chunks."""
    b = Btt(comms, **kw)
    for c in chunks:
        b.feed(c)
    return b.result()


def time_ordered(chunks: Iterable[npt.NDArray[np.void]], hold_ns: int = 200_000_000) -> Iterator[npt.NDArray[np.void]]:
    """Re-sort a stream of EVENT chunks into time order with bounded memory.

    Each chunk is merged with the held-back tail of the previous ones and
    events older than (newest - hold_ns) are released.
    """
    held: npt.NDArray[np.void] | None = None
    for c in chunks:
        if not len(c):
            continue
        cur = c if held is None else join_events([held, c])
        cur = select_events(cur, np.argsort(cur["ts"], kind="stable"))
        cut = int(np.searchsorted(cur["ts"], int(cur["ts"][-1]) - hold_ns, side="right"))
        if cut:
            yield cur[:cut]
        held = cur[cut:]
    if held is not None and len(held):
        yield held
