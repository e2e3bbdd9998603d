"""A capture's I/O aggregated into bounded cells, streaming (numpy), for the pictures of a page.

Every I/O of the per-I/O table (report's pairing, docs/ios-table.md) lands in:
- heat cells per phase (q2c, d2c, q2d): (time column, latency bucket, key) -> I/Os, the bucket being
  ioscope's log-linear one (hist.py, 8 per power of two: the buckets of report, lat and agg), the time the
  phase ended (q2c, d2c: completion; q2d: issue);
- access cells: (issue-time column, sector bin, key) -> I/Os and the slowest D2C bucket among them;
- curve cells: (completion-time column, key) -> requests, I/Os, bytes, sum of Q2C, seeks;
- per key: phase sums (btt's Device Overhead) and a histogram per phase (report's percentiles);
- points: every I/O while there are at most `points` of them, else the slowest `points` per disk (Q2C).
A key is one (disk, op, process, cgroup): every picture can be filtered and split by those. Time columns
start at `res` ns (1 us) and widen (x2, x5, ...) whenever a kind of cell outgrows its budget, so a page
holds a bounded number of cells whatever the capture's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ioscope.base import hist
from ioscope.base.errors import IoscopeError

PHASES = ("q2c", "d2c", "q2d")
OVERHEAD = ("q2g", "g2i", "q2m", "i2d", "m2d", "d2c")   # btt's Device Overhead phases (and M2D)
CURVE_COLS = ("req", "ios", "bytes", "q2c_sum", "seeks")
KEY_BITS = 16
MAX_KEYS = 1 << KEY_BITS
SECTOR_BINS = 96
UNKNOWN = "?"
OTHERS = "(others)"
DIM_CAP = {"comm": 2000, "cgroup": 1000}   # names kept per dimension; the rest are OTHERS
BATCH_ROWS = 1 << 18
USED = frozenset(("disk", "op", "comm", "cgroup", "c_ns", "d_ns", "q_ns", "sector", "bytes", "q2c", "d2c", "q2d",
                  "q2g", "g2i", "q2m", "i2d", "m2d", "in_flight_start", "in_flight_end", "replaced", "merged", "pid"))


def _distinct(x: npt.NDArray[np.int64]) -> int:
    """How many different values (a sort: numpy 2's hashed unique was 6x slower on 262,144 int64)."""
    s = np.sort(x)
    return int(np.count_nonzero(s[1:] != s[:-1])) + 1 if len(s) else 0


def _ladder(res: int) -> int:
    """The next time resolution: 1, 2, 10, 20, 100, 200 ... us (each an exact multiple of the last)."""
    s = str(res)
    return res * (5 if s.startswith("2") else 2)


class Sparse:
    """Sparse counts over (time bin, other) keys; values summed (or maxed), bins widened to a budget."""

    def __init__(self, names: tuple[str, ...], budget: int, res_ns: int = 1000, maxed: tuple[str, ...] = ()) -> None:
        self.names = names
        self.maxed = maxed
        self.budget = budget
        self.res = res_ns
        self.tb = np.zeros(0, np.int64)
        self.other = np.zeros(0, np.int64)
        self.vals = {n: np.zeros(0, np.int64) for n in names}

    def add(self, t_rel: npt.NDArray[np.int64], other: npt.NDArray[np.int64],
            vals: dict[str, npt.NDArray[np.int64]]) -> None:
        if not len(t_rel):
            return
        while int(t_rel.max()) // self.res >= 1 << 31:
            self._widen()
        # widen first while the new cells alone (counted with a hash, not a sort) would not fit
        while len(t_rel) > self.budget // 2 and _distinct(((t_rel // self.res) << 32) | other) > self.budget // 2:
            self._widen()
        tb = np.concatenate([self.tb, t_rel // self.res])
        other = np.concatenate([self.other, other])
        v = {n: np.concatenate([self.vals[n], vals[n]]) for n in self.names}
        self._reduce(tb, other, v)
        while len(self.tb) > self.budget:
            self._widen()

    def _reduce(self, tb: npt.NDArray[np.int64], other: npt.NDArray[np.int64],
                v: dict[str, npt.NDArray[np.int64]]) -> None:
        comp = (tb << 32) | other
        order = np.argsort(comp)
        comp = comp[order]
        starts = np.flatnonzero(np.r_[True, comp[1:] != comp[:-1]]) if len(comp) else np.zeros(0, np.int64)
        self.tb = comp[starts] >> 32
        self.other = comp[starts] & 0xFFFFFFFF
        for n in self.names:
            x = v[n][order]
            self.vals[n] = (np.maximum.reduceat(x, starts) if n in self.maxed else np.add.reduceat(x, starts)) \
                if len(x) else x

    def _widen(self) -> None:
        nxt = _ladder(self.res)
        f = nxt // self.res
        self.res = nxt
        self._reduce(self.tb // f, self.other.copy(), {n: a.copy() for n, a in self.vals.items()})


@dataclass
class Keys:
    """The (disk, op, process, cgroup) combinations seen, numbered; each dimension's names numbered too."""

    dims: dict[str, list[str]] = field(default_factory=lambda: {"disk": [], "op": [], "comm": [], "cgroup": []})
    ids: dict[str, dict[str, int]] = field(default_factory=lambda: {"disk": {}, "op": {}, "comm": {}, "cgroup": {}})
    keys: list[tuple[int, int, int, int]] = field(default_factory=list)
    key_ids: dict[tuple[int, int, int, int], int] = field(default_factory=dict)

    def codes(self, dim: str, col: pa.Array | None, n: int) -> npt.NDArray[np.int64]:
        """Each row's id in dimension dim (null and absent: '?')."""
        if col is None:
            return np.full(n, self._id(dim, UNKNOWN), np.int64)
        enc = pc.dictionary_encode(col)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        words = [UNKNOWN if w is None else str(w) for w in enc.dictionary.to_pylist()]
        lut = np.array([self._id(dim, w) for w in words] + [self._id(dim, UNKNOWN)], np.int64)
        idx = enc.indices.fill_null(len(words)).to_numpy(zero_copy_only=False).astype(np.int64)
        return np.asarray(lut[idx], dtype=np.int64)

    def _id(self, dim: str, word: str) -> int:
        d = self.ids[dim]
        i = d.get(word)
        if i is None and len(self.dims[dim]) >= DIM_CAP.get(dim, 1 << 20):
            word = OTHERS   # past the cap, the rest of the processes (cgroups) together
            i = d.get(word)
        if i is None:
            i = d[word] = len(self.dims[dim])
            self.dims[dim].append(word)
        return i

    def key_of(self, d: npt.NDArray[np.int64], o: npt.NDArray[np.int64], c: npt.NDArray[np.int64],
               g: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        comp = ((d * 64 + o) << 42) | (c << 21) | g
        u, inv = np.unique(comp, return_inverse=True)
        lut = np.empty(len(u), np.int64)
        for j, x in enumerate(u.tolist()):
            t = (x >> 48, (x >> 42) & 63, (x >> 21) & ((1 << 21) - 1), x & ((1 << 21) - 1))
            k = self.key_ids.get(t)
            if k is None:
                if len(self.keys) >= MAX_KEYS - 1:
                    raise IoscopeError(f"more than {MAX_KEYS - 1} (disk, op, process, cgroup) combinations",
                                       "report the capture per disk (ioscope export, then one capture per disk)")
                k = self.key_ids[t] = len(self.keys)
                self.keys.append(t)
            lut[j] = k
        return np.asarray(lut[inv.reshape(-1)], dtype=np.int64)


def key_sums(key: npt.NDArray[np.int64], v: npt.NDArray[np.int64], nk: int) -> list[int]:
    """Exact integer sums of v per key (0..nk-1): bincount's float64 weights, split in two halves of 26 bits so
    that no partial sum loses a bit."""
    lo = np.bincount(key, weights=(v & ((1 << 26) - 1)).astype(np.float64), minlength=nk)
    hi = np.bincount(key, weights=(v >> 26).astype(np.float64), minlength=nk)
    return [int(h) * (1 << 26) + int(low) for h, low in zip(hi.tolist(), lo.tolist())]


@dataclass
class PhaseTotals:
    """Per key: histogram, count, sum, min and max of a phase (ns)."""

    counts: dict[int, npt.NDArray[np.int64]] = field(default_factory=dict)
    n: dict[int, int] = field(default_factory=dict)
    total: dict[int, int] = field(default_factory=dict)
    mn: dict[int, int] = field(default_factory=dict)
    mx: dict[int, int] = field(default_factory=dict)

    def add(self, key: npt.NDArray[np.int64], v: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> None:
        nk = int(key.max()) + 1
        counts = np.bincount(key * hist.NBUCKETS + b, minlength=nk * hist.NBUCKETS).reshape(nk, hist.NBUCKETS)
        n = np.bincount(key, minlength=nk)
        total = key_sums(key, v, nk)
        mn = np.full(nk, np.iinfo(np.int64).max, np.int64)
        mx = np.full(nk, -1, np.int64)
        np.minimum.at(mn, key, v)
        np.maximum.at(mx, key, v)
        for k in np.flatnonzero(n).tolist():
            c = self.counts.get(k)
            self.counts[k] = counts[k].astype(np.int64) if c is None else c + counts[k]
            self.total[k] = self.total.get(k, 0) + total[k]
            self.mn[k] = min(self.mn.get(k, int(mn[k])), int(mn[k]))
            self.mx[k] = max(self.mx.get(k, int(mx[k])), int(mx[k]))
            self.n[k] = self.n.get(k, 0) + int(n[k])

    def hist(self, keys: list[int]) -> hist.Hist:
        h = hist.Hist()
        present = [k for k in keys if self.n.get(k)]
        if not present:
            return h
        h.counts = np.sum([self.counts[k] for k in present], axis=0).astype(np.uint64)
        h.count = sum(self.n[k] for k in present)
        h.total = sum(self.total[k] for k in present)
        h.min = min(self.mn[k] for k in present)
        h.max = max(self.mx[k] for k in present)
        return h


POINT_DT = np.dtype([("t", "<i8"), ("q2c", "<i8"), ("d2c", "<i8"), ("q2d", "<i8"), ("key", "<i4"),
                     ("sector", "<i8"), ("bytes", "<i8"), ("pid", "<i4")])


@dataclass
class Marks:
    """Where a capture is not whole: the recording's edges, I/Os in flight at its start and end, idle gaps,
    losses, a flight-recorder window and trigger, a cut-short end."""

    first_ts: int | None = None
    last_ts: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)
    in_flight_start: list[int] = field(default_factory=list)   # completion times of I/Os queued before
    in_flight_end: list[int] = field(default_factory=list)     # queue times of I/Os never completed
    n_in_flight_start: int = 0
    n_in_flight_end: int = 0
    n_replaced: int = 0


class Aggregator:
    """Feed per-I/O batches (and each chunk's events, for the time zero and the gaps); finish() -> Cells."""

    def __init__(self, heat_budget: int = 80_000, access_budget: int = 20_000, curve_budget: int = 20_000,
                 points: int = 10_000, gap_ns: int = 1_000_000_000, t0_ns: int | None = None,
                 disk_sectors: dict[str, int] | None = None) -> None:
        self.keys = Keys()
        self.heat = {p: Sparse(("n",), heat_budget) for p in PHASES}
        self.access = Sparse(("n", "maxb"), access_budget, maxed=("maxb",))
        self.curves = Sparse(CURVE_COLS, curve_budget)
        self.totals = {p: PhaseTotals() for p in PHASES}
        self.overhead: dict[int, dict[str, int]] = {}
        self.points_max = points
        self.points: dict[int, npt.NDArray[np.void]] = {}   # per disk id
        self.n_points_seen = 0
        self.n_ios = 0
        self.marks = Marks()
        self.gap_ns = gap_ns
        self.t0 = t0_ns
        self.sector_shift: dict[int, int] = {}
        self.disk_sectors = disk_sectors or {}
        self.last_d: dict[int, tuple[int, int]] = {}   # disk -> (issue time, end sector) of the last issued I/O
        self.max_lat_bucket = 0
        self.min_lat_bucket = hist.NBUCKETS
        self._held: list[pa.RecordBatch] = []
        self._held_rows = 0

    # --------------------------------------------------------------- events: time zero, gaps
    def events(self, ev: npt.NDArray[np.void]) -> None:
        if not len(ev):
            return
        ts = ev["ts"].astype(np.int64)
        m = self.marks
        if m.first_ts is None:
            m.first_ts = int(ts[0])
            if self.t0 is None:
                self.t0 = m.first_ts
        prev = m.last_ts if m.last_ts else int(ts[0])
        d = np.diff(np.r_[prev, ts])
        for j in np.flatnonzero(d >= self.gap_ns).tolist():
            start = prev if j == 0 else int(ts[j - 1])
            m.gaps.append((start, int(ts[j])))
        m.last_ts = max(m.last_ts, int(ts[-1]))

    # --------------------------------------------------------------- per-I/O rows
    def batch(self, b: pa.RecordBatch) -> None:
        """Take a batch of rows; they are aggregated in groups of about BATCH_ROWS (fewer, larger sorts)."""
        self._held.append(b.select([c for c in b.schema.names if c in USED]))   # the rest let go now
        self._held_rows += b.num_rows
        if self._held_rows >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._held:
            return
        t = pa.Table.from_batches(self._held).combine_chunks()
        self._held, self._held_rows = [], 0
        for b in t.to_batches():
            self._rows(b)

    def _rows(self, b: pa.RecordBatch) -> None:
        n = b.num_rows
        if not n:
            return
        names = b.schema.names

        def col(name: str) -> pa.Array | None:
            return b.column(names.index(name)) if name in names else None

        def ints(name: str, fill: int = -1) -> npt.NDArray[np.int64]:
            c = col(name)
            assert c is not None
            return np.asarray(c.fill_null(fill).to_numpy(zero_copy_only=False), dtype=np.int64)

        def flag(name: str) -> npt.NDArray[np.bool_]:
            c = col(name)
            return np.zeros(n, bool) if c is None else np.asarray(c.fill_null(False).to_numpy(zero_copy_only=False))

        ks = self.keys
        disk = ks.codes("disk", col("disk"), n)
        key = ks.key_of(disk, ks.codes("op", col("op"), n), ks.codes("comm", col("comm"), n),
                        ks.codes("cgroup", col("cgroup"), n))
        t0 = self.t0 if self.t0 is not None else 0
        c_ns, d_ns, q_ns = ints("c_ns"), ints("d_ns"), ints("q_ns")
        sector, nbytes = ints("sector", 0), ints("bytes", 0)
        ph = {p: ints(p) for p in (*PHASES, *OVERHEAD)}
        start, end, replaced = flag("in_flight_start"), flag("in_flight_end"), flag("replaced")
        merged = flag("merged")
        mk = self.marks
        mk.n_in_flight_start += int(start.sum())
        mk.n_in_flight_end += int(end.sum())
        mk.n_replaced += int(replaced.sum())
        if start.any() and len(mk.in_flight_start) < 10_000:
            mk.in_flight_start.extend(c_ns[start & (c_ns >= 0)][:10_000].tolist())
        if end.any() and len(mk.in_flight_end) < 10_000:
            mk.in_flight_end.extend(q_ns[end & (q_ns >= 0)][:10_000].tolist())
        # heat cells and totals, per phase
        buckets: dict[str, npt.NDArray[np.int64]] = {}
        for p in PHASES:
            v = ph[p]
            ok = v >= 0
            if not ok.any():
                buckets[p] = np.full(n, -1, np.int64)
                continue
            bk = np.full(n, -1, np.int64)
            bk[ok] = hist.bucket_indexes(v[ok])
            buckets[p] = bk
            t_end = (c_ns if p != "q2d" else d_ns)[ok] - t0
            self.heat[p].add(np.maximum(t_end, 0), (bk[ok] << KEY_BITS) | key[ok],
                             {"n": np.ones(int(ok.sum()), np.int64)})
            self.totals[p].add(key[ok], v[ok], bk[ok])
            self.min_lat_bucket = min(self.min_lat_bucket, int(bk[ok].min()))
            self.max_lat_bucket = max(self.max_lat_bucket, int(bk[ok].max()))
        q2c_ok = ph["q2c"] >= 0
        self.n_ios += int(q2c_ok.sum())
        # btt's Device Overhead: each phase's total against Q2C's, per key
        nk = int(key.max()) + 1
        sums = {x: key_sums(key, np.maximum(ph[x], 0), nk) for x in (*OVERHEAD, "q2c")}
        for k in np.flatnonzero(np.bincount(key[q2c_ok], minlength=nk)).tolist():
            acc = self.overhead.setdefault(k, {x: 0 for x in (*OVERHEAD, "q2c")})
            for x in (*OVERHEAD, "q2c"):
                acc[x] += sums[x][k]
        # curves: completions (every C, as iostat counts them), requests (not merged bios), bytes, Q2C
        done = c_ns >= 0
        if done.any():
            cv = {"req": (~merged[done]).astype(np.int64), "ios": np.ones(int(done.sum()), np.int64),
                  "bytes": nbytes[done], "q2c_sum": np.maximum(ph["q2c"][done], 0),
                  "seeks": np.zeros(int(done.sum()), np.int64)}
            self.curves.add(np.maximum(c_ns[done] - t0, 0), key[done], cv)
        # access pattern and seeks, in issue order (D to D, as btt's D2D seeks; not merged bios)
        iss = (d_ns >= 0) & ~merged
        if iss.any():
            idx = np.flatnonzero(iss)
            idx = idx[np.argsort(d_ns[idx])]
            dd = disk[idx]
            nsec = np.maximum(nbytes[idx] // 512, 1)
            seek = np.zeros(len(idx), np.int64)
            for dk in np.flatnonzero(np.bincount(dd)).tolist():
                m = np.flatnonzero(dd == dk)
                s, e = sector[idx[m]], sector[idx[m]] + nsec[m]
                prev_end = np.r_[self.last_d[dk][1] if dk in self.last_d else -1, e[:-1]]
                has_prev = np.r_[dk in self.last_d, np.ones(len(m) - 1, bool)]
                seek[m] = (has_prev & (s != prev_end)).astype(np.int64)
                self.last_d[dk] = (int(d_ns[idx[m[-1]]]), int(e[-1]))
            if seek.any():
                zero = np.zeros(len(idx), np.int64)
                self.curves.add(np.maximum(d_ns[idx] - t0, 0), key[idx],
                                {"req": zero, "ios": zero, "bytes": zero, "q2c_sum": zero, "seeks": seek})
            sb = np.zeros(len(idx), np.int64)
            for dk in np.flatnonzero(np.bincount(dd)).tolist():
                m = dd == dk
                sb[m] = sector[idx[m]] >> self._shift(dk, int(sector[idx[m]].max()))
            d2b = buckets["d2c"][idx]
            self.access.add(np.maximum(d_ns[idx] - t0, 0), (sb << KEY_BITS) | key[idx],
                            {"n": np.ones(len(idx), np.int64), "maxb": np.maximum(d2b, 0)})
        # points
        if q2c_ok.any():
            pt = np.zeros(int(q2c_ok.sum()), POINT_DT)
            pt["t"] = c_ns[q2c_ok] - t0
            for p in PHASES:
                pt[p] = ph[p][q2c_ok]
            pt["key"], pt["sector"], pt["bytes"] = key[q2c_ok], sector[q2c_ok], nbytes[q2c_ok]
            pid = col("pid")
            pt["pid"] = ints("pid", 0)[q2c_ok] if pid is not None else 0
            self.n_points_seen += len(pt)
            dks = disk[q2c_ok]
            for dk in np.flatnonzero(np.bincount(dks)).tolist():
                cur = self.points.get(dk)
                new = pt[dks == dk]
                allp = new if cur is None else np.concatenate([cur, new])
                if len(allp) > self.points_max:
                    keep = np.argpartition(-allp["q2c"], self.points_max - 1)[:self.points_max]
                    allp = allp[np.sort(keep)]
                self.points[dk] = allp

    def _shift(self, disk: int, max_sector: int) -> int:
        """Sector bin of a disk: 2^shift sectors, SECTOR_BINS bins over its size (or the largest sector
        seen, bins widening as larger ones come)."""
        name = self.keys.dims["disk"][disk]
        size = max(self.disk_sectors.get(name, 0), max_sector + 1)
        need = max(0, (size - 1).bit_length() - SECTOR_BINS.bit_length() + 1)
        cur = self.sector_shift.get(disk)
        if cur is None or need > cur:
            if cur is not None:   # re-bin what is there
                f = need - cur
                a = self.access
                dk_mask = np.isin(a.other & (MAX_KEYS - 1), [i for i, k in enumerate(self.keys.keys) if k[0] == disk])
                sb = a.other >> KEY_BITS
                sb = np.where(dk_mask, sb >> f, sb)
                a._reduce(a.tb.copy(), (sb << KEY_BITS) | (a.other & (MAX_KEYS - 1)),
                          {x: v.copy() for x, v in a.vals.items()})
            self.sector_shift[disk] = need
            return need
        return cur

    def finish(self, src_meta: dict[str, Any], losses: list[tuple[int, int, dict[str, Any]]]) -> Cells:
        self._flush()
        total_points = sum(len(p) for p in self.points.values())
        sampled = self.n_points_seen > total_points
        pts = np.concatenate(list(self.points.values())) if self.points else np.zeros(0, POINT_DT)
        pts = pts[np.argsort(pts["t"], kind="stable")]
        return Cells(self.keys, self.t0 or 0, self.heat, self.access, self.curves, self.totals, self.overhead,
                     pts, sampled, self.n_points_seen, self.marks, losses, dict(src_meta),
                     {self.keys.dims["disk"][d]: s for d, s in self.sector_shift.items()}, self.n_ios)


@dataclass
class Cells:
    keys: Keys
    t0: int                                   # ns (CLOCK_MONOTONIC) of the capture's first block event
    heat: dict[str, Sparse]
    access: Sparse
    curves: Sparse
    totals: dict[str, PhaseTotals]
    overhead: dict[int, dict[str, int]]
    points: npt.NDArray[np.void]
    points_sampled: bool                      # True: the slowest per disk, not every I/O
    points_of: int                            # I/Os the points were chosen from
    marks: Marks
    losses: list[tuple[int, int, dict[str, Any]]]
    meta: dict[str, Any]
    sector_shift: dict[str, int]
    n_ios: int

    def keys_where(self, **want: str) -> list[int]:
        """The keys whose dimensions have the values given (disk=..., op=..., comm=..., cgroup=...)."""
        dims = ("disk", "op", "comm", "cgroup")
        out = []
        for i, k in enumerate(self.keys.keys):
            if all(self.keys.dims[d][k[dims.index(d)]] == v for d, v in want.items()):
                out.append(i)
        return out

    @property
    def duration_ns(self) -> int:
        m = self.marks
        return (m.last_ts - m.first_ts) if m.first_ts is not None else 0


def aggregate(path: str, **kw: Any) -> Cells:
    """Open a capture and aggregate it (source.py reads it)."""
    from ioscope.engines.pages import source
    src = source.open_capture(path)
    with src:
        sizes = {}
        for info in (src.meta.get("devices") or {}).values():
            if isinstance(info, dict) and isinstance(info.get("size_bytes"), int) and info.get("name"):
                sizes[str(info["name"])] = int(info["size_bytes"]) // 512
        agg = Aggregator(disk_sectors=sizes, **kw)
        for b in source.io_batches(src, agg.events):
            agg.batch(b)
        meta = dict(src.meta)
        meta["_path"] = path
        meta["_kind"] = src.kind
        if src.truncation:
            meta["_truncation"] = src.truncation
        return agg.finish(meta, source.chunk_losses(src))


__all__ = ["PHASES", "Aggregator", "Cells", "aggregate"]
