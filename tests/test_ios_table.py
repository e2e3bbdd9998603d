"""The per-I/O table (engines/pairing/ios.py), export --format parquet and ioscope sql, without root: synthetic captures
whose phases report computes are the reference (every phase column summed and counted per row equals report's
statistic), edge cases (in flight at start and end, requeue, split, merges), chunking, bounded memory, and the
command lines' errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import blk_scenarios as bs
from conftest import run_ioscope
from ioscope.capture.events import TA_COMPLETE, TA_ISSUE, TA_QUEUE
from ioscope.capture.offline import open_source
from ioscope.engines.pairing import btt, ios

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import report_speed

ALL_PHASES = ("q2g", "g2i", "i2d", "q2m", "m2d", "d2c", "q2c", "q2d")


def table_of(path: Path) -> pa.Table:
    src = open_source(str(path))
    try:
        return pa.Table.from_batches(list(ios.ios_batches(src, ios.capture_id(src))), ios.IOS_SCHEMA)
    finally:
        src.close()


def plain(t: pa.Table) -> pa.Table:
    """Without the wall-clock columns (pyarrow gives Python values of ns timestamps only through pandas)."""
    return t.drop_columns([f"{x}_time" for x in ios.EVENT_LETTERS])


def report_of(path: Path) -> btt.BttResult:
    src = open_source(str(path))
    try:
        return btt.analyse(src.chunks(), src.comms)
    finally:
        src.close()


def _check_phases(t: pa.Table, r: btt.BttResult, phases: tuple[str, ...]) -> None:
    for ph in phases:
        col = t[ph]
        st = r.stat(ph)
        assert (pc.count(col).as_py(), pc.sum(col).as_py() or 0) == (st.n, st.total), ph


@pytest.mark.parametrize("name", ["synthetic", "split_bios", "inflight_at_start"])
def test_every_phase_column_equals_report(name: str, tmp_path: Path) -> None:
    cap = tmp_path / "c.ioscope"
    if name == "synthetic":
        report_speed.write_capture(str(cap), 60_000)
    else:
        bs.write_capture(str(cap), getattr(bs, name)())
    t, r = plain(table_of(cap)), report_of(cap)
    _check_phases(t, r, ALL_PHASES)   # no requeue here: one D per I/O
    # one row per Q report counted (split pieces are rows of their own), plus completions of I/Os queued before
    # (btt's count of Qs is the same here: no requeue, no Q at the start sector of one in flight)
    assert r.btt is not None
    nq = sum(d.n_qs for d in r.btt.devices)
    pieces = sum(d.split_pieces for d in r.devices.values())
    start = pc.sum(t["in_flight_start"]).as_py()
    assert t.num_rows == nq + pieces + start
    assert pc.sum(t["in_flight_end"]).as_py() == sum(d.inflight for d in r.devices.values())
    assert pc.sum(t["split"]).as_py() == (sum(d.split_bios for d in r.devices.values()) + pieces)
    if name == "inflight_at_start":
        # the C at 10000 (device not yet set up) and the D+C at 20000 (no Q): two rows with no Q, no process
        rows = t.filter(t["in_flight_start"]).select(["sector", "bytes", "q_ns", "pid", "comm", "c_ns"]).to_pylist()
        assert rows == [{"sector": 10_000, "bytes": 4096, "q_ns": None, "pid": None, "comm": None,
                         "c_ns": 5_000_000_000},
                        {"sector": 20_000, "bytes": 4096, "q_ns": None, "pid": None, "comm": None,
                         "c_ns": 5_000_020_000}]
    if name == "synthetic":   # the comms and merges of the generator
        assert set(t["comm"].to_pylist()) == {"fio", "postgres", "kworker/u4:2"}
        assert pc.sum(t["merged"]).as_py() == r.stat("q2m").n


def test_mixed_edges(tmp_path: Path) -> None:
    cap = tmp_path / "m.ioscope"
    bs.write_capture(str(cap), bs.mixed())
    t, r = plain(table_of(cap)), report_of(cap)
    # the requeued I/O (Q G I D R I D C) is timed from its first issue, as the kernel's objects time it: one
    # I2D and one Q2D, so every phase column adds up to report's numbers here too
    _check_phases(t, r, ALL_PHASES)
    rq = t.filter(pc.greater(t["requeues"], 0)).to_pylist()
    assert len(rq) == 1 and rq[0]["sector"] == 300_000 and rq[0]["requeues"] == 1
    assert rq[0]["d_ns"] - rq[0]["q_ns"] == 300 and rq[0]["i2d"] == 100 and rq[0]["comm"] == "fio"
    merged = t.filter(t["merged"]).to_pylist()
    assert sorted(m["sector"] for m in merged) == [99_992, 100_008, 600_016]
    assert all(m["m2d"] is not None and m["i2d"] is None for m in merged)
    end = t.filter(t["in_flight_end"]).to_pylist()
    assert [(e["sector"], e["c_ns"], e["q2c"], e["d_ns"] is not None) for e in end] == [(800_000, None, None, True)]
    cols = ["disk", "dev", "major", "minor"]
    disks = {tuple(x[c] for c in cols) for x in t.select(cols).to_pylist()}
    assert disks == {("loop0", "7,0", 7, 0), ("loop1", "7,1", 7, 1)}
    w = t.filter(pc.equal(t["sector"], 7000)).to_pylist()[0]
    assert (w["op"], w["rwbs"], w["comm"], w["d2c"], w["bytes"]) == ("write", "WS", "dd", 123_457, 65536)


def test_chunking_changes_nothing_and_memory_stays_bounded() -> None:
    s = bs.mixed()
    ev = s.events()

    def rows(chunk: int) -> list[dict[str, Any]]:
        src = open_source.__globals__["Source"]("x", "capture", meta={}, comms=dict(s.comms))
        table = ios.IosTable(src, "id")
        b = btt.Btt(s.comms, on_io=table)
        for i in range(0, len(ev), chunk):
            b.feed(ev[i:i + chunk])
        b.result()
        out = plain(pa.Table.from_batches(table.take(), ios.IOS_SCHEMA)).to_pylist()
        return sorted(out, key=lambda x: (x["sector"], x["q_ns"] or 0))

    whole = rows(len(ev))
    for chunk in (1, 3, 7):
        assert rows(chunk) == whole, chunk
    # a long stream: the Q attributes kept are those of the I/Os in flight, not of the whole stream
    src = open_source.__globals__["Source"]("x", "capture", meta={}, comms=dict(report_speed.COMMS))
    table = ios.IosTable(src, "id")
    b = btt.Btt(report_speed.COMMS, on_io=table)
    peak = 0
    n = 0
    for chunk in report_speed.synth_chunks(200_000, seed=3, ios_per_chunk=5_000):
        b.feed(chunk)
        peak = max(peak, len(table.queued.pending))
        n += sum(x.num_rows for x in table.take())
    b.result()
    n += sum(x.num_rows for x in table.take())
    assert n == b.result().stat("q2c").n + sum(d.inflight for d in b.result().devices.values())
    # synth_chunks queues one I/O every 3.9 us on average, each taking ~105 us: about 27 in flight
    # (Little's law); 200 bounds the tail, far below a chunk's 5,000
    assert peak < 200, peak


def test_no_hook_no_records() -> None:
    """report's engine without the hook: the core keeps no per-I/O records."""
    b = btt.Btt()
    b.feed(bs.mixed().events())
    assert b.core.take_io() == b""


