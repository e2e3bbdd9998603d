"""The per-I/O table (docs/ios-table.md): one row per I/O as report's engine (btt.Btt) pairs them, and the
raw events, as Arrow record batches, streamed chunk by chunk with bounded memory.

Btt's core emits one record per I/O (btt.IOREC), as the pairing engine pairs them (tracecore/bios.c), when it
completes or is still in flight at the end; the attributes of its Q event (pid, tgid, cpu, flags, command)
are kept here from the Q until no I/O in flight needs them any more (QueuedAttrs), with the cgroup its bio
was charged to (the Q's aux where it has EV_CGROUP: every piece of a split bio, and the request it went
into, is that bio's cgroup).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ioscope.base.devices import kdev_split, kdev_str
from ioscope.base.hist import bucket_indexes
from ioscope.capture.events import (
    ACTION_LETTERS,
    EV_CGROUP,
    EV_NOTE_PROCESS,
    TA_QUEUE,
    TC_DISCARD,
    TC_WRITE,
    note_comm,
    rwbs,
)
from ioscope.capture.offline import Source
from ioscope.engines.pairing import btt
from ioscope.engines.pairing.btt import IO_DUP, IO_END, IO_SPLIT, IO_START, NO_TIME, Btt, CgroupIOs

SCHEMA_VERSION = 1
PHASE_COLS = ("q2g", "g2i", "i2d", "q2m", "m2d", "d2c", "q2c", "q2d")
EVENT_LETTERS = ("q", "g", "i", "m", "d", "c")
# wall-clock columns in microseconds: Spark reads no nanosecond Parquet timestamp (PARQUET_TYPE_ILLEGAL
# with pyspark 4 unless spark.sql.legacy.parquet.nanosAsLong); the exact instants are the *_ns columns
TS = pa.timestamp("us", tz="UTC")

# The host is not a column of the files: it is their Hive partition (host=H/), which every reader adds.
IOS_SCHEMA = pa.schema(
    [("capture_id", pa.string()), ("disk", pa.string()), ("dev", pa.string()), ("major", pa.int32()),
     ("minor", pa.int32()), ("sector", pa.int64()), ("bytes", pa.int64()), ("op", pa.string()),
     ("rwbs", pa.string()), ("pid", pa.int32()), ("tgid", pa.int32()), ("comm", pa.string()), ("cpu", pa.int32())]
    + [(f"{x}_ns", pa.int64()) for x in EVENT_LETTERS]
    + [(f"{x}_time", TS) for x in EVENT_LETTERS]
    + [(p, pa.int64()) for p in PHASE_COLS]
    + [("merged", pa.bool_()), ("split", pa.bool_()), ("requeues", pa.int32()), ("error", pa.int32()),
       ("in_flight_start", pa.bool_()), ("in_flight_end", pa.bool_()), ("replaced", pa.bool_()),
       ("cgroup_id", pa.int64()), ("cgroup", pa.string())],
    metadata={b"ioscope.table": b"ios", b"ioscope.schema_version": str(SCHEMA_VERSION).encode()})

EVENTS_SCHEMA = pa.schema(
    [("capture_id", pa.string()), ("ts_ns", pa.int64()), ("time", TS), ("disk", pa.string()), ("dev", pa.string()),
     ("action", pa.string()), ("rwbs", pa.string()), ("sector", pa.int64()), ("bytes", pa.int64()),
     ("pid", pa.int32()), ("tgid", pa.int32()), ("comm", pa.string()), ("cpu", pa.int32()), ("error", pa.int32()),
     ("aux", pa.int64()), ("aux_dev", pa.string())],
    metadata={b"ioscope.table": b"events", b"ioscope.schema_version": str(SCHEMA_VERSION).encode()})

# cg: the cgroup id of the Q, NO_CGROUP where it carries none (older captures, blktrace imports)
QATTR = np.dtype([("ord", "<u8"), ("pid", "<u4"), ("tgid", "<u4"), ("cpu", "<u2"), ("category", "<u2"),
                  ("comm", "<i4"), ("cg", "<i8")])
NO_CGROUP = -1
QCGROUP = np.dtype([("ord", "<u8"), ("cg", "<i8")])   # the fields of QATTR report's cgroups need


def capture_id(src: Source) -> str:
    """A capture's id: its start (UTC) and a digest of its header, the same for every export of the file."""
    meta = {k: v for k, v in src.meta.items() if k not in ("truncated", "end", "late_events", "chunks", "events")}
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:10]
    wall = None
    for key in ("start", "clock"):
        c = src.meta.get(key)
        if isinstance(c, dict) and isinstance(c.get("wall_ns"), int):
            wall = int(c["wall_ns"])
            break
    if wall is None:
        return digest
    import time
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall // 1_000_000_000)) + "-" + digest


