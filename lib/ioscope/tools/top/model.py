"""Pure model of ioscope top: begin/end samples -> device rows, process rows, heat-map columns.

Nothing here touches the kernel: the collector hands over plain data (DiskStats
from /proc/diskstats, numpy arrays dumped from the BPF maps), so every number
on the screen can be checked on fixtures.

Device rows follow sysstat's iostat -x exactly (rd_stats.c/iostat.c):
    r/s      = d(reads) / t                  rkB/s    = d(sectors_read) / 2 / t
    rrqm/s   = d(reads_merged) / t           r_await  = d(read_ms) / d(reads)    (0 without reads)
    rareq-sz = d(sectors_read) / 2 / d(reads)  (kB)
    aqu-sz   = d(weighted_ms) / (t * 1000)   %util    = d(io_ms) / (t * 1000) * 100
and the same for writes; t is the interval in seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base import cgroups, hist, psi
from ioscope.base.devices import DiskStats
from ioscope.base.heat import HeatGrid
from ioscope.base.hist import Hist
from ioscope.engines.context.throttle import HeldBios
from ioscope.kernel import abi
from ioscope.kernel.inflight import InFlightRow, OldestIO, in_flight_rows
from ioscope.kernel.iowait import ThreadWaits, per_process, waited_between

NS_PER_MS = 1e6


@dataclass
class DeviceRow:
    """One disk over one interval: iostat -x columns plus latency from the in-kernel histogram."""

    disk: str
    r_s: float = 0.0
    w_s: float = 0.0
    rkB_s: float = 0.0
    wkB_s: float = 0.0
    rrqm_s: float = 0.0
    wrqm_s: float = 0.0
    r_await: float = 0.0
    w_await: float = 0.0
    aqu_sz: float = 0.0
    rareq_sz: float = 0.0
    wareq_sz: float = 0.0
    util: float = 0.0
    p99_ms: float | None = None  # None: no request was timed in this interval
    lat_ios: int = 0             # requests timed by the BPF histogram
    hist: Hist | None = field(default=None, repr=False, compare=False)


@dataclass
class ProcRow:
    """One process on one disk over one interval (I/O attributed to the process that queued it)."""

    pid: int
    comm: str
    disk: str
    r_s: float = 0.0
    w_s: float = 0.0
    rkB_s: float = 0.0
    wkB_s: float = 0.0
    avg_kB: float = 0.0          # average I/O size of its reads and writes
    avg_ms: float | None = None  # mean queue-to-completion latency (None: nothing timed)
    p99_ms: float | None = None
    ios: int = 0                 # I/Os completed in the interval (all operations)
    hist: Hist | None = field(default=None, repr=False, compare=False)
    cgroup: str | None = None    # the cgroup its I/O was charged to (the cgroup view, -c), else None
    io_pct: float = 0.0          # IO>: % of the interval its threads were blocked in I/O waits (the process's,
                                 # whatever the disk: the same on each of its rows; summed over its threads)
    swapin_pct: float = 0.0      # SWAPIN: the part of io_pct in swap-ins (iotop's SWAPIN)


@dataclass
class CgroupRow:
    """One cgroup on one disk over one interval: the I/O charged to it (whoever queued it: a kworker that
    queued a throttled or written-back bio is counted in the cgroup it served), from the process rows."""

    cgroup: str
    disk: str
    label: str = ""              # the path as shown, with the container, pod or machine it is (cgroups.label)
    procs: int = 0               # processes (kworkers included) that queued its I/O
    r_s: float = 0.0
    w_s: float = 0.0
    rkB_s: float = 0.0
    wkB_s: float = 0.0
    avg_ms: float | None = None
    p99_ms: float | None = None
    ios: int = 0
    hist: Hist | None = field(default=None, repr=False, compare=False)
    held: int = 0                # bios blk-throttle held before their queue event (not in avg_ms, p99ms)
    thr_p99_ms: float | None = None  # their wait in the throttle, where it is measured (fentry or submit notes)
    io_pct: float = 0.0          # IO>: % of the interval its tasks were blocked in I/O waits (whatever the disk)
    swapin_pct: float = 0.0      # SWAPIN: the part of io_pct in swap-ins
    psi_pct: float | None = None  # PSI: % of the interval some of its tasks were stalled on I/O (v2 io.pressure)
    psi: psi.Share | None = field(default=None, repr=False, compare=False)


@dataclass
class WaitRow:
    """One process's I/O waits over one interval (kernel/iowait.py): who is blocked on I/O, and how long."""

    pid: int
    comm: str
    io_pct: float                # IO>: % of the interval blocked, summed over its threads
    waited_s: float              # seconds blocked in the interval, summed over its threads
    waits: int                   # waits that ended in the interval
    blocked: int                 # threads blocked in an I/O wait at its end
    oldest_s: float              # the longest of those waits so far (0: none blocked)
    cgroup: str                  # its cgroup of the io controller
    dequeue_delayed: int = 0     # of its waits that ended, those whose dequeue the scheduler delayed (EEVDF,
                                 # 6.12+): delay accounting (iotop) counts them later or not at all
    dequeue_delayed_s: float = 0.0  # their time
    swapin_pct: float = 0.0      # SWAPIN: the part of io_pct in swap-ins (iotop's SWAPIN)
    swapin_s: float = 0.0        # the part of waited_s in swap-ins
    swapins: int = 0             # the swap-in waits that ended in the interval


