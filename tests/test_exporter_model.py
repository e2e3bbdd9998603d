"""ioscope exporter's model, view and HTTP side, no kernel: round le bounds against the raw values, stable
series with a bound and an idle expiry, the per-disk completions check, the metric families as
prometheus_client writes them, --listen, and the landing page and 404s."""

from __future__ import annotations

import io
import random
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ioscope.base import hist
from ioscope.base.devices import DiskStats
from ioscope.base.errors import UsageError
from ioscope.tools.exporter import server
from ioscope.tools.exporter.model import (
    LE_NS,
    CompletionCheck,
    Counter,
    ExporterState,
    Exposition,
    KernelHists,
    ScrapeSample,
    SeriesSet,
    hist_series,
    le_counts,
)
from ioscope.tools.exporter.view import LE_LABELS, RegistryCollector


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


def test_series_are_kept_bounded_and_other_holds_the_rest() -> None:
    s: SeriesSet[str] = SeriesSet(limit=2, idle_s=600)
    s.add({"a": (1, 100), "b": (2, 300), "c": (1, 200)}, now=0)
    assert set(s.series) == {"b", "c"} and (s.other.ios, s.other.bytes) == (1, 100)  # the larger new ones
    s.add({"a": (5, 5000), "b": (1, 1)}, now=1)  # a is now the largest: it gets no series, b keeps its own
    assert set(s.series) == {"b", "c"} and (s.series["b"].ios, s.series["b"].bytes) == (3, 301)
    assert (s.other.ios, s.other.bytes) == (6, 5100)
    total = sum(c.bytes for c in s.series.values()) + s.other.bytes
    assert total == 100 + 300 + 200 + 5000 + 1


def test_series_age_out_only_after_idle_s_and_come_back_from_zero() -> None:
    s: SeriesSet[str] = SeriesSet(limit=2, idle_s=600)
    s.add({"a": (1, 10), "b": (1, 10)}, now=0)
    s.add({"a": (1, 10)}, now=599)
    s.add({"c": (1, 10)}, now=599.5)  # full: c goes to other
    assert set(s.series) == {"a", "b"} and s.other.bytes == 10
    s.expire(now=600)  # b idle for 600 s: dropped; a did I/O at 599
    assert set(s.series) == {"a"}
    s.add({"c": (2, 20), "b": (1, 5)}, now=601)  # room for one: the larger
    assert set(s.series) == {"a", "c"} and s.series["c"].bytes == 20 and s.other.bytes == 15
    s.add({}, now=1198.9)
    assert set(s.series) == {"a", "c"}
    s.add({}, now=1199)
    assert set(s.series) == {"c"}


def test_series_do_not_depend_on_how_often_they_are_read() -> None:
    """The same I/O read once or in many pieces (two scrapers, the tick) gives the same series, but for
    which of several new keys first seen in one read win the last places."""
    rng = random.Random(5)
    events = [(t * 0.1, f"p{rng.randrange(6)}", rng.randrange(1, 9) * 4096) for t in range(2000)]

    def run(every: int) -> dict[str, int]:
        s: SeriesSet[str] = SeriesSet(limit=10, idle_s=30)
        batch: dict[str, tuple[int, int]] = {}
        for n, (t, k, b) in enumerate(events):
            i, nb = batch.get(k, (0, 0))
            batch[k] = (i + 1, nb + b)
            if n % every == every - 1:
                s.add(batch, now=t)
                batch = {}
        s.add(batch, now=events[-1][0])
        return {k: c.bytes for k, c in s.series.items()} | {"other": s.other.bytes}

    assert run(1) == run(7) == run(50)


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


def _sample(now: float, ds: DiskStats, read_d2c: int, losses: dict[str, int] | None = None) -> ScrapeSample:
    h = hist.Hist.from_values([20000] * read_d2c)
    names = {"not_stamped", "completion_unseen", "hist_map_full"}
    return ScrapeSample(now=now, diskstats={ds.name: ds}, mq=[ds.name],
                        hists=[(ds.name, "read", "d2c", h), (ds.name, "read", "q2c", h)],
                        losses=losses or {n: 0 for n in names}, loss_names=frozenset(names),
                        timing={ds.name: "kernel stamps"})


def test_state_reports_misses_as_completion_unseen_and_not_the_probes_own_count() -> None:
    st = ExporterState(CompletionCheck.at_attach({"loop1": 100}))
    x = st.scrape(_sample(1.0, _stats("loop1", 100, 0), 0))
    assert x.losses["completion_unseen"] == 0
    x = st.scrape(_sample(2.0, _stats("loop1", 200, 0), 97, {"completion_unseen": 5, "not_stamped": 1,
                                                              "hist_map_full": 0}))
    assert x.unseen == {"loop1": 2} and x.losses["completion_unseen"] == 2 and x.losses["not_stamped"] == 1
    # every request: counted + unseen + untimed == what the kernel completed
    assert sum(h.count for h in x.hists if h.phase == "d2c") + 2 + 1 == 200 - 100


