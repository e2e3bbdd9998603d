"""The exporter's prometheus_client Collector: at each scrape, read lat's histograms (and, for the
per-process and per-cgroup series, agg's maps) with reset, add the deltas to the cumulative state
(model.py), read /proc/diskstats, and yield metric families.

The latency histograms come from lat's object: on the disks the kernel stamps, one BPF program per
I/O with one map lookup for the three phases (agg's generic engine, one lookup per expression,
cost 354 ns of BPF time per I/O for the same three histograms against lat's ~200)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ioscope import devices
from ioscope._version import __version__
from ioscope.exporter.model import LE_NS, CumHist, TopN
from ioscope.stamps import STAMPS

if TYPE_CHECKING:
    from ioscope.agg.collector import AggCollector
    from ioscope.lat.collector import LatCollector

OPS = (("read", "reads", "reads_merged", "sectors_read"), ("write", "writes", "writes_merged", "sectors_written"),
       ("discard", "discards", "discards_merged", "sectors_discarded"))


@dataclass
class ExporterOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    per_process: int = 0
    per_cgroup: int = 0


def expressions(o: ExporterOptions) -> list[str]:
    """agg's expressions for the per-process and per-cgroup series (none without them)."""
    ex = []
    if o.per_process:
        ex.append("sum(bytes) by tgid,comm")
    if o.per_cgroup:
        ex.append("sum(bytes) by cgroup")
    return ex


class IoscopeCollector:
    """A custom prometheus_client collector around lat's LatCollector (and agg's AggCollector)."""

    def __init__(self, lat: LatCollector, agg: AggCollector | None, opts: ExporterOptions) -> None:
        self.lat = lat
        self.agg = agg
        self.opts = opts
        self.lock = threading.Lock()
        self.hists: dict[tuple[str, str, str], CumHist] = {}
        self.procs = TopN(opts.per_process)
        self.cgroups = TopN(opts.per_cgroup)
        self.losses: dict[str, int] = {}
        self.timing: dict[str, str] = {}
        self.names = {d.name for d in opts.disks}

    def _update(self) -> tuple[list[tuple[tuple[str, str], int, int]], list[tuple[tuple[str, str], int, int]]]:
        from time import time
        for h in self.lat.read(reset=True):
            self.hists.setdefault((h.disk, h.op, h.phase), CumHist()).add(h.hist)
        self.timing = dict(self.lat.timing)
        losses = [self.lat.losses(since_last=True)[0]]
        procs: list[tuple[tuple[str, str], int, int]] = []
        cgs: list[tuple[tuple[str, str], int, int]] = []
        if self.agg is not None:
            sample = self.agg.sample(time(), reset=True, final=False)
            losses.append(sample.losses)
            rest = sample.rows
            if self.opts.per_process:
                d = {(str(r.keys.get("tgid")), str(r.keys.get("comm"))): (r.stat.count, r.stat.total)
                     for r in rest[0]}
                procs = self.procs.update(d)
                rest = rest[1:]
            if self.opts.per_cgroup:
                d = {(str(r.keys.get("cgroup")), ""): (r.stat.count, r.stat.total) for r in rest[0]}
                cgs = self.cgroups.update(d)
        for lo in losses:
            for k, v in lo.counters.items():
                if k in lo.loss_names:   # losses only: the explanations (split, ...) are not
                    self.losses[k] = self.losses.get(k, 0) + v
        return procs, cgs

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            procs, cgs = self._update()
            yield from self._latency()
            yield from self._disks()
            if self.opts.per_process:
                yield from self._topn("process", ["pid", "comm"], procs, self.procs.other, ("", "other"))
            if self.opts.per_cgroup:
                yield from self._topn("cgroup", ["cgroup"], [((k[0],), i, b) for k, i, b in cgs],
                                      self.cgroups.other, ("other",))
            lost = CounterMetricFamily("ioscope_lost_events", "events ioscope's BPF programs lost or skipped",
                                       labels=["reason"])
            for k, v in sorted(self.losses.items()):
                lost.add_metric([k], v)
            yield lost
            timing = GaugeMetricFamily("ioscope_disk_timing_info",
                                       "how ioscope times each disk's I/O: stamps (the kernel's request stamps, "
                                       "one BPF program per I/O) or probes (each bio from its queue event)",
                                       labels=["disk", "timing"])
            for disk, how in sorted(self.timing.items()):
                timing.add_metric([disk, "stamps" if how == STAMPS else "probes"], 1)
            yield timing
            info = GaugeMetricFamily("ioscope_build_info", "ioscope's version", labels=["version"])
            info.add_metric([__version__], 1)
            yield info

    def _latency(self) -> Iterator[Metric]:
        m = HistogramMetricFamily("ioscope_io_latency_seconds",
                                  "block I/O latency per phase (q2c queue to complete, d2c issue to complete,"
                                  " q2d queue to issue)", labels=["disk", "op", "phase"])
        for (disk, op, phase), h in sorted(self.hists.items()):
            cum, acc = [], 0
            for b, n in zip([*(repr(ns / 1e9) for ns in LE_NS), "+Inf"], h.buckets):
                acc += n
                cum.append((b, acc))
            m.add_metric([disk, op, phase], cum, h.sum_ns / 1e9)
        yield m

    def _disks(self) -> Iterator[Metric]:
        stats = devices.read_diskstats()
        ios = CounterMetricFamily("ioscope_disk_ios", "I/Os completed (/proc/diskstats)", labels=["disk", "op"])
        byt = CounterMetricFamily("ioscope_disk_bytes", "bytes transferred (/proc/diskstats)", labels=["disk", "op"])
        mrg = CounterMetricFamily("ioscope_disk_merges", "I/Os merged (/proc/diskstats)", labels=["disk", "op"])
        inf = GaugeMetricFamily("ioscope_disk_in_flight", "I/Os in flight", labels=["disk"])
        iot = CounterMetricFamily("ioscope_disk_io_time_seconds", "time the disk was busy (iostat %util)",
                                  labels=["disk"])
        wanted = self.names or {d.name for d in devices.list_disks()}
        for name, s in sorted(stats.items()):
            if name not in wanted:
                continue
            for op, n, mg, sec in OPS:
                ios.add_metric([name, op], getattr(s, n))
                mrg.add_metric([name, op], getattr(s, mg))
                byt.add_metric([name, op], getattr(s, sec) * 512)
            inf.add_metric([name], s.in_flight)
            iot.add_metric([name], s.io_ms / 1000)
        yield from (ios, byt, mrg, inf, iot)

    def _topn(self, what: str, labels: list[str], rows: Sequence[tuple[tuple[str, ...], int, int]],
              other: tuple[int, int], other_key: tuple[str, ...]) -> Iterator[Metric]:
        ios = CounterMetricFamily(f"ioscope_{what}_ios", f"I/Os queued per {what} (top N, the rest in other)",
                                  labels=labels)
        byt = CounterMetricFamily(f"ioscope_{what}_bytes", f"bytes queued per {what} (top N, the rest in other)",
                                  labels=labels)
        for k, i, b in rows:
            ios.add_metric(list(k), i)
            byt.add_metric(list(k), b)
        ios.add_metric(list(other_key), other[0])
        byt.add_metric(list(other_key), other[1])
        yield from (ios, byt)