def iostat(prev: DiskStats, cur: DiskStats, seconds: float) -> DeviceRow:
    """sysstat's iostat -x numbers for one disk between two /proc/diskstats samples."""
    def d(name: str) -> int:
        v = int(getattr(cur, name)) - int(getattr(prev, name))
        return v if v >= 0 else 0  # counters went back: the device was re-created

    t = seconds if seconds > 0 else 1e-9
    reads, writes = d("reads"), d("writes")
    rsec, wsec = d("sectors_read"), d("sectors_written")
    return DeviceRow(
        disk=cur.name,
        r_s=reads / t,
        w_s=writes / t,
        rkB_s=rsec / 2.0 / t,
        wkB_s=wsec / 2.0 / t,
        rrqm_s=d("reads_merged") / t,
        wrqm_s=d("writes_merged") / t,
        r_await=d("read_ms") / reads if reads else 0.0,
        w_await=d("write_ms") / writes if writes else 0.0,
        aqu_sz=d("weighted_ms") / (t * 1000.0),
        rareq_sz=rsec / 2.0 / reads if reads else 0.0,
        wareq_sz=wsec / 2.0 / writes if writes else 0.0,
        util=d("io_ms") / (t * 1000.0) * 100.0,
    )


def active(prev: DiskStats, cur: DiskStats) -> bool:
    """Did the disk do anything in the interval (iostat -z's test)?"""
    return (cur.reads, cur.writes, cur.io_ms, cur.discards, cur.flushes) != (
        prev.reads, prev.writes, prev.io_ms, prev.discards, prev.flushes) or cur.in_flight > 0


def merge_hists(arr: npt.NDArray[Any], groups: npt.NDArray[np.int64], ngroups: int) -> npt.NDArray[Any]:
    """Sum HIST records by group index (counts, sum) and take max/min_inv maxima."""
    out = np.zeros(ngroups, dtype=abi.HIST)
    if len(arr) == 0:
        return out
    for name in ("slots", "count", "sum"):
        np.add.at(out[name], groups, arr[name])
    for name in ("max", "min_inv"):
        np.maximum.at(out[name], groups, arr[name])
    return out


@dataclass
class Sample:
    """What the collector read at one moment. BPF arrays are deltas since the previous sample."""

    mono: float                  # time.monotonic() of the read
    wall: float                  # time.time() of the read
    diskstats: dict[str, DiskStats]
    proc_keys: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=abi.TOP_PROC_KEY))
    proc_vals: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=abi.TOP_PROC_VAL))
    disk_keys: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=abi.TOP_DISK_KEY))
    disk_hists: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=abi.HIST))
    lost: int = 0
    lost_detail: dict[str, int] = field(default_factory=dict)
    throttled: list[HeldBios] = field(default_factory=list)  # bios blk-throttle held since the last sample
    iowait: ThreadWaits = field(default_factory=ThreadWaits)  # every thread's I/O waits so far (not a delta)
    oldest: dict[int, OldestIO] = field(default_factory=dict)  # dev -> its oldest bio in flight over OVER_NS
    pressure: psi.Pressure | None = None  # the host's I/O pressure (/proc/pressure/io), None without PSI
    cgroup_pressure: dict[str, psi.Pressure] = field(default_factory=dict)  # cgroup -> its io.pressure (v2)


