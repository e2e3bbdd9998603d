"""readsize, fair and readahead: the pure models on synthetic samples (no root), and their views: the
numbers in JSON are the numbers in the text, because both come from one report object."""

from __future__ import annotations

import json
import re

import pytest

from ioscope.base.devices import DiskStats, kdev
from ioscope.base.fmt import fmt_bytes
from ioscope.base.hist import Hist
from ioscope.base.losses import Losses
from ioscope.base.render import render_plain
from ioscope.engines.procio import abi
from ioscope.engines.procio.model import DevRequests, ProcIO, ReadsizeSample
from ioscope.engines.procio.model import build_report as rs_report
from ioscope.tools.fair.model import FairSample
from ioscope.tools.fair.model import build_report as fair_report
from ioscope.tools.fair.view import text_lines as fair_text
from ioscope.tools.fair.view import to_json as fair_json
from ioscope.tools.readahead.collector import RA_EXPLAIN, RA_LOSSES
from ioscope.tools.readahead.model import DevInfo, RaFile, RaSample
from ioscope.tools.readahead.model import build_report as ra_report
from ioscope.tools.readahead.view import RaViewOptions
from ioscope.tools.readahead.view import renderables as ra_renderables
from ioscope.tools.readahead.view import to_json as ra_json
from ioscope.tools.readsize.view import ReadsizeViewOptions
from ioscope.tools.readsize.view import renderables as rs_renderables
from ioscope.tools.readsize.view import to_json as rs_json

T0 = 1_700_000_000.0
RS_LOSSES = frozenset(abi.RS_STAT_NAMES[i] for i in range(abi.RS_NR_LOST_STATS)) | {"recursion_misses"}


def _text(renderables: object) -> str:
    return "\n".join(render_plain(r, width=200) for r in renderables)  # type: ignore[attr-defined]


def _proc(pid: int, comm: str, op: str, app: list[int], dev: list[int], ra: int = 0) -> ProcIO:
    return ProcIO(pid, comm, op, Hist.from_values(app), Hist.from_values(app), Hist.from_values(dev),
                  ra_count=ra, ra_bytes=sum(dev[:ra]))


# -- readsize ----------------------------------------------------------------

def _rs_sample() -> ReadsizeSample:
    counters = {"proc_map_full": 2, "inflight_map_full": 0, "iov_truncated": 5, "kthread_bios_to_reader": 3,
                "recursion_misses": 1}
    procs = [_proc(11, "small", "read", [4096] * 13, [4096] * 13),
             _proc(7, "cat", "read", [32768] * 787, [524288] * 49, ra=49),
             _proc(7, "cat", "write", [8192] * 97, [8192 * 97])]
    reqs = [DevRequests("loop1", "read", Hist.from_values([524288] * 49 + [4096] * 13), 512),
            DevRequests("loop0", "write", Hist.from_values([794624]), 1280),
            DevRequests("loop0", "read", Hist(), 1280)]  # nothing issued: not in the text
    return ReadsizeSample(wall=T0 + 5, started=T0, procs=procs, requests=reqs,
                          losses=Losses(counters, RS_LOSSES))


def test_readsize_report_orders_and_counts() -> None:
    r = rs_report(_rs_sample(), attach="raw_tp")
    assert r.interval_s == 5.0 and r.attach == "raw_tp"
    assert [(p.pid, p.op) for p in r.procs] == [(7, "read"), (11, "read"), (7, "write")]  # busiest first per op
    assert [(q.disk, q.op) for q in r.requests] == [("loop0", "read"), ("loop0", "write"), ("loop1", "read")]
    # the two map-full counters and recursion misses are losses; truncated iovecs and kthread bios explain
    assert r.losses.lost == 3 and r.losses.counters["iov_truncated"] == 5