def wall_offset(src: Source) -> int | None:
    """wall-clock ns minus CLOCK_MONOTONIC ns, from the capture's clock pair (offline.wall_at's mapping)."""
    from ioscope.capture.offline import wall_at
    w = wall_at(src, 0)
    return None if w is None else w


class _Strings:
    """Strings numbered in order of first use (an Arrow dictionary)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.values: list[str] = []

    def id(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.values)
            self.values.append(s)
        return i

    def column(self, idx: npt.NDArray[Any]) -> pa.Array:
        """Strings of indexes idx (-1: null), plain (not dictionary) so that every reader takes them."""
        vals = pa.array(self.values, pa.string())
        mask = idx < 0
        taken = vals.take(pa.array(np.where(mask, 0, idx).astype(np.int32))) if len(self.values) else \
            pa.nulls(len(idx), pa.string())
        if mask.any():
            taken = pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), taken)
        return taken


def queue_cgroups(ev: npt.NDArray[np.void], at: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """The cgroup id of the events ev[at] (their aux where they have EV_CGROUP), else NO_CGROUP."""
    return np.where((ev["flags"][at] & EV_CGROUP) != 0, ev["aux"][at].astype(np.int64), np.int64(NO_CGROUP))


class QueuedAttrs:
    """The attributes (QATTR) of the Qs whose I/O may still be in flight, by the Q's ordinal: remember()
    the Qs of each chunk the engine is fed, find() those of its per-I/O records, forget() the Qs no I/O
    in flight needs any more (an IoSink's three steps; memory bounded by the I/Os in flight)."""

    def __init__(self, dtype: np.dtype[np.void] = QATTR) -> None:
        """dtype: QATTR, or the fields of it a sink needs ("ord" and "cg" for report's cgroups)."""
        self.dtype = dtype
        self.pending = np.zeros(0, dtype=dtype)

    def remember(self, ev: npt.NDArray[np.void], base: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.void]]:
        """The chunk's Qs with data (ev[k] has ordinal base + k): their indexes in ev and their rows, whose
        fields the caller may fill further (comm) before add()."""
        q = np.flatnonzero((ev["action"] == TA_QUEUE) & (ev["bytes"] > 0))
        add = np.zeros(len(q), dtype=self.dtype)
        if len(q):
            add["ord"] = q.astype(np.uint64) + np.uint64(base)
            names = self.dtype.names or ()
            for f in ("pid", "tgid", "cpu", "category"):
                if f in names:
                    add[f] = ev[f][q]
            add["cg"] = queue_cgroups(ev, q)
        return q, add

    def add(self, rows: npt.NDArray[np.void]) -> None:
        if len(rows):
            self.pending = np.concatenate([self.pending, rows])

    def find(self, recs: npt.NDArray[np.void]) -> tuple[npt.NDArray[np.void], npt.NDArray[np.bool_]]:
        """The attributes of each record's Q, and whether it was found (records without a Q: not)."""
        n = len(recs)
        has_q = recs["ord_q"] != NO_TIME
        if not len(self.pending):
            return np.zeros(n, dtype=self.dtype), np.zeros(n, dtype=bool)
        at = np.minimum(np.searchsorted(self.pending["ord"], recs["ord_q"]), len(self.pending) - 1)
        return self.pending[at], has_q & (self.pending["ord"][at] == recs["ord_q"])

    def forget(self, recs: npt.NDArray[np.void], min_ord: int) -> None:
        """Drop the Qs older than min_ord (the oldest Q in flight; -1: none is) and those of the whole
        (not split) I/Os just emitted."""
        keep = self.pending["ord"] >= np.uint64(min_ord) if min_ord >= 0 else np.zeros(len(self.pending), bool)
        if len(recs):
            done = recs["ord_q"][(recs["flags"] & IO_SPLIT) == 0]
            keep &= ~np.isin(self.pending["ord"], done)
        if not keep.all():
            self.pending = self.pending[keep]


