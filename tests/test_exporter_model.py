"""ioscope exporter's model, view and HTTP side, no kernel: round le bounds against the raw values, stable
series with a bound and an idle expiry, the per-disk completions check, the metric families as
prometheus_client writes them, --listen, and the landing page and 404s."""

from __future__ import annotations

import random
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ioscope.base import hist, http
from ioscope.base.devices import DiskStats
from ioscope.base.errors import UsageError
from ioscope.tools.exporter.cmd import DEFAULT_LISTEN
from ioscope.tools.exporter.collector import ExporterOptions
from ioscope.tools.exporter.model import (
    LE_NS,
    CompletionCheck,
    Counter,
    Delta,
    ExporterState,
    Exposition,
    KernelHists,
    ScrapeSample,
    SeriesSet,
    SeriesView,
    hist_series,
    le_counts,
)
from ioscope.tools.exporter.server import _Families
from ioscope.tools.exporter.view import (
    CGROUP_OTHER,
    DISK_NODE,
    LE_LABELS,
    PROCESS_OTHER,
    ViewOptions,
    families,
)


def test_bounds_are_round_1_2_5_from_1us_to_10s() -> None:
    assert LE_NS == [m * 10 ** d for d in range(3, 10) for m in (1, 2, 5)] + [10 ** 10]
    assert LE_LABELS[:4] == ["1e-06", "2e-06", "5e-06", "1e-05"]
    assert LE_LABELS[9:11] == ["0.001", "0.002"] and LE_LABELS[-2:] == ["10.0", "+Inf"]
    assert [float(x) for x in LE_LABELS[:-1]] == [b / 1e9 for b in LE_NS]


def test_le_counts_are_exact_but_for_the_one_bucket_holding_each_bound() -> None:
    rng = random.Random(7)
    values = [int(rng.lognormvariate(11, 2.5)) for _ in range(20000)]
    values += LE_NS + [b + 1 for b in LE_NS] + [b - 1 for b in LE_NS]  # the edges themselves
    h = hist.Hist.from_values(values)
    got = le_counts(h.counts)
    assert got[-1] == len(values) == h.count
    assert got == sorted(got)
    for b, n in zip(LE_NS, got):
        i = hist.bucket_index(b)
        low, high = hist.bucket_low(i), hist.bucket_high(i)
        assert sum(v < low for v in values) <= n <= sum(v < high for v in values)
        assert sum(v <= b for v in values if not low <= v < high) == sum(v < low for v in values)
    # the split of the bound's bucket is linear in the part of it at or below the bound
    only = hist.Hist.from_values([1000] * 64)  # 1 us: bucket [960, 1024)
    assert le_counts(only.counts)[0] == 64 * 41 // 64


def test_le_counts_never_go_down_as_a_histogram_grows() -> None:
    rng = random.Random(3)
    h = hist.Hist()
    prev = le_counts(h.counts)
    for _ in range(50):
        h = h.merge(hist.Hist.from_values(int(rng.lognormvariate(12, 3)) for _ in range(37)))
        cur = le_counts(h.counts)
        assert all(a <= b for a, b in zip(prev, cur))
        prev = cur


def _d(ios: int, nbytes: int) -> Delta:
    return Delta(ios, nbytes)


def _bytes(s: SeriesSet[str]) -> dict[str, int]:
    return {k: c.bytes for k, c in s.snapshot().items()} | {"other": s.other.bytes}


def test_series_start_from_zero_and_other_holds_the_rest() -> None:
    s: SeriesSet[str] = SeriesSet(limit=2, idle_s=600, window_s=60)
    s.add({"a": _d(1, 100), "b": _d(2, 300), "c": _d(1, 200)}, now=0)
    # the two heaviest get places; what made them heavy is in other (a new series starts at 0: the
    # value of a series' first sample is not an increase to Prometheus, other's increase is)
    assert set(s.series) == {"b", "c"} and _bytes(s) == {"b": 0, "c": 0, "other": 600}
    s.add({"a": _d(5, 5000), "b": _d(1, 1)}, now=1)  # a is heavier now, but b and c hold their places a window
    assert set(s.series) == {"b", "c"} and _bytes(s) == {"b": 1, "c": 0, "other": 5600}
    assert s.replaced == 0