def test_readsize_json_and_text_carry_the_same_numbers() -> None:
    r = rs_report(_rs_sample())
    doc = json.loads(json.dumps(rs_json(r)))
    text = _text(rs_renderables(r, ReadsizeViewOptions(rows=2)))
    lines = text.splitlines()
    assert doc["lost"] == 3 and doc["lost_detail"]["proc_map_full"] == 2 and doc["interval_s"] == 5.0
    assert lines[0].endswith("interval 5.000s  lost 3")
    # the driver's requests: count and max_sectors_kb as in JSON; an empty disk/direction only in JSON
    for q in doc["requests"]:
        if q["count"]:
            assert f"{q['disk']} {q['op']}: {q['count']} requests issued to the driver" in text
            assert f"(max_sectors_kb={q['max_sectors_kb']})" in text
    assert "loop0 read:" not in text and len(doc["requests"]) == 3
    # the table: -n 2 shows the two busiest rows; JSON has all three
    table = [ln.split() for ln in lines if re.match(r"\s+\d+ \S+\s+(read|write) ", ln)]
    assert len(table) == 2 and len(doc["procs"]) == 3
    assert "... 1 more processes (-r to show more)" in text
    for row, p in zip(table, doc["procs"]):
        assert row[:4] == [str(p["pid"]), p["comm"], p["op"], str(p["app"]["count"])]
        assert row[4] == fmt_bytes(p["app"]["bytes"]) and row[6] == str(p["dev"]["count"])
        assert row[7] == fmt_bytes(p["dev"]["bytes"]) and row[9] == fmt_bytes(p["dev"]["ra_bytes"])
        assert row[10] == f"{p['amplification']:.2f}"
    cat = doc["procs"][0]
    assert cat["app"]["count"] == 787 and cat["dev"]["count"] == 49 and cat["size_ratio"] == 16.0
    assert f"device requests {cat['size_ratio']:.1f}x the application's size" in text


# -- fair --------------------------------------------------------------------

def _ds(name: str, sectors_read: int, io_ms: int) -> DiskStats:
    return DiskStats(name, 7, 1, 0, 0, sectors_read, 0, 0, 0, 0, 0, 0, io_ms, 0)