def test_export_parquet_layout_append_and_refusal(tmp_path: Path) -> None:
    a, c = tmp_path / "a.ioscope", tmp_path / "c.ioscope"
    bs.write_capture(str(a), bs.mixed(), meta={"host": "alpha"})
    bs.write_capture(str(c), bs.split_bios(), meta={"host": "beta"})
    out = tmp_path / "pq"
    r = run_ioscope("export", "--format", "parquet", "-o", str(out), str(a), check=True)
    r = run_ioscope("export", "--format", "parquet", "-o", str(out), str(c), check=True)   # appends
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))
    assert [f.split("/")[:2] for f in files] == [["events", "host=alpha"], ["events", "host=beta"],
                                                 ["ios", "host=alpha"], ["ios", "host=beta"]]
    md = pq.read_schema(out / files[2]).metadata
    assert md[b"ioscope.schema_version"] == str(ios.SCHEMA_VERSION).encode()
    ev = pq.read_table(out / "events", partitioning="hive")
    n_ev = len(bs.mixed().events()) + len(bs.split_bios().events())
    assert ev.num_rows == n_ev
    assert pc.sum(pc.equal(ev["action"], "Q")).as_py() == int(sum(
        (s.events()["action"] == TA_QUEUE).sum() for s in (bs.mixed(), bs.split_bios())))
    # the same capture again: refused in one line, the files untouched; --force rewrites it
    before = {f: os.stat(out / f).st_mtime_ns for f in files}
    r = run_ioscope("export", "--format", "parquet", "-o", str(out), str(a))
    assert r.returncode != 0 and "exists" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert {f: os.stat(out / f).st_mtime_ns for f in files} == before
    run_ioscope("export", "--format", "parquet", "-o", str(out), "-f", "--host", "alpha", str(a), check=True)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet")) == files
    assert not [p for p in out.rglob(".*")]


