"""The slot table of the bios in flight (bpf/inflight.bpf.h), as user space reads it: lat, agg and top.

The queue program gives each bio a slot, the issue program (lat and agg) stamps its issue time
into it (top, which has none, marks at queue the bios that can end only by completing:
SLOT_ENDS_IN_RQ in bpf/inflight.bpf.h) and the completion program frees it. Two things are read
from it here, the same way for every tool:

- slots left over by bios whose completion will never come (older than STALE_NS, on a disk the
  kernel has nothing in flight on, /proc/diskstats) are freed, every SWEEP_EVERY_S, and counted
  (`stale`); a slot older than that on a disk with requests in flight is kept: it may be the hung
  I/O itself (OldestWatch shows it);
- the oldest bios in flight per disk, their age, the process that queued them and how many are
  older than OVER_S (OldestWatch: top's line, the exporter's gauges);
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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ioscope.base import devices
from ioscope.kernel import abi

STALE_NS = 120 * 1_000_000_000  # a bio unfinished after 2 minutes, its disk idle, is dropped and counted
SWEEP_EVERY_S = 10
SETTLE_S = 0.25  # a final report's wait for the bios pending at its moment (none pending: no wait)
POLL_S = 0.02
# An I/O in flight longer than this is shown (top's line, the exporter's gauges): a healthy disk, even a
# loaded one, completes in milliseconds to a few hundred; it does not depend on the refresh interval, so
# that `top 10` shows a 5 s hang as `top 0.5` does (docs/top.md, "Hung I/O").
OVER_NS = 1_000_000_000
# The table is 4 MB, read as memory (mmapable: ~1 ms of CPU; ~30 ms dumped through the bpf() system call,
# measured, docs/top.md); it is read at most this often, and only while a disk has had requests in flight
# for OVER_NS.
READ_EVERY_NS = 1_000_000_000
EXPLAIN = {"completion_unseen": "issued requests whose completion ran no BPF program, though the kernel completed "
                                "them (docs/lat.md, 'Completions no BPF program saw'): not counted"}


class _Map(Protocol):
    def dump(self, sum: bool = ..., delete: bool = ...) -> tuple[bytes, bytes, int]: ...

    def update(self, key: bytes, value: bytes) -> None: ...


def _mapped_slots(m: _Map) -> tuple[np.ndarray, np.ndarray] | None:
    """(slot indexes, slots) of the bios in the table, read as memory (an mmapable BPF array,
    bpf/inflight.bpf.h) and copied out; None when the map cannot be mapped (then it is dumped). Mapped
    for the read only: nothing holds the map once its object is closed."""
    import mmap
    fd, n, size = getattr(m, "fd", None), getattr(m, "max_entries", 0), getattr(m, "value_size", 0)
    if not isinstance(fd, int) or fd < 0 or size != abi.BIO_SLOT.itemsize or not n:
        return None
    length = -(-n * size // mmap.PAGESIZE) * mmap.PAGESIZE
    try:
        mem = mmap.mmap(fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (OSError, ValueError):   # not BPF_F_MMAPABLE: EINVAL
        return None
    with mem:
        table = np.frombuffer(mem, dtype=abi.BIO_SLOT, count=n)
        used = np.flatnonzero(table["bio"] != 0)
        vals = table[used]   # a copy; a slot freed meanwhile reads as a dump would read it
        del table
    keep = vals["bio"] != 0
    return used[keep].astype(np.uint32), vals[keep]


class SlotTable:
    """The `inflight` map of one BPF object."""

    def __init__(self, inflight: _Map, stale_ns: int = STALE_NS,
                 diskstats: Callable[[], Mapping[str, devices.DiskStats]] = devices.read_diskstats) -> None:
        self.map = inflight
        self.mappable = True   # until a map refuses mmap (an object built before bpf/inflight.bpf.h asked for it)
        self.stale_ns = stale_ns
        self.diskstats = diskstats
        self.stale = 0  # slots freed by sweep_stale(), since the last take_stale()
        self.kept = 0   # slots older than stale_ns kept at the last sweep: their disk has requests in flight
        self._last_sweep = time.monotonic()

    def slots(self) -> tuple[np.ndarray, np.ndarray]:
        """(slot indexes, slots) of the bios in the table (copies: the table changes under the reader)."""
        if self.mappable:
            got = _mapped_slots(self.map)
            if got is not None:
                return got
            self.mappable = False
        kb, vb, n = self.map.dump(sum=False)
        keys = np.frombuffer(kb, dtype=np.uint32, count=n)
        vals = np.frombuffer(vb, dtype=abi.BIO_SLOT, count=n)
        used = vals["bio"] != 0
        return keys[used], vals[used]

    def sweep_stale(self) -> None:
        """Free the slots older than stale_ns whose disk has nothing in flight (/proc/diskstats, read
        after the table: a request in flight at the read is still counted then): I/O whose completion
        was not seen. A slot as old on a disk with requests in flight is kept: the kernel has not
        completed something there, and it may be that I/O, hung."""
        keys, vals = self.slots()
        now = time.monotonic_ns()
        busy = {k for k, n in in_flight_by_dev(self.diskstats()).items() if n > 0}
        ts = np.maximum(vals["q_ns"], vals["d_ns"]).astype(np.int64)
        old = (ts > 0) & (now - ts > self.stale_ns)
        keep = old & np.isin(vals["dev"], np.fromiter(busy, dtype=np.uint32, count=len(busy)))
        free = keys[old & ~keep]
        empty = np.zeros(1, dtype=abi.BIO_SLOT).tobytes()
        for k in free:
            self.map.update(k.tobytes(), empty)
        self.stale += len(free)
        self.kept = int(keep.sum())

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


def in_flight_by_dev(stats: Mapping[str, devices.DiskStats]) -> dict[int, int]:
    """Requests in flight per disk (kernel dev_t, as the slots' dev) from /proc/diskstats."""
    return {devices.kdev(s.major, s.minor): s.in_flight for s in stats.values()}


@dataclass(frozen=True)
class OldestIO:
    """The oldest bio in flight on one disk, from the slot table."""

    dev: int                 # the disk (kernel dev_t)
    age_ns: int              # since it was queued (since its issue for a bio queued before tracing)
    tgid: int                # the process that queued it (0: queued before tracing)
    issued: bool | None      # its request was issued to the driver; None: the tool cannot tell (top)
    over: int                # bios in flight on this disk longer than OVER_NS, this one included
    # False: from /proc/diskstats alone (no slot holds it: queued before tracing, or a disk the slot table does
    # not follow): requests in flight (over: how many) and none completed on the disk for age_ns, so its
    # oldest request is at least that old; who queued it is not known
    known: bool = True


def oldest_in_flight(vals: np.ndarray, now_ns: int, idle_at: Mapping[int, int], issue_known: bool,
                     over_ns: int = OVER_NS) -> dict[int, OldestIO]:
    """Per disk of idle_at (dev -> the last moment the kernel had nothing in flight on it, 0: not seen
    so), the oldest of the slots (BIO_SLOT records) queued after that moment and in flight longer than
    over_ns at now_ns (CLOCK_MONOTONIC, as bpf_ktime_get_ns). A slot from before the disk was last seen
    idle is one whose completion was not seen, not an I/O in flight. issue_known: the object has an
    issue program (d_ns is its stamp; top's d_ns is 0 or SLOT_ENDS_IN_RQ, not an issue)."""
    q = vals["q_ns"].astype(np.int64)
    d = vals["d_ns"].astype(np.int64)
    ts = np.where(q > 0, q, d)   # a bio queued before tracing: from its issue
    dev = vals["dev"]
    out = {}
    for k, idle in idle_at.items():
        m = (dev == k) & (ts > max(idle, 1)) & (now_ns - ts >= over_ns)
        if not m.any():
            continue
        i = int(np.argmin(np.where(m, ts, np.iinfo(np.int64).max)))
        out[k] = OldestIO(k, int(now_ns - ts[i]), int(vals["tgid"][i]),
                          bool(d[i] > 1) if issue_known else None, int(m.sum()))
    return out


class OldestWatch:
    """The oldest I/O in flight per disk, read from the slot table when it can be there.

    read(diskstats) is given /proc/diskstats at each refresh (top) or tick (the exporter). A disk can
    hold a bio in flight longer than OVER_NS only if the kernel has had requests in flight on it for
    that long: the table is read only then, and at most every READ_EVERY_NS (a read in between
    returns the last one's values); otherwise nothing is older than OVER_NS. The kernel counts the
    requests issued to the driver; a bio waiting in a scheduler while the disk has nothing issued is
    not seen (docs/top.md, "Hung I/O")."""

    def __init__(self, table: SlotTable | None, issue_known: bool, clock: Callable[[], int] = time.monotonic_ns,
                 every_ns: int = READ_EVERY_NS, over_ns: int = OVER_NS) -> None:
        self.table, self.issue_known, self.clock = table, issue_known, clock
        self.every_ns, self.over_ns = every_ns, over_ns
        # dev -> (requests completed, the first reading that saw requests in flight with that count; -1: none
        # yet, the disk was idle at the last reading)
        self.done: dict[int, tuple[int, int]] = {}
        self.current: dict[int, OldestIO] = {}      # what the last read() returned
        self.idle_at: dict[int, int] = {}    # dev -> the last reading with nothing in flight (0: none seen)
        self.busy_from: dict[int, int] = {}  # dev -> the first reading with requests in flight since then
        self.last: dict[int, OldestIO] = {}
        # the slots the last read of the table returned, and the disks it was read for (dev -> the last
        # moment it was seen idle): the flight recorder decides its conditions on the I/Os in flight there
        self.vals: np.ndarray = np.empty(0, dtype=abi.BIO_SLOT)
        self.due: dict[int, int] = {}
        self.read_at: int | None = None      # when the table was last read
        self.reads = 0
        self.cpu_s = 0.0                     # time.thread_time() spent reading the table (reads included)

    def read(self, diskstats: Mapping[str, devices.DiskStats]) -> dict[int, OldestIO]:
        """Per disk, the oldest I/O in flight over OVER_NS: from the slot table where it holds one, else
        (table None: a tool without one, or a bio queued before tracing) what /proc/diskstats alone says
        (stalled())."""
        now = self.clock()
        stalled = self.stalled(diskstats, now)
        out = self._from_table(diskstats, now) if self.table is not None else {}
        for dev, (age, n) in stalled.items():
            if dev not in out:
                out[dev] = OldestIO(dev, age, 0, True, n, known=False)
        self.current = dict(out)
        return out

    def stalled(self, diskstats: Mapping[str, devices.DiskStats], now: int) -> dict[int, tuple[int, int]]:
        """dev -> (ns, requests in flight) of each disk that has had requests in flight and completed none
        for OVER_NS or longer, counted from this watch's first reading: the requests in flight when the
        stall began are in flight still, so the disk's oldest request is at least that old. It is counted
        from the first reading that saw them, not from the idle reading before it: a request issued between
        the two is younger than that (a web page said 4.01 s for a read dd had started 4.006 s before)."""
        out = {}
        for st in diskstats.values():
            dev, n = devices.kdev(st.major, st.minor), devices.completed_requests(st)
            was = self.done.get(dev)
            if was is None or was[0] != n or st.in_flight == 0 or was[1] < 0:
                self.done[dev] = (n, now if st.in_flight else -1)
            elif now - was[1] >= self.over_ns:
                out[dev] = (now - was[1], st.in_flight)
        return out

    def _from_table(self, diskstats: Mapping[str, devices.DiskStats], now: int) -> dict[int, OldestIO]:
        assert self.table is not None
        for dev, n in in_flight_by_dev(diskstats).items():
            if n > 0:
                self.busy_from.setdefault(dev, now)
                self.idle_at.setdefault(dev, 0)
            else:
                self.idle_at[dev] = now
                self.busy_from.pop(dev, None)
        due = {d: self.idle_at[d] for d, t in self.busy_from.items() if now - t >= self.over_ns}
        if not due:
            self.last = {}
        elif self.read_at is None or now - self.read_at >= self.every_ns * 9 // 10:  # a 1 s refresh's jitter
            t0 = time.thread_time()
            _, vals = self.table.slots()
            self.vals, self.due = vals, due
            self.last = oldest_in_flight(vals, self.clock(), due, self.issue_known, self.over_ns)
            self.cpu_s += time.thread_time() - t0
            self.reads += 1
            self.read_at = now
        else:
            self.last = {d: o for d, o in self.last.items() if d in due}
        return dict(self.last)


@dataclass
class InFlightRow:
    """A disk whose oldest I/O in flight is older than OVER_NS, as the live views show it (top, web)."""

    disk: str
    age_s: float                 # since it was queued
    pid: int                     # the process that queued it (0: queued before the tool started)
    comm: str
    issued: bool | None          # None: the tool has no issue program and cannot tell
    over_1s: int                 # bios in flight on the disk longer than OVER_NS, this one included
    # False: no bio of the tool's in flight there: from /proc/diskstats alone, the requests in flight (over_1s)
    # with none completed for age_s (a lower bound of the oldest's age; who queued it is not known)
    known: bool = True


def in_flight_rows(oldest: Mapping[int, OldestIO], disks: Iterable[str], name_of: Callable[[int], str],
                   comm_of: Callable[[int], str]) -> list[InFlightRow]:
    """The disks (of those shown) whose oldest I/O in flight is older than OVER_NS, oldest first."""
    names = set(disks)
    rows = [InFlightRow(name_of(o.dev), o.age_ns / 1e9, o.tgid, comm_of(o.tgid) if o.tgid else "[unknown]",
                        o.issued if o.known else None, o.over, o.known)
            for o in oldest.values() if o.age_ns >= OVER_NS]
    return sorted((r for r in rows if r.disk in names), key=lambda r: (-r.age_s, r.disk))


def in_flight_lines(rows: Iterable[InFlightRow], tool: str, unknown: str = "") -> list[str]:
    """A line per disk whose oldest I/O in flight is older than 1 s, oldest first (rows' order). unknown: why
    a disk's I/O in flight is known from /proc/diskstats alone (default: queued before the tool started)."""
    out = []
    unknown = unknown or f"queued before {tool} started"
    for r in rows:
        if not r.known:  # /proc/diskstats alone: no bio of the tool's in flight there
            out.append(f"{r.disk}: {r.over_1s} in flight, none completed for {r.age_s:.1f} s ({unknown}: who queued "
                       "it is not known)")
            continue
        issued = "" if r.issued is None else (", issued" if r.issued else ", not issued yet")
        who = f"pid {r.pid} {r.comm}" if r.pid else f"queued before {tool} started"
        out.append(f"{r.disk}: oldest I/O in flight {r.age_s:.1f} s, {who}, {r.over_1s} over 1 s{issued}")
    return out


def in_flight_json(rows: Iterable[InFlightRow]) -> dict[str, dict[str, object]]:
    """disk -> its oldest I/O in flight over 1 s (issued: null where the tool cannot tell)."""
    from dataclasses import asdict
    out = {}
    for r in rows:
        d = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(r).items()}
        out[str(d.pop("disk"))] = d
    return out


def kernel_in_flight(disks: Iterable[str]) -> int:
    """Requests the kernel has in flight now on these blk-mq disks (/proc/diskstats)."""
    stats = devices.read_diskstats()
    return sum(stats[n].in_flight for n in disks if n in stats)


__all__ = ["EXPLAIN", "OVER_NS", "POLL_S", "READ_EVERY_NS", "SETTLE_S", "STALE_NS", "SWEEP_EVERY_S", "InFlightRow",
           "OldestIO", "OldestWatch", "SlotTable", "in_flight_by_dev", "in_flight_json", "in_flight_lines",
           "in_flight_rows", "kernel_in_flight", "oldest_in_flight"]
