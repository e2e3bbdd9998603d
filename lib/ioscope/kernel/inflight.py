"""The slot table of the bios in flight (bpf/inflight.bpf.h), as user space reads it: lat, agg and top.

The queue program gives each bio a slot, the issue program (lat and agg) stamps its issue time
into it (top, which has none, marks at queue the bios that can end only by completing:
SLOT_ENDS_IN_RQ in bpf/inflight.bpf.h) and the completion program frees it. Two things are read
from it here, the same way for every tool:

- slots left over by bios whose completion will never come (older than STALE_NS) are freed, every
  SWEEP_EVERY_S, and counted (`stale`);
- the slots of bios sent to the disk and not (yet) seen completing (`issued_not_completed`, a
  gauge): those whose d_ns is set (the issue program's stamp, or top's mark). Once the traced
  disks are idle, those beyond what the kernel itself has in flight are completions that ran no BPF
  program (docs/lat.md, "Completions no BPF program saw"): losses.unreported_completions() counts
  them, and a final report moves them into the loss `completion_unseen` (losses.settle_unreported),
  where the queue program already counts a slot whose address comes back. A final report first
  gives the bios pending at its moment up to SETTLE_S to complete, and counts only those that did
  not: a busy disk's bios in flight, several to a request, are not taken for lost completions.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Protocol

import numpy as np

from ioscope.base import devices
from ioscope.kernel import abi

STALE_NS = 120 * 1_000_000_000  # a bio unfinished after 2 minutes is dropped and counted
SWEEP_EVERY_S = 10
SETTLE_S = 0.25  # a final report's wait for the bios pending at its moment (none pending: no wait)
POLL_S = 0.02
EXPLAIN = {"completion_unseen": "issued requests whose completion ran no BPF program, though the kernel completed "
                                "them (docs/lat.md, 'Completions no BPF program saw'): not counted"}


class _Map(Protocol):
    def dump(self, sum: bool = ..., delete: bool = ...) -> tuple[bytes, bytes, int]: ...

    def update(self, key: bytes, value: bytes) -> None: ...


class SlotTable:
    """The `inflight` map of one BPF object."""

    def __init__(self, inflight: _Map) -> None:
        self.map = inflight
        self.stale = 0  # slots freed by sweep_stale(), since the last take_stale()
        self._last_sweep = time.monotonic()

    def slots(self) -> tuple[np.ndarray, np.ndarray]:
        """(slot indexes, slots) of the bios in the table."""
        kb, vb, n = self.map.dump(sum=False)
        keys = np.frombuffer(kb, dtype=np.uint32, count=n)
        vals = np.frombuffer(vb, dtype=abi.BIO_SLOT, count=n)
        used = vals["bio"] != 0
        return keys[used], vals[used]

    def sweep_stale(self) -> None:
        """Free the slots older than STALE_NS (I/O whose completion will never be seen)."""
        keys, vals = self.slots()
        now = time.monotonic_ns()
        ts = np.maximum(vals["q_ns"], vals["d_ns"]).astype(np.int64)
        old = keys[(ts > 0) & (now - ts > STALE_NS)]
        empty = np.zeros(1, dtype=abi.BIO_SLOT).tobytes()
        for k in old:
            self.map.update(k.tobytes(), empty)
        self.stale += len(old)

    def tick(self) -> None:
        """Sweep every SWEEP_EVERY_S (the table is 4 MB: not every second)."""
        if time.monotonic() - self._last_sweep >= SWEEP_EVERY_S:
            self._last_sweep = time.monotonic()
            self.sweep_stale()

    def take_stale(self) -> int:
        n, self.stale = self.stale, 0
        return n

    def pending(self) -> set[tuple[int, int, int, int]]:
        """The bios sent to the disk whose completion has not reached us (yet), each as (slot, bio,
        queue time, issue time): the same tuple is the same bio, still pending."""
        keys, vals = self.slots()
        issued = vals["d_ns"] != 0
        keys, vals = keys[issued], vals[issued]
        return set(zip(keys.tolist(), vals["bio"].tolist(), vals["q_ns"].tolist(), vals["d_ns"].tolist()))

    def pending_and_kernel(self, disks: Iterable[str], settle_s: float = 0.0) -> tuple[int, int]:
        """The number of pending() bios, and what the kernel has in flight on these disks, read before
        and after the table (the larger): a request issued while the table is read is in one of the
        two readings, so the difference of the two numbers never takes a busy disk's new I/O for a
        completion no program saw (but for one issued and completed inside that window).

        settle_s (a final report): the bios pending now are given up to settle_s to complete (the
        table read again every POLL_S), and only those still pending, the same bio in the same slot,
        are counted, against the kernel's count read around the last reading. Requests the kernel
        has in flight then that were issued during the wait make the difference smaller, never
        larger: a lower bound."""
        names = list(disks)
        before = kernel_in_flight(names)
        pending = self.pending()
        after = kernel_in_flight(names)
        end = time.monotonic() + settle_s
        while pending and time.monotonic() < end:
            time.sleep(POLL_S)
            before = kernel_in_flight(names)
            pending &= self.pending()
            after = kernel_in_flight(names)
        return len(pending), max(before, after)


def kernel_in_flight(disks: Iterable[str]) -> int:
    """Requests the kernel has in flight now on these blk-mq disks (/proc/diskstats)."""
    stats = devices.read_diskstats()
    return sum(stats[n].in_flight for n in disks if n in stats)


__all__ = ["EXPLAIN", "POLL_S", "SETTLE_S", "STALE_NS", "SWEEP_EVERY_S", "SlotTable", "kernel_in_flight"]
