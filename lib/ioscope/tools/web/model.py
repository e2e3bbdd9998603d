"""The live heat map's state, pure: one column per interval of ioscope's log-linear latency buckets per
(disk, op, process, cgroup) key and phase, the last `columns` of them; as JSON for the page."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

PHASES = ("q2c", "d2c", "q2d")
DIMS = ("disk", "op", "comm", "cgroup")


@dataclass
class Column:
    seq: int
    t: float                                   # wall-clock seconds at the end of the interval
    width: float                               # seconds
    cells: list[tuple[int, int, int, int]]     # (phase index, key, bucket, I/Os)
    lost: int = 0


@dataclass
class LiveHeat:
    columns: int = 300
    keys: list[tuple[str, str, str, str]] = field(default_factory=list)
    key_ids: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    cols: deque[Column] = field(default_factory=deque)
    seq: int = 0
    # the last second's lines beside the map: the host's I/O pressure (lines, io_pressure) and the disks whose
    # oldest I/O in flight is over 1 s (alerts, in_flight_oldest): base/psi.py, kernel/inflight.py
    status: dict[str, Any] = field(default_factory=dict)

    def key(self, k: tuple[str, str, str, str]) -> int:
        i = self.key_ids.get(k)
        if i is None:
            i = self.key_ids[k] = len(self.keys)
            self.keys.append(k)
        return i

    def add(self, t: float, width: float, rows: Iterable[tuple[str, tuple[str, str, str, str],
                                                                npt.NDArray[np.uint64]]], lost: int = 0) -> Column:
        """One interval: rows of (phase, key, bucket counts)."""
        cells: list[tuple[int, int, int, int]] = []
        for phase, k, counts in rows:
            p = PHASES.index(phase)
            ki = self.key(k)
            nz = np.flatnonzero(counts)
            cells.extend((p, ki, int(b), int(counts[b])) for b in nz.tolist())
        self.seq += 1
        col = Column(self.seq, t, width, cells, lost)
        self.cols.append(col)
        while len(self.cols) > self.columns:
            self.cols.popleft()
        return col

    def to_json(self, since: int = 0) -> dict[str, Any]:
        """The columns after `since` (the page's last seq) and every key (the page's lookup table)."""
        return {"seq": self.seq, "columns": self.columns, "status": self.status,
                "keys": [dict(zip(DIMS, k), k=i) for i, k in enumerate(self.keys)],
                "data": [{"seq": c.seq, "t": c.t, "w": c.width, "lost": c.lost, "cells": c.cells}
                         for c in self.cols if c.seq > since]}


__all__ = ["PHASES", "Column", "LiveHeat"]