@dataclass
class Snapshot:
    """Everything one refresh shows."""

    wall: float
    interval: float
    host: str
    kernel: str
    devices: list[DeviceRow]
    procs: list[ProcRow]
    lost: int = 0
    lost_detail: dict[str, int] = field(default_factory=dict)
    attach: str = ""
    disk_hists: dict[str, Hist] = field(default_factory=dict)  # disk -> all-op request latency this interval
    # Optional panels' data (e.g. per-process balance, readahead), filled by extra sources of the Sampler
    # (cmd.py) and drawn by the panels registered in view.PANELS; JSON carries them under "extras".
    extras: dict[str, Any] = field(default_factory=dict)
    cgroups: list[CgroupRow] | None = None  # the cgroup view (-G): None when not asked for
    throttled: list[HeldBios] = field(default_factory=list)  # bios blk-throttle held in the interval
    throttle_no_wait: str = ""  # why their wait is not measured here ("" when it is)
    waits: list[WaitRow] = field(default_factory=list)  # processes blocked in I/O waits, most first
    in_flight: list[InFlightRow] = field(default_factory=list)  # disks with an I/O in flight over 1 s, oldest first
    pressure: psi.Share | None = None  # the host's I/O pressure over the interval (None without PSI)


def with_pressure(rows: list[CgroupRow], prev: Sample, cur: Sample, seconds: float) -> list[CgroupRow]:
    """Each cgroup row's I/O pressure over the interval (from two reads of its io.pressure; a cgroup read
    for the first time has none yet)."""
    for r in rows:
        r.psi = psi.share(prev.cgroup_pressure.get(r.cgroup), cur.cgroup_pressure.get(r.cgroup), seconds)
        r.psi_pct = None if r.psi is None else r.psi.some_pct
    return rows


def device_hists(keys: npt.NDArray[Any], hists: npt.NDArray[Any],
                 name_of: Callable[[int], str]) -> dict[str, Hist]:
    """Per-disk request latency histograms (all operations merged)."""
    if len(keys) == 0:
        return {}
    devs, inv = np.unique(keys["dev"], return_inverse=True)
    merged = merge_hists(hists, inv.astype(np.int64), len(devs))
    return {name_of(int(dev)): h for dev, h in zip(devs, abi.hists_from_array(merged))}


def proc_rows(keys: npt.NDArray[Any], vals: npt.NDArray[Any], seconds: float,
              name_of: Callable[[int], str], comm_of: Callable[[int], str],
              cgroup_of: Callable[[int], str] | None = None) -> list[ProcRow]:
    """One row per (process, disk), and cgroup when cgroup_of names them, from the procs map dump (one
    record per tgid, dev, op, cgroup)."""
    if len(keys) == 0:
        return []
    t = seconds if seconds > 0 else 1e-9
    combo = (keys["tgid"].astype(np.uint64) << np.uint64(32)) | keys["dev"].astype(np.uint64)
    cgs = keys["cgroup"].astype(np.uint64) if cgroup_of is not None else np.zeros(len(keys), dtype=np.uint64)
    uniq2, inv = np.unique(np.column_stack([combo, cgs]), axis=0, return_inverse=True)
    uniq = uniq2[:, 0]
    inv = inv.reshape(-1).astype(np.int64)
    n = len(uniq)
    ops = keys["op"]
    ios = vals["ios"].astype(np.float64)
    nbytes = vals["bytes"].astype(np.float64)
    rd = ops == abi.OP_READ
    wr = ops == abi.OP_WRITE
    r_ios = np.bincount(inv, weights=np.where(rd, ios, 0.0), minlength=n)
    w_ios = np.bincount(inv, weights=np.where(wr, ios, 0.0), minlength=n)
    r_b = np.bincount(inv, weights=np.where(rd, nbytes, 0.0), minlength=n)
    w_b = np.bincount(inv, weights=np.where(wr, nbytes, 0.0), minlength=n)
    all_ios = np.bincount(inv, weights=ios, minlength=n)
    lat = merge_hists(vals["lat"], inv, n)
    hists = abi.hists_from_array(lat)
    out = []
    for i, c in enumerate(uniq):
        tgid, dev = int(c) >> 32, int(c) & 0xFFFFFFFF
        h = hists[i]
        rw_ios = r_ios[i] + w_ios[i]
        out.append(ProcRow(
            pid=tgid,
            comm=comm_of(tgid),
            disk=name_of(dev),
            r_s=float(r_ios[i] / t),
            w_s=float(w_ios[i] / t),
            rkB_s=float(r_b[i] / 1024.0 / t),
            wkB_s=float(w_b[i] / 1024.0 / t),
            avg_kB=float((r_b[i] + w_b[i]) / 1024.0 / rw_ios) if rw_ios else 0.0,
            avg_ms=h.mean / NS_PER_MS if h.count else None,
            p99_ms=h.percentile(99) / NS_PER_MS if h.count else None,
            ios=int(all_ios[i]),
            hist=h,
            cgroup=cgroup_of(int(uniq2[i, 1])) if cgroup_of is not None else None,
        ))
    return out


