"""The exporter's view: one Exposition as Prometheus metric families (prometheus_client writes the
text format; nothing here formats it by hand).

Names and labels follow node_exporter's and ebpf_exporter's where they have the same thing: the label
`device` (node_exporter), `operation` (ebpf_exporter's biolatency), `*_seconds_total`; the disk
counters also under node_exporter's own names (`--disk-names node` or `both`: DISK_NODE)."""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ioscope._version import __version__
from ioscope.base import cgroups
from ioscope.kernel.stamps import STAMPS
from ioscope.tools.exporter.model import LE_NS, Counter, Exposition, SeriesView, le_counts

# as the client libraries print them: 1e-06, 2e-06, 5e-06, 1e-05, ..., 0.001, ..., 10.0 (the ns values are exact)
LE_LABELS = [repr(b / 1e9) for b in LE_NS] + ["+Inf"]
# /proc/diskstats fields per operation: (operation, completed, merged, sectors, ms); flushes have no sectors
OPS = (("read", "reads", "reads_merged", "sectors_read", "read_ms"),
       ("write", "writes", "writes_merged", "sectors_written", "write_ms"),
       ("discard", "discards", "discards_merged", "sectors_discarded", "discard_ms"),
       ("flush", "flushes", None, None, "flush_ms"))
DISK_NAMES = ("ioscope", "node", "both")
# The aggregates of what no named series shows. A process name is at most 15 bytes (the kernel's
# TASK_COMM_LEN, less its NUL), so no process can be called "(other processes)" (17); a cgroup path
# starts with "/", so none is "(other cgroups)".
PROCESS_OTHER = "(other processes)"
CGROUP_OTHER = "(other cgroups)"
# kind, name, pod (the pod's UID): what the path says (base.cgroups.describe); namespace, pod_name, container:
# what the host says of a Kubernetes pod and container (base.kubenames), "" where it says nothing
CGROUP_LABELS = ["cgroup", "kind", "name", "pod", "namespace", "pod_name", "container"]
CGROUP_OTHER_LABELS = [CGROUP_OTHER, *[""] * (len(CGROUP_LABELS) - 1)]

# node_exporter's diskstats names (collector/diskstats_linux.go), each with its /proc/diskstats field and
# the factor it is exported with: ticks (ms) as seconds, sectors as bytes of 512, but for
# node_disk_discarded_sectors_total, which node_exporter exports in sectors
DISK_NODE = (
    ("reads_completed_total", "reads", 1, "reads completed (/proc/diskstats)"),
    ("reads_merged_total", "reads_merged", 1, "reads merged into others (/proc/diskstats)"),
    ("read_bytes_total", "sectors_read", 512, "bytes read (/proc/diskstats, sectors x 512)"),
    ("read_time_seconds_total", "read_ms", 0.001, "seconds the reads took (/proc/diskstats)"),
    ("writes_completed_total", "writes", 1, "writes completed (/proc/diskstats)"),
    ("writes_merged_total", "writes_merged", 1, "writes merged into others (/proc/diskstats)"),
    ("written_bytes_total", "sectors_written", 512, "bytes written (/proc/diskstats, sectors x 512)"),
    ("write_time_seconds_total", "write_ms", 0.001, "seconds the writes took (/proc/diskstats)"),
    ("io_now", "in_flight", 1, "I/Os in progress (/proc/diskstats)"),
    ("io_time_seconds_total", "io_ms", 0.001, "seconds the disk had I/O in progress (/proc/diskstats)"),
    ("io_time_weighted_seconds_total", "weighted_ms", 0.001,
     "I/Os in progress times the seconds they were (/proc/diskstats)"),
    ("discards_completed_total", "discards", 1, "discards completed (/proc/diskstats)"),
    ("discards_merged_total", "discards_merged", 1, "discards merged into others (/proc/diskstats)"),
    ("discarded_sectors_total", "sectors_discarded", 1, "sectors discarded (/proc/diskstats; in sectors, as "
                                                        "node_exporter exports it)"),
    ("discard_time_seconds_total", "discard_ms", 0.001, "seconds the discards took (/proc/diskstats)"),
    ("flush_requests_total", "flushes", 1, "flush requests completed (/proc/diskstats)"),
    ("flush_requests_time_seconds_total", "flush_ms", 0.001, "seconds the flush requests took (/proc/diskstats)"),
)


