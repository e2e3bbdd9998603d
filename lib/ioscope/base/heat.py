"""One heat-map quantisation for every heat map of ioscope (top's live one, report's Q2C one).

Latency rows: ioscope's log-linear buckets (hist.py) grouped into bands of 1, 2, 4 or 8 per power of two, as
many as the rows allow (HeatGrid.from_counts). Count levels: a log scale of count/peak, so that the rare slow
I/O stays visible next to a band of thousands (level). Pure: numpy in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ioscope.base import hist

# the characters of levels 1..9 (level 0, no I/O, is a space)
HEAT_CHARS = ".:-=+*#%@"


def level(count: int, peak: int) -> int:
    """0 for no I/O, else 1..len(HEAT_CHARS) on a log scale of count/peak."""
    if count <= 0 or peak <= 0:
        return 0
    n = len(HEAT_CHARS)
    return max(1, min(n, math.ceil(math.log1p(count) / math.log1p(peak) * n)))


def char(count: int, peak: int) -> str:
    lv = level(count, peak)
    return HEAT_CHARS[lv - 1] if lv else " "


@dataclass
class HeatGrid:
    """counts[row, col]: row 0 is the lowest latency band; col -1 is the latest interval."""

    counts: npt.NDArray[np.uint64]
    lows: list[float]   # ns, lower bound of each row
    highs: list[float]  # ns, exclusive upper bound of each row

    @classmethod
    def from_counts(cls, data: npt.NDArray[np.uint64], max_rows: int, ncols: int) -> HeatGrid:
        """Group fine buckets into bands: 1, 2, 4 or 8 per power of two, as many as max_rows allows."""
        t = data.shape[0]
        total = data.sum(axis=0)
        nz = np.flatnonzero(total)
        if len(nz) == 0:
            # nothing yet: one decade of empty rows around 1 ms
            lo_b, hi_b = hist.bucket_index(1 << 17), hist.bucket_index(1 << 20)
        else:
            lo_b, hi_b = int(nz[0]), int(nz[-1])
        lo_oct = _octave(lo_b)
        hi_oct = _octave(hi_b)
        noct = hi_oct - lo_oct + 1
        bounds: list[float] = []
        if noct > max_rows:
            # more powers of two than rows: each band covers k of them
            k = -(-noct // max_rows)
            nb = -(-noct // k)
            bounds = [float(1 << (lo_oct + j * k)) if lo_oct + j * k > 0 else 0.0 for j in range(nb)]
            bounds.append(float(1 << (lo_oct + nb * k)))
        else:
            per = 1
            for p in (8, 4, 2):
                if noct * p <= max_rows:
                    per = p
                    break
            for o in range(lo_oct, hi_oct + 1):
                start = float(1 << o) if o > 0 else 0.0
                step = (float(1 << (o + 1)) - start) / per
                bounds.extend(start + step * j for j in range(per))
            bounds.append(float(1 << (hi_oct + 1)))
        lows, highs = bounds[:-1], bounds[1:]
        # every fine bucket goes to the band holding its lower bound; values below the first band join it,
        # values above the last join the last
        band = np.searchsorted(np.asarray(lows), hist.LOWS, side="right") - 1
        band = np.clip(band, 0, len(lows) - 1)
        onehot = np.zeros((hist.NBUCKETS, len(lows)), dtype=np.uint64)
        onehot[np.arange(hist.NBUCKETS), band] = 1
        grid = (data.astype(np.uint64) @ onehot).T  # (rows, t)
        if t < ncols:  # pad on the left: the screen always shows ncols intervals, newest on the right
            grid = np.concatenate([np.zeros((grid.shape[0], ncols - t), dtype=np.uint64), grid], axis=1)
        return cls(grid.astype(np.uint64), lows, highs)


def _octave(bucket: int) -> int:
    """floor(log2) of a fine bucket's lower bound (0 for the values 0 and 1)."""
    low = hist.bucket_low(bucket)
    return max(low, 1).bit_length() - 1


__all__ = ["HEAT_CHARS", "HeatGrid", "char", "level"]