class IosTable(btt.IoSink):
    """Collects the per-I/O rows of one capture as Arrow record batches (batches())."""

    def __init__(self, src: Source, cap_id: str, batch_rows: int = 262_144) -> None:
        self.src = src
        self.cap_id = cap_id
        self.wall = wall_offset(src)
        self.batch_rows = batch_rows
        self.queued = QueuedAttrs()   # attributes of Qs whose I/O may still be in flight
        self.comms = _Strings()
        self.cgroups: dict[int, str] = src.cgroups
        self.out: list[pa.RecordBatch] = []
        self.rows = 0

    def io(self, recs: npt.NDArray[np.void], ev: npt.NDArray[np.void] | None, base: int, comms: dict[int, str],
           dev_of: list[int], min_ord: int) -> None:
        if ev is not None:
            q, add = self.queued.remember(ev, base)
            if len(q):
                upid, inv = np.unique(ev["pid"][q], return_inverse=True)
                ids = np.array([self.comms.id(comms[p]) if p in comms else -1 for p in upid.tolist()], dtype=np.int32)
                add["comm"] = ids[inv.reshape(-1)]
                self.queued.add(add)
        if len(recs):
            self._rows(recs, ev, base, dev_of)
        if ev is not None:   # forget the Qs no I/O in flight needs
            self.queued.forget(recs, min_ord)

    def _rows(self, r: npt.NDArray[np.void], ev: npt.NDArray[np.void] | None, base: int, dev_of: list[int]) -> None:
        n = len(r)
        attrs, found = self.queued.find(r)
        devs = np.array(dev_of, dtype=np.int64)[r["dev"]]
        err = np.zeros(n, dtype=np.int32)
        has_c = r["ord_c"] != NO_TIME
        if ev is not None and has_c.any():
            err[has_c] = ev["error"][(r["ord_c"][has_c] - np.uint64(base)).astype(np.int64)]
        cat = attrs["category"]
        cols: dict[str, Any] = {}
        cols["capture_id"] = pa.repeat(self.cap_id, n)
        names, devstr, major, minor = _dev_columns(self.src, devs)
        cols["disk"], cols["dev"], cols["major"], cols["minor"] = names, devstr, major, minor
        cols["sector"] = pa.array(r["s"].astype(np.int64))
        cols["bytes"] = pa.array(((r["e"] - r["s"]) * np.uint64(512)).astype(np.int64))
        op = np.where(cat & TC_DISCARD, 2, np.where(cat & TC_WRITE, 1, 0)).astype(np.int32)
        cols["op"] = _masked(pa.array(["read", "write", "discard"], pa.string()).take(pa.array(op)), found)
        ucat, inv = _small_unique(cat)
        cols["rwbs"] = _masked(pa.array([rwbs(int(c), 1) for c in ucat.tolist()], pa.string()).take(inv), found)
        cols["pid"] = _masked(pa.array(attrs["pid"].astype(np.int32)), found)
        cols["tgid"] = _masked(pa.array(attrs["tgid"].astype(np.int32)), found)
        cols["comm"] = self.comms.column(np.where(found, attrs["comm"], -1))
        cols["cpu"] = _masked(pa.array(attrs["cpu"].astype(np.int32)), found)
        t = {x: r[f] for x, f in zip(EVENT_LETTERS, ("t", "g", "i", "m", "d", "c"))}
        ok = {x: v != NO_TIME for x, v in t.items()}
        for x in EVENT_LETTERS:
            mono = t[x].astype(np.int64)
            cols[f"{x}_ns"] = pa.array(mono, mask=~ok[x])
        for x in EVENT_LETTERS:
            if self.wall is None:
                cols[f"{x}_time"] = pa.nulls(n, TS)
            else:
                cols[f"{x}_time"] = pa.array((t[x].astype(np.int64) + self.wall) // 1000, TS, mask=~ok[x])
        # as report times them: G2I at an I after the G, I2D (else M2D) at a D after the I (M)
        cols["q2g"] = _delta(t["q"], t["g"], ok["q"] & ok["g"])
        cols["g2i"] = _delta(t["g"], t["i"], ok["g"] & ok["i"] & (t["i"] >= t["g"]))
        i_first = ok["i"] & ok["d"] & (t["d"] >= t["i"])
        cols["i2d"] = _delta(t["i"], t["d"], i_first)
        cols["q2m"] = _delta(t["q"], t["m"], ok["q"] & ok["m"])
        cols["m2d"] = _delta(t["m"], t["d"], ok["m"] & ok["d"] & ~i_first & (t["d"] >= t["m"]))
        cols["d2c"] = _delta(t["d"], t["c"], ok["d"] & ok["c"])
        cols["q2c"] = _delta(t["q"], t["c"], ok["q"] & ok["c"])
        cols["q2d"] = _delta(t["q"], t["d"], ok["q"] & ok["d"])
        cols["merged"] = pa.array(ok["m"])
        cols["split"] = pa.array((r["flags"] & IO_SPLIT) != 0)
        cols["requeues"] = pa.array(r["rq"].astype(np.int32))
        cols["error"] = pa.array(err, mask=~has_c)
        cols["in_flight_start"] = pa.array((r["flags"] & IO_START) != 0)
        cols["in_flight_end"] = pa.array((r["flags"] & IO_END) != 0)
        cols["replaced"] = pa.array((r["flags"] & IO_DUP) != 0)
        cg = np.where(found, attrs["cg"], np.int64(NO_CGROUP))
        has_cg = cg != NO_CGROUP
        cols["cgroup_id"] = pa.array(cg, mask=~has_cg)
        cols["cgroup"] = _cgroup_column(cg, self.cgroups)
        self.out.append(pa.RecordBatch.from_arrays([cols[f.name] for f in IOS_SCHEMA], schema=IOS_SCHEMA))
        self.rows += n

    def take(self) -> list[pa.RecordBatch]:
        out, self.out = self.out, []
        return out


class CgroupSink(btt.IoSink):
    """Report's per-cgroup view: each I/O's Q2C and D2C, as the ios table's columns have them, summed
    per cgroup of its Q (totals: cgroup id, or NO_CGROUP, -> CgroupIOs)."""

    def __init__(self) -> None:
        self.queued = QueuedAttrs(QCGROUP)
        self.totals: dict[int, CgroupIOs] = {}

    def io(self, recs: npt.NDArray[np.void], ev: npt.NDArray[np.void] | None, base: int, comms: dict[int, str],
           dev_of: list[int], min_ord: int) -> None:
        if ev is not None:
            self.queued.add(self.queued.remember(ev, base)[1])
        if len(recs):
            attrs, found = self.queued.find(recs)
            r, cg = recs[found], attrs["cg"][found]
            done = r["c"] != NO_TIME
            issued = done & (r["d"] != NO_TIME)
            q2c = np.where(r["c"] > r["t"], r["c"] - r["t"], np.uint64(1))
            d2c = np.where(r["c"] > r["d"], r["c"] - r["d"], np.uint64(1))
            bq, bd = bucket_indexes(q2c), bucket_indexes(d2c)   # once per chunk, not per cgroup
            nbytes = ((r["e"] - r["s"]) * np.uint64(512)).astype(np.int64)
            first = cg[0] if len(cg) else NO_CGROUP
            for c in [int(first)] if bool((cg == first).all()) else np.unique(cg).tolist():
                m = cg == c
                acc = self.totals.get(c)
                if acc is None:
                    acc = self.totals[c] = CgroupIOs()
                md, mi = m & done, m & issued
                acc.ios += int(md.sum())
                acc.bytes += int(nbytes[md].sum())
                acc.unfinished += int((m & ~done).sum())
                acc.q2c.add(q2c[md], bq[md])
                acc.d2c.add(d2c[mi], bd[mi])
        if ev is not None:
            self.queued.forget(recs, min_ord)


def cgroup_path(cg: int, cgroups: dict[int, str]) -> str:
    """A cgroup id's path as the capture stored it; "cgroup:ID" for an id it has no path for."""
    return cgroups.get(cg) or f"cgroup:{cg}"


def _cgroup_column(cg: npt.NDArray[np.int64], cgroups: dict[int, str]) -> pa.Array:
    """The paths of cgroup ids (null for NO_CGROUP)."""
    if not (cg != NO_CGROUP).any():
        return pa.nulls(len(cg), pa.string())
    u, inv = np.unique(cg, return_inverse=True)
    names = [None if c == NO_CGROUP else cgroup_path(c, cgroups) for c in u.tolist()]
    return pa.array(names, pa.string()).take(pa.array(inv.reshape(-1).astype(np.int32)))


def _masked(a: pa.Array, valid: npt.NDArray[np.bool_]) -> pa.Array:
    if valid.all():
        return a
    return pc.if_else(pa.array(valid), a, pa.scalar(None, a.type))


def _delta(a: npt.NDArray[Any], b: npt.NDArray[Any], ok: npt.NDArray[np.bool_]) -> pa.Array:
    """b - a in ns as btt counts a phase: 1 when zero or negative; null where either event is absent."""
    d = np.where(b > a, b - a, np.uint64(1)).astype(np.int64)
    return pa.array(d, mask=~ok)


def _small_unique(x: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], pa.Array]:
    """np.unique(x, return_inverse=True) for small non-negative integers (codes, flags): by counting, not
    sorting; the inverse as an Arrow int32 array, for take()."""
    if not len(x):
        return np.zeros(0, dtype=np.int64), pa.array(np.zeros(0, dtype=np.int32))
    u = np.flatnonzero(np.bincount(x))
    lut = np.zeros(int(u[-1]) + 1, dtype=np.int32)
    lut[u] = np.arange(len(u), dtype=np.int32)
    return u, pa.array(lut[x])


