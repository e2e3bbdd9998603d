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
and per-cgroup series come from agg's queue program (who queued an I/O is known only there)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ioscope.base import devices
from ioscope.base.collector import Tick
from ioscope.tools.exporter.model import (
    DEFAULT_SERIES_IDLE_S,
    AggDeltas,
    CompletionCheck,
    ExporterState,
    Exposition,
    ScrapeSample,
    SeriesSet,
)

if TYPE_CHECKING:
    from ioscope.engines.aggregate.collector import AggCollector
    from ioscope.engines.latency.collector import LatCollector


@dataclass
class ExporterOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    per_process: int = 0
    per_cgroup: int = 0
    series_idle_s: float = DEFAULT_SERIES_IDLE_S


def expressions(o: ExporterOptions) -> list[str]:
    """agg's expressions for the per-process and per-cgroup series (none without them)."""
    ex = []
    if o.per_process:
        ex.append("sum(bytes) by tgid,comm")
    if o.per_cgroup:
        ex.append("sum(bytes) by cgroup")
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
        self.names = [d.name for d in opts.disks]
        self.lock = threading.Lock()  # scrapes come from the HTTP server's threads, the tick from the main one
        stats = devices.read_diskstats()
        self._mq: dict[str, bool] = {}
        check = CompletionCheck.at_attach(mq_completed(stats, self._mq_of(self._exported(stats))))
        self.state = ExporterState(
            check,
            SeriesSet(opts.per_process, opts.series_idle_s) if opts.per_process else None,
            SeriesSet(opts.per_cgroup, opts.series_idle_s) if opts.per_cgroup else None,
            opts.series_idle_s)
        self.agg: AggCollector | None = None

    def set_agg(self, agg: AggCollector) -> None:
        with self.lock:
            self.agg = agg

    def _exported(self, stats: dict[str, devices.DiskStats]) -> dict[str, devices.DiskStats]:
        """The disks exported: those given with -d, else every disk in /sys/block (not partitions)."""
        names = self.names or [d.name for d in devices.list_disks()]
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
        procs: dict[tuple[str, str], tuple[int, int]] = {}
        cgroups: dict[str, tuple[int, int]] = {}
        if self.opts.per_process:
            for r in rows.pop(0):
                k = (str(r.keys.get("tgid")), str(r.keys.get("comm")))
                i, b = procs.get(k, (0, 0))
                procs[k] = (i + r.stat.count, b + r.stat.total)
        if self.opts.per_cgroup:
            for r in rows.pop(0):
                c = str(r.keys.get("cgroup"))
                i, b = cgroups.get(c, (0, 0))
                cgroups[c] = (i + r.stat.count, b + r.stat.total)
        lo = sample.losses
        self.state.add_agg(AggDeltas(self.clock(), procs, cgroups, dict(lo.counters), lo.loss_names))

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
            hists = [(h.disk, h.op, h.phase, h.hist) for h in self.lat.read(reset=False)]
            lo = self.lat.losses(since_last=True)[0]
            self._read_agg()
            return self.state.scrape(ScrapeSample(
                now=self.clock(), diskstats=stats, mq=self._mq_of(stats), hists=hists,
                losses=dict(lo.counters), loss_names=lo.loss_names, timing=dict(self.lat.timing)))

    def close(self) -> None:
        if self.agg is not None:
            self.agg.close()
        self.lat.close()


__all__ = ["ExporterCollector", "ExporterOptions", "expressions"]
