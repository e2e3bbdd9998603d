"""fileslower's model and views on hand-made samples (no root)."""

from __future__ import annotations

from dataclasses import replace

from ioscope.base.hist import Hist
from ioscope.base.losses import Losses
from ioscope.tools.fileslower.model import CallRecord, FileSlowerSample, HistRow, breakdown, build_report
from ioscope.tools.fileslower.view import breakdown_text, call_json, hist_json, hist_lines, to_json

MS = 1_000_000
REC = CallRecord(start_ns=5_000 * MS, end_ns=5_000 * MS + 98_100_000, call="fdatasync", ret=0, tid=42, pid=41,
                 comm="postgres", file="/mnt/wal.log", dev="loop0", cgroup="/svc", iowait_ns=96 * MS, iowaits=2,
                 offcpu_ns=97_200_000, runq_ns=0, dev_ns=200_000, bios_done=3, rbios=0, wbios=2, obios=1,
                 rbytes=0, wbytes=16384, flushes=1, fua=0, sync=3)


def sample(*recs: CallRecord, hists: list[HistRow] | None = None) -> FileSlowerSample:
    return FileSlowerSample(records=list(recs), hists=hists or [], losses=Losses({"events_lost_ring_full": 3},
                            frozenset({"events_lost_ring_full"})), started=100.0, now=101.5, mono_to_wall=1000.0)


def test_breakdown_adds_up_to_the_latency() -> None:
    c = breakdown(REC, 1000.0)
    assert c.lat_ns == 98_100_000
    assert (c.iowait_ns, c.other_ns, c.runq_ns, c.oncpu_ns) == (96 * MS, 1_200_000, 0, 900_000)
    assert c.oncpu_ns + c.iowait_ns + c.other_ns + c.runq_ns == c.lat_ns
    assert (c.bios, c.bio_bytes) == (3, 16384)
    assert c.end_time == 1000.0 + 5.0981


def test_breakdown_clamps_counters_from_other_cpus() -> None:
    """A wait's end counted in the waker's context may read past the off-CPU time: no part is negative."""
    c = breakdown(replace(REC, iowait_ns=99 * MS, offcpu_ns=120 * MS, runq_ns=5 * MS), 0.0)
    assert (c.oncpu_ns, c.iowait_ns, c.runq_ns, c.other_ns) == (0, 98_100_000, 0, 0)
    c = breakdown(replace(REC, iowait_ns=50 * MS, offcpu_ns=60 * MS, runq_ns=4 * MS), 0.0)
    assert (c.oncpu_ns, c.iowait_ns, c.runq_ns, c.other_ns) == (38_100_000, 50 * MS, 4 * MS, 6 * MS)


def test_report_keeps_calls_at_the_threshold_in_return_order() -> None:
    fast = replace(REC, start_ns=REC.start_ns + 1, end_ns=REC.start_ns + 1 + 9_999_999, call="pwrite64", ret=8192)
    early = replace(REC, end_ns=REC.end_ns - 50 * MS, start_ns=REC.start_ns - 50 * MS)
    rep = build_report(sample(REC, fast, early), 10 * MS)
    assert [c.rec for c in rep.calls] == [early, REC]
    assert len(build_report(sample(REC, fast, early), 0).calls) == 3
    assert rep.interval_s == 1.5 and rep.losses.lost == 3


def test_text_and_json_carry_the_same_numbers() -> None:
    c = breakdown(REC, 1000.0)
    assert breakdown_text(c) == ("= I/O wait 96.0 (2 waits) + other blocked 1.2 + on CPU 0.9 ms; 3 bios 16.0 KiB, "
                                 "device 0.2 ms, 1 flush")
    assert "device 0.2 ms (2 done)" in breakdown_text(breakdown(replace(REC, bios_done=2), 0.0))
    j = call_json(c)
    assert (j["lat_ms"], j["iowait_ms"], j["other_blocked_ms"], j["oncpu_ms"]) == (98.1, 96.0, 1.2, 0.9)
    assert (j["bios"], j["write_bytes"], j["flushes"], j["device_ms"], j["bytes"]) == (3, 16384, 1, 0.2, 0)
    err = call_json(breakdown(replace(REC, ret=-5), 0.0))
    assert (err["bytes"], err["error"]) == (0, 5)


def test_histograms_most_frequent_first() -> None:
    h1 = Hist.from_values([1 * MS, 2 * MS, 3 * MS])
    h2 = Hist.from_values([40 * MS])
    rows = [HistRow("fsync", "/a", h2, pid=7, comm="x"), HistRow("pwrite64", "/b", h1, pid=7, comm="x"),
            HistRow("read", "/c", Hist(), pid=7, comm="x")]
    rep = build_report(sample(hists=rows), 10 * MS)
    assert [h.row.call for h in rep.hists] == ["pwrite64", "fsync"]
    j = to_json(rep)
    assert j["lost"] == 3 and j["hists"][0]["count"] == 3 and j["hists"][0]["pid"] == 7
    assert hist_json(rep.hists[1])["max_ms"] == 40.0
    lines = list(hist_lines(rep))
    assert lines[1].split()[:2] == ["CALL", "COUNT"] and "PID" in lines[1]
    assert lines[2].split()[:2] == ["pwrite64", "3"] and lines[2].endswith(" /b")