@dataclass(frozen=True)
class ViewOptions:
    disk_names: str = "ioscope"                 # DISK_NAMES
    process_pid: bool = False                   # process series keyed (pid, comm)
    cgroup_hierarchy: tuple[str, str] | None = None  # (how: "v1 blkio" or "v2", its mount point)


_describe = functools.lru_cache(maxsize=4096)(cgroups.describe)   # a function of the path: cached


def cgroup_labels(path: str) -> tuple[str, ...]:
    """CGROUP_LABELS' values for a cgroup path as agg names it ('/x/y'; '[unknown]' or 'cgroup:ID' when it
    has no path). The Kubernetes names are looked up at each call (dictionary reads; base.kubenames
    refreshes them): a pod's names appear when the kubelet has made its log directory, after its cgroup."""
    if not path.startswith("/"):
        return path, "unknown", path, "", "", "", ""
    n = cgroups.named(_describe(path))
    return path, n.kind, n.name, n.pod, n.namespace, n.pod_name, n.container


def families(x: Exposition, o: ViewOptions = ViewOptions()) -> Iterator[Metric]:
    lat = HistogramMetricFamily(
        "ioscope_io_latency_seconds",
        "block I/O latency per phase: q2c queued to completed, q2d queued to issued, d2c issued to completed "
        "(one d2c per request: the requests the kernel completed, less ioscope_disk_completions_unseen_total)",
        labels=["device", "operation", "phase"])
    for h in x.hists:
        lat.add_metric([h.disk, h.op, h.phase], list(zip(LE_LABELS, h.buckets)), h.sum_ns / 1e9)
    yield lat
    if o.disk_names in ("ioscope", "both"):
        yield from _disks(x)
    if o.disk_names in ("node", "both"):
        yield from _node_disks(x)
    unseen = CounterMetricFamily(
        "ioscope_disk_completions_unseen",
        "requests the kernel completed (/proc/diskstats) that no ioscope program counted, per disk (also in "
        "ioscope_lost_events_total{reason=\"completion_unseen\"})", labels=["device"])
    for disk, n in sorted(x.unseen.items()):
        unseen.add_metric([disk], n)
    yield unseen
    oldest = GaugeMetricFamily("ioscope_disk_oldest_in_flight_seconds",
                               "age of the disk's oldest I/O in flight, since it was queued, when over 1 s (0: none "
                               "in flight that long); read once a second; only disks timed by the probes "
                               "(docs/exporter.md, 'Hung I/O')", labels=["device"])
    over = GaugeMetricFamily("ioscope_disk_in_flight_over_1s", "bios in flight on the disk for longer than 1 s "
                             "(disks timed by the probes)", labels=["device"])
    for name, (age, n) in sorted(x.in_flight_oldest.items()):
        oldest.add_metric([name], age)
        over.add_metric([name], n)
    yield from (oldest, over)
    yield from _pressure(x)
    if x.processes is not None:
        yield from _processes(x.processes, o.process_pid)
    if x.cgroups is not None:
        yield from _cgroups(x.cgroups, o.cgroup_hierarchy)
    if x.process_waits is not None:
        names = ["pid", "comm"] if o.process_pid else ["comm"]
        rows = sorted((_process_labels(k), c) for k, c in x.process_waits.series.items())
        rows.append(([""] * (len(names) - 1) + [PROCESS_OTHER], x.process_waits.other))
        yield from _waits("ioscope_process", "process name" if not o.process_pid else "process", names, rows)
        yield _replaced("process_io_wait", x.process_waits.replaced)
    if x.cgroup_waits is not None:
        rows = sorted((list(cgroup_labels(str(k))), c) for k, c in x.cgroup_waits.series.items())
        rows.append((CGROUP_OTHER_LABELS, x.cgroup_waits.other))
        yield from _waits("ioscope_cgroup", "cgroup", CGROUP_LABELS, rows)
        yield _replaced("cgroup_io_wait", x.cgroup_waits.replaced)
    yield from _throttle(x)
    lost = CounterMetricFamily("ioscope_lost_events",
                               "I/O or events ioscope could not count, by reason and, where the kernel says "
                               "which, device (docs/exporter.md, 'Losses')", labels=["reason", "device"])
    for (reason, device), n in x.losses.items():
        lost.add_metric([reason, device], n)
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
    def counter(name: str, doc: str, labels: tuple[str, ...] = ("device", "operation")) -> CounterMetricFamily:
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


PSI_DOC = ("the CPUs' stall times weighted by their non-idle time (PSI; docs/exporter.md, 'I/O pressure'): "
           "rate() is the share of the machine's capacity lost")