def test_a_heavier_key_takes_the_lightest_place_after_a_window_with_hysteresis() -> None:
    s: SeriesSet[str] = SeriesSet(limit=2, idle_s=600, window_s=60)
    for t in range(0, 70, 10):  # b, c steady at 1000 and 600 bytes per 10 s
        s.add({"b": _d(1, 1000), "c": _d(1, 600)}, now=t)
    assert set(s.series) == {"b", "c"}
    # d does 1.5x c's bytes: not enough to take its place (REPLACE_FACTOR 2)
    for t in range(70, 140, 10):
        s.add({"b": _d(1, 1000), "c": _d(1, 600), "d": _d(1, 900)}, now=t)
    assert set(s.series) == {"b", "c"} and s.replaced == 0
    # d does 3x c's: it takes c's place once its window holds more than twice c's
    for t in range(140, 220, 10):
        s.add({"b": _d(1, 1000), "c": _d(1, 600), "d": _d(1, 1800)}, now=t)
    assert set(s.series) == {"b", "d"} and s.replaced == 1
    assert set(s.frozen) == {"c"}  # c's final values stay exported for a window
    final_c, frozen_at = s.frozen["c"][0].bytes, s.frozen["c"][1]
    s.add({"c": _d(1, 600)}, now=frozen_at + 59)
    assert s.snapshot()["c"].bytes == final_c  # frozen: no longer grows, its I/O is other's
    s.add({}, now=frozen_at + 60)
    assert "c" not in s.snapshot()


def test_a_frozen_series_that_comes_back_continues_its_values() -> None:
    s: SeriesSet[str] = SeriesSet(limit=1, idle_s=5, window_s=60)
    s.add({"a": _d(1, 100)}, now=0)
    for t in range(1, 61):
        s.add({"a": _d(1, 1)}, now=t)
    assert _bytes(s) == {"a": 60, "other": 100}
    s.add({"b": _d(1, 10_000)}, now=61)  # a held its place a window: b, far heavier, takes it
    assert set(s.series) == {"b"} and s.frozen["a"][0].bytes == 60
    s.add({"a": _d(1, 50_000)}, now=62)  # a is heavier than twice b now, but b holds its place a window
    assert set(s.series) == {"b"}
    s.add({"a": _d(1, 7)}, now=67)  # b idle for idle_s: its place is free; a, frozen, gets it back
    assert set(s.series) == {"a"} and s.series["a"].bytes == 60  # from its frozen value: no counter reset
    assert not s.frozen  # one series per key: never frozen and named at once
    s.add({"a": _d(1, 7)}, now=68)
    assert s.series["a"].bytes == 67


def test_idle_series_age_out_and_free_their_place() -> None:
    s: SeriesSet[str] = SeriesSet(limit=2, idle_s=600, window_s=60)
    s.add({"a": _d(1, 10), "b": _d(1, 10)}, now=0)
    s.add({"a": _d(1, 10)}, now=599)
    s.expire(now=600)  # b idle since its first read (0): dropped, not frozen (idle that long: seen by all)
    assert set(s.series) == {"a"} and not s.frozen
    s.add({"c": _d(2, 20)}, now=601)
    assert set(s.series) == {"a", "c"}


def test_churn_the_steady_heavy_keys_keep_their_places_and_nothing_flaps() -> None:
    """A busy host: 300 short-lived names (each one read, a little I/O) while fio-like and two heavy
    keys run steadily; 5 places. The heavy ones get places and keep them; the places change a bounded
    number of times; named + other == every byte."""
    rng = random.Random(11)
    s: SeriesSet[str] = SeriesSet(limit=5, idle_s=600, window_s=60)
    changes, prev, last = 0, set[str](), dict[str, int]()
    for t in range(600):  # 10 minutes, one read a second
        d = {"fio": _d(100, 400_000), "heavy1": _d(30, 120_000), "heavy2": _d(20, 80_000)}
        for _ in range(rng.randrange(0, 3)):
            d[f"short{rng.randrange(300)}"] = _d(2, rng.randrange(1, 9) * 4096)
        other0 = s.other.bytes
        s.add(d, now=float(t))
        snap = {k: c.bytes for k, c in s.snapshot().items()}
        # as Prometheus adds increases: each series from its previous value (a new one from 0), and other
        increase = sum(v - last.get(k, 0) for k, v in snap.items()) + s.other.bytes - other0
        assert increase == sum(x.bytes for x in d.values()), t
        last = snap
        named = set(s.series)
        changes += len(named - prev)
        prev = named
        if t >= 1:
            assert {"fio", "heavy1", "heavy2"} <= named, t
        assert len(snap) <= 2 * 5
    assert changes <= 5 + 2 * 600 // 60, changes  # each of the 2 free places changes hands at most once a window
    ranked = sorted(s.series, key=lambda k: -s.series[k].bytes)
    assert ranked[:3] == ["fio", "heavy1", "heavy2"]


