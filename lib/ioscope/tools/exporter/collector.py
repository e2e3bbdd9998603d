"""The exporter's collector: the kernel's side of a scrape and of the one-second tick.

A scrape reads /proc/diskstats first, then lat's histograms (without reset: the kernel keeps them
cumulative since the attach, so no count can be lost between two reads or counted twice) and lat's
loss counters, and hands them to the model (model.ExporterState.scrape). The tick (every second, from
the command's main loop, whoever scrapes and however often) does lat's and agg's housekeeping and reads
agg's per-process and per-cgroup maps with reset (model.ExporterState.add_agg); a scrape reads them too,
so that it shows what was queued up to its moment.

The latency histograms come from lat's object: on the disks the kernel stamps, one BPF program per
I/O with one map lookup for the three phases (agg's generic engine, one lookup per expression,
cost 354 ns of BPF time per I/O for the same three histograms against lat's ~200). The per-process
and per-cgroup series come from agg's object (who queued an I/O is known only at its queue event):
its queue program alone for the counters, and its probes (queue, issue, completion) when the
per-cgroup q2c and d2c histograms are asked for."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ioscope.base import cgroups, devices, psi
from ioscope.base.collector import Tick
from ioscope.base.hist import Hist
from ioscope.tools.exporter.model import (
    DEFAULT_SERIES_IDLE_S,
    DEFAULT_SERIES_WINDOW_S,
    AggDeltas,
    CompletionCheck,
    Delta,
    ExporterState,
    Exposition,
    ScrapeSample,
    SeriesSet,
)

if TYPE_CHECKING:
    from ioscope.engines.aggregate.collector import AggCollector
    from ioscope.engines.aggregate.model import NamedRow
    from ioscope.engines.latency.collector import LatCollector

# node_exporter's diskstats default (--collector.diskstats.device-exclude): RAM disks, zram, loop and
# floppy devices, and partitions of sd/hd/vd/xvd and NVMe disks
DEFAULT_DEVICE_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"


@dataclass
class ExporterOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    per_process: int = 0
    per_cgroup: int = 0
    series_idle_s: float = DEFAULT_SERIES_IDLE_S
    series_window_s: float = DEFAULT_SERIES_WINDOW_S
    process_pid: bool = False       # a series per process (pid, comm) rather than per name
    cgroup_latency: bool = True     # q2c and d2c histograms per cgroup (with per_cgroup)
    io_wait: bool = True            # time blocked in I/O waits per process and cgroup (with per_process, per_cgroup)
    device_exclude: str | None = DEFAULT_DEVICE_EXCLUDE
    device_include: str | None = None

    def wanted(self) -> Callable[[str], bool]:
        """Is a disk exported: named with -d, else not excluded and (with an include) included, as
        node_exporter's diskstats collector decides (both are regular expressions, searched)."""
        if self.disks:
            names = {d.name for d in self.disks}
            return names.__contains__
        ex = re.compile(self.device_exclude) if self.device_exclude else None
        inc = re.compile(self.device_include) if self.device_include else None
        return lambda n: not (ex is not None and ex.search(n)) and (inc is None or bool(inc.search(n)))


def expressions(o: ExporterOptions) -> list[str]:
    """agg's expressions for the per-process and per-cgroup series (none without them), in this order."""
    ex = []
    if o.per_process:
        ex.append("sum(bytes) by tgid,comm" if o.process_pid else "sum(bytes) by comm")
    if o.per_cgroup:
        ex.append("sum(bytes) by cgroup")
        if o.cgroup_latency:
            ex += ["llquantize(q2c) by cgroup", "llquantize(d2c) by cgroup"]
    if o.io_wait and o.per_process:
        ex.append("sum(iowait) by tgid,comm" if o.process_pid else "sum(iowait) by comm")
        ex.append("sum(swapin) by tgid,comm" if o.process_pid else "sum(swapin) by comm")
    if o.io_wait and o.per_cgroup:
        ex += ["sum(iowait) by cgroup", "sum(swapin) by cgroup"]
    return ex


