"""The one histogram convention of ioscope (user side).

Buckets are log-linear, as defined in bpf/ioscope.h: values below HIST_SUB
have a bucket each; every power of two above is split in HIST_SUB equal
sub-buckets. A bucket [low, high) has high - low <= low / HIST_SUB, so a
value estimated from the right bucket is within 1/HIST_SUB (12.5%) of the
true value. Percentiles interpolate linearly inside the bucket and are
clamped to the exact min and max.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

SUB_BITS = 3
SUB = 1 << SUB_BITS
MAX_LOG2 = 40
NBUCKETS = (MAX_LOG2 - SUB_BITS + 1) * SUB
# The largest relative width of a bucket: the bound on a percentile's error.
RELATIVE_ERROR = 1.0 / SUB

U64 = np.uint64
Counts = npt.NDArray[np.uint64]


def bucket_index(v: int) -> int:
    """Bucket of a non-negative value; the same function as hist_bucket() in BPF."""
    if v < SUB:
        return int(v)
    k = int(v).bit_length() - 1
    if k >= MAX_LOG2:
        return NBUCKETS - 1
    return (k - SUB_BITS + 1) * SUB + ((int(v) >> (k - SUB_BITS)) & (SUB - 1))


def bucket_indexes(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Vectorised bucket_index for an array of non-negative integers."""
    v = np.asarray(values, dtype=np.uint64)
    out = v.astype(np.int64)
    big = v >= SUB
    if big.any():
        vb = v[big]
        # floor(log2) exactly, without float rounding near powers of two
        k = np.floor(np.log2(vb.astype(np.float64))).astype(np.int64)
        k -= (np.left_shift(np.uint64(1), k.astype(np.uint64)) > vb).astype(np.int64)
        k += (np.left_shift(np.uint64(1), (k + 1).astype(np.uint64)) <= vb).astype(np.int64)
        shift = np.clip(k - SUB_BITS, 0, 63).astype(np.uint64)
        sub = (np.right_shift(vb, shift) & np.uint64(SUB - 1)).astype(np.int64)
        idx = (k - SUB_BITS + 1) * SUB + sub
        idx[k >= MAX_LOG2] = NBUCKETS - 1
        out[big] = idx
    return out


def bucket_low(i: int) -> int:
    if i < SUB:
        return i
    k = i // SUB + SUB_BITS - 1
    return (1 << k) + (i % SUB) * (1 << (k - SUB_BITS))


def bucket_high(i: int) -> int:
    """Exclusive upper bound. The last bucket also holds every larger value."""
    if i < SUB:
        return i + 1
    k = i // SUB + SUB_BITS - 1
    return bucket_low(i) + (1 << (k - SUB_BITS))


LOWS = np.array([bucket_low(i) for i in range(NBUCKETS)], dtype=np.float64)
HIGHS = np.array([bucket_high(i) for i in range(NBUCKETS)], dtype=np.float64)


@dataclass
class Hist:
    """One histogram: bucket counts plus exact count, sum, min and max."""

    counts: Counts = field(default_factory=lambda: np.zeros(NBUCKETS, dtype=U64))
    count: int = 0
    total: int = 0
    min: int = 0
    max: int = 0

    @classmethod
    def from_values(cls, values: Iterable[int]) -> Hist:
        arr = np.fromiter((int(v) for v in values), dtype=np.uint64)
        h = cls()
        if arr.size:
            h.counts = np.bincount(bucket_indexes(arr), minlength=NBUCKETS).astype(U64)
            h.count = int(arr.size)
            h.total = int(arr.sum(dtype=np.uint64))
            h.min = int(arr.min())
            h.max = int(arr.max())
        return h

    def merge(self, other: Hist) -> Hist:
        """A new histogram holding both (min/max of empty ones are ignored)."""
        out = Hist(self.counts + other.counts, self.count + other.count, self.total + other.total)
        mins = [h.min for h in (self, other) if h.count]
        maxs = [h.max for h in (self, other) if h.count]
        out.min = min(mins) if mins else 0
        out.max = max(maxs) if maxs else 0
        return out

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def percentile(self, p: float) -> float:
        """Value at percentile p (0..100), interpolated in its bucket, clamped to [min, max]."""
        if not self.count:
            return 0.0
        if p <= 0:
            return float(self.min)
        if p >= 100:
            return float(self.max)
        rank = p / 100.0 * self.count
        cum = np.cumsum(self.counts, dtype=np.float64)
        i = int(np.searchsorted(cum, rank, side="left"))
        i = min(i, NBUCKETS - 1)
        before = cum[i - 1] if i > 0 else 0.0
        inside = float(self.counts[i])
        low, high = LOWS[i], HIGHS[i]
        if i == NBUCKETS - 1:
            high = max(high, float(self.max))
        frac = (rank - before) / inside if inside else 0.0
        est = low + frac * (high - low)
        return float(min(max(est, self.min), self.max))

    def percentiles(self, ps: Sequence[float] = (50, 90, 99, 99.9)) -> dict[float, float]:
        return {p: self.percentile(p) for p in ps}

    def nonzero_buckets(self) -> list[tuple[int, int, int]]:
        """[(low, high, count)] for buckets with counts; high is exclusive."""
        out = []
        for i in np.flatnonzero(self.counts):
            high = bucket_high(int(i))
            if i == NBUCKETS - 1:
                high = max(high, self.max + 1)
            out.append((bucket_low(int(i)), high, int(self.counts[i])))
        return out

    def coarse(self) -> list[tuple[int, int, int]]:
        """Counts per power of two [2^k, 2^(k+1)) for display; empty rows inside the range kept."""
        if not self.count:
            return []
        rows: dict[int, int] = {}
        for low, _high, n in self.nonzero_buckets():
            k = max(low, 1).bit_length() - 1
            rows[k] = rows.get(k, 0) + n
        lo, hi = min(rows), max(rows)
        return [((1 << k) if k else 0, 1 << (k + 1), rows.get(k, 0)) for k in range(lo, hi + 1)]


def check_relative_error(estimate: float, truth: float) -> bool:
    """True when estimate is within the bucket bound of truth."""
    return math.isclose(estimate, truth, rel_tol=RELATIVE_ERROR) or abs(estimate - truth) <= 1