def cgroup_rows(procs: Iterable[ProcRow], throttled: Iterable[HeldBios] = ()) -> list[CgroupRow]:
    """The process rows (with their cgroup) added up per cgroup and disk, with the bios blk-throttle held
    in each, busiest first."""
    rows: dict[tuple[str, str], CgroupRow] = {}
    for p in procs:
        if p.cgroup is None:
            continue
        r = rows.setdefault((p.cgroup, p.disk), CgroupRow(p.cgroup, p.disk, cgroups.label(p.cgroup)))
        r.procs += 1
        r.r_s += p.r_s
        r.w_s += p.w_s
        r.rkB_s += p.rkB_s
        r.wkB_s += p.wkB_s
        r.ios += p.ios
        if p.hist is not None:
            r.hist = p.hist if r.hist is None else r.hist.merge(p.hist)
    for t in throttled:
        r = rows.setdefault((t.cgroup, t.disk), CgroupRow(t.cgroup, t.disk, cgroups.label(t.cgroup)))
        r.held += t.held
        if t.wait.count:
            r.thr_p99_ms = t.wait.percentile(99) / NS_PER_MS
    for r in rows.values():
        if r.hist is not None and r.hist.count:
            r.avg_ms = r.hist.mean / NS_PER_MS
            r.p99_ms = r.hist.percentile(99) / NS_PER_MS
    return sorted(rows.values(), key=lambda r: (r.rkB_s + r.wkB_s, r.ios, r.cgroup), reverse=True)


def build_snapshot(prev: Sample, cur: Sample, *, host: str, kernel: str, disks: Iterable[str],
                   name_of: Callable[[int], str], comm_of: Callable[[int], str], attach: str = "",
                   show_idle: bool = False, cgroup_of: Callable[[int], str] | None = None,
                   cgroup_view: bool = False, throttle_no_wait: str = "",
                   cgroup_name: Callable[[int], str] | None = None) -> Snapshot:
    """The rows of one refresh. disks: the whole-disk names (partitions are left out). A disk that did
    nothing in the interval is left out (iostat -z), unless show_idle: the disks asked for by name (-d),
    which iostat lists whatever they did. cgroup_of: names the cgroup of each process row (-G, -c);
    cgroup_view: the rows per cgroup too. cgroup_name: names a cgroup id of the io controller (the
    waits' cgroups; their ids when None)."""
    seconds = cur.mono - prev.mono
    disks = list(disks)
    dh = device_hists(cur.disk_keys, cur.disk_hists, name_of)
    devs = []
    for name in disks:
        a, b = prev.diskstats.get(name), cur.diskstats.get(name)
        if a is None or b is None:
            continue
        h = dh.get(name)
        if not show_idle and not active(a, b) and not (h and h.count):
            continue
        row = iostat(a, b, seconds)
        if h is not None and h.count:
            row.p99_ms = h.percentile(99) / NS_PER_MS
            row.lat_ios = h.count
            row.hist = h
        devs.append(row)
    procs = proc_rows(cur.proc_keys, cur.proc_vals, seconds, name_of, comm_of, cgroup_of)
    waits = wait_rows(prev.iowait, cur.iowait, comm_of, cgroup_name or (lambda cg: str(cg)))
    procs = with_waits(procs, waits, cgroup_of is not None, waiters=not show_idle)
    cgs = cgroup_rows(procs, cur.throttled) if cgroup_view else None
    return Snapshot(wall=cur.wall, interval=seconds, host=host, kernel=kernel, devices=devs, procs=procs,
                    lost=cur.lost, lost_detail=dict(cur.lost_detail), attach=attach, disk_hists=dh,
                    cgroups=None if cgs is None else with_pressure(cgroups_with_waits(cgs, waits), prev, cur, seconds),
                    throttled=list(cur.throttled), throttle_no_wait=throttle_no_wait, waits=waits,
                    in_flight=in_flight_rows(cur.oldest, disks, name_of, comm_of),
                    pressure=psi.share(prev.pressure, cur.pressure, seconds))


