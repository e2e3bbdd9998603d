"""btt's analysis of block events, as a streaming function over EVENT chunks.

Matching follows btt's rules (learnt from its documentation and sources; the
code here is ioscope's own):

- In-flight I/Os are keyed by (device, start sector) of their Q event. A Q
  at the start sector of an I/O still in flight takes its place, as in btt
  (found by experiment with btt 2.09: the newer Q is the one completed); the
  older one is never completed and is counted as `dup_q`.
- A device's events are ignored until its first Q or A (remap) event: they
  belong to I/Os that were in flight when the capture started (`culled`).
- G, I, M and S apply to the in-flight Q whose sector range holds their
  sector. D and C apply to every in-flight Q whose range lies inside theirs
  (so a merged request's D2C and Q2C count once per queued bio, and a partial
  completion finishes the bios it covers). C ends the Q's life.
- Split bios (X) are where ioscope and btt part ways. btt ignores X: it keeps
  a split bio as one I/O whose range no piece's D or C covers, so the bio
  never completes, its pieces after the first are not paired, and a later Q
  inside its range can have its G, I, D and C taken by the stale bio (btt's
  range search returns whichever of the two it meets first): Q2G and Q2C of
  seconds, Device Overhead far above 100% (docs/report.md, "Where report and
  btt differ"). ioscope splits the in-flight Q at each X: each piece is paired
  on its own and keeps the bio's Q time, so every phase counts requests as
  the kernel and /proc/diskstats do. `split_bios` counts the bios split,
  `split_pieces` the pieces made (one per X). The core also rebuilds btt's
  own tree of Qs beside this pairing (bn_insert/bn_walk/bn_erase) and counts
  the btt_* fields: btt's Q2C and D2C N, and the I/Os and Gs btt pairs
  differently, by reason (tests check them against the real btt).
- Events with no data (bytes == 0) are ignored, except R (requeue) and A.
- A delta that is zero or negative counts as 1 ns, as btt does.
- Device-mapper/md devices (majors 9, 253, 254) are "remappers": their Q2Q,
  Q2A and Q2C go to the *dm rows.

The pairing itself is sequential and runs in C (_tracecore.c), one pass per
chunk, emitting one record per measured interval; everything else here is
numpy over those records. Results are kept as counters, min/max/sum and
log-linear histograms (one per phase per device and per process), so memory
stays bounded whatever the capture's size; only I/Os in flight (in C) and the
still-open active periods are carried from chunk to chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base.devices import kdev_split
from ioscope.base.hist import NBUCKETS, Hist, bucket_indexes
from ioscope.capture.blktrace import EXPORT_BASE_OFFSET
from ioscope.capture.events import (
    EV_NOTE_PROCESS,
    TA_BACKMERGE,
    TA_COMPLETE,
    TA_FRONTMERGE,
    TA_REMAP,
    TC_READ,
    join_events,
    select_events,
)
from ioscope.trace import _tracecore

PHASES = ("q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c", "q2d",
          "q2q_dm", "q2a_dm", "q2c_dm")
NPH = len(PHASES)
K_LIVE = NPH + 2   # (NPH and NPH + 1 are unused)
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


@dataclass
class Spans:
    """Union of [start, end] intervals (btt's I/O active periods), streaming.

    Intervals that touch or overlap are one period. Periods that can no longer
    grow (they end before any I/O still in flight was issued) are reduced to
    counters, so memory does not grow with the capture.
    """

    done_n: int = 0
    done_live: int = 0
    done_end: int = 0
    starts: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ends: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def add(self, s: npt.NDArray[Any], e: npt.NDArray[Any], horizon: int | None) -> None:
        """Add intervals; horizon: no later interval will start before it (None: unknown)."""
        if len(s):
            st = np.concatenate([self.starts, s.astype(np.int64)])
            en = np.concatenate([self.ends, e.astype(np.int64)])
            o = np.argsort(st, kind="stable")
            st, en = st[o], en[o]
            cmax = np.maximum.accumulate(en)
            new = np.r_[True, st[1:] > cmax[:-1]]
            idx = np.flatnonzero(new)
            self.starts = st[idx]
            self.ends = np.maximum.reduceat(en, idx)
        if horizon is not None and len(self.starts):
            k = int(np.searchsorted(self.ends, horizon, side="left"))
            if k:
                self.done_n += k
                self.done_live += int((self.ends[:k] - self.starts[:k]).sum())
                self.done_end = max(self.done_end, int(self.ends[k - 1]))
                self.starts = self.starts[k:]
                self.ends = self.ends[k:]

    def summary(self, t0: int) -> tuple[int, float, float, float]:
        """(# live, avg active s, avg inactive s, % live) like btt's I/O Active Period table.

        As in btt, the observed span runs from the trace's time zero t0 (not
        from the first active period) to the end of the last one.
        """
        n = self.done_n + len(self.starts)
        if n == 0:
            return 0, 0.0, 0.0, 0.0
        if n == 1:
            return 1, 0.0, 0.0, 100.0
        live = (self.done_live + int((self.ends - self.starts).sum())) / 1e9
        end = max(self.done_end, int(self.ends.max()) if len(self.ends) else 0)
        t = (end - t0) / 1e9
        return n, live / n, (t - live) / (n - 1), 100.0 * live / t if t else 0.0


@dataclass
class DevState:
    """One device's results (what btt keeps per device)."""

    dev: int
    start_time: int = 0
    end_time: int = 0
    n_qs: int = 0
    n_ds: int = 0
    t_act_q: int = 0
    dup_q: int = 0
    culled: int = 0
    overlap_q: int = 0
    split_pieces: int = 0
    split_bios: int = 0
    # btt's own pairing of the same events (its tree of Qs rebuilt in the core): the Q2C and D2C N it
    # prints, the I/Os ioscope completes that btt does not complete at the same C (by reason), the
    # G events it gives to another I/O (by reason), and the Qs it still holds at the end
    btt_q2c_n: int = 0
    btt_d2c_n: int = 0
    btt_diff_split: int = 0
    btt_diff_range: int = 0
    btt_diff_other: int = 0
    btt_g_split: int = 0
    btt_g_range: int = 0
    btt_g_other: int = 0
    btt_in_flight: int = 0
    blk_n: int = 0
    blk_total: int = 0
    blk_min: int = 0
    blk_max: int = 0
    nplugs: int = 0
    nplugs_t: int = 0
    nios_up: int = 0
    nios_upt: int = 0
    plugged_s: float = 0.0  # time plugged as btt sums it: differences of bit_time()s (for its % exactly)
    inflight: int = 0
    inflight_issued: int = 0
    q2d_hist: list[int] = field(default_factory=lambda: [0] * 10)
    q2q_seek: Seeks = field(default_factory=Seeks)
    d2d_seek: Seeks = field(default_factory=Seeks)
    live: Spans = field(default_factory=Spans)


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
    devices: dict[int, DevState]
    stats: dict[tuple[str, int], Stat]            # (phase, dev) -> Stat; dev -1 = all devices
    proc_stats: dict[tuple[str, str], Stat]       # (phase, process name) -> Stat
    live_all: Spans
    first_ts: int
    last_ts: int
    n_events: int
    heat: HeatMap
    iostat: dict[tuple[int, int], npt.NDArray[np.float64]]   # (dev, interval from the first event) -> counters
    iostat_interval: int
    time_zero: int = 0                            # the trace's time zero (btt's reference for % live)
    # (from device, to device) -> [bios, bytes] remapped (A events: a partition's or dm/md device's I/O
    # sent to the device below it)
    remaps: dict[tuple[int, int], list[int]] = field(default_factory=dict)

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
IO_SPLIT, IO_DUP, IO_END, IO_START = 1, 2, 4, 8


class IoSink:
    """Receives the per-I/O records (Btt(on_io=...)): io() after each chunk with the events the core was fed
    (ev[k] has ordinal base + k) and the names known then; done() once at the end with the I/Os still in
    flight (ev None). dev_of maps the records' device indexes to device numbers."""

    def io(self, recs: npt.NDArray[np.void], ev: npt.NDArray[np.void] | None, base: int, comms: dict[int, str],
           dev_of: list[int], min_ord: int) -> None:
        raise NotImplementedError


class Btt:
    """Feed EVENT chunks in time order with feed(); result() gives the analysis.

    on_latency(phase, dev, proc, t_ns, value_ns, sector) receives each chunk's
    per-I/O values of q2c, d2c and q2d (dev: device numbers, proc: indexes
    into proc_names), for latency dumps.
    """

    def __init__(self, comms: dict[int, str] | None = None, iostat_interval_ns: int = 1_000_000_000,
                 on_latency: LatencySink | None = None, time_zero: int | None = None,
                 on_io: IoSink | None = None, stats: bool = True) -> None:
        """time_zero: the time btt's times count from: 0 for blktrace files; None for a capture, whose
        export counts from just before its first event (blktrace.EXPORT_BASE_OFFSET). stats=False: only
        the pairing, for on_io (no statistics, histograms, heat map or iostat: result() has none)."""
        self.core = _tracecore.Core()
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
        self.live: dict[int, Spans] = {}
        self.live_all = Spans()
        self.first_ts: int | None = None
        self.last_ts = 0
        self.remaps: dict[tuple[int, int], list[int]] = {}
        self.n_events = 0
        self.heat = HeatMap()
        self.on_latency = on_latency
        self.on_io = on_io
        self.want_stats = stats
        self.n_fed = 0   # events fed to the core: the ordinal of the next one
        self._io_flushed = False
        if on_io is not None:
            self.core.set_io_records(True)
        if not stats:
            self.core.set_seeks(False)
        self.iostat_interval = iostat_interval_ns
        self.iostat: dict[tuple[int, int], npt.NDArray[np.float64]] = {}
        self._pid_lut = np.full(1 << 16, -1, dtype=np.int32)

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
        return lut[inv].astype(np.int32)

    def _procs(self, pids: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
        """Process index of each pid, through a lookup table indexed by pid."""
        top = int(pids.max())
        if top >= len(self._pid_lut):
            grown = np.full(max(top + 1, 2 * len(self._pid_lut)), -1, dtype=np.int32)
            grown[:len(self._pid_lut)] = self._pid_lut
            self._pid_lut = grown
        out = self._pid_lut[pids]
        missing = out < 0
        if missing.any():
            # a set, not np.unique: numpy 2 imports numpy.ma for a plain unique (~10 ms of start-up)
            for pid in sorted(set(pids[missing].tolist())):
                name = process_name(pid, self.comms)
                p = self.proc_ids.get(name)
                if p is None:
                    p = self.proc_ids[name] = len(self.proc_names)
                    self.proc_names.append(name)
                self.pid_proc[pid] = p
                self._pid_lut[pid] = p
            out = self._pid_lut[pids]
        return np.asarray(out, dtype=np.int32)

    def _renames(self, ev: npt.NDArray[np.void], named: list[tuple[int, int, str]]) -> npt.NDArray[np.void]:
        """Apply process notes (time, pid, name) in time order: a pid's events before a note that renames
        it (exec, prctl) are fed under its old name, later ones under the new (btt keeps a pid's first
        name). Returns the events after the last rename."""
        ts = ev["ts"]
        cut = 0
        for t, pid, comm in named:
            p = self.pid_proc.get(pid)
            if self.comms.get(pid) == comm and (p is None or self.proc_names[p] == process_name(pid, {pid: comm})):
                continue
            at = max(int(np.searchsorted(ts, t, "left")), cut)
            if at > cut:   # the events before the note, under the name they were done under
                self.feed(ev[cut:at])
                cut = at
            self.comms[pid] = comm
            p = self.pid_proc.get(pid)
            if p is not None and self.proc_names[p] != process_name(pid, {pid: comm}):
                del self.pid_proc[pid]
                self._pid_lut[pid] = -1
        return ev[cut:] if cut else ev

    def feed(self, ev: npt.NDArray[np.void]) -> None:
        if not len(ev):
            return
        notes = (ev["flags"] & EV_NOTE_PROCESS) != 0
        if notes.any():
            from ioscope.capture.events import note_comm
            named = sorted((int(e["ts"]), int(e["pid"]), note_comm(e)) for e in ev[notes])
            ev = select_events(ev, ~notes)
            ev = self._renames(ev, named)
            if not len(ev):
                return
        if self.first_ts is None:
            self.first_ts = int(ev["ts"][0])
            if self.time_zero is None:
                self.time_zero = self.first_ts - EXPORT_BASE_OFFSET
                self.core.set_time_zero(self.time_zero)
        self.last_ts = max(self.last_ts, int(ev["ts"][-1]))
        self.n_events += len(ev)
        n = len(ev)
        dev = self._devs(ev["dev"])
        auxdev = np.full(n, -1, dtype=np.int32)
        rm = ev["action"] == TA_REMAP
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
        rd = ((ev["category"] & TC_READ) != 0).astype(np.uint8)
        raw = self.core.feed(n, np.ascontiguousarray(ev["ts"]), np.ascontiguousarray(ev["action"]), dev,
                             np.ascontiguousarray(ev["sector"]), np.ascontiguousarray(ev["bytes"]), proc, rd,
                             np.ascontiguousarray(ev["aux"]), auxdev)
        per_kind = [np.frombuffer(b, dtype=REC) for b in raw]
        if self.on_io is not None:
            self.on_io.io(np.frombuffer(self.core.take_io(), dtype=IOREC), ev, self.n_fed, self.comms, self.dev_of,
                          self.core.min_ord())
        self.n_fed += n
        if self.want_stats:
            self._absorb(per_kind)
            self._iostat(ev, dev, per_kind[PHASES.index("q2c")])

    def _absorb(self, per_kind: list[npt.NDArray[np.void]]) -> None:
        dev_of = np.array(self.dev_of, dtype=np.int64)
        for k, r in enumerate(per_kind):
            if not len(r):
                continue
            if k == K_LIVE:
                self._live(r)
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

    def _live(self, r: npt.NDArray[np.void]) -> None:
        # Later periods start when an I/O still in flight was issued, or later than now: periods that end
        # before that can be closed.
        now = self.last_ts
        horizons = {}
        for di in range(len(self.dev_of)):
            m = self.core.min_issued(di)
            horizons[di] = now if m < 0 else min(now, m)
        self.live_all.add(r["t"], r["v"], min(horizons.values(), default=now))
        devs = r["dev"]
        for di in _present(devs):
            m = devs == di
            self.live.setdefault(self.dev_of[di], Spans()).add(r["t"][m], r["v"][m], horizons[di])

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
            d = DevState(dev, **{k: info[k] for k in (
                "start_time", "end_time", "n_qs", "n_ds", "t_act_q", "dup_q", "culled", "overlap_q", "split_pieces",
                "split_bios", "btt_q2c_n", "btt_d2c_n", "btt_diff_split", "btt_diff_range", "btt_diff_other",
                "btt_g_split", "btt_g_range", "btt_g_other", "btt_in_flight", "blk_n",
                "blk_total", "blk_min", "blk_max", "nplugs", "nplugs_t", "nios_up", "nios_upt", "plugged_s",
                "inflight", "inflight_issued", "q2d_hist")})
            if info["plugged"]:   # btt closes a plug still open at the device's last event
                d.nplugs += 1
                d.plugged_s += bit_time(info["end_time"] - tz) - bit_time(info["last_plug"] - tz)
            d.q2q_seek = Seeks(**info["seek_q2q"])
            d.d2d_seek = Seeks(**info["seek_d2d"])
            d.live = self.live.get(dev, Spans())
            devices[dev] = d
        return BttResult(devices, self.stats, self.proc_stats, self.live_all, self.first_ts or 0, self.last_ts,
                         self.n_events, self.heat, self.iostat, self.iostat_interval, tz, self.remaps)


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