def _dev_columns(src: Source, devs: npt.NDArray[np.int64]) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    if len(devs) and bool((devs == devs[0]).all()):   # the common case: one disk in the batch
        u, inv = devs[:1], np.zeros(len(devs), dtype=np.int64)
    else:
        u, inv = np.unique(devs, return_inverse=True)
        inv = inv.reshape(-1)
    names = [src.dev_name(int(d)) or kdev_str(int(d)) for d in u.tolist()]
    strs = [kdev_str(int(d)) for d in u.tolist()]
    mm = [kdev_split(int(d)) for d in u.tolist()]
    take = pa.array(inv.astype(np.int32))
    return (pa.array(names, pa.string()).take(take), pa.array(strs, pa.string()).take(take),
            pa.array([m[0] for m in mm], pa.int32()).take(take), pa.array([m[1] for m in mm], pa.int32()).take(take))


def ios_batches(src: Source, cap_id: str, events_sink: Any = None) -> Iterator[pa.RecordBatch]:
    """The per-I/O rows of a capture, as record batches, streaming. events_sink(ev, comms): each chunk's
    events as they are read (for the events table)."""
    table = IosTable(src, cap_id)
    b = Btt(src.comms, on_io=table, stats=False)   # the pairing only: report's statistics are not needed
    for chunk in src.chunks():
        if events_sink is not None:
            events_sink(chunk, b.comms)
        b.feed(chunk)
        yield from table.take()
    b.finish_io()
    yield from table.take()


