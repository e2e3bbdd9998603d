"""One loss type for every tool, and one reader of a BPF object's loss counters.

Every tool says what it did not see the same way: `Losses.lost` (a number, in the text header
and in JSON's "lost"), `Losses.counters` (every counter by name, JSON's "lost_detail"), and
`Losses.describe()` (one human line on stderr). A counter is either a loss (data that did not
make it into the result) or an explanation (a number that helps read the result, such as I/O
already in flight at the start); only losses add up to `lost`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

RECURSION_MISSES = "recursion_misses"
# the slot table's gauge of bios issued and not completed, and the loss they become (inflight.py)
PENDING, UNSEEN = "issued_not_completed", "completion_unseen"
MAPERR_PREFIX = "map_"  # loader.BPFObject.map_errors(): map_update_EBUSY, map_delete_ENOENT, ...


@dataclass
class Losses:
    counters: dict[str, int] = field(default_factory=dict)
    loss_names: frozenset[str] = frozenset()
    # counter name -> what the user should read it as (and do about it), for describe()
    explain: Mapping[str, str] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return sum(v for k, v in self.counters.items() if k in self.loss_names)

    def add(self, name: str, n: int, loss: bool) -> None:
        self.counters[name] = self.counters.get(name, 0) + n
        if loss:
            self.loss_names = self.loss_names | {name}

    def describe(self) -> str:
        """'3 start_map_full, 1 recursion_misses (program runs the kernel skipped)' or 'none'."""
        parts = []
        for k, v in self.counters.items():
            if v and k in self.loss_names:
                why = self.explain.get(k)
                parts.append(f"{v} {k}" + (f" ({why})" if why else ""))
        failed = [f"{v} {k[4:]}" for k, v in self.counters.items() if v and k.startswith(MAPERR_PREFIX)]
        if failed:  # why some of the losses happened, by the kernel's error
            parts.append("map operations that failed: " + ", ".join(failed))
        return ", ".join(parts) or "none"

    def to_json(self) -> dict[str, Any]:
        """JSON's "lost" and "lost_detail" members, the same in every tool."""
        return {"lost": self.lost, "lost_detail": dict(self.counters)}


def unreported_completions(losses: Losses, in_flight: int) -> int:
    """Issued bios still waiting for a completion beyond what the kernel has in flight: completions
    that ran no BPF program (exact once the disks are idle, a lower bound while they are busy)."""
    return max(0, losses.counters.get(PENDING, 0) - in_flight)


def settle_unreported(losses: Losses, unreported: int, from_pending: bool = True) -> None:
    """At the final report (nothing more can arrive): the unreported completions become losses (taken
    out of the slot table's pending gauge when that is where they were found)."""
    if unreported:
        losses.add(UNSEEN, unreported, loss=True)
        if from_pending:
            losses.counters[PENDING] -= unreported


class _StatsObject(Protocol):
    def recursion_misses(self) -> int: ...
    def map_errors(self) -> dict[str, int]: ...


class _StatsMap(Protocol):
    def dump(self, sum: bool = ..., delete: bool = ...) -> tuple[bytes, bytes, int]: ...


class StatsDelta:
    """A BPF object's per-CPU `stats` array (summed over CPUs), the kernel's recursion_misses for its
    programs and the map operations they saw fail (by error: bpf/maperr.bpf.h), as counts since the
    previous read (or since the start). The failed map operations explain losses the stats count
    already (a full map, a bucket locked by an interrupted program): explanations, not losses."""

    def __init__(self, bpf: _StatsObject, stats: _StatsMap, names: Mapping[int, str], nr: int,
                 loss_names: Iterable[str], explain: Mapping[str, str] | None = None) -> None:
        self.bpf, self.stats, self.names, self.nr = bpf, stats, dict(names), nr
        self.loss_names = frozenset(loss_names) | {RECURSION_MISSES}
        self.explain = {RECURSION_MISSES: "program runs the kernel skipped", **(explain or {})}
        self._last = np.zeros(nr, dtype=np.uint64)
        self._last_misses = 0
        self._last_maperr: dict[str, int] = {}

    def _current(self) -> tuple[np.ndarray, int]:
        _kb, vb, n = self.stats.dump(sum=True)
        vals = np.frombuffer(vb, dtype=np.uint64, count=n)
        cur = np.zeros(self.nr, dtype=np.uint64)
        cur[: min(len(vals), self.nr)] = vals[: self.nr]
        return cur, self.bpf.recursion_misses()

    def read(self, since_last: bool = True) -> Losses:
        """Counts since the previous read(since_last=True); since the start otherwise."""
        cur, misses = self._current()
        if since_last:
            delta, dmiss = cur - self._last, misses - self._last_misses
            self._last, self._last_misses = cur, misses
        else:
            delta, dmiss = cur, misses
        counters = {name: int(delta[i]) for i, name in self.names.items() if i < self.nr}
        counters[RECURSION_MISSES] = int(dmiss)
        maperr = self.bpf.map_errors()
        for name, v in maperr.items():
            counters[name] = v - self._last_maperr.get(name, 0) if since_last else v
        if since_last:
            self._last_maperr = maperr
        return Losses(counters, self.loss_names, self.explain)


__all__ = ["PENDING", "RECURSION_MISSES", "UNSEEN", "Losses", "StatsDelta", "settle_unreported",
           "unreported_completions"]