def test_sql_outputs_and_views(tmp_path: Path) -> None:
    a = tmp_path / "a.ioscope"
    bs.write_capture(str(a), bs.mixed(), meta={"host": "alpha"})
    doc = json.loads(run_ioscope("report", "--json", str(a), check=True).stdout)
    q = "select host, count(q2c) n, sum(q2c) s from ios group by host"
    js = [json.loads(x) for x in run_ioscope("sql", "-j", q, str(a), check=True).stdout.splitlines()]
    assert js == [{"host": "alpha", "n": doc["phases"]["q2c"]["n"],
                   "s": round(doc["phases"]["q2c"]["total"] * 1e9)}]
    csv_out = run_ioscope("sql", "--csv", q, str(a), check=True).stdout.splitlines()
    assert csv_out == ["host,n,s", f"alpha,{js[0]['n']},{js[0]['s']}"]
    # -r CAPTURE, as agg takes it: the same rows; no input at all is one line
    assert [json.loads(x) for x in run_ioscope("sql", "-j", "-r", str(a), q, check=True).stdout.splitlines()] == js
    none = run_ioscope("sql", q)
    assert none.returncode != 0 and none.stderr.startswith("ioscope sql: error: no capture to query; give it ")
    assert len(none.stderr.splitlines()) == 1 and "Traceback" not in none.stderr
    table = run_ioscope("sql", q, str(a), check=True).stdout.splitlines()
    assert table[0].split() == ["host", "n", "s"] and table[1].split() == ["alpha", str(js[0]["n"]), str(js[0]["s"])]
    procs = [json.loads(x) for x in run_ioscope("sql", "-j", "select comm, ios from procs order by comm", str(a),
                                                 check=True).stdout.splitlines()]
    ev = bs.mixed().events()
    qs = ev[ev["action"] == TA_QUEUE]
    assert procs == [{"comm": "dd", "ios": int((qs["pid"] == 101).sum())},
                     {"comm": "fio", "ios": int((qs["pid"] == 100).sum())}]
    devs = run_ioscope("sql", "--csv", "select disk, ios from devices order by disk", str(a), check=True).stdout
    assert devs.splitlines() == ["disk,ios", f"loop0,{int((qs['dev'] == bs.LOOP0).sum())}",
                                 f"loop1,{int((qs['dev'] == bs.LOOP1).sum())}"]
    n_ev = run_ioscope("sql", "--csv", "select count(*) from events where action = 'C'", str(a), check=True).stdout
    assert n_ev.splitlines()[1] == str(int((bs.mixed().events()["action"] == TA_COMPLETE).sum()))
    # a capture given with its own export, and each given twice: counted once
    out = tmp_path / "pq"
    run_ioscope("export", "--format", "parquet", "-o", str(out), str(a), check=True)
    both = run_ioscope("sql", "--csv", "select count(*) from ios", str(out), str(a), f"{out}/", str(a),
                       check=True).stdout
    one = run_ioscope("sql", "--csv", "select count(*) from ios", str(a), check=True).stdout
    assert both == one


