"""report --explain's model (engines/pairing/outliers.py) on per-I/O tables written by hand: each reason's
cost and numbers, exactly, and the order the reasons come in."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ioscope.engines.pairing import outliers
from ioscope.engines.pairing.ios import IOS_SCHEMA

MS = 1_000_000


def io(q: int, d: int | None, c: int | None, *, g: int | None = None, disk: str = "loop0", op: str = "read",
       rwbs: str = "R", nbytes: int = 4096, comm: str = "app", pid: int = 10, cgroup: str | None = None,
       requeues: int = 0, merged: bool = False) -> dict[str, Any]:
    """One row of the ios table (times in ns)."""
    g = q if g is None and d is not None and not merged else g
    return {"disk": disk, "sector": q // 1000, "bytes": nbytes, "op": op, "rwbs": rwbs, "pid": pid, "tgid": pid,
            "comm": comm, "q_ns": q, "g_ns": g, "d_ns": d, "c_ns": c,
            "q2g": None if g is None else max(g - q, 1), "d2c": None if d is None or c is None else max(c - d, 1),
            "q2c": None if c is None else max(c - q, 1), "merged": merged, "split": False, "requeues": requeues,
            "in_flight_start": False, "in_flight_end": c is None, "cgroup": cgroup}


def table(rows: list[dict[str, Any]]) -> list[pa.RecordBatch]:
    cols = {f.name: [r.get(f.name) for r in rows] for f in IOS_SCHEMA}
    return [pa.RecordBatch.from_pydict(cols, schema=IOS_SCHEMA)]


def reasons(o: outliers.Outlier) -> list[tuple[str, int | None]]:
    return [(r.kind, r.cost_ns) for r in o.reasons]


def test_a_slow_device_is_the_first_reason_with_its_ratio_to_the_usual() -> None:
    # nine 4 KiB reads of 1, 2, ..., 9 ms at the device (median 5 ms) and one of 80 ms, alone
    rows = [io(k * 100 * MS, k * 100 * MS, k * 100 * MS + k * MS) for k in range(1, 10)]
    rows.append(io(2000 * MS, 2000 * MS + 2 * MS, 2000 * MS + 82 * MS, comm="slow", pid=20))
    (o,) = outliers.explain(table(rows), 1).outliers
    assert (o.comm, o.pid, o.q2c_ns, o.in_flight) == ("slow", 20, 82 * MS, False)
    assert o.phases == {"q2g": 1, "g2d": 2 * MS, "d2c": 80 * MS}
    # the median of the ten 4 KiB reads (1..9 and 80 ms): 5.5 ms
    usual = int(5.5 * MS)
    assert reasons(o) == [("device_slow", 80 * MS - usual), ("device", usual), ("queue", 2 * MS)]
    dev = o.reasons[0].detail
    assert (dev["usual_ns"], dev["like_n"], dev["ratio"], dev["at_device"]) == (usual, 10, round(80 / 5.5, 2), 0)
    assert o.others == []


def test_the_queue_names_what_was_issued_ahead_and_whose() -> None:
    # a read queued at 0 and issued at 30 ms; meanwhile a backup issued 3 writes of 64 KiB and a logger 1 of 4 KiB
    rows = [io(0, 30 * MS, 31 * MS, comm="db", pid=1)]
    rows += [io((1 + k) * MS, (2 + k) * MS, (29 + k) * MS, op="write", rwbs="W", nbytes=65536, comm="backup", pid=2)
             for k in range(3)]
    rows.append(io(5 * MS, 6 * MS, 7 * MS, op="write", rwbs="W", comm="logger", pid=3))
    rows.append(io(40 * MS, 41 * MS, 42 * MS, comm="late", pid=4))   # after it: not ahead, not meanwhile
    (o,) = outliers.explain(table(rows), 1).outliers
    assert o.comm == "db" and reasons(o)[0] == ("queue", 30 * MS)
    q = o.reasons[0].detail
    assert (q["issued_ahead"], q["bytes_ahead"]) == (4, 3 * 65536 + 4096)
    assert q["owners"] == [{"comm": "backup", "ios": 3, "bytes": 3 * 65536},
                           {"comm": "logger", "ios": 1, "bytes": 4096}]
    assert [x["comm"] for x in o.others] == ["backup", "logger"]


def test_a_tag_wait_counts_what_was_in_flight_against_nr_requests() -> None:
    # 4 writes in flight from 0 to 50 ms hold the disk's 4 requests; a read queued at 1 ms gets one at 50 ms
    rows = [io(k, k, 50 * MS + k, op="write", rwbs="W", comm="fio", pid=5) for k in range(4)]
    rows.append(io(1 * MS, 51 * MS, 52 * MS, g=50 * MS, comm="db", pid=1))
    devices = {"7,0": {"name": "loop0", "nr_requests": 4, "scheduler": "none"}}
    (o,) = outliers.explain(table(rows), 1, devices=devices).outliers
    assert o.comm == "db" and reasons(o)[0] == ("tag", 49 * MS)
    assert o.reasons[0].detail == {"in_flight_at_queue": 4, "in_flight_bytes": 4 * 4096, "nr_requests": 4}


def test_a_flush_in_flight_costs_the_union_of_its_overlap() -> None:
    # a read out from 10 to 60 ms; flushes at the device 0-20 ms and 15-30 ms (union within it: 10-30 ms) and a
    # FUA write 50-70 ms (50-60 ms): 30 ms; a flush on another disk does not count
    rows = [io(10 * MS, 11 * MS, 60 * MS, comm="db", pid=1),
            io(0, 0, 20 * MS, op="write", rwbs="FN", nbytes=0, comm="jbd2", pid=7),
            io(15 * MS, 15 * MS, 30 * MS, op="write", rwbs="FN", nbytes=0, comm="jbd2", pid=7),
            io(50 * MS, 50 * MS, 70 * MS, op="write", rwbs="WFS", comm="jbd2", pid=7),
            io(10 * MS, 10 * MS, 60 * MS, op="write", rwbs="FN", nbytes=0, disk="loop1", comm="other", pid=8)]
    e = outliers.explain(table(rows), 5)
    (o,) = [x for x in e.outliers if x.comm == "db"]
    flush = [r for r in o.reasons if r.kind == "flush"]
    assert [(r.cost_ns, r.detail["flushes"]) for r in flush] == [(30 * MS, 3)]
    assert flush[0].detail["owners"] == [{"comm": "jbd2", "ios": 3, "bytes": 4096}]


def test_one_still_in_flight_at_the_end_comes_first_by_its_age_with_its_limit_and_requeues() -> None:
    rows = [io(0, 1 * MS, 5 * MS), io(2 * MS, 3 * MS, None, comm="stuck", pid=9, cgroup="/svc", requeues=2),
            io(100 * MS, 101 * MS, 102 * MS)]
    limits = [{"disk": "loop0", "cgroup": "/svc", "limits": {"wiops": 10}}]
    e = outliers.explain(table(rows), 2, limits)
    assert e.ios == 3 and e.end_ns == 102 * MS
    first = e.outliers[0]
    assert (first.comm, first.in_flight, first.q2c_ns) == ("stuck", True, 100 * MS)
    kinds = [r.kind for r in first.reasons]
    # the device since its issue: 99 ms, against the usual 2.5 ms of the two like it that completed
    assert reasons(first)[:2] == [("device_slow", 99 * MS - int(2.5 * MS)), ("device", int(2.5 * MS))]
    assert {"requeue", "limit", "in_flight"} <= set(kinds)
    assert first.phases["d2c"] is None
    assert e.outliers[1].q2c_ns == 5 * MS


def test_json_in_seconds() -> None:
    rows = [io(0, 1 * MS, 3 * MS)]
    doc = outliers.to_json(outliers.explain(table(rows), 1))
    (o,) = doc["outliers"]
    assert o["q2c_s"] == 0.003 and o["phases_s"] == {"q2g": 1e-9, "g2d": 0.001, "d2c": 0.002}
    dev = next(r for r in o["reasons"] if r["kind"] == "device")
    assert dev["cost_s"] == 0.002 and dev["usual_s"] == 0.002 and "usual_ns" not in dev
