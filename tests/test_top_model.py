"""ioscope top's pure model: iostat math on fixture /proc/diskstats, process rows, heat-map grids (no root)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ioscope.base import hist
from ioscope.base.devices import read_diskstats
from ioscope.kernel import abi
from ioscope.tools.top import model
from ioscope.tools.top.view import snapshot_json

# Two /proc/diskstats samples 2 s apart. Fields after the name: reads, reads merged, sectors read, ms reading,
# writes, writes merged, sectors written, ms writing, in flight, io ms, weighted ms, discards (4), flushes (2).
BEFORE = """\
 253       0 vda 5000 100 80000 2500 4000 300 64000 9000 0 7000 11500 0 0 0 0 50 40
   7       2 loop2 1000 10 8000 500 200 20 3200 300 0 1000 800 0 0 0 0 0 0
   7       3 loop3 7 0 56 1 0 0 0 0 0 1 1 0 0 0 0 0 0
 253       1 vda1 4900 100 79000 2400 4000 300 64000 9000 0 6900 11400 0 0 0 0 0 0
"""
AFTER = """\
 253       0 vda 5000 100 80000 2500 4010 300 64080 9020 0 7010 11520 0 0 0 0 52 41
   7       2 loop2 3000 50 24000 1500 700 120 11200 1300 1 2500 3800 0 0 0 0 0 0
   7       3 loop3 7 0 56 1 0 0 0 0 0 1 1 0 0 0 0 0 0
 253       1 vda1 4900 100 79000 2400 4010 300 64080 9020 0 6910 11420 0 0 0 0 0 0