NO_DISK = "-"  # the DISK of a row of a process (or cgroup) that waited on I/O and completed none


def wait_rows(prev: ThreadWaits, cur: ThreadWaits, comm_of: Callable[[int], str],
              cgroup_name: Callable[[int], str]) -> list[WaitRow]:
    """The processes whose threads were blocked in I/O waits between two samples, most first."""
    w = waited_between(prev, cur)
    return [WaitRow(p.pid, comm_of(p.pid), p.percent(w.seconds), p.waited_s, p.waits, p.blocked, p.oldest_s,
                    cgroup_name(p.cgroup), p.delayed, p.delayed_s, p.swapin_percent(w.seconds), p.swapin_s, p.swapins)
            for p in per_process(w)]


def with_waits(procs: list[ProcRow], waits: Sequence[WaitRow], per_cgroup: bool, waiters: bool = True) -> list[ProcRow]:
    """Each process row with its process's IO>, and, with waiters, a row (DISK '-') for each process that
    waited and completed no I/O of its own (fio's fdatasync waits on the journal's writes, a throttled
    reader's bios are queued by a kworker). Not with disks asked for by name (-d): which disk a wait is
    for the kernel does not say, and the rows would be every process's that waited on any disk."""
    by = {w.pid: w for w in waits}
    seen = set()
    for r in procs:
        w = by.get(r.pid)
        if w is not None:
            r.io_pct, r.swapin_pct = w.io_pct, w.swapin_pct
            seen.add(r.pid)
    return procs + [ProcRow(w.pid, w.comm, NO_DISK, io_pct=w.io_pct, swapin_pct=w.swapin_pct,
                            cgroup=w.cgroup if per_cgroup else None)
                    for w in waits if waiters and w.pid not in seen and (w.waited_s > 0 or w.blocked)]


def cgroups_with_waits(rows: list[CgroupRow], waits: Sequence[WaitRow]) -> list[CgroupRow]:
    """Each cgroup row with the IO> of the processes whose waits were in that cgroup (on each of its
    disks' rows), and a row (DISK '-') for a cgroup that waited and had no I/O charged to it."""
    pct: dict[str, float] = {}
    swap: dict[str, float] = {}
    for w in waits:
        pct[w.cgroup] = pct.get(w.cgroup, 0.0) + w.io_pct
        swap[w.cgroup] = swap.get(w.cgroup, 0.0) + w.swapin_pct
    seen = set()
    for r in rows:
        if r.cgroup in pct:
            r.io_pct, r.swapin_pct = pct[r.cgroup], swap[r.cgroup]
            seen.add(r.cgroup)
    return rows + [CgroupRow(cg, NO_DISK, cgroups.label(cg), io_pct=v, swapin_pct=swap[cg]) for cg, v in pct.items()
                   if cg not in seen and v > 0]


# -- sorting and filtering ----------------------------------------------------

DEV_SORT_KEYS = ("disk", "r_s", "w_s", "rkB_s", "wkB_s", "rrqm_s", "wrqm_s", "r_await", "w_await", "aqu_sz",
                 "rareq_sz", "wareq_sz", "util", "p99_ms")


def _key(field_name: str) -> Callable[[Any], Any]:
    def get(row: Any) -> Any:
        v = getattr(row, field_name)
        if v is None:
            return -1.0
        return v
    return get