def test_series_do_not_depend_much_on_how_often_they_are_read() -> None:
    """The same I/O read in pieces of 1 s or 0.1 s (the tick, two scrapers) names the same keys, and
    every byte is in a series or other either way."""
    rng = random.Random(5)
    events = [(t * 0.1, f"p{rng.randrange(6)}", rng.randrange(1, 9) * 4096) for t in range(6000)]
    events += [(t * 0.1, "big", 64 * 4096) for t in range(6000)]

    def run(step: float) -> tuple[set[str], int]:
        s: SeriesSet[str] = SeriesSet(limit=3, idle_s=30, window_s=60)
        batch: dict[str, Delta] = {}
        nxt = step
        for t, k, b in sorted(events):
            if t >= nxt:
                s.add(batch, now=t)
                batch, nxt = {}, nxt + step
            d = batch.setdefault(k, Delta())
            d.ios += 1
            d.bytes += b
        s.add(batch, now=events[-1][0])
        return set(s.series), sum(c.bytes for c in s.snapshot().values()) + s.other.bytes

    assert run(1.0)[1] == run(0.1)[1] == sum(b for _, _, b in events)
    assert "big" in run(1.0)[0] and "big" in run(0.1)[0]


def test_cgroup_histograms_add_up_per_series_and_other() -> None:
    s: SeriesSet[str] = SeriesSet(limit=1, idle_s=600, window_s=60)
    h = hist.Hist.from_values([20_000] * 3)
    s.add({"/a": Delta(3, 12288, {"q2c": h}), "/b": Delta(1, 4096, {"q2c": hist.Hist.from_values([7])})}, now=0)
    s.add({"/a": Delta(3, 12288, {"q2c": h, "d2c": h})}, now=1)
    a = s.series["/a"]
    assert a.hists["q2c"].count == 3 and a.hists["d2c"].count == 3
    assert s.other.hists["q2c"].count == 4  # /a's first read and /b


def test_completion_check_finds_misses_per_disk_and_never_goes_down() -> None:
    c = CompletionCheck.at_attach({"a": 1000, "b": 50})
    c.update({"a": 1010, "b": 60}, {"a": 10, "b": 12}, untimed=0)  # b counted 2 completed after the kernel read
    assert c.unseen("a") == 0 and c.unseen("b") == 0
    c.update({"a": 1110, "b": 70}, {"a": 108, "b": 20}, untimed=0)  # a: 2 missed; b's surplus hides nothing on a
    assert c.unseen("a") == 2 and c.unseen("b") == 0 and c.total == 2
    c.update({"a": 1110, "b": 70}, {"a": 108, "b": 20}, untimed=0)
    assert c.total == 2
    c.update({"a": 1120, "b": 70}, {"a": 118, "b": 20}, untimed=1)  # one ended untimed: not a miss
    assert c.total == 2
    c.update({"a": 1120, "b": 70, "new": 500}, {"a": 118, "b": 20, "new": 3}, untimed=1)  # first seen: the base
    c.update({"a": 1120, "b": 70, "new": 510}, {"a": 118, "b": 20, "new": 13}, untimed=1)
    assert c.unseen("new") == 0
    c.update({"a": 5, "b": 70, "new": 510}, {"a": 120, "b": 20, "new": 13}, untimed=1)  # a made again: restart
    c.update({"a": 15, "b": 70, "new": 510}, {"a": 124, "b": 20, "new": 13}, untimed=1)  # 10 - 6 - 1
    assert c.unseen("a") == 2 + 3 and c.total == 5


def test_kernel_hists_survive_a_deleted_key() -> None:
    k = KernelHists()
    h10 = hist.Hist.from_values([5000] * 10)
    assert k.update([("d", "read", "d2c", h10)])[("d", "read", "d2c")].count == 10
    # the key deleted: gone from the read, then made again with 3
    assert k.update([])[("d", "read", "d2c")].count == 10
    got = k.update([("d", "read", "d2c", hist.Hist.from_values([5000] * 3))])[("d", "read", "d2c")]
    assert got.count == 13 and got.total == 13 * 5000


