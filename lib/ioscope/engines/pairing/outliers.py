"""Each outlier explained (report --explain): for the slowest I/Os of a capture, why each took that long, the
reasons in the order they cost, from the per-I/O table alone (docs/ios-table.md: report's pairing).

For an I/O on disk D queued at Q, issued at I (its D event) and completed at C, a reason is one of:

- ``tag``: Q2G, the time to get a request (a tag) of the disk, a wait when its nr_requests were all in use;
  with the I/Os of the disk in flight when it was queued and its nr_requests (the capture's header).
- ``queue``: from its request (G; Q for a merged bio) to its issue: time in the queue and the I/O scheduler,
  with the I/Os of the disk issued ahead of it meanwhile (count, bytes, whose).
- ``device_slow``: D2C above the usual D2C of the disk's I/Os of the same op and size (its median): the
  excess is the cost, the ratio says how unusual; with the I/Os at the device when it was issued.
- ``device``: D2C up to that median: the device's usual time for such an I/O.
- ``flush``: a cache flush or FUA write of the disk in flight during the I/O (the union of those
  intervals within its Q..C), and whose.
- ``requeue``, ``merged``, ``limit`` (an I/O limit in force on its cgroup: blk-throttle's wait is before Q,
  in no phase here), ``in_flight`` (not completed when the capture ended: its age is a lower bound). These
  have no cost of their own in the table.

Also who else queued I/O on the disk while it was out. Everything is a number of the table: nothing is
guessed from the kernel version or the device's kind. Memory: the columns below for every I/O (about 120 bytes an I/O).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

COLUMNS = ("disk", "sector", "bytes", "op", "rwbs", "pid", "comm", "cgroup", "q_ns", "g_ns", "d_ns", "c_ns",
           "q2g", "d2c", "q2c", "merged", "split", "requeues", "in_flight_start", "in_flight_end")
NONE = np.iinfo(np.int64).min   # an absent instant or phase
TOP = 3                          # owners named per reason
MIN_COST_NS = 1_000              # a reason that cost less than 1 us is not listed
SLOW_RATIO = 2.0                 # D2C at least this many times its usual is "slow"


@dataclass
class Reason:
    kind: str                    # tag, queue, device_slow, device, flush, requeue, merged, limit, in_flight
    cost_ns: int | None          # what it cost the I/O (None: no cost of its own in the table)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outlier:
    disk: str
    sector: int
    bytes: int
    op: str
    rwbs: str
    pid: int
    comm: str
    cgroup: str | None
    q_ns: int
    q2c_ns: int                   # for one still in flight at the end: its age then (a lower bound)
    in_flight: bool
    phases: dict[str, int | None]  # q2g, g2d, d2c (ns) where it had them
    reasons: list[Reason]
    others: list[dict[str, Any]]   # who else queued on the disk while it was out: comm, ios, bytes


@dataclass
class Explained:
    outliers: list[Outlier]
    ios: int                      # I/Os of the capture with a queue event (report's I/Os)
    end_ns: int                   # the last instant of the table (the capture's end, as far as I/O goes)


class Table:
    """The columns of the per-I/O table needed here, as numpy arrays (absent values NONE, strings as codes
    into their distinct values), for every I/O with a queue event."""

    def __init__(self, batches: Iterable[pa.RecordBatch]):
        STRINGS = ("disk", "op", "rwbs", "comm", "cgroup")
        parts: dict[str, list[npt.NDArray[Any]]] = {c: [] for c in COLUMNS}
        values: dict[str, dict[str | None, int]] = {c: {} for c in STRINGS}   # each string's code
        for b in batches:   # each batch to numpy at once: the Arrow batches are not all held
            keep_b = np.asarray(b.column("q_ns").is_valid()) & ~np.asarray(
                b.column("in_flight_start").fill_null(False), dtype=bool)
            for c in COLUMNS:
                col = b.column(c)
                if c in STRINGS:   # as codes into the distinct values (few: disks, ops, commands, cgroups)
                    enc = (col.dictionary_decode() if pa.types.is_dictionary(col.type) else col).dictionary_encode()
                    known = values[c]
                    remap = np.array([known.setdefault(v, len(known)) for v in enc.dictionary.to_pylist()]
                                     + [known.setdefault(None, len(known))], dtype=np.int32)
                    idx = np.asarray(enc.indices.fill_null(len(remap) - 1), dtype=np.int64)
                    parts[c].append(remap[idx[keep_b]])
                elif c in ("merged", "split", "in_flight_start", "in_flight_end"):
                    parts[c].append(np.asarray(col.fill_null(False), dtype=bool)[keep_b])
                else:
                    parts[c].append(np.asarray(col.cast(pa.int64()).fill_null(NONE), dtype=np.int64)[keep_b])

        def cat(c: str) -> npt.NDArray[Any]:
            a = np.concatenate(parts.pop(c)) if parts[c] else np.zeros(0, dtype=np.int64)
            return a

        def ints(c: str) -> npt.NDArray[np.int64]:
            a: npt.NDArray[np.int64] = cat(c).astype(np.int64, copy=False)
            return a

        def codes(c: str) -> tuple[npt.NDArray[np.int32], list[str | None]]:
            names: list[str | None] = [None] * len(values[c])
            for v, k in values[c].items():
                names[k] = v
            a: npt.NDArray[np.int32] = cat(c).astype(np.int32, copy=False)
            return a, names

        def bools(c: str) -> npt.NDArray[np.bool_]:
            a: npt.NDArray[np.bool_] = cat(c).astype(bool, copy=False)
            return a

        (self.disk, self.disks), (self.op, self.ops), (self.rwbs, self.rwbss), (self.comm, self.comms), \
            (self.cgroup, self.cgroups) = (codes(c) for c in ("disk", "op", "rwbs", "comm", "cgroup"))
        self.sector, self.bytes, self.pid = ints("sector"), ints("bytes"), ints("pid")
        self.q, self.g, self.d, self.c = ints("q_ns"), ints("g_ns"), ints("d_ns"), ints("c_ns")
        self.q2g, self.d2c, self.q2c = ints("q2g"), ints("d2c"), ints("q2c")
        self.merged, self.split, self.end_open = bools("merged"), bools("split"), bools("in_flight_end")
        self.requeues = np.maximum(ints("requeues"), 0)
        self.n = len(self.q)
        inst = np.concatenate([a[a != NONE] for a in (self.q, self.g, self.d, self.c)]) if self.n else np.zeros(0)
        self.end_ns = int(inst.max()) if len(inst) else 0
        # a cache flush (blkparse's leading F) or a FUA write (F after the op letter)
        flush_codes = [k for k, r in enumerate(self.rwbss) if r and (r[0] == "F" or "F" in r[1:])]
        self.flushy = np.isin(self.rwbs, flush_codes)
        self.size_class = np.where(self.bytes > 0, np.frexp(np.maximum(self.bytes - 1, 1))[1], 0)


def _type(c: str) -> pa.DataType:
    if c in ("disk", "op", "rwbs", "comm", "cgroup"):
        return pa.string()
    if c in ("merged", "split", "in_flight_start", "in_flight_end"):
        return pa.bool_()
    if c in ("pid", "requeues"):
        return pa.int32()
    return pa.int64()


def _owners(t: Table, sel: npt.NDArray[np.bool_]) -> list[dict[str, Any]]:
    """The commands behind the selected I/Os, the most bytes first (ties: the most I/Os, then the name)."""
    if not sel.any():
        return []
    used, inv = np.unique(t.comm[sel], return_inverse=True)
    names = [str(t.comms[k]) for k in used]
    ios = np.bincount(inv, minlength=len(names))
    nbytes = np.bincount(inv, weights=t.bytes[sel], minlength=len(names))
    order = sorted(range(len(names)), key=lambda k: (-nbytes[k], -ios[k], names[k]))
    return [{"comm": str(names[k]), "ios": int(ios[k]), "bytes": int(nbytes[k])} for k in order[:TOP]]


def _union_within(starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], lo: int, hi: int) -> int:
    """The length of the union of [starts, ends) clipped to [lo, hi)."""
    s, e = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    total, cur_s, cur_e = 0, None, None
    for a, b in sorted(zip(s.tolist(), e.tolist())):
        if b <= a:
            continue
        if cur_e is None or a > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _explain(t: Table, i: int, limited: Mapping[str, set[str]], queues: Mapping[str, Mapping[str, Any]]) -> Outlier:
    disk = str(t.disks[t.disk[i]])
    same = t.disk == t.disk[i]
    q, g, d, c = (int(a[i]) for a in (t.q, t.g, t.d, t.c))
    open_ = c == NONE
    end = t.end_ns if open_ else c
    others_mask = np.ones(t.n, dtype=bool)
    others_mask[i] = False
    same_o = same & others_mask

    def done_after(x: int) -> npt.NDArray[np.bool_]:   # still out after instant x
        out: npt.NDArray[np.bool_] = (t.c == NONE) | (t.c > x)
        return out

    reasons: list[Reason] = []
    phases: dict[str, int | None] = {"q2g": None, "g2d": None, "d2c": None}
    if g != NONE:
        phases["q2g"] = int(t.q2g[i])   # as report times it (at least 1 ns)
        at_q = same_o & (t.q < q) & done_after(q)
        if g - q >= MIN_COST_NS:
            nr = queues.get(str(disk), {}).get("nr_requests")
            reasons.append(Reason("tag", g - q, {"in_flight_at_queue": int(at_q.sum()),
                                                 "in_flight_bytes": int(t.bytes[at_q].sum()),
                                                 "nr_requests": nr if isinstance(nr, int) else None}))
    if d != NONE:
        start = g if g != NONE else q
        phases["g2d"] = d - start
        ahead = same_o & (t.d != NONE) & (t.d > start) & (t.d < d)
        if d - start >= MIN_COST_NS:
            sched = queues.get(str(disk), {}).get("scheduler")
            reasons.append(Reason("queue", d - start, {"scheduler": sched if isinstance(sched, str) else None,
                                                       "issued_ahead": int(ahead.sum()),
                                                       "bytes_ahead": int(t.bytes[ahead].sum()),
                                                       "owners": _owners(t, ahead)}))
    if d != NONE:
        d2c = (c if not open_ else end) - d
        phases["d2c"] = int(t.d2c[i]) if not open_ else None
        like = same & (t.op == t.op[i]) & (t.size_class == t.size_class[i]) & (t.d2c != NONE)
        usual = int(np.median(t.d2c[like])) if like.any() else None
        at_dev = same_o & (t.d != NONE) & (t.d < d) & done_after(d)
        dev = {"usual_ns": usual, "like_n": int(like.sum()), "op": t.ops[t.op[i]], "size_class": int(t.size_class[i]),
               "at_device": int(at_dev.sum()), "at_device_bytes": int(t.bytes[at_dev].sum()),
               "ratio": round(d2c / usual, 2) if usual else None}
        if usual is not None and usual > 0 and d2c >= SLOW_RATIO * usual and d2c - usual >= MIN_COST_NS:
            reasons.append(Reason("device_slow", d2c - usual, dev))
            reasons.append(Reason("device", usual, dev))
        elif d2c >= MIN_COST_NS:
            reasons.append(Reason("device", d2c, dev))
    fl = same_o & t.flushy & (t.q < end) & done_after(q)
    if fl.any():
        begin = np.where(t.d[fl] != NONE, t.d[fl], t.q[fl])
        stop = np.where(t.c[fl] != NONE, t.c[fl], t.end_ns)
        overlap = _union_within(begin, stop, q, end)
        if overlap >= MIN_COST_NS:
            reasons.append(Reason("flush", overlap, {"flushes": int(fl.sum()), "owners": _owners(t, fl)}))
    if t.requeues[i]:
        reasons.append(Reason("requeue", None, {"requeues": int(t.requeues[i])}))
    if t.merged[i]:
        reasons.append(Reason("merged", None, {}))
    cg = t.cgroups[t.cgroup[i]]
    if cg is not None and cg in limited.get(disk, set()):
        reasons.append(Reason("limit", None, {"cgroup": cg}))
    if open_:
        reasons.append(Reason("in_flight", None, {"age_ns": end - q}))
    reasons.sort(key=lambda r: -(r.cost_ns if r.cost_ns is not None else -1))
    during = same_o & (t.q >= q) & (t.q < end)
    return Outlier(disk=disk, sector=int(t.sector[i]), bytes=int(t.bytes[i]), op=str(t.ops[t.op[i]]),
                   rwbs=str(t.rwbss[t.rwbs[i]]), pid=int(t.pid[i]), comm=str(t.comms[t.comm[i]]),
                   cgroup=None if cg is None else str(cg), q_ns=q, q2c_ns=end - q, in_flight=open_,
                   phases=phases, reasons=reasons, others=_owners(t, during))


def explain(batches: Iterable[pa.RecordBatch], n: int, limits: Any = None, devices: Any = None) -> Explained:
    """The n slowest I/Os by Q2C (one still in flight at the end counts by its age then), each explained.
    limits: the capture's I/O limits as iolimits.recorded() gives them (a list of dicts with disk and
    cgroup), or None; devices: the capture header's devices (dicts with name, nr_requests, scheduler)."""
    t = Table(batches)
    queues = {str(d["name"]): d for d in (devices.values() if isinstance(devices, dict) else ())
              if isinstance(d, dict) and d.get("name")}
    limited: dict[str, set[str]] = {}
    for e in limits if isinstance(limits, list) else ():
        if isinstance(e, dict) and e.get("disk") and e.get("cgroup"):
            limited.setdefault(str(e["disk"]), set()).add(str(e["cgroup"]))
    age = np.where(t.q2c != NONE, t.q2c, np.where(t.end_open, t.end_ns - t.q, NONE))
    order = np.argsort(-age, kind="stable")
    picked = [int(k) for k in order[:n] if age[k] != NONE]
    return Explained([_explain(t, k, limited, queues) for k in picked], t.n, t.end_ns)