def _pressure(x: Exposition) -> Iterator[Metric]:
    """I/O pressure totals (base/psi.py): the host's (/proc/pressure/io, node_exporter's
    node_pressure_io_*_seconds_total under ioscope's names) and each exported cgroup's io.pressure (v2)."""
    if x.pressure is not None:
        for name, line, what, who in (("waiting", x.pressure.some, "some", "some tasks"),
                                      ("stalled", x.pressure.full, "full", "all non-idle tasks")):
            if line is None:
                continue
            fam = CounterMetricFamily(f"ioscope_pressure_io_{name}_seconds",
                                      f"seconds in which {who} were stalled on I/O, {PSI_DOC} "
                                      f"(/proc/pressure/io {what} total)")
            fam.add_metric([], line.total_us / 1e6)
            yield fam
    if x.cgroup_pressure:
        for name, what, who in (("waiting", "some", "some"), ("stalled", "full", "all non-idle")):
            fam = CounterMetricFamily(f"ioscope_cgroup_pressure_io_{name}_seconds",
                                      f"seconds in which {who} of the cgroup's tasks were stalled on I/O, "
                                      f"{PSI_DOC} (its io.pressure {what} total)", labels=CGROUP_LABELS)
            for path, pr in sorted(x.cgroup_pressure.items()):
                line = pr.some if what == "some" else pr.full
                if line is not None:
                    fam.add_metric(list(cgroup_labels(path)), line.total_us / 1e6)
            yield fam


def _node_disks(x: Exposition) -> Iterator[Metric]:
    """The same /proc/diskstats counters under node_exporter's names, labels and units."""
    for suffix, field, factor, doc in DISK_NODE:
        cls = GaugeMetricFamily if suffix == "io_now" else CounterMetricFamily
        fam = cls(f"node_disk_{suffix.removesuffix('_total')}", doc, labels=["device"])
        for name, s in sorted(x.diskstats.items()):
            fam.add_metric([name], getattr(s, field) * factor)
        yield fam


def _counters(name: str, what: str, labels: list[str], rows: list[tuple[list[str], Counter]]) -> Iterator[Metric]:
    doc = f"per {what}, since its series started (docs/exporter.md, 'Series')"
    ios = CounterMetricFamily(f"{name}_ios", f"I/Os queued {doc}", labels=labels)
    byt = CounterMetricFamily(f"{name}_bytes", f"bytes queued {doc}", labels=labels)
    for k, c in rows:
        ios.add_metric(k, c.ios)
        byt.add_metric(k, c.bytes)
    yield from (ios, byt)


def _waits(name: str, what: str, labels: list[str], rows: list[tuple[list[str], Counter]]) -> Iterator[Metric]:
    doc = (f"per {what}, the heaviest by time blocked (iotop's IO>: threads in io_schedule and its kin, from the "
           f"scheduler's tracepoints; counted when a wait ends), since its series started (docs/exporter.md, 'Series')")
    sec = CounterMetricFamily(f"{name}_io_wait_seconds", f"seconds its threads were blocked in I/O waits {doc}",
                              labels=labels)
    n = CounterMetricFamily(f"{name}_io_waits", f"I/O waits its threads ended {doc}", labels=labels)
    sw = CounterMetricFamily(f"{name}_swapin_seconds", "of those seconds, the waits that were swap-ins (iotop's "
                             "SWAPIN: a swap-in function on the blocked thread's stack; 0 while the host has no swap "
                             f"in use) {doc}", labels=labels)
    swn = CounterMetricFamily(f"{name}_swapins", f"of those waits, the swap-ins {doc}", labels=labels)
    for k, c in rows:
        sec.add_metric(k, c.waited_ns / 1e9)
        n.add_metric(k, c.waits)
        sw.add_metric(k, c.swapin_ns / 1e9)
        swn.add_metric(k, c.swapins)
    yield from (sec, n, sw, swn)


def _process_labels(k: Hashable) -> list[str]:
    return [str(x) for x in k] if isinstance(k, tuple) else [str(k)]


def _processes(v: SeriesView, pid: bool) -> Iterator[Metric]:
    names = ["pid", "comm"] if pid else ["comm"]
    rows = sorted((_process_labels(k), c) for k, c in v.series.items())
    rows.append(([""] * (len(names) - 1) + [PROCESS_OTHER], v.other))
    yield from _counters("ioscope_process", "process name" if not pid else "process", names, rows)
    yield _replaced("process", v.replaced)


