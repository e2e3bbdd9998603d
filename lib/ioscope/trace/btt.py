"""btt's analysis of block events, as a streaming function over EVENT chunks.

Matching follows btt's rules (learnt from its documentation and sources; the
code here is ioscope's own):

- In-flight I/Os are keyed by (device, start sector) of their Q event. A Q
  whose start sector is already in flight on that device is not tracked (btt
  keeps one I/O per start sector); it is counted as `dup_q`.
- A device's events are ignored until its first Q or A (remap) event: they
  belong to I/Os that were in flight when the capture started (`culled`).
- G, I, M and S apply to the in-flight Q whose sector range holds their
  sector. D and C apply to every in-flight Q whose range lies inside theirs
  (so a merged request's D2C and Q2C count once per queued bio, and a partial
  completion finishes the bios it covers). C ends the Q's life.
- Events with no data (bytes == 0) are ignored, except R (requeue) and A.
- A delta that is zero or negative counts as 1 ns, as btt does.
- Device-mapper/md devices (majors 9, 253, 254) are "remappers": their Q2Q,
  Q2A and Q2C go to the *dm rows.

Results are kept as counters, min/max/sum and log-linear histograms (one per
phase per device and per process), so memory stays bounded whatever the
capture's size; only I/Os in flight are carried from chunk to chunk.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.hist import NBUCKETS, Hist, bucket_indexes
from ioscope.trace.events import (
    EV_NOTE_PROCESS,
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
    TA_SLEEPRQ,
    TA_UNPLUG_IO,
    TA_UNPLUG_TIMER,
    TC_READ,
)

PHASES = ("q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c", "q2d",
          "q2q_dm", "q2a_dm", "q2c_dm")
PH = {name: i for i, name in enumerate(PHASES)}
NPH = len(PHASES)
# btt's ALL table rows (q2d is ioscope's addition: btt prints it only as a histogram)
ALL_ROWS = ("q2q_dm", "q2a_dm", "q2c_dm", "q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c")
REMAPPER_MAJORS = (9, 253, 254)
NONE = -1
Q2D_EDGES_MS = (5, 10, 25, 50, 75, 100, 250, 500, 1000)


def is_remapper(dev: int) -> bool:
    return (dev >> 20) in REMAPPER_MAJORS


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

    def add(self, v: npt.NDArray[np.int64]) -> None:
        if not len(v):
            return
        mn, mx = int(v.min()), int(v.max())
        self.min = mn if not self.n else min(self.min, mn)
        self.max = mx if not self.n else max(self.max, mx)
        self.n += len(v)
        self.total += int(v.sum())
        self.counts += np.bincount(bucket_indexes(v), minlength=NBUCKETS).astype(np.uint64)

    def merged(self, other: Stat) -> Stat:
        out = Stat(self.n, self.total, self.min, self.max, self.counts.copy())
        if other.n:
            out.min = other.min if not out.n else min(out.min, other.min)
            out.max = other.max if not out.n else max(out.max, other.max)
            out.n += other.n
            out.total += other.total
            out.counts += other.counts
        return out

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
            out[f"p{p:g}".replace(".", "_") if p != 99.9 else "p99_9"] = h.percentile(p) / 1e9 if self.n else 0.0
        return out


@dataclass
class Seeks:
    """btt's seek distances between consecutive Qs (or Ds) of a device, in sectors."""

    last_start: int = 0
    last_end: int = 0
    n: int = 0
    total: int = 0
    dists: dict[int, int] = field(default_factory=dict)   # |distance| -> count

    def add(self, start: int, end: int) -> None:
        ls, le = self.last_start, self.last_end
        if (ls <= start <= le) or (ls <= end <= le):
            d = 0
        elif start > le:
            d = start - le
        else:
            d = start - ls
        self.last_start, self.last_end = start, end
        d = abs(d)
        self.n += 1
        self.total += d
        self.dists[d] = self.dists.get(d, 0) + 1

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    def median(self) -> int:
        if not self.n:
            return 0
        keys = sorted(self.dists)
        cum = 0
        half = self.n / 2
        for k in keys:
            cum += self.dists[k]
            if cum >= half:
                return k
        return keys[-1]

    def modes(self) -> tuple[list[int], int]:
        if not self.dists:
            return [], 0
        most = max(self.dists.values())
        return sorted(k for k, c in self.dists.items() if c == most), most