def to_json(e: Explained) -> dict[str, Any]:
    def reason(r: Reason) -> dict[str, Any]:
        d = dict(r.detail)
        if "size_class" in d:   # the sizes the usual is of: (2^(c-1), 2^c] bytes
            c = d.pop("size_class")
            d["like_bytes"] = [(1 << (c - 1)) + 1, 1 << c] if c > 0 else [0, 0]
        for k in [k for k in d if k.endswith("_ns")]:
            v = d.pop(k)
            d[k[:-3] + "_s"] = None if v is None else v / 1e9
        return {"kind": r.kind, "cost_s": None if r.cost_ns is None else r.cost_ns / 1e9, **d}

    return {"ios": e.ios, "outliers": [
        {"disk": o.disk, "sector": o.sector, "bytes": o.bytes, "op": o.op, "rwbs": o.rwbs, "pid": o.pid,
         "comm": o.comm, "cgroup": o.cgroup, "queued_ns": o.q_ns, "q2c_s": o.q2c_ns / 1e9, "in_flight": o.in_flight,
         "phases_s": {k: None if v is None else v / 1e9 for k, v in o.phases.items()},
         "reasons": [reason(r) for r in o.reasons], "others": o.others} for o in e.outliers]}


__all__ = ["COLUMNS", "Explained", "Outlier", "Reason", "Table", "explain", "to_json"]
