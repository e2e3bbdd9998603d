"""The exporter's view: one Exposition as Prometheus metric families (prometheus_client writes the
text format; nothing here formats it by hand), and the prometheus_client collector that serves them.

Names and labels follow node_exporter's where it has the same thing (`device`, `*_seconds_total`,
io_time, io_time_weighted), with one `op` label where node_exporter has a metric per operation."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ioscope._version import __version__
from ioscope.kernel.stamps import STAMPS
from ioscope.tools.exporter.model import LE_NS, Counter, Exposition

# as the client libraries print them: 1e-06, 2e-06, 5e-06, 1e-05, ..., 0.001, ..., 10.0 (the ns values are exact)
LE_LABELS = [repr(b / 1e9) for b in LE_NS] + ["+Inf"]
# /proc/diskstats fields per op: (op, completed, merged, sectors, ms); flushes have no sectors or merges
OPS = (("read", "reads", "reads_merged", "sectors_read", "read_ms"),
       ("write", "writes", "writes_merged", "sectors_written", "write_ms"),
       ("discard", "discards", "discards_merged", "sectors_discarded", "discard_ms"),
       ("flush", "flushes", None, None, "flush_ms"))


def families(x: Exposition) -> Iterator[Metric]:
    lat = HistogramMetricFamily(
        "ioscope_io_latency_seconds",
        "block I/O latency per phase: q2c queued to completed, q2d queued to issued, d2c issued to completed "
        "(one d2c per request: the requests the kernel completed, less ioscope_disk_completions_unseen_total)",
        labels=["device", "op", "phase"])
    for h in x.hists:
        lat.add_metric([h.disk, h.op, h.phase], list(zip(LE_LABELS, h.buckets)), h.sum_ns / 1e9)
    yield lat
    yield from _disks(x)
    unseen = CounterMetricFamily(
        "ioscope_disk_completions_unseen",
        "requests the kernel completed (/proc/diskstats) that no ioscope program counted, per disk (also in "
        "ioscope_lost_events_total{reason=\"completion_unseen\"})", labels=["device"])
    for disk, n in sorted(x.unseen.items()):
        unseen.add_metric([disk], n)
    yield unseen
    if x.processes is not None:
        procs: list[tuple[tuple[str, ...], Counter]] = sorted(x.processes.items())
        yield from _series("process", ["pid", "comm"], procs, x.process_other, ("", "other"))
    if x.cgroups is not None:
        cgs: list[tuple[tuple[str, ...], Counter]] = [((cg,), c) for cg, c in sorted(x.cgroups.items())]
        yield from _series("cgroup", ["cgroup"], cgs, x.cgroup_other, ("other",))
    lost = CounterMetricFamily("ioscope_lost_events",
                               "I/O or events ioscope could not count, by reason (docs/exporter.md, 'Losses')",
                               labels=["reason"])
    for reason, n in x.losses.items():
        lost.add_metric([reason], n)
    yield lost
    timing = GaugeMetricFamily("ioscope_disk_timing_info",
                               "how ioscope times each disk's I/O: stamps (the kernel's request stamps, "
                               "one BPF program per I/O) or probes (each bio from its queue event)",
                               labels=["device", "timing"])
    for disk, how in sorted(x.timing.items()):
        timing.add_metric([disk, "stamps" if how == STAMPS else "probes"], 1)
    yield timing
    info = GaugeMetricFamily("ioscope_build_info", "ioscope's version", labels=["version"])
    info.add_metric([__version__], 1)
    yield info


def _disks(x: Exposition) -> Iterator[Metric]:
    def counter(name: str, doc: str, labels: tuple[str, ...] = ("device", "op")) -> CounterMetricFamily:
        return CounterMetricFamily(f"ioscope_disk_{name}", f"{doc} (/proc/diskstats)", labels=list(labels))

    ios = counter("ios", "requests completed")
    byt = counter("bytes", "bytes transferred (sectors x 512)")
    mrg = counter("merges", "requests merged into others")
    tim = counter("request_time_seconds", "time the completed requests took, queued to completed, summed: "
                  "await is its rate over the rate of ioscope_disk_ios_total")
    busy = counter("io_time_seconds", "time the disk had requests in flight (iostat's %util is its rate)",
                   ("device",))
    weighted = counter("io_time_weighted_seconds", "requests in flight times the time they were (iostat's aqu-sz "
                       "is its rate)", ("device",))
    inf = GaugeMetricFamily("ioscope_disk_in_flight", "requests in flight when read (/proc/diskstats)",
                            labels=["device"])
    for name, s in sorted(x.diskstats.items()):
        for op, n, merged, sectors, ms in OPS:
            ios.add_metric([name, op], getattr(s, n))
            tim.add_metric([name, op], getattr(s, ms) / 1000)
            if merged is not None and sectors is not None:
                mrg.add_metric([name, op], getattr(s, merged))
                byt.add_metric([name, op], getattr(s, sectors) * 512)
        busy.add_metric([name], s.io_ms / 1000)
        weighted.add_metric([name], s.weighted_ms / 1000)
        inf.add_metric([name], s.in_flight)
    yield from (ios, byt, mrg, tim, busy, weighted, inf)


def _series(what: str, labels: list[str], rows: list[tuple[tuple[str, ...], Counter]], other: Counter,
            other_key: tuple[str, ...]) -> Iterator[Metric]:
    doc = (f"per {what}, since its series started; a {what} without one (past --per-{what} series) is in "
           f"{labels[-1]}=\"other\"")
    ios = CounterMetricFamily(f"ioscope_{what}_ios", f"I/Os queued {doc}", labels=labels)
    byt = CounterMetricFamily(f"ioscope_{what}_bytes", f"bytes queued {doc}", labels=labels)
    for k, c in [*rows, (other_key, other)]:
        ios.add_metric(list(k), c.ios)
        byt.add_metric(list(k), c.bytes)
    yield from (ios, byt)


class RegistryCollector:
    """What prometheus_client's registry calls at every scrape: one read, one Exposition, its families."""

    def __init__(self, scrape: Callable[[], Exposition]) -> None:
        self.scrape = scrape

    def collect(self) -> Iterator[Metric]:
        yield from families(self.scrape())


__all__ = ["LE_LABELS", "RegistryCollector", "families"]