def _stats(name: str, reads: int, writes: int, flushes: int = 0, in_flight: int = 0) -> DiskStats:
    return DiskStats(name, 7, 1, reads, 0, reads * 8, reads, writes, 1, writes * 8, 2 * writes, in_flight, 900,
                     1200, 0, 0, 0, 0, flushes, 3 * flushes)


def _sample(now: float, ds: DiskStats, read_d2c: int, losses: dict[str, int] | None = None,
            unstamped: dict[str, int] | None = None) -> ScrapeSample:
    h = hist.Hist.from_values([20000] * read_d2c)
    names = {"not_stamped", "completion_unseen", "hist_map_full"}
    return ScrapeSample(now=now, diskstats={ds.name: ds}, mq=[ds.name],
                        hists=[(ds.name, "read", "d2c", h), (ds.name, "read", "q2c", h)],
                        losses=losses or {n: 0 for n in names}, loss_names=frozenset(names),
                        timing={ds.name: "kernel stamps"}, unstamped=unstamped or {})


def test_state_reports_misses_as_completion_unseen_and_not_the_probes_own_count() -> None:
    st = ExporterState(CompletionCheck.at_attach({"loop1": 100}))
    x = st.scrape(_sample(1.0, _stats("loop1", 100, 0), 0))
    assert x.losses[("completion_unseen", "loop1")] == 0
    x = st.scrape(_sample(2.0, _stats("loop1", 200, 0), 97, {"completion_unseen": 5, "not_stamped": 1,
                                                              "hist_map_full": 0}, {"loop1": 1}))
    assert x.unseen == {"loop1": 2} and x.losses[("completion_unseen", "loop1")] == 2
    # every request: counted + unseen + untimed == what the kernel completed
    assert sum(h.count for h in x.hists if h.phase == "d2c") + 2 + 1 == 200 - 100


def test_losses_say_which_disk_where_the_kernel_does() -> None:
    """not_stamped per disk (the kernel's unstamped_devs map), the rest of it (the map full) without a
    disk; completion_unseen per disk; the reasons the kernel counts for all disks without one."""
    st = ExporterState(CompletionCheck.at_attach({"loop1": 0}))
    names = {"not_stamped", "completion_unseen", "hist_map_full"}
    x = st.scrape(_sample(1.0, _stats("loop1", 0, 0), 0, {"not_stamped": 3000, "hist_map_full": 2,
                                                           "completion_unseen": 0}, {"loop1": 2990}))
    assert x.losses[("not_stamped", "loop1")] == 2990 and x.losses[("not_stamped", "")] == 10
    assert x.losses[("hist_map_full", "")] == 2 and ("hist_map_full", "loop1") not in x.losses
    assert x.losses[("completion_unseen", "loop1")] == 0
    text = _text(x)
    assert 'ioscope_lost_events_total{device="loop1",reason="not_stamped"} 2990.0' in text
    assert set(names) <= {r for r, _ in x.losses}


def test_state_keeps_a_removed_disks_histograms_until_idle() -> None:
    st = ExporterState(CompletionCheck.at_attach({"loop1": 0}), idle_s=600)
    st.scrape(_sample(0.0, _stats("loop1", 5, 0), 5))
    gone = ScrapeSample(now=10.0, diskstats={}, mq=[], hists=[("loop1", "read", "d2c", hist.Hist.from_values([1] * 5))],
                        losses={}, loss_names=frozenset(), timing={})
    assert [h.disk for h in st.scrape(gone).hists] == ["loop1", "loop1"]  # d2c, q2c (gone from the read: kept)
    gone.now = 600.0
    assert st.scrape(gone).hists == []


def _text(x: Exposition, o: ViewOptions | None = None) -> str:
    return generate_latest(_Families(list(families(x, o or ViewOptions())))).decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for f in text_string_to_metric_families(text) for smp in f.samples}


def _x(**kw: Any) -> Exposition:
    h = hist_series("loop1", "read", "d2c", hist.Hist.from_values([1500, 30000, 30000]))
    return Exposition(hists=[h], diskstats={"loop1": _stats("loop1", 3, 7, flushes=2, in_flight=1),
                                            "vda": _stats("vda", 11, 13)},
                      unseen={"loop1": 0}, losses={("completion_unseen", "loop1"): 0},
                      timing={"loop1": "kernel stamps"}, **kw)