def stack_rows(devs: Sequence[DeviceRow], stacks: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each stacked device (dm, md, btrfs: devices.stack_meta()) with its members' IOPS, kB/s, %util
    and share of the stack's kB/s this interval (snapshot.extras["stacks"], drawn by the stacks panel)."""
    by = {d.disk: d for d in devs}
    out = []
    for name, st in sorted(stacks.items()):
        rows = []
        for m in st.get("members", []):
            d = by.get(m)
            rows.append({"disk": m, "iops": round(d.r_s + d.w_s, 3) if d else 0.0,
                         "kB_s": round(d.rkB_s + d.wkB_s, 3) if d else 0.0, "util": round(d.util, 3) if d else 0.0})
        total = sum(r["kB_s"] for r in rows)
        for r in rows:
            r["share"] = round(r["kB_s"] / total, 4) if total else 0.0
        out.append({"name": name, "kind": st.get("kind"), "label": st.get("label") or "", "members": rows})
    return out


def sort_procs(rows: Sequence[ProcRow], by: str = "total", reverse: bool = True) -> list[ProcRow]:
    """by: a ProcRow field, or 'total' (read + write bytes/s, then I/Os)."""
    if by == "total":
        return sorted(rows, key=lambda r: (r.rkB_s + r.wkB_s, r.ios, -r.pid), reverse=reverse)
    return sorted(rows, key=_key(by), reverse=reverse)


def sort_devices(rows: Sequence[DeviceRow], by: str = "util", reverse: bool = True) -> list[DeviceRow]:
    return sorted(rows, key=lambda r: (_key(by)(r), r.r_s + r.w_s), reverse=reverse)


def filter_snapshot(s: Snapshot, disk: str | None = None, pid: int | None = None) -> Snapshot:
    """The same snapshot restricted to one disk and/or one process (None: no restriction). A disk's rows only
    with a disk: a process that only waited has none (the kernel does not say which disk a wait is for), as
    with -d."""
    devs = [d for d in s.devices if disk is None or d.disk == disk]
    procs = [p for p in s.procs if (disk is None or p.disk == disk) and (pid is None or p.pid == pid)]
    cgs = None if s.cgroups is None else [c for c in s.cgroups if disk is None or c.disk == disk]
    held = [t for t in s.throttled if disk is None or t.disk == disk]
    waits = [w for w in s.waits if pid is None or w.pid == pid]
    hung = [r for r in s.in_flight if disk is None or r.disk == disk]
    return replace(s, devices=devs, procs=procs, cgroups=cgs, throttled=held, waits=waits, in_flight=hung)


# -- heat map -----------------------------------------------------------------

class HeatHistory:
    """The last `columns` intervals of each disk's latency histogram (fine buckets)."""

    def __init__(self, columns: int = 240) -> None:
        self.columns = columns
        self.times: deque[float] = deque(maxlen=columns)
        self.cols: dict[str, deque[npt.NDArray[np.uint64]]] = {}

    def push(self, wall: float, hists: dict[str, Hist]) -> None:
        self.times.append(wall)
        zero = np.zeros(hist.NBUCKETS, dtype=np.uint64)
        for name in hists:
            if name not in self.cols:
                # a disk seen for the first time: its earlier columns are empty
                self.cols[name] = deque([zero] * (len(self.times) - 1), maxlen=self.columns)
        for name, col in self.cols.items():
            h = hists.get(name)
            col.append(h.counts.astype(np.uint64) if h is not None else zero)

    def disks(self) -> list[str]:
        return sorted(self.cols)

    def copy(self) -> HeatHistory:
        out = HeatHistory(self.columns)
        out.times = deque(self.times, maxlen=self.columns)
        out.cols = {k: deque(v, maxlen=self.columns) for k, v in self.cols.items()}
        return out

    def grid(self, disk: str, ncols: int, max_rows: int) -> HeatGrid | None:
        """The last ncols intervals of disk as a (rows x ncols) count grid, log latency rows."""
        col = self.cols.get(disk)
        if not col or max_rows < 1 or ncols < 1:
            return None
        data = np.stack(list(col)[-ncols:])  # (t, NBUCKETS)
        return HeatGrid.from_counts(data, max_rows, ncols)


