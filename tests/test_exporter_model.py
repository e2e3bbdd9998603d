"""ioscope exporter's model, no kernel: le bounds, coarsening against the raw values, top N + other."""

from __future__ import annotations

import random

from ioscope import hist
from ioscope.exporter.model import LE_NS, CumHist, TopN


def test_bounds_are_bucket_boundaries_near_1_2_5() -> None:
    lows = {hist.bucket_low(i) for i in range(hist.NBUCKETS)}
    assert all(b in lows for b in LE_NS)
    assert LE_NS == sorted(LE_NS) and len(LE_NS) == 19
    for b, want in zip(LE_NS, [m * 10 ** d for d in range(4, 10) for m in (1, 2, 5)] + [10 ** 10]):
        assert want * 7 / 8 <= b <= want


def test_cumulative_le_counts_are_exact() -> None:
    rng = random.Random(7)
    values = [int(rng.lognormvariate(12, 2.5)) for _ in range(5000)]
    h = CumHist()
    h.add(hist.Hist.from_values(values[:2500]))
    h.add(hist.Hist.from_values(values[2500:]))
    acc = 0
    for b, n in zip(LE_NS, h.buckets):
        acc += n
        assert acc == sum(v <= b for v in values)  # le means <=: exact because b is a bucket boundary
    assert sum(h.buckets) == h.count == len(values)
    assert h.sum_ns == sum(values)


def test_top_n_and_other_are_monotonic_and_add_up() -> None:
    t = TopN(1)
    shown = t.update({("1", "a"): (3, 300), ("2", "b"): (1, 100)})
    assert shown == [(("1", "a"), 3, 300)] and t.other == (1, 100)
    shown = t.update({("2", "b"): (5, 500), ("1", "a"): (1, 10)})
    assert shown == [(("2", "b"), 6, 600)] and t.other == (2, 110)
    assert sum(b for _, _, b in shown) + t.other[1] <= 910