@dataclass
class Intervals:
    """Union of [start, end] intervals (btt's I/O active periods), merged as they come."""

    spans: list[list[int]] = field(default_factory=list)

    def add(self, s: int, e: int) -> None:
        sp = self.spans
        if sp and s >= sp[-1][0]:
            last = sp[-1]
            if s <= last[1]:
                if e > last[1]:
                    last[1] = e
                return
            sp.append([s, e])
            return
        # out of order: insert and merge neighbours
        i = bisect.bisect_left(sp, [s, e])
        sp.insert(i, [s, e])
        j = max(i - 1, 0)
        while j + 1 < len(sp):
            if sp[j + 1][0] <= sp[j][1]:
                sp[j][1] = max(sp[j][1], sp[j + 1][1])
                del sp[j + 1]
            elif j >= i:
                break
            else:
                j += 1

    def summary(self, t0: int) -> tuple[int, float, float, float]:
        """(# live, avg active s, avg inactive s, % live) like btt's I/O Active Period table.

        As in btt, the observed span runs from the trace's time zero t0 (not
        from the first active period) to the end of the last one.
        """
        n = len(self.spans)
        if n == 0:
            return 0, 0.0, 0.0, 0.0
        live = sum(e - s for s, e in self.spans) / 1e9
        if n == 1:
            return 1, 0.0, 0.0, 100.0
        t = (self.spans[-1][1] - t0) / 1e9
        return n, live / n, (t - live) / (n - 1), 100.0 * live / t if t else 0.0


@dataclass
class DevState:
    dev: int
    culling: bool = True
    start_time: int = 0
    end_time: int = 0
    starts: list[int] = field(default_factory=list)      # sorted start sectors of tracked Qs
    qs: dict[int, list[Any]] = field(default_factory=dict)
    last_q: int = NONE
    n_qs: int = 0
    n_ds: int = 0
    n_act_q: int = 0
    t_act_q: int = 0
    blk_n: int = 0
    blk_total: int = 0
    blk_min: int = 0
    blk_max: int = 0
    q2q_seek: Seeks = field(default_factory=Seeks)
    d2d_seek: Seeks = field(default_factory=Seeks)
    plugged: bool = False
    last_plug: int = 0
    plugged_time: int = 0
    nplugs: int = 0
    nplugs_t: int = 0
    nios_up: int = 0
    nios_upt: int = 0
    live: Intervals = field(default_factory=Intervals)
    q2d_hist: list[int] = field(default_factory=lambda: [0] * 10)
    dup_q: int = 0
    culled: int = 0
    reads_done: int = 0
    writes_done: int = 0


# Q record fields
Q_T, Q_S, Q_E, Q_PROC, Q_G, Q_I, Q_M, Q_D, Q_SL, Q_READ = range(10)


@dataclass
class BttResult:
    devices: dict[int, DevState]
    stats: dict[tuple[str, int], Stat]            # (phase, dev) -> Stat; dev -1 = all devices
    proc_stats: dict[tuple[str, str], Stat]       # (phase, process name) -> Stat
    live_all: Intervals
    inflight_end: dict[int, int]                  # dev -> Qs still in flight at the end
    inflight_end_issued: dict[int, int]           # of which issued (D seen)
    first_ts: int
    last_ts: int
    n_events: int
    processes: list[str]
    heat: HeatMap
    iostat: dict[int, dict[int, list[float]]]     # dev -> interval index -> counters
    iostat_interval: int
    time_zero: int = 0                            # the trace's time zero (btt's reference for % live)

    def stat(self, phase: str, dev: int = -1) -> Stat:
        return self.stats.get((phase, dev), Stat())


