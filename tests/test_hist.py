"""The histogram convention: bucket math, bounds, percentiles, merges (no root needed)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ioscope.base import hist
from ioscope.base.hist import (
    NBUCKETS,
    RELATIVE_ERROR,
    SUB,
    Hist,
    bucket_high,
    bucket_index,
    bucket_indexes,
    bucket_low,
)


def test_buckets_tile_the_range_without_gaps() -> None:
    assert bucket_low(0) == 0
    for i in range(NBUCKETS - 1):
        assert bucket_high(i) == bucket_low(i + 1)
    assert bucket_low(NBUCKETS - 1) < 2**hist.MAX_LOG2 <= bucket_high(NBUCKETS - 1)


def test_bucket_width_bound() -> None:
    for i in range(SUB, NBUCKETS):
        assert (bucket_high(i) - bucket_low(i)) / bucket_low(i) <= RELATIVE_ERROR


def test_index_matches_bounds_exhaustively_small() -> None:
    for v in range(0, 70000):
        i = bucket_index(v)
        assert bucket_low(i) <= v < bucket_high(i)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_index_scalar_and_vector_agree(v: int) -> None:
    i = bucket_index(v)
    assert bucket_indexes([v])[0] == i
    if v < 2**hist.MAX_LOG2:
        assert bucket_low(i) <= v < bucket_high(i)
    else:
        assert i == NBUCKETS - 1


def test_powers_of_two_edges() -> None:
    for k in range(3, 40):
        for v in (2**k - 1, 2**k, 2**k + 1):
            i = bucket_index(v)
            assert bucket_low(i) <= v < bucket_high(i)
            assert bucket_indexes([v])[0] == i


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10**10), min_size=1, max_size=3000),
       st.sampled_from([50.0, 90.0, 99.0, 99.9]))
def test_percentile_within_bucket_bound(values: list[int], p: float) -> None:
    h = Hist.from_values(values)
    est = h.percentile(p)
    # the value of rank ceil(p% * n) is the one the estimate must bracket
    arr = np.sort(np.array(values, dtype=np.float64))
    rank = max(int(np.ceil(p / 100 * len(arr))) - 1, 0)
    truth = arr[rank]
    assert abs(est - truth) <= RELATIVE_ERROR * truth + 1, (est, truth)


def test_exact_summary_fields() -> None:
    h = Hist.from_values([5, 1000, 1000, 70000])
    assert (h.count, h.total, h.min, h.max) == (4, 72005, 5, 70000)
    assert h.percentile(0) == 5 and h.percentile(100) == 70000
    assert sum(b[2] for b in h.nonzero_buckets()) == 4


def test_merge_equals_histogram_of_union() -> None:
    a, b = [3, 17, 4096, 10**6], [1, 2**20, 2**33]
    m = Hist.from_values(a).merge(Hist.from_values(b))
    u = Hist.from_values(a + b)
    assert np.array_equal(m.counts, u.counts)
    assert (m.count, m.total, m.min, m.max) == (u.count, u.total, u.min, u.max)
    assert Hist().merge(Hist.from_values([7])).min == 7


def test_coarse_rows_are_powers_of_two_and_keep_counts() -> None:
    h = Hist.from_values([10, 11, 40, 3000])
    rows = h.coarse()
    assert [r[0] for r in rows] == [8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    assert sum(r[2] for r in rows) == 4
    assert rows[0][2] == 2 and rows[2][2] == 1 and rows[-1][2] == 1