def _cgroups(v: SeriesView, hierarchy: tuple[str, str] | None) -> Iterator[Metric]:
    rows = sorted((list(cgroup_labels(str(k))), c) for k, c in v.series.items())
    rows.append((CGROUP_OTHER_LABELS, v.other))
    where = f" of the {hierarchy[0]} hierarchy" if hierarchy else ""
    yield from _counters("ioscope_cgroup", f"cgroup (its path{where}, where the block layer charges I/O)",
                         CGROUP_LABELS, rows)
    lat = HistogramMetricFamily(
        "ioscope_cgroup_io_latency_seconds",
        "block I/O latency per cgroup: q2c queued to completed (per bio), d2c issued to completed (per request)",
        labels=[*CGROUP_LABELS, "phase"])
    for k, c in rows:
        for phase, h in sorted(c.hists.items()):
            lat.add_metric([*k, phase], list(zip(LE_LABELS, le_counts(h.counts))), int(h.total) / 1e9)
    yield lat
    yield _replaced("cgroup", v.replaced)
    if hierarchy is not None:
        info = GaugeMetricFamily("ioscope_cgroup_hierarchy_info",
                                 "the cgroup hierarchy the cgroup labels are paths of: the one the io controller "
                                 "is on, where the block layer charges I/O (v1 blkio where mounted, else v2)",
                                 labels=["version", "controller", "mountpoint"])
        version, controller = ("1", "blkio") if hierarchy[0].startswith("v1") else ("2", "io")
        info.add_metric([version, controller, hierarchy[1]], 1)
        yield info


LIMIT_LABELS = ["device", *CGROUP_LABELS, "limit"]


def _throttle(x: Exposition) -> Iterator[Metric]:
    """blk-throttle: the limits in force, the bios it held per disk and cgroup, and their waits where
    measured (docs/exporter.md, 'Throttled I/O')."""
    limits = GaugeMetricFamily(
        "ioscope_io_limit", "cgroup I/O limits in force on the exported disks (v1 blkio.throttle.*, v2 io.max): "
        "bytes or I/Os per second; a held bio waits before the queue event, in no latency here",
        labels=LIMIT_LABELS)
    for x_ in sorted(x.limits, key=lambda d: (str(d.get("disk")), str(d.get("cgroup")))):
        for k, v in sorted((x_.get("limits") or {}).items()):
            limits.add_metric([str(x_.get("disk")), *cgroup_labels(str(x_.get("cgroup"))), k], float(v))
    yield limits

    def labels(key: tuple[str, str]) -> list[str]:
        disk, cg = key
        return [disk, *cgroup_labels(cg)] if cg else ["", *CGROUP_OTHER_LABELS]

    held = CounterMetricFamily(
        "ioscope_throttled_bios", "bios blk-throttle held back before their queue event, per disk and the cgroup "
        "they are charged to (exact: counted in its dispatch work, tracepoints only)",
        labels=["device", *CGROUP_LABELS])
    wait = HistogramMetricFamily(
        "ioscope_throttle_wait_seconds", "how long blk-throttle held a bio, from its hold to its queue event, where "
        "measured (fentry on throtl_add_bio_tg); _count is the bios measured, ioscope_throttled_bios_total all held",
        labels=["device", *CGROUP_LABELS])
    for key, t in x.held.items():
        held.add_metric(labels(key), t.held)
        wait.add_metric(labels(key), list(zip(LE_LABELS, le_counts(t.wait.counts))), int(t.wait.total) / 1e9)
    yield held
    yield wait
    measured = GaugeMetricFamily(
        "ioscope_throttle_wait_measured", "1 where the waits of held bios are measured here, else 0 with the reason "
        "(no fentry under lockdown: held bios are still counted)", labels=["reason"])
    measured.add_metric([x.throttle_no_wait or x.throttle_no_held], 0 if (x.throttle_no_wait or x.throttle_no_held)
                        else 1)
    yield measured


def _replaced(what: str, n: int) -> Metric:
    c = CounterMetricFamily(f"ioscope_{what}_series_replaced",
                            f"named {what} series that gave their place to a heavier one (docs/exporter.md, 'Series')")
    c.add_metric([], n)
    return c


__all__ = ["CGROUP_LABELS", "CGROUP_OTHER", "DISK_NAMES", "DISK_NODE", "LE_LABELS", "PROCESS_OTHER", "ViewOptions",
           "cgroup_labels", "families"]