def test_families_follow_node_exporter_and_ebpf_exporter() -> None:
    procs = SeriesView({"dd": Counter(3, 12288), "other": Counter(2, 8192)}, Counter(1, 4096), 0)
    s = _samples(_text(_x(processes=procs)))
    assert s[("ioscope_disk_ios_total", (("device", "loop1"), ("operation", "flush")))] == 2
    assert s[("ioscope_disk_request_time_seconds_total", (("device", "loop1"), ("operation", "write")))] == 0.014
    assert s[("ioscope_disk_io_time_seconds_total", (("device", "loop1"),))] == 0.9
    assert s[("ioscope_disk_io_time_weighted_seconds_total", (("device", "loop1"),))] == 1.2
    assert ("ioscope_disk_bytes_total", (("device", "loop1"), ("operation", "flush"))) not in s
    # the histogram's op label as ebpf_exporter's biolatency names it
    assert s[("ioscope_io_latency_seconds_bucket", (("device", "loop1"), ("le", "2e-06"), ("operation", "read"),
                                                     ("phase", "d2c")))] == 1
    assert s[("ioscope_io_latency_seconds_count", (("device", "loop1"), ("operation", "read"), ("phase", "d2c")))] == 3
    # no pid label by default; a process named "other" is its own series, the aggregate another
    assert s[("ioscope_process_bytes_total", (("comm", "other"),))] == 8192
    assert s[("ioscope_process_bytes_total", (("comm", PROCESS_OTHER),))] == 4096
    assert len(PROCESS_OTHER.encode()) > 15  # longer than any process name the kernel keeps
    assert s[("ioscope_disk_completions_unseen_total", (("device", "loop1"),))] == 0
    assert not [k for k in s if k[0].startswith("node_")]  # node_exporter's names only when asked


def test_disk_counters_under_node_exporters_names() -> None:
    """--disk-names node: the 17 diskstats fields as node_exporter's diskstats collector names them,
    in its units (seconds, bytes; discarded sectors in sectors), label device."""
    ds = _stats("loop1", 3, 7, flushes=2, in_flight=1)
    s = _samples(_text(_x(), ViewOptions(disk_names="node")))
    dev = (("device", "loop1"),)
    want = {"node_disk_reads_completed_total": 3, "node_disk_reads_merged_total": ds.reads_merged,
            "node_disk_read_bytes_total": 3 * 8 * 512, "node_disk_read_time_seconds_total": 0.003,
            "node_disk_writes_completed_total": 7, "node_disk_writes_merged_total": 1,
            "node_disk_written_bytes_total": 7 * 8 * 512, "node_disk_write_time_seconds_total": 0.014,
            "node_disk_io_now": 1, "node_disk_io_time_seconds_total": 0.9,
            "node_disk_io_time_weighted_seconds_total": 1.2, "node_disk_discards_completed_total": 0,
            "node_disk_discards_merged_total": 0, "node_disk_discarded_sectors_total": 0,
            "node_disk_discard_time_seconds_total": 0, "node_disk_flush_requests_total": 2,
            "node_disk_flush_requests_time_seconds_total": 0.006}
    assert len(want) == len(DISK_NODE) == 17
    for name, v in want.items():
        assert s[(name, dev)] == pytest.approx(v), name
    assert not [k for k in s if k[0].startswith("ioscope_disk_") and "unseen" not in k[0] and "timing" not in k[0]]
    both = _samples(_text(_x(), ViewOptions(disk_names="both")))
    assert both[("node_disk_reads_completed_total", dev)] == both[("ioscope_disk_ios_total",
                                                                    (("device", "loop1"), ("operation", "read")))]


