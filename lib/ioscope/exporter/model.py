"""The exporter's state: cumulative histograms and counters built from per-interval deltas.

Prometheus histograms and counters are cumulative; agg's collector is read with reset, so
every read is a delta that is added here. Nothing in this module touches the kernel."""

from __future__ import annotations

from dataclasses import dataclass, field

from ioscope import hist


def _le_bounds_ns() -> list[int]:
    """1-2-5 per decade from 10 us to 10 s, each rounded down to the nearest bucket boundary of
    ioscope's log-linear scheme, so that every `le` count is exact (no bucket straddles a bound)."""
    lows = [hist.bucket_low(i) for i in range(hist.NBUCKETS)]
    out: list[int] = []
    for dec in range(4, 10):  # 1e4 ns (10 us) .. 1e9 ns (1 s) decades
        for m in (1, 2, 5):
            want = m * 10 ** dec
            out.append(max(b for b in lows if b <= want))
    out.append(max(b for b in lows if b <= 10 ** 10))
    return sorted(set(out))


LE_NS = _le_bounds_ns()


def coarsen(counts: dict[int, int]) -> list[int]:
    """Log-linear bucket index -> count, to per-`le` counts (not cumulative), the last one +Inf.
    A bucket [low, high) goes under the smallest bound >= high: exact because bounds are boundaries."""
    out = [0] * (len(LE_NS) + 1)
    for i, n in counts.items():
        high = hist.bucket_high(i)
        j = next((k for k, b in enumerate(LE_NS) if high <= b), len(LE_NS))
        if i == hist.NBUCKETS - 1:
            j = len(LE_NS)  # the last bucket holds every larger value
        out[j] += n
    return out


@dataclass
class CumHist:
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LE_NS) + 1))
    count: int = 0
    sum_ns: int = 0

    def add(self, h: hist.Hist) -> None:
        nz = {i: int(c) for i, c in enumerate(h.counts) if c}
        for j, n in enumerate(coarsen(nz)):
            self.buckets[j] += n
        self.count += int(h.count)
        self.sum_ns += int(h.total)


@dataclass
class TopN:
    """Top-N series with an 'other' accumulator: every key keeps its cumulative value since start;
    a scrape shows the N keys that moved most bytes in its interval, each with its cumulative value,
    and 'other' grows by the deltas of the keys not shown (monotonic, so rate() of it is right)."""

    n: int
    cum: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)   # key -> (ios, bytes)
    other: tuple[int, int] = (0, 0)

    def update(self, deltas: dict[tuple[str, str], tuple[int, int]]) -> list[tuple[tuple[str, str], int, int]]:
        for k, (i, b) in deltas.items():
            ci, cb = self.cum.get(k, (0, 0))
            self.cum[k] = (ci + i, cb + b)
        top = sorted(deltas, key=lambda k: (-deltas[k][1], k))[: self.n]
        shown = set(top)
        oi, ob = self.other
        for k, (i, b) in deltas.items():
            if k not in shown:
                oi, ob = oi + i, ob + b
        self.other = (oi, ob)
        return [(k, *self.cum[k]) for k in sorted(shown)]
