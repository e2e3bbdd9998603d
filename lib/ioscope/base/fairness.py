"""Balance of throughput across processes: pure functions, no kernel access.

Jain's fairness index J = (sum x)^2 / (n * sum x^2) is 1 when every process
got the same, and 1/n when one process got everything. The coefficient of
variation is the standard deviation (population) over the mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

# Below this index the balance is called poor: with two processes, J = 0.9
# means one gets about twice what the other gets (x/y ~ 2.0).
POOR_JAIN = 0.9

# A verdict needs this many bytes, summed over the processes compared, in the
# interval: two processes that wrote 5 and 64 bytes have a Jain's index of 0.58
# and nothing to say about balance (fair --min-bytes changes it).
MIN_VERDICT_BYTES = 1 << 20


@dataclass(frozen=True)
class Balance:
    n: int
    total: float
    min: float
    max: float
    mean: float
    cv: float        # coefficient of variation (population stddev / mean)
    max_min: float   # max / min; inf when min is 0
    jain: float      # Jain's index in [1/n, 1]; 1.0 for n <= 1

    @property
    def poor(self) -> bool:
        return self.n >= 2 and self.jain < POOR_JAIN


@dataclass(frozen=True)
class Verdict:
    """The balance of one operation over the processes compared, and whether it means anything."""

    op: str
    balance: Balance
    pids: list[int]
    min_bytes: float

    @property
    def enough(self) -> bool:
        """Enough activity to judge: at least min_bytes over the processes compared."""
        return self.balance.total >= self.min_bytes

    @property
    def poor(self) -> bool:
        return self.enough and self.balance.poor


def jain_index(xs: Sequence[float]) -> float:
    n = len(xs)
    sq = sum(x * x for x in xs)
    if n == 0 or sq == 0:
        return 1.0
    return float(sum(xs)) ** 2 / (n * sq)


def balance(xs: Sequence[float]) -> Balance:
    """Balance of the values (one per process)."""
    n = len(xs)
    if n == 0:
        return Balance(0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0)
    total = float(sum(xs))
    mean = total / n
    var = sum((x - mean) ** 2 for x in xs) / n
    lo, hi = float(min(xs)), float(max(xs))
    return Balance(
        n=n, total=total, min=lo, max=hi, mean=mean,
        cv=math.sqrt(var) / mean if mean else 0.0,
        max_min=hi / lo if lo else (1.0 if hi == 0 else math.inf),
        jain=jain_index(xs),
    )


K = TypeVar("K")


def select_active(values: dict[K, float], min_share: float) -> dict[K, float]:
    """The processes (or cgroups) that count for the balance: at least min_share of the busiest one.

    A shell that read one small file next to 64 streaming readers would otherwise
    make any workload look unfair.
    """
    if not values:
        return {}
    top = max(values.values())
    if top <= 0:
        return {}
    return {k: v for k, v in values.items() if v >= top * min_share}