def mq_completed(stats: dict[str, devices.DiskStats], names: list[str]) -> dict[str, int]:
    return {n: devices.completed_requests(stats[n]) for n in names if n in stats}


class ExporterCollector:
    """lat's collector (and agg's, for the per-process and per-cgroup series) and the exporter's state.

    Build it right after lat's collector attached: it reads the kernel's counts then, the start of the
    comparison of what the kernel completed with what was counted. agg's collector, slower to load,
    is added after (set_agg)."""

    def __init__(self, lat: LatCollector, opts: ExporterOptions,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lat = lat
        self.opts = opts
        self.clock = clock
        self.wanted = opts.wanted()
        self.lock = threading.Lock()  # scrapes come from the HTTP server's worker, the tick from the main thread
        stats = devices.read_diskstats()
        self._mq: dict[str, bool] = {}
        check = CompletionCheck.at_attach(mq_completed(stats, self._mq_of(self._exported(stats))))
        self.state = ExporterState(
            check,
            SeriesSet[Hashable](opts.per_process, opts.series_idle_s, opts.series_window_s)
            if opts.per_process else None,
            SeriesSet[str](opts.per_cgroup, opts.series_idle_s, opts.series_window_s) if opts.per_cgroup else None,
            opts.series_idle_s,
            SeriesSet[Hashable](opts.per_process, opts.series_idle_s, opts.series_window_s, "waited_ns")
            if opts.per_process and opts.io_wait else None,
            SeriesSet[str](opts.per_cgroup, opts.series_idle_s, opts.series_window_s, "waited_ns")
            if opts.per_cgroup and opts.io_wait else None)
        self.agg: AggCollector | None = None
        # the cgroups' io.pressure: where the io controller's hierarchy is v2 (a v1 blkio cgroup has none)
        io = cgroups.io_cgroup_root() if opts.per_cgroup else None
        self.psi_root = io[0] if io is not None and io[1] == "v2" else None

    def _pressure(self) -> tuple[psi.Pressure | None, dict[str, psi.Pressure]]:
        """The host's I/O pressure, and that of each cgroup with a series (v2 only)."""
        got: dict[str, psi.Pressure] = {}
        if self.psi_root is not None:
            keys: set[str] = set()
            for ss in (self.state.cgroups, self.state.cgroup_waits):
                if ss is not None:
                    keys |= {k for k in (*ss.series, *ss.frozen) if isinstance(k, str) and k.startswith("/")}
            got = {k: pr for k in keys if (pr := psi.cgroup_io(self.psi_root, k)) is not None}
        return psi.host_io(), got

    def set_agg(self, agg: AggCollector) -> None:
        with self.lock:
            self.agg = agg

    def _exported(self, stats: dict[str, devices.DiskStats]) -> dict[str, devices.DiskStats]:
        """The disks exported: those given with -d, else the disks in /sys/block (not partitions) that
        the include and exclude expressions let through."""
        names = [d.name for d in self.opts.disks] or [d.name for d in devices.list_disks() if self.wanted(d.name)]
        return {n: stats[n] for n in names if n in stats}

    def _mq_of(self, stats: dict[str, devices.DiskStats]) -> list[str]:
        for n in stats:
            if n not in self._mq:
                self._mq[n] = devices.is_mq(n)
        return [n for n in stats if self._mq[n]]

    def _read_agg(self) -> None:
        if self.agg is None:
            return
        sample = self.agg.sample(Tick(time.time(), reset=True))
        rows = list(sample.rows)
        procs: dict[Hashable, Delta] = {}
        cgroups: dict[str, Delta] = {}
        pwaits: dict[Hashable, Delta] = {}
        cwaits: dict[str, Delta] = {}

        def process(r: NamedRow) -> Hashable:
            comm = str(r.keys.get("comm"))
            return (str(r.keys.get("tgid")), comm) if self.opts.process_pid else comm

        if self.opts.per_process:
            for r in rows.pop(0):
                d = procs.setdefault(process(r), Delta())
                d.ios += r.stat.count
                d.bytes += r.stat.total
        if self.opts.per_cgroup:
            for r in rows.pop(0):
                d = cgroups.setdefault(str(r.keys.get("cgroup")), Delta())
                d.ios += r.stat.count
                d.bytes += r.stat.total
            for phase in ("q2c", "d2c") if self.opts.cgroup_latency else ():
                for r in rows.pop(0):
                    h = r.stat
                    if not isinstance(h, Hist) or not h.count:
                        continue
                    d = cgroups.setdefault(str(r.keys.get("cgroup")), Delta())
                    have = d.hists.get(phase)
                    d.hists[phase] = have.merge(h) if have is not None else h
        # sum(iowait): a record per wait that ended, its time in ns; sum(swapin): the swap-ins among them
        waited: list[tuple[NamedRow, Delta]] = []
        swapped: list[tuple[NamedRow, Delta]] = []
        if self.opts.io_wait and self.opts.per_process:
            waited += [(r, pwaits.setdefault(process(r), Delta())) for r in rows.pop(0)]
            swapped += [(r, pwaits.setdefault(process(r), Delta())) for r in rows.pop(0)]
        if self.opts.io_wait and self.opts.per_cgroup:
            waited += [(r, cwaits.setdefault(str(r.keys.get("cgroup")), Delta())) for r in rows.pop(0)]
            swapped += [(r, cwaits.setdefault(str(r.keys.get("cgroup")), Delta())) for r in rows.pop(0)]
        for r, d in waited:
            d.waits += r.stat.count
            d.waited_ns += r.stat.total
        for r, d in swapped:
            d.swapins += r.stat.count
            d.swapin_ns += r.stat.total
        lo = sample.losses
        self.state.add_agg(AggDeltas(self.clock(), procs, cgroups, dict(lo.counters), lo.loss_names, pwaits, cwaits))

    def tick(self) -> None:
        """Every stamps.TICK_S: lat's and agg's housekeeping (disks without stamps to the probes, stale
        slots), and agg's maps into the per-process and per-cgroup series."""
        with self.lock:
            self.lat.tick()
            if self.agg is not None:
                self.agg.tick()
            self._read_agg()

    @property
    def unavailable(self) -> list[str]:
        return self.lat.unavailable + (self.agg.unavailable if self.agg is not None else [])

    def sample(self, tick: Tick) -> Exposition:
        """The exposition now: counters since the start, as Prometheus expects (scrape)."""
        return self.scrape()

    def scrape(self) -> Exposition:
        with self.lock:
            # the kernel first: a request it has completed has been counted by then (its completion
            # program runs before the kernel accounts it), never the reverse
            stats = self._exported(devices.read_diskstats())
            hists = [(h.disk, h.op, h.phase, h.hist) for h in self.lat.read(reset=False) if self.wanted(h.disk)]
            lo = self.lat.losses(since_last=True)[0]
            unstamped = {self.lat.names.name(dev): n for dev, n in self.lat.stamps.unstamped().items()}
            self._read_agg()
            thr = self.lat.throttle
            held = [h for h in thr.read(self.lat.names.name, self.lat.cgroup_names.name) if self.wanted(h.disk)]
            oldest, followed = self.lat.in_flight_oldest()
            pressure, cg_pressure = self._pressure()
            return self.state.scrape(ScrapeSample(
                now=self.clock(), diskstats=stats, mq=self._mq_of(stats), hists=hists,
                losses=dict(lo.counters), loss_names=lo.loss_names,
                timing={d: t for d, t in self.lat.timing.items() if self.wanted(d)},
                unstamped={d: n for d, n in unstamped.items() if self.wanted(d)},
                held=held, limits=[x for x in thr.limits if self.wanted(str(x.get("disk")))],
                throttle_no_wait=thr.no_wait, throttle_no_held=thr.no_held,
                oldest={d: o for d, o in oldest.items() if self.wanted(d)}, followed=followed,
                pressure=pressure, cgroup_pressure=cg_pressure))

    def close(self) -> None:
        with self.lock:  # not while a scrape (the server's worker thread) reads the maps
            if self.agg is not None:
                self.agg.close()
            self.lat.close()


__all__ = ["DEFAULT_DEVICE_EXCLUDE", "ExporterCollector", "ExporterOptions", "expressions"]