def test_cgroup_series_name_containers_and_say_their_hierarchy() -> None:
    did = "3f4e9a1b2c3d" + "0" * 52
    h = hist.Hist.from_values([20_000] * 4)
    cgs = SeriesView({f"/system.slice/docker-{did}.scope": Counter(4, 16384, {"q2c": h, "d2c": h}),
                      "/system.slice/nginx.service": Counter(1, 4096)}, Counter(2, 8192, {"q2c": h}), 1)
    text = _text(_x(cgroups=cgs), ViewOptions(cgroup_hierarchy=("v1 blkio", "/sys/fs/cgroup/blkio")))
    s = _samples(text)
    k8s = (("container", ""), ("namespace", ""), ("pod_name", ""))   # no Kubernetes names: empty (test_kubenames)

    def sort(*labels: tuple[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((*labels, *k8s)))

    lab = (("cgroup", f"/system.slice/docker-{did}.scope"), ("kind", "docker"), ("name", "3f4e9a1b2c3d"),
           ("pod", ""))
    assert s[("ioscope_cgroup_bytes_total", sort(*lab))] == 16384
    assert s[("ioscope_cgroup_io_latency_seconds_count", sort(*lab, ("phase", "q2c")))] == 4
    assert s[("ioscope_cgroup_bytes_total", sort(("cgroup", "/system.slice/nginx.service"),
                                                 ("kind", "systemd-service"), ("name", "nginx.service"),
                                                 ("pod", "")))] == 4096
    other = (("cgroup", CGROUP_OTHER), ("kind", ""), ("name", ""), ("pod", ""))
    assert s[("ioscope_cgroup_bytes_total", sort(*other))] == 8192
    assert s[("ioscope_cgroup_series_replaced_total", ())] == 1
    assert s[("ioscope_cgroup_hierarchy_info", (("controller", "blkio"), ("mountpoint", "/sys/fs/cgroup/blkio"),
                                                ("version", "1")))] == 1
    assert "of the v1 blkio hierarchy" in text


def test_device_filter_is_node_exporters() -> None:
    keep = ExporterOptions().wanted()
    assert [n for n in ("sda", "sda1", "nvme0n1", "nvme0n1p2", "vda", "vda3", "loop0", "loop12", "ram0", "zram0",
                        "fd0", "dm-0", "md0", "sr0") if keep(n)] == ["sda", "nvme0n1", "vda", "dm-0", "md0", "sr0"]
    loops = ExporterOptions(device_exclude=None, device_include="^loop").wanted()
    assert loops("loop3") and not loops("vda")


@pytest.mark.parametrize("text, want", [
    ("127.0.0.1:9863", ("127.0.0.1", 9863)),
    ("localhost:9100", ("localhost", 9100)),
    (":9863", (http.ANY, 9863)),
    ("[::1]:9863", ("::1", 9863)),
    ("[::]:80", ("::", 80)),
    ("9863", ("127.0.0.1", 9863)),
    (" 0.0.0.0:1 ", ("0.0.0.0", 1)),
])
def test_listen_takes_what_exporters_take(text: str, want: tuple[str, int]) -> None:
    assert http.parse_listen(text, DEFAULT_LISTEN) == want


@pytest.mark.parametrize("text, words", [
    ("localhost", "is not HOST:PORT"), ("1.2.3.4:99999", "is not"), ("::1:9863", "brackets"), ("[::1]", "is not"),
    ("host:0", "is not"), (":", "is not"), ("[::1]9863", "is not"), ("a b:1", "is not"),
])
def test_listen_refuses_with_one_line(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        http.parse_listen(text, DEFAULT_LISTEN)


def test_process_pid_labels() -> None:
    procs = SeriesView({("42", "dd"): Counter(3, 12288)}, Counter(1, 4096), 0)
    s = _samples(_text(_x(processes=procs), ViewOptions(process_pid=True)))
    assert s[("ioscope_process_bytes_total", (("comm", "dd"), ("pid", "42")))] == 12288
    assert s[("ioscope_process_bytes_total", (("comm", PROCESS_OTHER), ("pid", "")))] == 4096


def test_wait_series_are_chosen_by_time_blocked_and_exported_in_seconds() -> None:
    """The I/O wait series (weight waited_ns): the key blocked longest gets the place, however few bytes it
    queued (a service whose journal jbd2 writes); its waits and seconds are exported per process and per
    cgroup, the rest in other."""
    s: SeriesSet[str] = SeriesSet(limit=1, idle_s=600, window_s=60, weight="waited_ns")
    s.add({"postgres": Delta(waits=90, waited_ns=900_000_000), "dd": Delta(waits=3, waited_ns=3_000_000)}, now=0)
    assert set(s.series) == {"postgres"} and s.other.waits == 93  # the first read went to other
    s.add({"postgres": Delta(waits=10, waited_ns=95_000_000), "dd": Delta(waits=1, waited_ns=2_000_000)}, now=1)
    assert (s.series["postgres"].waits, s.series["postgres"].waited_ns) == (10, 95_000_000)
    assert (s.other.waits, s.other.waited_ns) == (94, 905_000_000)
    # a key that only queued bytes (no wait) is no heavier than none
    b: SeriesSet[str] = SeriesSet(limit=1, idle_s=600, window_s=60, weight="waited_ns")
    b.add({"backup": Delta(ios=1000, bytes=1 << 30), "svc": Delta(waits=1, waited_ns=1000)}, now=0)
    assert set(b.series) == {"svc"}
    procs = SeriesView.of(s, 1)
    cgs = SeriesView({"/system.slice/postgresql.service": Counter(waits=10, waited_ns=95_000_000, swapins=4,
                                                                  swapin_ns=7_000_000)},
                     Counter(waits=1, waited_ns=2_000_000), 0)
    out = _samples(_text(_x(process_waits=procs, cgroup_waits=cgs)))
    # the swap-ins among the waits: in the same series, 0 where none
    sw = [(n, v) for (n, ls), v in out.items() if n.startswith("ioscope_cgroup_swapin")
          and ("cgroup", "/system.slice/postgresql.service") in ls]
    assert sorted(sw) == [("ioscope_cgroup_swapin_seconds_total", 0.007), ("ioscope_cgroup_swapins_total", 4)], sw
    assert out[("ioscope_process_swapin_seconds_total", (("comm", "postgres"),))] == 0
    assert out[("ioscope_process_io_wait_seconds_total", (("comm", "postgres"),))] == 0.095
    assert out[("ioscope_process_io_waits_total", (("comm", "postgres"),))] == 10
    assert out[("ioscope_process_io_wait_seconds_total", (("comm", PROCESS_OTHER),))] == 0.905
    cg = [v for (n, ls), v in out.items() if n == "ioscope_cgroup_io_wait_seconds_total"
          and ("cgroup", "/system.slice/postgresql.service") in ls]
    assert cg == [0.095]
    assert out[("ioscope_process_io_wait_series_replaced_total", ())] == 0
    # not asked for (--no-io-wait, or no --per-process): no such family
    assert not [k for k in _samples(_text(_x())) if "io_wait" in k[0] or "swapin" in k[0]]


def test_swapins_add_up_in_a_series_and_in_other() -> None:
    """A Delta's swap-ins add to its series' counter as its waits do, and to other when it has no place."""
    s: SeriesSet[str] = SeriesSet(limit=1, idle_s=600, window_s=60, weight="waited_ns")
    s.add({"db": Delta(waits=5, waited_ns=50_000_000, swapins=2, swapin_ns=30_000_000),
           "cron": Delta(waits=1, waited_ns=1_000, swapins=1, swapin_ns=1_000)}, now=0)
    s.add({"db": Delta(waits=5, waited_ns=50_000_000, swapins=3, swapin_ns=40_000_000),
           "cron": Delta(waits=1, waited_ns=1_000, swapins=1, swapin_ns=1_000)}, now=1)
    assert (s.series["db"].swapins, s.series["db"].swapin_ns) == (3, 40_000_000)
    assert (s.other.swapins, s.other.swapin_ns) == (4, 30_002_000)


def test_oldest_in_flight_gauges_for_the_disks_the_slot_table_follows() -> None:
    from ioscope.base.devices import DiskStats
    from ioscope.kernel.inflight import OldestIO
    from ioscope.tools.exporter.model import ScrapeSample, in_flight_oldest
    ds = {n: DiskStats(n, 7, i, *([0] * 8), 1, 0, 0) for i, n in enumerate(("loop0", "loop1", "loop2"))}
    s = ScrapeSample(now=0.0, diskstats=ds, mq=list(ds), hists=[], losses={}, loss_names=frozenset(), timing={},
                     oldest={"loop0": OldestIO(7 << 20, 12_500_000_000, 42, True, 3)}, followed=["loop0", "loop1"])
    # loop1, loop2: nothing over 1 s, from the slot table or (loop2, timed from the stamps) /proc/diskstats: 0
    assert in_flight_oldest(s) == {"loop0": (12.5, 3), "loop1": (0.0, 0), "loop2": (0.0, 0)}