"""



@pytest.fixture
def samples(tmp_path: Path) -> tuple[dict[str, object], dict[str, object]]:
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "diskstats").write_text(BEFORE)
    (b / "diskstats").write_text(AFTER)
    return read_diskstats(str(a)), read_diskstats(str(b))  # type: ignore[return-value]


def test_iostat_math_matches_sysstat_formulas(samples: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    a, b = samples
    row = model.iostat(a["loop2"], b["loop2"], 2.0)
    # worked out by hand from the fixture (deltas: reads 2000, merged 40, sectors 16000, ms 1000; writes 500,
    # merged 100, sectors 8000, ms 1000; io_ms 1500; weighted 3000; over 2 s)
    assert row.r_s == pytest.approx(1000.0)
    assert row.w_s == pytest.approx(250.0)
    assert row.rkB_s == pytest.approx(4000.0)
    assert row.wkB_s == pytest.approx(2000.0)
    assert row.rrqm_s == pytest.approx(20.0)
    assert row.wrqm_s == pytest.approx(50.0)
    assert row.r_await == pytest.approx(0.5)
    assert row.w_await == pytest.approx(2.0)
    assert row.aqu_sz == pytest.approx(1.5)
    assert row.rareq_sz == pytest.approx(4.0)
    assert row.wareq_sz == pytest.approx(8.0)
    assert row.util == pytest.approx(75.0)


def test_iostat_without_io_has_zero_awaits(samples: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    a, b = samples
    row = model.iostat(a["vda"], b["vda"], 2.0)
    assert row.r_s == 0 and row.r_await == 0 and row.rareq_sz == 0
    assert row.w_s == pytest.approx(5.0) and row.w_await == pytest.approx(2.0) and row.wareq_sz == pytest.approx(4.0)
    assert not model.active(a["loop3"], b["loop3"])
    assert model.active(a["loop2"], b["loop2"])


def test_counters_going_back_count_as_zero(samples: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    a, b = samples
    row = model.iostat(b["loop2"], a["loop2"], 1.0)  # device re-created: counters restarted
    assert row.r_s == 0 and row.util == 0


def _proc_arrays(recs: list[tuple[int, int, int, int, int, list[int]]],
                 cgroups: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    keys = np.zeros(len(recs), dtype=abi.TOP_PROC_KEY)
    vals = np.zeros(len(recs), dtype=abi.TOP_PROC_VAL)
    for i, (tgid, dev, op, ios, nbytes, lats) in enumerate(recs):
        keys[i]["tgid"], keys[i]["dev"], keys[i]["op"] = tgid, dev, op
        keys[i]["cgroup"] = cgroups[i] if cgroups else 0
        vals[i]["ios"], vals[i]["bytes"] = ios, nbytes
        h = hist.Hist.from_values(lats)
        vals[i]["lat"]["slots"] = h.counts
        vals[i]["lat"]["count"] = h.count
        vals[i]["lat"]["sum"] = h.total
        vals[i]["lat"]["max"] = h.max
        vals[i]["lat"]["min_inv"] = ~np.uint64(h.min) if h.count else 0
    return keys, vals


def test_proc_rows_merge_ops_and_keep_disks_apart() -> None:
    reads = [100_000] * 97 + [5_000_000] * 3    # 100 reads: 97 at 100 us, 3 at 5 ms
    writes = [200_000] * 50
    keys, vals = _proc_arrays([
        (4242, 7 << 20 | 2, abi.OP_READ, 100, 100 * 4096, reads),
        (4242, 7 << 20 | 2, abi.OP_WRITE, 50, 50 * 16384, writes),
        (4242, 253 << 20, abi.OP_READ, 2, 8192, [1_000_000, 1_000_000]),
        (17, 7 << 20 | 2, abi.OP_FLUSH, 3, 0, [10_000] * 3),
    ])
    names = {7 << 20 | 2: "loop2", 253 << 20: "vda"}
    rows = model.proc_rows(keys, vals, 2.0, names.__getitem__, lambda t: {4242: "fio", 17: "jbd2"}[t])
    by = {(r.pid, r.disk): r for r in rows}
    assert set(by) == {(4242, "loop2"), (4242, "vda"), (17, "loop2")}
    fio = by[(4242, "loop2")]
    assert fio.comm == "fio"
    assert fio.r_s == pytest.approx(50.0) and fio.w_s == pytest.approx(25.0)
    assert fio.rkB_s == pytest.approx(200.0) and fio.wkB_s == pytest.approx(400.0)
    assert fio.avg_kB == pytest.approx((100 * 4 + 50 * 16) / 150)
    assert fio.avg_ms == pytest.approx((97 * 0.1 + 3 * 5 + 50 * 0.2) / 150)
    # 150 values, the slowest 3 at 5 ms: the 99th percentile (rank 148.5) is in the 5 ms bucket
    assert hist.check_relative_error(fio.p99_ms * 1e6, 5_000_000)
    assert fio.ios == 150
    flush = by[(17, "loop2")]
    assert flush.r_s == 0 and flush.w_s == 0 and flush.ios == 3 and flush.avg_kB == 0
    top = model.sort_procs(rows)
    assert top[0].pid == 4242 and top[0].disk == "loop2"
    assert [r.pid for r in model.sort_procs(rows, "pid", reverse=False)] == [17, 4242, 4242]


def test_cgroup_view_adds_up_processes_per_cgroup_and_splits_a_kworker() -> None:
    """With cgroup names (-G): a process row per (process, disk, cgroup), so a kworker that queued two
    cgroups' throttled writes has a row in each; the cgroup rows add up the rows of their cgroup, the
    latency histograms merged (not averaged)."""
    dev = 7 << 20 | 2
    keys, vals = _proc_arrays([
        (100, dev, abi.OP_WRITE, 40, 40 * 4096, [1_000_000] * 40),     # fio in /svc-a
        (100, dev, abi.OP_READ, 10, 10 * 4096, [100_000] * 10),
        (7, dev, abi.OP_WRITE, 30, 30 * 4096, [900_000_000] * 30),    # kworker, /svc-a's held writes
        (7, dev, abi.OP_WRITE, 5, 5 * 4096, [200_000] * 5),           # kworker, /svc-b's
        (200, dev, abi.OP_READ, 20, 20 * 8192, [50_000] * 20),        # db in /svc-b
    ], cgroups=[11, 11, 11, 12, 12])
    names = {11: "/svc-a", 12: "/system.slice/docker-" + "ab" * 32 + ".scope"}
    rows = model.proc_rows(keys, vals, 1.0, {dev: "loop2"}.__getitem__,
                           {100: "fio", 7: "kworker/0:1", 200: "db"}.__getitem__, names.__getitem__)
    by = {(r.pid, r.cgroup): r for r in rows}
    assert set(by) == {(100, "/svc-a"), (7, "/svc-a"), (7, names[12]), (200, names[12])}
    assert by[(7, "/svc-a")].ios == 30 and by[(7, names[12])].ios == 5
    cgs = {c.cgroup: c for c in model.cgroup_rows(rows)}
    a, b = cgs["/svc-a"], cgs[names[12]]
    assert (a.procs, a.ios, b.procs, b.ios) == (2, 80, 2, 25)
    assert a.w_s == pytest.approx(70.0) and a.r_s == pytest.approx(10.0)
    assert a.wkB_s == pytest.approx(280.0) and b.rkB_s == pytest.approx(160.0)
    # the kworker's 30 held writes at 900 ms are 30 of /svc-a's 80 I/Os: its p99 is theirs
    assert a.p99_ms is not None and hist.check_relative_error(a.p99_ms * 1e6, 900_000_000)
    assert a.hist is not None and a.hist.count == 80
    assert b.label == names[12] + " [docker " + "ab" * 6 + "]" and a.label == "/svc-a"
    assert [c.cgroup for c in model.cgroup_rows(rows)] == ["/svc-a", names[12]]  # busiest first
    # without names (no -G, no -c): the rows are per process and disk, as before
    plain = model.proc_rows(keys, vals, 1.0, {dev: "loop2"}.__getitem__,
                            {100: "fio", 7: "kworker/0:1", 200: "db"}.__getitem__)
    assert sorted((r.pid, r.ios) for r in plain) == [(7, 35), (100, 50), (200, 20)]
    assert all(r.cgroup is None for r in plain) and model.cgroup_rows(plain) == []


def test_snapshot_filters_and_json(samples: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    a, b = samples
    keys, vals = _proc_arrays([(4242, 7 << 20 | 2, abi.OP_READ, 10, 40960, [50_000] * 10)])
    dkeys = np.zeros(1, dtype=abi.TOP_DISK_KEY)
    dkeys[0]["dev"] = 7 << 20 | 2
    h = hist.Hist.from_values([30_000] * 99 + [9_000_000])
    dh = np.zeros(1, dtype=abi.HIST)
    dh[0]["slots"], dh[0]["count"], dh[0]["sum"], dh[0]["max"] = h.counts, h.count, h.total, h.max
    dh[0]["min_inv"] = ~np.uint64(h.min)
    s0 = model.Sample(10.0, 1000.0, a)
    s1 = model.Sample(12.0, 1002.0, b, keys, vals, dkeys, dh, 3, {"start_map_full": 3})
    names = {7 << 20 | 2: "loop2"}
    snap = model.build_snapshot(s0, s1, host="h", kernel="k", disks=["loop2", "loop3", "vda"],
                                name_of=names.__getitem__, comm_of=lambda t: "fio")
    assert [d.disk for d in snap.devices] == ["loop2", "vda"]  # loop3 idle, vda1 is a partition
    loop2 = snap.devices[0]
    assert loop2.lat_ios == 100 and loop2.p99_ms is not None
    # the p99 of 99 I/Os of 30 us and one of 9 ms lies between the two
    assert 0.03 <= loop2.p99_ms <= 9.0
    doc = snapshot_json(snap)
    assert doc["lost"] == 3 and doc["interval_s"] == 2.0
    assert {"disk", "r_s", "w_s", "rkB_s", "wkB_s", "rrqm_s", "wrqm_s", "r_await", "w_await", "aqu_sz", "rareq_sz",
            "wareq_sz", "util", "p99_ms"} <= set(doc["devices"][0])
    assert {"pid", "comm", "disk", "r_s", "w_s", "rkB_s", "wkB_s", "avg_kB", "avg_ms", "p99_ms"} <= set(doc["procs"][0])
    assert sum(b[2] for b in doc["devices"][0]["lat_buckets"]) == 100
    f = model.filter_snapshot(snap, disk="vda")
    assert [d.disk for d in f.devices] == ["vda"] and f.procs == []
    f = model.filter_snapshot(snap, pid=4242)
    assert len(f.procs) == 1 and len(f.devices) == 2


def test_heat_grid_conserves_counts_and_orders_bands() -> None:
    hh = model.HeatHistory(columns=10)
    for i in range(12):
        vals = [20_000 + i] * (i + 1) + ([3_000_000] if i % 4 == 0 else [])
        hh.push(float(i), {"loop2": hist.Hist.from_values(vals)})
    assert len(hh.cols["loop2"]) == 10
    g = hh.grid("loop2", 20, 12)
    assert g is not None
    assert g.counts.shape[1] == 20  # padded on the left to the requested width
    assert int(g.counts.sum()) == sum((i + 1) + (1 if i % 4 == 0 else 0) for i in range(2, 12))
    assert all(lo < hi for lo, hi in zip(g.lows, g.highs))
    assert all(g.highs[i] == g.lows[i + 1] for i in range(len(g.lows) - 1))
    slow = max(i for i in range(len(g.lows)) if g.counts[i].sum())
    assert g.lows[slow] <= 3_000_000 < g.highs[slow]
    assert int(g.counts[:, -1].sum()) == 12  # the newest interval (i = 11): 12 I/Os, none slow
    assert len(g.lows) <= 12
    # a disk appearing later gets empty columns before it
    hh.push(12.0, {"vdb": hist.Hist.from_values([1000])})
    assert len(hh.cols["vdb"]) == 10 and int(hh.cols["vdb"][-1].sum()) == 1
    assert int(hh.cols["loop2"][-1].sum()) == 0