class HeatMap:
    """Counts per (time bin, log2 latency bucket), the time bins widening as the capture grows."""

    NLAT = 40

    def __init__(self, max_bins: int = 2048) -> None:
        self.width = 1_000_000  # 1 ms to start with
        self.t0: int | None = None
        self.max_bins = max_bins
        self.grid = np.zeros((0, self.NLAT), dtype=np.int64)

    def add(self, t: npt.NDArray[np.int64], lat: npt.NDArray[np.int64]) -> None:
        if not len(t):
            return
        if self.t0 is None:
            self.t0 = int(t.min())
        rel = np.maximum(t - self.t0, 0)
        while int(rel.max()) // self.width >= self.max_bins:
            self._widen()
        col = (rel // self.width).astype(np.int64)
        lb = np.minimum(np.floor(np.log2(np.maximum(lat, 1))).astype(np.int64), self.NLAT - 1)
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


class Btt:
    """Feed EVENT chunks in time order with feed(); result() gives the analysis.

    on_latency(phase, dev, proc, t_ns, value_ns, sector) is called per chunk with
    arrays of per-I/O values (for latency dumps), if given.
    """

    def __init__(self, comms: dict[int, str] | None = None, iostat_interval_ns: int = 1_000_000_000,
                 on_latency: Callable[[str, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any],
                                       npt.NDArray[Any], npt.NDArray[Any]], None] | None = None) -> None:
        self.comms: dict[int, str] = dict(comms or {})
        self.devs: dict[int, DevState] = {}
        self.stats: dict[tuple[str, int], Stat] = {}
        self.proc_stats: dict[tuple[str, str], Stat] = {}
        self.proc_ids: dict[str, int] = {}
        self.proc_names: list[str] = []
        self.pid_proc: dict[int, int] = {}
        self.last_q = NONE
        self.live_all = Intervals()
        self.first_ts: int | None = None
        self.last_ts = 0
        self.n_events = 0
        self.heat = HeatMap()
        self.on_latency = on_latency
        self.iostat_interval = iostat_interval_ns
        self.iostat: dict[int, dict[int, list[float]]] = {}
        self._proc_last_q: dict[int, int] = {}

    # ---------------------------------------------------------------- helpers
    def _proc(self, pid: int) -> int:
        p = self.pid_proc.get(pid)
        if p is None:
            name = process_name(pid, self.comms)
            p = self.proc_ids.get(name)
            if p is None:
                p = len(self.proc_names)
                self.proc_ids[name] = p
                self.proc_names.append(name)
            self.pid_proc[pid] = p
        return p

    def _dev(self, dev: int, ts: int) -> DevState:
        d = self.devs.get(dev)
        if d is None:
            d = DevState(dev, start_time=ts, end_time=ts)
            self.devs[dev] = d
        return d

    # ---------------------------------------------------------------- the matcher
    def feed(self, ev: npt.NDArray[np.void]) -> None:
        if not len(ev):
            return
        notes = (ev["flags"] & EV_NOTE_PROCESS) != 0
        if notes.any():
            from ioscope.trace.events import note_comm
            for e in ev[notes]:
                self.comms.setdefault(int(e["pid"]), note_comm(e))
            ev = ev[~notes]
            if not len(ev):
                return
        if self.first_ts is None:
            self.first_ts = int(ev["ts"][0])
        self.last_ts = max(self.last_ts, int(ev["ts"][-1]))
        self.n_events += len(ev)
        # per-phase outputs of this chunk: parallel lists (dev, proc, t, value, sector)
        out: dict[int, tuple[list[int], list[int], list[int], list[int], list[int]]] = {
            i: ([], [], [], [], []) for i in range(NPH)}
        ph = PH
        remap_majors = REMAPPER_MAJORS
        devs = self.devs
        proc_of = self._proc
        get_dev = self._dev
        bl, bl_right, ins = bisect.bisect_left, bisect.bisect_right, bisect.insort
        iostat = self.iostat
        ival = self.iostat_interval

        def emit(p: int, dev: int, proc: int, t: int, v: int, sec: int) -> None:
            o = out[p]
            o[0].append(dev)
            o[1].append(proc)
            o[2].append(t)
            o[3].append(v if v > 0 else 1)
            o[4].append(sec)

        def find_sec(d: DevState, sec: int) -> list[Any] | None:
            i = bl_right(d.starts, sec) - 1
            if i >= 0:
                q = d.qs[d.starts[i]]
                if sec < q[Q_E]:
                    return q
            return None

        def inside(d: DevState, s: int, e: int) -> list[list[Any]]:
            st = d.starts
            i = bl(st, s)
            res = []
            n = len(st)
            while i < n and st[i] < e:
                q = d.qs[st[i]]
                if q[Q_E] <= e:
                    res.append(q)
                i += 1
            return res

        def io_stat(dev: int, t: int) -> list[float]:
            per = iostat.get(dev)
            if per is None:
                per = iostat[dev] = {}
            k = t // ival
            row = per.get(k)
            if row is None:
                # r_ios w_ios r_sect w_sect r_merges w_merges sum_q2c n_q2c busy_ns
                row = per[k] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
            return row

        cols = zip(ev["ts"].tolist(), ev["action"].tolist(), ev["dev"].tolist(), ev["sector"].tolist(),
                   ev["bytes"].tolist(), ev["pid"].tolist(), ev["category"].tolist(), ev["aux"].tolist(),
                   ev["aux_dev"].tolist())
        for t, act, dev, sec, nb, pid, cat, aux, aux_dev in cols:
            if act == TA_PLUG or act == TA_UNPLUG_IO or act == TA_UNPLUG_TIMER:
                d = devs.get(dev)
                if d is None:
                    continue
                if act == TA_PLUG:
                    if not d.plugged:
                        d.plugged = True
                        d.last_plug = t
                elif d.plugged:
                    if act == TA_UNPLUG_IO:
                        d.nplugs += 1
                        d.nios_up += aux
                    else:
                        d.nplugs_t += 1
                        d.nios_upt += aux
                    d.plugged = False
                    d.plugged_time += t - d.last_plug
                continue
            if nb == 0 and act != TA_REQUEUE and act != TA_REMAP:
                continue
            if act not in _TRACKED:
                continue
            d = get_dev(dev, t)
            if d.culling:
                if act == TA_QUEUE or act == TA_REMAP:
                    d.culling = False
                else:
                    d.culled += 1
                    continue
            d.end_time = t
            e = sec + (nb >> 9)
            if act == TA_QUEUE:
                if sec in d.qs:
                    d.dup_q += 1
                    continue
                proc = proc_of(pid)
                d.q2q_seek.add(sec, e)
                dm = (dev >> 20) in remap_majors
                qp = ph["q2q_dm"] if dm else ph["q2q"]
                if self.last_q != NONE:
                    emit(qp, NONE, NONE, t, t - self.last_q, sec)      # all devices
                self.last_q = t
                if d.last_q != NONE:
                    emit(qp, dev, NONE, t, t - d.last_q, sec)           # per device
                d.last_q = t
                pl = self._proc_last_q
                lq = pl.get(proc, NONE)
                if lq != NONE:
                    emit(qp, NONE, proc, t, t - lq, sec)               # per process
                pl[proc] = t
                q = [t, sec, e, proc, NONE, NONE, NONE, NONE, 0, bool(cat & TC_READ)]
                d.qs[sec] = q
                ins(d.starts, sec)
                d.n_qs += 1
                d.t_act_q += d.n_act_q
                d.n_act_q += 1
            elif act == TA_GETRQ:
                q = find_sec(d, sec)
                if q is not None:
                    q[Q_G] = t
                    emit(ph["q2g"], dev, q[Q_PROC], t, t - q[Q_T], q[Q_S])
                    if q[Q_SL]:
                        emit(ph["s2g"], dev, q[Q_PROC], t, t - q[Q_SL], q[Q_S])
            elif act == TA_INSERT:
                q = find_sec(d, sec)
                if q is not None:
                    q[Q_I] = t
                    if q[Q_G] != NONE:
                        emit(ph["g2i"], dev, q[Q_PROC], t, t - q[Q_G], q[Q_S])
            elif act == TA_BACKMERGE or act == TA_FRONTMERGE:
                row = io_stat(dev, t)
                row[4 if cat & TC_READ else 5] += 1
                q = find_sec(d, sec)
                if q is not None:
                    q[Q_M] = t
                    emit(ph["q2m"], dev, q[Q_PROC], t, t - q[Q_T], q[Q_S])
                if d.n_act_q:
                    d.n_act_q -= 1
            elif act == TA_ISSUE:
                if d.n_act_q:
                    d.n_act_q -= 1
                d.d2d_seek.add(sec, e)
                d.n_ds += 1
                for q in inside(d, sec, e):
                    if q[Q_I] != NONE:
                        emit(ph["i2d"], dev, q[Q_PROC], t, t - q[Q_I], q[Q_S])
                    elif q[Q_M] != NONE:
                        emit(ph["m2d"], dev, q[Q_PROC], t, t - q[Q_M], q[Q_S])
                    q[Q_D] = t
                    q2d = t - q[Q_T]
                    emit(ph["q2d"], dev, q[Q_PROC], t, q2d, q[Q_S])
                    ms = q2d // 1_000_000 if q2d > 0 else 0
                    k = 0
                    while k < 9 and ms >= Q2D_EDGES_MS[k]:
                        k += 1
                    d.q2d_hist[k] += 1
            elif act == TA_COMPLETE:
                nblk = nb >> 9
                if d.blk_n == 0:
                    d.blk_min = d.blk_max = nblk
                else:
                    if nblk < d.blk_min:
                        d.blk_min = nblk
                    if nblk > d.blk_max:
                        d.blk_max = nblk
                d.blk_n += 1
                d.blk_total += nblk
                row = io_stat(dev, t)
                rd = bool(cat & TC_READ)
                row[0 if rd else 1] += 1
                row[2 if rd else 3] += nblk
                dm = (dev >> 20) in remap_majors
                for q in inside(d, sec, e):
                    q2c = t - q[Q_T]
                    emit(ph["q2c_dm"] if dm else ph["q2c"], dev, q[Q_PROC], q[Q_T], q2c, q[Q_S])
                    row[6] += q2c
                    row[7] += 1
                    if q[Q_D] != NONE:
                        emit(ph["d2c"], dev, q[Q_PROC], t, t - q[Q_D], q[Q_S])
                        d.live.add(q[Q_D], t)
                        self.live_all.add(q[Q_D], t)
                    del d.qs[q[Q_S]]
                    st = d.starts
                    del st[bl(st, q[Q_S])]
            elif act == TA_REQUEUE:
                d.n_qs += 1
                d.t_act_q += d.n_act_q
                d.n_act_q += 1
            elif act == TA_SLEEPRQ:
                q = find_sec(d, sec)
                if q is not None:
                    q[Q_SL] = t
            elif act == TA_REMAP:
                src = devs.get(aux_dev)
                if src is not None:
                    q = find_sec(src, aux)
                    if q is not None:
                        dm = (aux_dev >> 20) in remap_majors
                        emit(ph["q2a_dm"] if dm else ph["q2a"], aux_dev, q[Q_PROC], t, t - q[Q_T], q[Q_S])
        self._absorb(out)

    def _absorb(self, out: dict[int, tuple[list[int], list[int], list[int], list[int], list[int]]]) -> None:
        for p, (devl, procl, tl, vl, secl) in out.items():
            if not vl:
                continue
            name = PHASES[p]
            dev = np.array(devl, dtype=np.int64)
            proc = np.array(procl, dtype=np.int64)
            v = np.array(vl, dtype=np.int64)
            t = np.array(tl, dtype=np.int64)
            if name in ("q2q", "q2q_dm"):
                # all-device, per-device and per-process rows were emitted separately
                self._add(name, -1, v[(dev == NONE) & (proc == NONE)])
                per_dev = dev != NONE
                for dv in np.unique(dev[per_dev]).tolist():
                    self._add(name, int(dv), v[dev == dv])
                per_proc = proc != NONE
                for pr in np.unique(proc[per_proc]).tolist():
                    self._addp(name, int(pr), v[proc == pr])
                continue
            self._add(name, -1, v)
            for dv in np.unique(dev).tolist():
                m = dev == dv
                self._add(name, int(dv), v[m])
            for pr in np.unique(proc).tolist():
                self._addp(name, int(pr), v[proc == pr])
            if name in ("d2c", "q2c"):
                if name == "q2c":
                    self.heat.add(t, v)
            if self.on_latency is not None and name in ("d2c", "q2c", "q2d"):
                self.on_latency(name, dev, proc, t, v, np.array(secl, dtype=np.int64))

    def _add(self, phase: str, dev: int, v: npt.NDArray[np.int64]) -> None:
        if len(v):
            s = self.stats.get((phase, dev))
            if s is None:
                s = self.stats[(phase, dev)] = Stat()
            s.add(v)

    def _addp(self, phase: str, proc: int, v: npt.NDArray[np.int64]) -> None:
        if len(v):
            key = (phase, self.proc_names[proc])
            s = self.proc_stats.get(key)
            if s is None:
                s = self.proc_stats[key] = Stat()
            s.add(v)

    def result(self) -> BttResult:
        infl: dict[int, int] = {}
        infl_d: dict[int, int] = {}
        for dev, d in self.devs.items():
            infl[dev] = len(d.qs)
            infl_d[dev] = sum(1 for q in d.qs.values() if q[Q_D] != NONE)
            if d.plugged:   # btt closes an open plug at the device's last event
                d.nplugs += 1
                d.plugged = False
                d.plugged_time += d.end_time - d.last_plug
        return BttResult(self.devs, self.stats, self.proc_stats, self.live_all, infl, infl_d,
                         self.first_ts or 0, self.last_ts, self.n_events, list(self.proc_names), self.heat,
                         self.iostat, self.iostat_interval)