def _fair_sample(seconds: float = 2.0) -> FairSample:
    fast = _proc(100, "fast", "read", [32768] * 1280, [131072] * 320, ra=320)   # 40 MiB
    slow = _proc(200, "slow", "read", [32768] * 128, [131072] * 32, ra=32)      # 4 MiB
    tiny = _proc(300, "sh", "read", [100], [])                                   # under --min-share
    earlier = _proc(200, "slow", "read", [32768] * 64, [131072] * 16, ra=16)
    settings = {"loop1": {"read_ahead_kb": 128, "scheduler": "none", "nr_requests": 128, "max_sectors_kb": 512}}
    return FairSample(
        wall=T0 + seconds, seconds=seconds, procs=[fast, slow, tiny], cumulative=[fast, slow.merge(earlier), tiny],
        losses=Losses({"proc_map_full": 0, "recursion_misses": 0}, RS_LOSSES),
        diskstats_before={"loop1": _ds("loop1", 0, 0), "loop0": _ds("loop0", 0, 0)},
        diskstats_after={"loop1": _ds("loop1", (44 << 20) // 512, 1800), "loop0": _ds("loop0", 0, 0)},
        disks=[], whole_disks=["loop0", "loop1"], settings=settings,
        limits={200: ["cgroup /slow read_bps_device 7:1 2097152"], 100: [], 300: []},
    )


def test_fair_model_balance_busy_and_causes() -> None:
    r = fair_report(_fair_sample(), by="app", min_share=0.01)
    assert [d.name for d in r.disks] == ["loop1"]  # loop0 did not move
    assert r.disks[0].util == pytest.approx(0.9) and r.disks[0].read_bytes == 44 << 20
    (g,) = r.groups  # a sample without per-disk bytes: one group of every process (--across-disks)
    assert g.disk is None
    v = g.balance["read"]
    assert v.pids == [100, 200] and v.poor  # sh's 100 bytes are under 1% of the busiest
    xs = [40 << 20, 4 << 20]
    assert v.balance.jain == pytest.approx(sum(xs) ** 2 / (2 * sum(x * x for x in xs)))
    assert g.poor["read"].busy == ["loop1"]
    assert "pid 200 (slow) is throttled: cgroup /slow read_bps_device 7:1 2097152" in g.poor["read"].causes
    assert [row.rate.pid for row in r.rows] == [100, 200, 300]
    assert r.rows[1].cum is not None and r.rows[1].cum.read == 6 << 20
    assert r.rows[0].read_Bps == (40 << 20) / 2.0
    assert g.cumulative["read"].balance.total == (46 << 20)


def test_fair_json_and_text_carry_the_same_numbers() -> None:
    r = fair_report(_fair_sample())
    doc = json.loads(json.dumps(fair_json(r)))
    lines = fair_text(r)
    assert doc["interval_s"] == 2.0 and lines[0].endswith("interval 2.000s  lost 0") and doc["lost"] == 0
    assert doc["devices"][0]["util"] == 0.9 and lines[1].startswith("loop1: busy 90%  read_ahead_kb=128")
    rows = {int(ln.split()[0]): ln.split() for ln in lines if re.match(r"\s+\d+ \S+\s+\S+\s+\S+", ln)
            and not ln.lstrip().startswith("-")}
    for p in doc["procs"]:
        row = rows[p["pid"]]
        assert row[2] == fmt_bytes(p["read_Bps"]) and row[3] == fmt_bytes(p["dev_read_Bps"])
        assert row[6] == fmt_bytes(p["cum_read_bytes"]) and row[7] == fmt_bytes(p["cum_dev_read_bytes"])
    (group,) = doc["groups"]
    bal = group["balance"]["read"]
    line = next(ln for ln in lines if ln.startswith("  interval read balance"))
    assert f"over {bal['n']} processes" in line and f"Jain {bal['jain']:.3f}" in line and "POOR" in line
    assert f"max/min {bal['max_min']:.2f}" in line and f"cv {bal['cv']:.2f}" in line
    cum = group["cumulative_balance"]["read"]
    line = next(ln for ln in lines if ln.startswith("  cumulative read balance"))
    assert f"Jain {cum['jain']:.3f}" in line and f"min {fmt_bytes(cum['min'], unit=True)} " in line
    poor = group["poor"]["read"]
    assert poor["busy"] is True and poor["busy_disks"] == ["loop1"]
    assert "    poor balance while loop1 was busy; likely causes:" in lines
    for c in poor["causes"]:
        assert f"    - {c}" in lines


def test_fair_not_busy_and_no_io() -> None:
    s = _fair_sample()
    s.diskstats_after["loop1"] = _ds("loop1", 100, 10)
    r = fair_report(s)
    poor = r.groups[0].poor
    assert poor["read"].busy == [] and any(c.startswith("the device was not busy (loop1 0%)")
                                           for c in poor["read"].causes)
    assert "    likely causes:" in fair_text(r)
    s.procs, s.cumulative = [], []
    r = fair_report(s)
    assert fair_json(r)["procs"] == [] and fair_json(r)["groups"][0]["balance"] == {}
    assert fair_text(r)[-1] == "no file I/O or block I/O in this interval"


# -- readahead -----------------------------------------------------------------

def _ra_file(pid: int, ino: int, pages: int, used: int, wasted: int, cached: int, sync: int, asy: int,
             path: str | None) -> RaFile:
    return RaFile(pid=pid, comm="reader", dev=kdev(7, 1), ino=ino, decisions={"sync": sync, "async": asy, "other": 0},
                  window_pages={"sync": sync * 32, "async": asy * 32, "other": 0}, max_ra_pages=32, max_window=32,
                  pages=pages, used=used, wasted=wasted, cached=cached, untracked=pages - used - wasted - cached,
                  path=path)


def _ra_sample() -> RaSample:
    hists = [Hist() for _ in range(abi.RA_NR_HISTS)]
    hists[0 * abi.RA_H_PER_KIND + abi.RA_H_SIZE] = Hist.from_values([4] * 3 + [32])
    hists[0 * abi.RA_H_PER_KIND + abi.RA_H_ASYNC] = Hist.from_values([0] * 3 + [16])
    hists[0 * abi.RA_H_PER_KIND + abi.RA_H_RA_PAGES] = Hist.from_values([32] * 4)
    hists[1 * abi.RA_H_PER_KIND + abi.RA_H_SIZE] = Hist.from_values([32] * 181)
    hists[abi.RA_H_AGE] = Hist.from_values([50_000] * 90 + [2_000_000] * 10)
    files = [_ra_file(10, 12, 101, 60, 30, 5, 1, 60, None),
             _ra_file(11, 13, 5895, 5895, 0, 0, 3, 121, "/mnt/a/very/long/path/to/a/file/read/ahead.dat")]
    counters = {"page_map_full": 6, "file_map_full": 0, "task_map_full": 0, "read_range_truncated": 2,
                "recursion_misses": 0}
    return RaSample(wall=T0 + 12.5, started=T0, files=files, hists=hists,
                    losses=Losses(counters, frozenset(RA_LOSSES) | {"recursion_misses"}, RA_EXPLAIN),
                    devices={kdev(7, 1): DevInfo("loop1", 128)}, missing=["wasted pages (...): unavailable"])


def test_readahead_model_totals_and_devices() -> None:
    r = ra_report(_ra_sample())
    assert [f.ino for f in r.files] == [13, 12]  # the most pages first
    assert r.totals == {"pages": 5996, "used": 5955, "wasted": 30, "cached": 5, "untracked": 6}
    assert r.decisions == {"sync": 4, "async": 181, "other": 0}
    assert r.efficiency == pytest.approx(5955 / 5996) and r.settled_efficiency == pytest.approx(5955 / 5985)
    (d,) = r.devices
    assert (d.disk, d.read_ahead_kb, d.max_ra_pages_seen, d.ra_kb_used, d.largest_window_kb) == \
        ("loop1", 128, 32, 128, 128)
    assert r.losses.lost == 6 and r.truncated_reads == 2 and r.elapsed_s == 12.5


def test_readahead_json_and_text_carry_the_same_numbers() -> None:
    r = ra_report(_ra_sample(), attach="tp_btf")
    doc = json.loads(json.dumps(ra_json(r)))
    text = _text(ra_renderables(r, RaViewOptions(rows=1)))
    lines = text.splitlines()
    assert doc["lost"] == 6 and lines[0].endswith("since start 12.500s  lost 6")
    assert doc["interval_s"] == doc["elapsed_s"] == 12.5 and doc["unavailable"] == r.missing
    assert "note: wasted pages (...): unavailable (tracepoint missing on this kernel)" in text
    dev = doc["devices"][0]
    assert (f"loop1: read_ahead_kb={dev['read_ahead_kb']}; the kernel used ra_pages up to "
            f"{dev['max_ra_pages_seen']} ({dev['ra_kb_used']} KiB), largest window "
            f"{dev['largest_window_pages']} pages ({dev['largest_window_kb']} KiB)") in text
    assert f"note: {doc['lost_detail']['read_range_truncated']} reads asked for more than 4096 pages" in text
    dec = doc["decisions"]
    assert f"decisions: sync {dec['sync']}, async {dec['async']}, other windows {dec['other']}" in text
    t = doc["totals"]
    assert (f"pages read ahead {t['pages']} ({fmt_bytes(t['pages'] * 4096)}B): used {t['used']} "
            f"({100 * t['used'] / t['pages']:.1f}%), wasted {t['wasted']}") in text
    assert f"still cached unused {t['cached']}, untracked {t['untracked']}" in text
    assert (f"efficiency: {100 * t['efficiency']:.1f}% of the pages read ahead were read "
            f"({100 * t['settled_efficiency']:.1f}% of those whose fate is known)") in text
    for kind in ("sync", "async"):
        w = doc["windows"][kind]["size"]
        assert f"{w['count']} windows, avg {w['sum'] / w['count']:.1f} max {w['max']} pages" in text
    assert "other readahead window size" not in text and doc["windows"]["other"]["size"]["count"] == 0
    age = doc["age_ns"]
    assert f"count {age['count']}  p50 " in text and age["count"] == 100 and age["p50"] <= age["p90"] <= age["p99"]
    # -n 1: one file row; JSON has both
    f = doc["files"][0]
    row = next(ln for ln in lines if ln.split()[:1] == [str(f["pid"])]).split()
    assert row[1] == f["comm"] and row[2].startswith("...") and f["path"].endswith(row[2][3:])
    assert row[3:11] == [str(f["decisions"]["sync"]), str(f["decisions"]["async"]), "0", str(f["max_window"]),
                         str(f["pages"]), str(f["used"]), str(f["wasted"]), str(f["cached"])]
    assert row[11] == f"{100 * f['efficiency']:.1f}%"
    assert "... 1 more (-r to show more)" in text and len(doc["files"]) == 2
    # a file without a path is named dev:ino
    assert doc["files"][1]["path"] is None
    assert "7:1:12" in _text(ra_renderables(r, RaViewOptions(rows=5)))


def test_readahead_nothing_seen() -> None:
    s = _ra_sample()
    s.files = []
    r = ra_report(s)
    assert r.efficiency is None and ra_json(r)["totals"]["efficiency"] is None
    assert "no readahead seen" in _text(ra_renderables(r, RaViewOptions()))