def event_batch(src: Source, cap_id: str, ev: npt.NDArray[np.void], comms: dict[int, str],
                wall: int | None) -> pa.RecordBatch | None:
    """A chunk's block events (process notes left out: they name processes, see procs) as one batch."""
    notes = (ev["flags"] & EV_NOTE_PROCESS) != 0
    if notes.any():
        for e in ev[notes]:
            comms.setdefault(int(e["pid"]), note_comm(e))
        ev = ev[~notes]
    n = len(ev)
    if not n:
        return None
    cols: dict[str, Any] = {}
    cols["capture_id"] = pa.repeat(cap_id, n)
    ts = ev["ts"].astype(np.int64)
    cols["ts_ns"] = pa.array(ts)
    cols["time"] = pa.array((ts + wall) // 1000, TS) if wall is not None else pa.nulls(n, TS)
    names, devstr, _ma, _mi = _dev_columns(src, ev["dev"].astype(np.int64))
    cols["disk"], cols["dev"] = names, devstr
    ua, ia = _small_unique(ev["action"])
    cols["action"] = pa.array([ACTION_LETTERS.get(int(a), str(int(a))) for a in ua.tolist()], pa.string()).take(ia)
    key = ev["category"].astype(np.int64) * 2 + (ev["bytes"] > 0)
    uk, ik = _small_unique(key)
    cols["rwbs"] = pa.array([rwbs(int(k) >> 1, int(k) & 1) for k in uk.tolist()], pa.string()).take(ik)
    cols["sector"] = pa.array(ev["sector"].astype(np.int64))
    cols["bytes"] = pa.array(ev["bytes"].astype(np.int64))
    cols["pid"] = pa.array(ev["pid"].astype(np.int32))
    cols["tgid"] = pa.array(ev["tgid"].astype(np.int32))
    up, ip = np.unique(ev["pid"], return_inverse=True)
    cols["comm"] = pa.array([comms.get(int(p)) for p in up.tolist()], pa.string()).take(
        pa.array(ip.reshape(-1).astype(np.int32)))
    cols["cpu"] = pa.array(ev["cpu"].astype(np.int32))
    cols["error"] = pa.array(ev["error"].astype(np.int32))
    cols["aux"] = pa.array(ev["aux"].astype(np.int64))
    aux_dev = ev["aux_dev"]
    if not aux_dev.any():
        cols["aux_dev"] = pa.nulls(n, pa.string())
    else:
        ud, idd = np.unique(aux_dev, return_inverse=True)
        cols["aux_dev"] = pa.array([kdev_str(int(d)) if d else None for d in ud.tolist()], pa.string()).take(
            pa.array(idd.reshape(-1).astype(np.int32)))
    return pa.RecordBatch.from_arrays([cols[f.name] for f in EVENTS_SCHEMA], schema=EVENTS_SCHEMA)