_TRACKED = frozenset((TA_QUEUE, TA_REMAP, TA_INSERT, TA_GETRQ, TA_BACKMERGE, TA_FRONTMERGE, TA_REQUEUE,
                      TA_ISSUE, TA_COMPLETE, TA_SLEEPRQ))


def analyse(chunks: Iterable[npt.NDArray[np.void]], comms: dict[int, str] | None = None,
            **kw: Any) -> BttResult:
    """Run the analysis over time-ordered EVENT chunks."""
    b = Btt(comms, **kw)
    for c in chunks:
        b.feed(c)
    return b.result()


def time_ordered(chunks: Iterable[npt.NDArray[np.void]], hold_ns: int = 200_000_000) -> Iterable[npt.NDArray[np.void]]:
    """Re-sort a stream of EVENT chunks into time order with bounded memory.

    Events from different CPUs may reach a capture slightly out of order; each
    chunk is merged with the held-back tail of the previous ones and events
    older than (newest - hold_ns) are released. An event later than that
    window is released as it comes (it cannot be placed before events already
    released).
    """
    held: npt.NDArray[np.void] | None = None
    for c in chunks:
        if not len(c):
            continue
        cur = c if held is None else np.concatenate([held, c])
        cur = cur[np.argsort(cur["ts"], kind="stable")]
        cut = int(np.searchsorted(cur["ts"], int(cur["ts"][-1]) - hold_ns, side="right"))
        if cut:
            yield cur[:cut]
        held = cur[cut:]
    if held is not None and len(held):
        yield held