@pytest.mark.parametrize("args,msg", [
    (["sql", "select nope from ios", "CAP"], 'Referenced column "nope" not found'),
    (["sql", "selec 1", "CAP"], "syntax error"),
    (["sql", "select 1", "NOTCAP"], "not an ioscope capture"),
    (["sql", "select 1", "EMPTYDIR"], "not a parquet export"),
    (["sql", "select 1", "MISSING"], "no such file"),
    (["export", "--format", "parquet", "-o", "OUT", "NOTCAP"], "not an ioscope capture"),
    (["export", "--format", "parquet", "-o", "OUT", "CAP", "BLKTRACE"], "not an ioscope capture"),
    (["export", "--format", "parquet", "--per-cpu", "-o", "OUT", "CAP"], "--per-cpu is for --format blktrace"),
    (["export", "-o", "OUT", "CAP", "CAP"], "takes one capture"),
])
def test_bad_input_one_line(args: list[str], msg: str, tmp_path: Path) -> None:
    cap = tmp_path / "a.ioscope"
    bs.write_capture(str(cap), bs.mixed())
    (tmp_path / "notcap").write_text("hello\n")
    (tmp_path / "empty").mkdir()
    blk = tmp_path / "a.bin"
    run_ioscope("export", str(cap), "-o", str(blk), check=True)
    subst = {"CAP": str(cap), "NOTCAP": str(tmp_path / "notcap"), "EMPTYDIR": str(tmp_path / "empty"),
             "MISSING": str(tmp_path / "missing"), "OUT": str(tmp_path / "out"), "BLKTRACE": str(blk)}
    r = run_ioscope(*[subst.get(x, x) for x in args])
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert msg in r.stderr, r.stderr
    if args[0] == "sql" and "nope" in args[1]:   # the views' columns are named
        assert "ios(host, capture_id, disk" in r.stderr and "q2c" in r.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.parquet"))


def test_sql_many_hosts_and_an_idle_capture(tmp_path: Path) -> None:
    """Two captures exported in one command, from hosts "123" (text, not a number) and "web-1", queried with an
    idle capture (no block event: empty tables, no error): per-host counts are each capture's Qs."""
    h1, h2, idle = tmp_path / "h1.ioscope", tmp_path / "h2.ioscope", tmp_path / "idle.ioscope"
    bs.write_capture(str(h1), bs.mixed(), meta={"host": "123"})
    bs.write_capture(str(h2), bs.split_bios(), meta={"host": "web-1"})
    bs.write_capture(str(idle), bs.Scenario(), meta={"host": "idle"})
    out = tmp_path / "pq"
    run_ioscope("export", "--format", "parquet", "-o", str(out), str(h1), str(h2), check=True)
    got = [json.loads(x) for x in run_ioscope("sql", "-j", "select host, count(*) filter (where q_ns is not null) n "
                                              "from ios group by host order by host", str(out), str(idle),
                                              check=True).stdout.splitlines()]
    want = []
    for host, s in (("123", bs.mixed()), ("web-1", bs.split_bios())):
        ev = s.events()
        want.append({"host": host, "n": int(((ev["action"] == TA_QUEUE) & (ev["bytes"] > 0)).sum())
                     + sum(d.split_pieces for d in btt.analyse([ev], s.comms).devices.values())})
    assert got == want
    empty = run_ioscope("sql", "--csv", "select count(*) n, (select count(*) from events) e from ios", str(idle),
                        check=True).stdout
    assert empty.splitlines() == ["n,e", "0,0"]


def test_a_q_at_the_start_sector_of_one_in_flight(tmp_path: Path) -> None:
    """Two Qs at one start sector are two I/Os (the engine's rule): the older is marked `replaced` (btt's view
    replaces it and never completes it) and is the one the request completes; the newer stays in flight."""
    s = bs.Scenario(comms={1: "a"})
    t = 10_000
    s.add(t, TA_QUEUE, 100, 4096, pid=1)
    s.add(t + 1, TA_QUEUE, 100, 4096, pid=1)
    s.add(t + 10, TA_ISSUE, 100, 4096, pid=1)
    s.add(t + 100, TA_COMPLETE, 100, 4096, pid=1)
    cap = tmp_path / "dup.ioscope"
    bs.write_capture(str(cap), s)
    rows = plain(table_of(cap)).select(["sector", "q_ns", "d2c", "q2c", "replaced", "in_flight_end"]).to_pylist()
    assert sorted(rows, key=lambda r: r["q_ns"]) == [
        {"sector": 100, "q_ns": t, "d2c": 90, "q2c": 100, "replaced": True, "in_flight_end": False},
        {"sector": 100, "q_ns": t + 1, "d2c": None, "q2c": None, "replaced": False, "in_flight_end": True}]
    r = report_of(cap)
    assert r.devices[bs.LOOP0].dup_q == 1 and r.stat("q2c").n == 1 and r.devices[bs.LOOP0].inflight == 1
