"""Pure model of ioscope agg: raw rows (from the kernel's maps, or from a capture's I/Os run through
the same evaluation) -> one AggResult per interval. No kernel, no files, no clock, no printing.

Every number any view shows is computed here: the function's value of each row, the buckets of the
quantize family and the percentiles of llquantize, the order of the rows and the -n cut.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ioscope.base.hist import NBUCKETS, Hist
from ioscope.base.losses import Losses, settle_unreported, unreported_completions
from ioscope.engines.aggregate import abi
from ioscope.engines.aggregate.expr import Expr, Insn, run_program

KeyValue = str | int


@dataclass
class Scalar:
    """count, sum, min, max and sum of squares of the values of one row (the kernel's struct agg_val)."""

    count: int = 0
    total: int = 0
    min: int = 0
    max: int = 0
    sumsq: int = 0

    def add(self, v: int) -> None:
        self.min = v if not self.count else min(self.min, v)
        self.max = max(self.max, v)
        self.count += 1
        self.total += v
        self.sumsq += v * v

    def merge(self, o: Scalar) -> Scalar:
        if not o.count:
            return Scalar(self.count, self.total, self.min, self.max, self.sumsq)
        if not self.count:
            return Scalar(o.count, o.total, o.min, o.max, o.sumsq)
        return Scalar(self.count + o.count, self.total + o.total, min(self.min, o.min), max(self.max, o.max),
                      self.sumsq + o.sumsq)

    @property
    def avg(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def stddev(self) -> float:
        """Population standard deviation, as DTrace's stddev()."""
        if not self.count:
            return 0.0
        var = (self.sumsq * self.count - self.total * self.total) / (self.count * self.count)
        return math.sqrt(max(var, 0.0))


@dataclass
class Linear:
    """lquantize's buckets: [0] below low, [1..n] of width step from low, [n+1] at or above high."""

    low: int
    step: int
    n: int
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: int = 0
    min: int = 0
    max: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (self.n + 2)

    def index(self, v: int) -> int:
        if v < self.low:
            return 0
        return min((v - self.low) // self.step + 1, self.n + 1)

    def add(self, v: int) -> None:
        self.counts[self.index(v)] += 1
        self.min = v if not self.count else min(self.min, v)
        self.max = max(self.max, v)
        self.count += 1
        self.total += v

    def merge(self, o: Linear) -> Linear:
        out = Linear(self.low, self.step, self.n, [a + b for a, b in zip(self.counts, o.counts)],
                     self.count + o.count, self.total + o.total)
        mins = [h.min for h in (self, o) if h.count]
        out.min = min(mins) if mins else 0
        out.max = max(h.max for h in (self, o))
        return out

    def buckets(self) -> list[tuple[int, int, int]]:
        """[(low, high, count)] for every bucket from the first to the last with counts (high exclusive)."""
        rows = []
        for i, n in enumerate(self.counts):
            if i == 0:
                lo, hi = 0, self.low
            elif i == self.n + 1:
                lo, hi = self.low + self.n * self.step, max(self.max + 1, self.low + self.n * self.step + 1)
            else:
                lo, hi = self.low + (i - 1) * self.step, self.low + i * self.step
            rows.append((lo, hi, n))
        nz = [i for i, r in enumerate(rows) if r[2]]
        return rows[nz[0]: nz[-1] + 1] if nz else []


Stat = Scalar | Hist | Linear


def merge_stat(a: Stat, b: Stat) -> Stat:
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        return a.merge(b)
    if isinstance(a, Hist) and isinstance(b, Hist):
        return a.merge(b)
    if isinstance(a, Linear) and isinstance(b, Linear):
        return a.merge(b)
    raise TypeError("rows of one expression have one kind of value")


def new_stat(e: Expr) -> Stat:
    if e.func == "lquantize":
        assert e.lq is not None
        low, high, step = e.lq
        return Linear(low, step, -(-(high - low) // step))
    if e.is_hist:
        return Hist()
    return Scalar()


# -- stacks ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CutStack:
    """A stack (leaf first) without the loop a broken frame-pointer walk runs in: code built without
    frame pointers can leave the walk going round the same few frames until the kernel's depth limit
    (127), so the stack ends in one cycle of addresses repeated. `frames` keeps the cycle once; `cycle`
    is its length and `cut` the frames dropped (0 and 0: no cycle)."""

    frames: list[int]
    cycle: int = 0
    cut: int = 0

    def note(self) -> str | None:
        """The line that says so, after the frames."""
        if not self.cut:
            return None
        return f"(cycle of {self.cycle} frame{'s' if self.cycle > 1 else ''} cut: {self.cut} more repeated it)"


def cut_cycle(frames: Sequence[int]) -> CutStack:
    """Cut a stack at the first frame that repeats an earlier one, when from there to the end it only
    repeats that cycle (a real recursion returns to its callers, so it does not run to the end)."""
    seen: dict[int, int] = {}
    for j, a in enumerate(frames):
        k = seen.get(a)
        if k is not None:
            p = j - k
            if all(frames[m] == frames[m - p] for m in range(j, len(frames))):
                return CutStack(list(frames[:j]), p, len(frames) - j)
            return CutStack(list(frames))
        seen[a] = j
    return CutStack(list(frames))


# -- the kernel's evaluation, for records from a capture -------------------------------

@dataclass
class RawRow:
    """One row as the kernel's map holds it: the expression, the key fields (abi.KEY's k[], 0 where
    not selected) and the value."""

    expr: int
    key: tuple[int, ...]
    stat: Stat


def key_mask(e: Expr) -> int:
    """Bits of the kernel's key fields (struct agg_expr.key_mask) for e's keys."""
    mask = 0
    for k in e.keys:  # comm and tgid share the kernel's tgid field: or, not add
        mask |= 1 << abi.FIELDS[abi.KEY_FIELD[k]]
    if "ustack" in e.keys or e.globs:  # user addresses mean something only in their process; a glob on
        mask |= 1 << abi.FIELDS["tgid"]  # comm is matched per process in user space (names.name_rows)
    return mask


def aggregate(exprs: Sequence[Expr], programs: Sequence[list[Insn]], records: Iterable[dict[str, int | None]]
              ) -> list[RawRow]:
    """What agg_eval() does in the kernel, over records (field name -> value, None or absent when the
    I/O lacks it; the comm condition's comm0/comm1 words included): the same rows."""
    masks = [key_mask(e) for e in exprs]
    keyfields = [name for name, idx in sorted(abi.FIELDS.items(), key=lambda kv: kv[1]) if idx < abi.NR_KEYS]
    tables: list[dict[tuple[int, ...], Stat]] = [{} for _ in exprs]
    for rec in records:
        for i, (e, prog) in enumerate(zip(exprs, programs)):
            if e.value is None:
                v = 1
            else:
                got = rec.get(e.value)
                if got is None:
                    continue
                v = int(got)
            if prog and not run_program(prog, rec):
                continue
            key = tuple(int(rec.get(f) or 0) if masks[i] & (1 << j) else 0 for j, f in enumerate(keyfields))
            st = tables[i].get(key)
            if st is None:
                st = tables[i][key] = new_stat(e)
            if isinstance(st, Hist):
                _hist_add(st, v)
            else:
                st.add(v)
    return [RawRow(i, k, s) for i, t in enumerate(tables) for k, s in t.items()]


def _hist_add(h: Hist, v: int) -> None:
    from ioscope.base.hist import bucket_index
    h.counts[bucket_index(v)] += np.uint64(1)
    h.min = v if not h.count else min(h.min, v)
    h.max = max(h.max, v)
    h.count += 1
    h.total += v


# -- samples and results ---------------------------------------------------------------

@dataclass
class NamedRow:
    """A raw row with its keys named for people (disk name, op name, process name, cgroup path...)."""

    keys: dict[str, KeyValue]
    stat: Stat


@dataclass
class AggSample:
    """What a collector read at one moment: the rows of every expression, named, and the losses."""

    wall: float
    started: float
    rows: list[list[NamedRow]]   # per expression, in -e order
    losses: Losses
    final: bool = False
    timing: dict[str, str] = field(default_factory=dict)  # traced disk -> stamps.STAMPS (rows: requests) / PROBES
    kernel_in_flight: int = 0  # /proc/diskstats: requests in flight on the traced disks when read


@dataclass
class ResultRow:
    keys: dict[str, KeyValue]
    value: float | int | None          # the scalar functions' value; None for the quantize family
    buckets: list[tuple[int, int, int]] = field(default_factory=list)  # (low, high exclusive, count)
    percentiles: dict[str, float] = field(default_factory=dict)        # llquantize: p50 p90 p99 p999
    count: int = 0                     # values aggregated in the row
    hist: Hist | None = None           # quantize and llquantize: the log-linear histogram (views draw it)
    extra: dict[str, int | float] = field(default_factory=dict)  # more values beside it (bpftrace's stats())


@dataclass
class AggTable:
    expr: str
    func: str
    value: str | None
    unit: str                          # "ns", "bytes", "sectors", "count"
    keys: tuple[str, ...]
    rows: list[ResultRow]
    truncated: int = 0                 # rows left out by -n


@dataclass
class AggResult:
    wall: float
    interval_s: float
    losses: Losses
    tables: list[AggTable]
    final: bool = False
    timing: dict[str, str] = field(default_factory=dict)
    active_s: float | None = None  # over a capture: its active span (ioscope.base.rate), the rates' divisor
    # what one record is, where the timing does not say (over a capture: pieces; I/O waits), or per part
    unit: str | dict[str, str] | None = None


PCT_NAMES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


def quantize_buckets(h: Hist) -> list[tuple[int, int, int]]:
    """Power-of-two buckets (DTrace's quantize: 0, 1, 2-3, 4-7, ...), exact: every power of two is a
    bucket boundary of the log-linear scheme, whose buckets below 8 hold one value each."""
    if not h.count:
        return []
    rows: dict[int, int] = {}
    for low, _high, n in h.nonzero_buckets():
        k = -1 if low == 0 else low.bit_length() - 1
        rows[k] = rows.get(k, 0) + n
    lo, hi = min(rows), max(rows)
    out = []
    for k in range(lo, hi + 1):
        if k == -1:
            out.append((0, 1, rows.get(k, 0)))
        else:
            out.append((1 << k, 1 << (k + 1), rows.get(k, 0)))
    return out


def buckets_percentiles(buckets: Sequence[tuple[int, int, int]], lo: int | None = None,
                        hi: int | None = None) -> dict[str, float]:
    """p50 p90 p99 p999 of a distribution given as (low, high exclusive, count) buckets (another tool's,
    such as bpftrace's hist and lhist), interpolated linearly inside the bucket, as Hist.percentile does,
    and kept inside [lo, hi], the smallest and largest value seen (without them: inside the buckets,
    high - 1 the largest value a bucket of integers holds)."""
    total = sum(n for _lo, _hi, n in buckets)
    out: dict[str, float] = {}
    if not total:
        return out
    nz = [(b_lo, b_hi) for b_lo, b_hi, n in buckets if n]
    floor = float(lo) if lo is not None else float(nz[0][0])
    ceil = float(hi) if hi is not None else float(max(nz[-1][1] - 1, nz[-1][0]))
    for name, p in PCT_NAMES.items():
        rank = p / 100.0 * total
        seen = 0
        for b_lo, b_hi, n in buckets:
            if n and seen + n >= rank:
                est = b_lo + max(0, b_hi - 1 - b_lo) * max(0.0, rank - seen) / n
                out[name] = round(min(max(est, floor), ceil), 1)
                break
            seen += n
    return out


def row_result(e: Expr, keys: dict[str, KeyValue], st: Stat) -> ResultRow:
    if isinstance(st, Scalar):
        value: float | int = {"count": st.count, "sum": st.total, "avg": st.avg, "min": st.min, "max": st.max,
                              "stddev": st.stddev}[e.func]
        return ResultRow(keys, value, count=st.count)
    if isinstance(st, Linear):
        return ResultRow(keys, None, st.buckets(), count=st.count)
    pct = {name: round(st.percentile(p), 1) for name, p in PCT_NAMES.items()}
    if e.func == "quantize":
        return ResultRow(keys, None, quantize_buckets(st), pct, st.count, hist=st)
    return ResultRow(keys, None, st.nonzero_buckets(), pct, st.count, hist=st)


def build_table(e: Expr, rows: Sequence[NamedRow], limit: int | None) -> AggTable:
    merged: dict[tuple[KeyValue, ...], NamedRow] = {}
    for r in rows:
        k = tuple(r.keys[name] for name in e.keys)
        got = merged.get(k)
        merged[k] = NamedRow(dict(r.keys), r.stat) if got is None else NamedRow(got.keys, merge_stat(got.stat, r.stat))
    results = [row_result(e, {name: r.keys[name] for name in e.keys}, r.stat) for r in merged.values()
               if _count(r.stat)]
    # DTrace's order: ascending by value, the largest last; the quantize family by count
    results.sort(key=lambda r: (r.value if r.value is not None else r.count, tuple(str(v) for v in r.keys.values())))
    cut = 0
    if limit is not None and len(results) > limit:
        cut = len(results) - limit
        results = results[cut:]
    return AggTable(e.text, e.func, e.value, e.unit, e.keys, results, cut)


def _count(st: Stat) -> int:
    return st.count


def build_result(exprs: Sequence[Expr], s: AggSample, limit: int | None = None) -> AggResult:
    tables = [build_table(e, rows, limit) for e, rows in zip(exprs, s.rows)]
    losses = Losses(dict(s.losses.counters), s.losses.loss_names, s.losses.explain)
    if s.final:  # nothing more can arrive: issued bios never seen completing are lost (inflight.py)
        settle_unreported(losses, unreported_completions(losses, s.kernel_in_flight))
    return AggResult(s.wall, s.wall - s.started, losses, tables, s.final, dict(s.timing))


def hist_from_counts(slots: np.ndarray, count: int, total: int, mn: int, mx: int) -> Hist:
    return Hist(counts=np.asarray(slots[:NBUCKETS], dtype=np.uint64), count=count, total=total, min=mn, max=mx)


__all__ = ["AggResult", "AggSample", "AggTable", "CutStack", "Linear", "NamedRow", "RawRow", "ResultRow", "Scalar",
           "aggregate", "buckets_percentiles", "build_result", "build_table", "cut_cycle", "key_mask",
           "quantize_buckets"]