def test_state_keeps_a_removed_disks_histograms_until_idle() -> None:
    st = ExporterState(CompletionCheck.at_attach({"loop1": 0}), idle_s=600)
    st.scrape(_sample(0.0, _stats("loop1", 5, 0), 5))
    gone = ScrapeSample(now=10.0, diskstats={}, mq=[], hists=[("loop1", "read", "d2c", hist.Hist.from_values([1] * 5))],
                        losses={}, loss_names=frozenset(), timing={})
    assert [h.disk for h in st.scrape(gone).hists] == ["loop1", "loop1"]  # d2c, q2c (gone from the read: kept)
    gone.now = 600.0
    assert st.scrape(gone).hists == []


def _text(x: Exposition) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RegistryCollector(lambda: x))
    return generate_latest(reg).decode()


def test_families_follow_node_exporter() -> None:
    h = hist_series("loop1", "read", "d2c", hist.Hist.from_values([1500, 30000, 30000]))
    x = Exposition(hists=[h], diskstats={"loop1": _stats("loop1", 3, 7, flushes=2, in_flight=1)},
                   unseen={"loop1": 0}, losses={"completion_unseen": 0}, timing={"loop1": "kernel stamps"},
                   processes={("42", "dd"): Counter(3, 12288)}, process_other=Counter(1, 4096))
    text = _text(x)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    s = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value for f in fams.values() for smp in f.samples}
    assert s[("ioscope_disk_ios_total", (("device", "loop1"), ("op", "flush")))] == 2
    assert s[("ioscope_disk_request_time_seconds_total", (("device", "loop1"), ("op", "write")))] == 0.014
    assert s[("ioscope_disk_io_time_seconds_total", (("device", "loop1"),))] == 0.9
    assert s[("ioscope_disk_io_time_weighted_seconds_total", (("device", "loop1"),))] == 1.2
    assert ("ioscope_disk_bytes_total", (("device", "loop1"), ("op", "flush"))) not in s
    assert s[("ioscope_io_latency_seconds_bucket", (("device", "loop1"), ("le", "2e-06"), ("op", "read"),
                                                     ("phase", "d2c")))] == 1
    assert s[("ioscope_io_latency_seconds_count", (("device", "loop1"), ("op", "read"), ("phase", "d2c")))] == 3
    assert s[("ioscope_process_bytes_total", (("comm", "other"), ("pid", "")))] == 4096  # Prometheus: no pid label
    assert s[("ioscope_disk_completions_unseen_total", (("device", "loop1"),))] == 0
    assert 'le="0.0001"' in text and "e-05\"" in text and "disk=" not in text


@pytest.mark.parametrize("text, want", [
    ("127.0.0.1:9863", ("127.0.0.1", 9863)),
    ("localhost:9100", ("localhost", 9100)),
    (":9863", (server.ANY, 9863)),
    ("[::1]:9863", ("::1", 9863)),
    ("[::]:80", ("::", 80)),
    ("9863", ("127.0.0.1", 9863)),
    (" 0.0.0.0:1 ", ("0.0.0.0", 1)),
])
def test_listen_takes_what_exporters_take(text: str, want: tuple[str, int]) -> None:
    assert server.parse_listen(text) == want


@pytest.mark.parametrize("text, words", [
    ("localhost", "is not HOST:PORT"), ("1.2.3.4:99999", "is not"), ("::1:9863", "brackets"), ("[::1]", "is not"),
    ("host:0", "is not"), (":", "is not"), ("[::1]9863", "is not"), ("a b:1", "is not"),
])
def test_listen_refuses_with_one_line(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        server.parse_listen(text)


def _get(path: str, method: str = "GET") -> tuple[str, dict[str, str], bytes]:
    def metrics(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ioscope_build_info 1\n"]

    env: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method, "wsgi.input": io.BytesIO()}
    setup_testing_defaults(env)
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(server.app(metrics, "9.9")(env, start_response))
    return got["status"], got["headers"], body


def test_landing_page_metrics_and_404() -> None:
    status, headers, body = _get("/")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/html")
    assert b'href="metrics"' in body and b"ioscope 9.9" in body
    assert _get("/metrics")[2] == b"ioscope_build_info 1\n"
    for path in ("/anything", "/metrics/", "/favicon.ico", "/index.html"):
        assert _get(path)[0].startswith("404"), path
    status, headers, _ = _get("/metrics", "POST")
    assert status.startswith("405") and headers["Allow"] == "GET, HEAD"
    assert _get("/", "HEAD")[2] == b""
