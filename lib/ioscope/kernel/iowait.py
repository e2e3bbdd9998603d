"""The I/O waits of every thread, read from bpf/iowait.bpf.h's two maps (a tool's object includes it).

`iowait_tids` holds each thread's ended waits (time and number, never reset by the kernel) and
`iowait_starts` the waits in progress. One read gives every thread's time blocked so far, counting a
wait in progress up to the moment of the read, so that a thread blocked for a minute shows in every
interval of that minute and not only when it is woken (as delay accounting's counters do: iotop's
IO> stays 0 for a task that never wakes). Differences between two reads (`waited_between`) are what
happened in between, whatever the interval.

Threads that exited are removed from the kernel's map after the read that saw their last wait, so
that the map holds the threads of the host's life, not of the tool's.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ioscope.kernel import abi

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)
HOOKS = ("sched_switch", "sched_waking", "sched_wakeup")  # the programs of bpf/iowait.bpf.h's IOWAIT_PROGRAMS
LOST = "iowait_map_full"                  # a wait not counted (abi.STAT_NAMES): a loss
EXPLAIN = {LOST: "I/O waits not counted: the map of threads that wait was full",
           "iowait_wake_unseen": "I/O waits dropped: the thread ran again and no program saw its wakeup"}


# the kernel functions a swap-in waits in (bpf/iowait.bpf.h: targ_swapin_fns): anonymous memory's fault,
# tmpfs's swap-in (named so from 6.0 on, shmem_swapin_page before), and the read itself (swap_read_folio
# from 6.6, swap_readpage before: 5.10 waits there, deep under shmem_swapin_page, for a single page read
# synchronously); at most three of them on one kernel
SWAPIN_FUNCTIONS = ("do_swap_page", "shmem_swapin_folio", "shmem_swapin_page", "swap_read_folio", "swap_readpage")
SWAPIN_SLOTS = 4   # IOWAIT_SWAPIN_FNS
# IOSCOPE_SWAPIN=off: no stack read at each I/O wait (its cost: bench/iowait_overhead.py --workload direct)
SWAPIN_ENV = "IOSCOPE_SWAPIN"


class _Global(Protocol):
    def set_global(self, name: str, value: bool | int | tuple[int, ...], fmt: str) -> None: ...


def set_swapin_functions(bpf: _Global, kallsyms: str = "/proc/kallsyms") -> str | None:
    """Give the object the swap-in functions' addresses, before its load; None, or why swap-ins cannot be
    told from other waits here (the addresses hidden: kptr_restrict, or not root)."""
    from ioscope.kernel.ksyms import kernel_function_ranges
    if os.environ.get(SWAPIN_ENV, "") == "off":
        return f"SWAPIN: not looked for ({SWAPIN_ENV}=off); it shows 0"
    found = [r for r in kernel_function_ranges(SWAPIN_FUNCTIONS, kallsyms).values() if r[0]]
    if not found:
        return "SWAPIN: no swap-in function's address in /proc/kallsyms (hidden by kernel.kptr_restrict?); it shows 0"
    flat = [a for r in found[:SWAPIN_SLOTS] for a in r] + [0, 0] * (SWAPIN_SLOTS - len(found[:SWAPIN_SLOTS]))
    bpf.set_global("targ_swapin_fns", tuple(flat), f"{2 * SWAPIN_SLOTS}Q")
    return None


def swap_used_kb(meminfo: str = "/proc/meminfo") -> int:
    """The host's swap in use (SwapTotal - SwapFree), in KiB; 0 without swap."""
    total = free = 0
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    total = int(line.split()[1])
                elif line.startswith("SwapFree:"):
                    free = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return 1   # not known: looked for
    return max(0, total - free)


class SwapGate:
    """Keeps the object's iowait_swap_used at 1 while the host has swap in use, 0 otherwise (bpf/iowait.bpf.h
    reads the stack of a thread that blocks only at 1). Checked at each refresh: a swap-in needs a page
    swapped out before it, seen by the refresh after that (a host whose first swap-out and swap-ins fall in
    one interval has those swap-ins in IO> and not in SWAPIN)."""

    def __init__(self, flag: _Map, meminfo: str = "/proc/meminfo") -> None:
        self.flag, self.meminfo = flag, meminfo
        self.on: bool | None = None

    def check(self) -> None:
        on = swap_used_kb(self.meminfo) > 0
        if on != self.on:
            self.flag.update(np.uint32(0).tobytes(), np.uint32(on).tobytes())
            self.on = on


class _Map(Protocol):
    def dump(self, sum: bool = ..., delete: bool = ...) -> tuple[bytes, bytes, int]: ...

    def delete(self, key: bytes) -> bool: ...

    def update(self, key: bytes, value: bytes, flags: int = ...) -> None: ...


def _empty(dt: np.dtype) -> npt.NDArray[Any]:
    return np.zeros(0, dtype=dt)


@dataclass(frozen=True)
class ThreadWaits:
    """Every thread's I/O waits at one moment (one read of the maps), sorted by thread id."""

    mono_ns: int = 0                        # time.monotonic_ns() of the read (the BPF programs' clock)
    tid: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U32))
    tgid: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U32))
    cgroup: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))
    waited_ns: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))   # ended + in progress
    waits: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))       # waits ended
    blocked_ns: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))  # the wait in progress (0: none)
    # of the waits ended, those whose dequeue the scheduler delayed (bpf/iowait.bpf.h: delay accounting
    # counts them from the delayed dequeue, or not at all), and their time
    delayed: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))
    delayed_ns: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))
    # the part of waited_ns in swap-ins (bpf/iowait.bpf.h: iotop's SWAPIN; a wait in progress included)
    swapin_ns: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))
    swapins: npt.NDArray[Any] = field(default_factory=lambda: _empty(_U64))     # swap-in waits ended


def combine(ended: npt.NDArray[Any], ended_tids: npt.NDArray[Any], starts: npt.NDArray[Any],
            start_tids: npt.NDArray[Any], mono_ns: int) -> ThreadWaits:
    """The two maps' dumps (IOWAIT_VAL and IOWAIT_START records with their thread ids) -> ThreadWaits at
    mono_ns: each thread's ended waits plus its wait in progress up to mono_ns."""
    tid = np.union1d(ended_tids, start_tids).astype(np.uint32)
    n = len(tid)
    tgid = np.zeros(n, dtype=np.uint32)
    cgroup = np.zeros(n, dtype=np.uint64)
    waited = np.zeros(n, dtype=np.uint64)
    waits = np.zeros(n, dtype=np.uint64)
    blocked = np.zeros(n, dtype=np.uint64)
    delayed = np.zeros(n, dtype=np.uint64)
    delayed_ns = np.zeros(n, dtype=np.uint64)
    swapin_ns = np.zeros(n, dtype=np.uint64)
    swapins = np.zeros(n, dtype=np.uint64)
    if len(ended_tids):
        i = np.searchsorted(tid, ended_tids)
        tgid[i], cgroup[i] = ended["tgid"], ended["cgroup"]
        waited[i] = ended["ns"]
        waits[i] = ended["waits"]
        delayed[i] = ended["delayed"]
        delayed_ns[i] = ended["delayed_ns"]
        swapin_ns[i] = ended["swapin_ns"]
        swapins[i] = ended["swapins"]
    if len(start_tids):
        i = np.searchsorted(tid, start_tids)
        tgid[i], cgroup[i] = starts["tgid"], starts["cgroup"]  # the wait in progress is the latest
        began = starts["ns"].astype(np.uint64)
        age = np.where(began < np.uint64(mono_ns), np.uint64(mono_ns) - began, np.uint64(0))
        blocked[i] = age
        waited[i] += age
        swapin_ns[i] += np.where(starts["swapin"] != 0, age, np.uint64(0))
    return ThreadWaits(mono_ns, tid, tgid, cgroup, waited, waits, blocked, delayed, delayed_ns, swapin_ns, swapins)


@dataclass(frozen=True)
class Waited:
    """What every thread waited between two reads (threads that did not wait are left out)."""

    seconds: float
    tid: npt.NDArray[Any]
    tgid: npt.NDArray[Any]
    cgroup: npt.NDArray[Any]
    waited_ns: npt.NDArray[Any]   # time blocked in the interval
    waits: npt.NDArray[Any]       # waits that ended in it
    blocked_ns: npt.NDArray[Any]  # at the end of the interval, the wait in progress so far (0: not blocked)
    delayed: npt.NDArray[Any]     # of the waits ended, those whose dequeue was delayed (ThreadWaits)
    delayed_ns: npt.NDArray[Any]
    swapin_ns: npt.NDArray[Any]   # the part of waited_ns in swap-ins
    swapins: npt.NDArray[Any]     # swap-in waits that ended in it


def waited_between(prev: ThreadWaits, cur: ThreadWaits) -> Waited:
    """cur - prev per thread. A thread absent from prev (new, or blocked since before the first read)
    counts from 0; a thread whose totals went back (its id reused after its entry was removed) counts
    from 0 too."""
    i = np.searchsorted(prev.tid, cur.tid)
    i_ok = np.minimum(i, max(len(prev.tid) - 1, 0))
    known = (i < len(prev.tid)) & (prev.tid[i_ok] == cur.tid) if len(prev.tid) else np.zeros(len(cur.tid), bool)
    p_wait = np.where(known, prev.waited_ns[i_ok] if len(prev.tid) else 0, 0).astype(np.uint64)
    p_n = np.where(known, prev.waits[i_ok] if len(prev.tid) else 0, 0).astype(np.uint64)
    p_dl = np.where(known, prev.delayed[i_ok] if len(prev.tid) else 0, 0).astype(np.uint64)
    p_dl_ns = np.where(known, prev.delayed_ns[i_ok] if len(prev.tid) else 0, 0).astype(np.uint64)
    p_sw = np.where(known, prev.swapin_ns[i_ok] if len(prev.tid) else 0, 0).astype(np.uint64)
    p_swn = np.where(known, prev.swapins[i_ok] if len(prev.tid) else 0, 0).astype(np.uint64)
    # a swap-in in progress at the last read that has ended since counts whole in swapin_ns now
    back = (cur.waited_ns < p_wait) | (cur.waits < p_n) | (cur.swapin_ns < p_sw)
    p_wait, p_n, p_dl, p_dl_ns, p_sw, p_swn = (np.where(back, 0, a).astype(np.uint64)
                                               for a in (p_wait, p_n, p_dl, p_dl_ns, p_sw, p_swn))
    d_wait = cur.waited_ns - p_wait
    d_n = cur.waits - p_n
    keep = (d_wait > 0) | (d_n > 0) | (cur.blocked_ns > 0)
    return Waited((cur.mono_ns - prev.mono_ns) / 1e9, cur.tid[keep], cur.tgid[keep], cur.cgroup[keep],
                  d_wait[keep], d_n[keep], cur.blocked_ns[keep], (cur.delayed - p_dl)[keep],
                  (cur.delayed_ns - p_dl_ns)[keep], (cur.swapin_ns - p_sw)[keep],
                  (cur.swapins - p_swn)[keep])


class IowaitReader:
    """Reads an object's iowait maps (bpf/iowait.bpf.h) and removes the threads that exited."""

    def __init__(self, tids: _Map, starts: _Map, proc_root: str = "/proc") -> None:
        self.tids, self.starts, self.proc_root = tids, starts, proc_root

    def read(self) -> ThreadWaits:
        """Every thread's waits now. The ended waits are read first and the waits in progress second: a
        wait that ends between the two is in neither and is counted, whole, at the next read (never
        twice)."""
        kb, vb, n = self.tids.dump()
        ended_tids = np.frombuffer(kb, dtype=np.uint32, count=n)
        ended = np.frombuffer(vb, dtype=abi.IOWAIT_VAL, count=n)
        kb, vb, m = self.starts.dump()
        start_tids = np.frombuffer(kb, dtype=np.uint32, count=m)
        starts = np.frombuffer(vb, dtype=abi.IOWAIT_START, count=m)
        now = time.monotonic_ns()
        # a start left by a thread that exited without the wakeup being seen: not a thread blocked now
        live = np.array([self._lives(t, g) for t, g in zip(start_tids.tolist(), starts["tgid"].tolist())], dtype=bool)
        for tid in start_tids[~live].tolist() if len(start_tids) else []:
            self.starts.delete(np.uint32(tid).tobytes())
        if len(start_tids):
            start_tids, starts = start_tids[live], starts[live]
        blocked = set(start_tids.tolist())
        for tid, tgid in zip(ended_tids.tolist(), ended["tgid"].tolist()):
            if tid not in blocked and not self._lives(tid, tgid):
                self.tids.delete(np.uint32(tid).tobytes())  # read now for the last time
        return combine(ended, ended_tids, starts, start_tids, now)

    def _lives(self, tid: int, tgid: int) -> bool:
        return os.path.exists(os.path.join(self.proc_root, str(tgid), "task", str(tid)))


@dataclass
class ProcessWait:
    """One process's I/O waits in an interval: its threads' added up."""

    pid: int                  # the process (tgid)
    cgroup: int               # its cgroup id of the io controller (its latest waiting thread's)
    waited_s: float           # seconds its threads were blocked in the interval, summed over threads
    waits: int                # waits that ended in it
    blocked: int              # threads blocked at its end
    oldest_s: float           # the longest of those waits so far (0: none blocked)
    delayed: int = 0          # of the waits ended, those whose dequeue the scheduler delayed (ThreadWaits)
    delayed_s: float = 0.0    # their time
    swapin_s: float = 0.0     # the part of waited_s in swap-ins (iotop's SWAPIN)
    swapins: int = 0          # the swap-in waits that ended

    def percent(self, seconds: float) -> float:
        """iotop's IO>: the share of the interval spent blocked, summed over threads (a process whose
        two threads are blocked throughout shows 200, as top's %CPU counts two busy CPUs)."""
        return 100.0 * self.waited_s / seconds if seconds > 0 else 0.0

    def swapin_percent(self, seconds: float) -> float:
        """iotop's SWAPIN: the share of the interval spent blocked in swap-ins (part of percent())."""
        return 100.0 * self.swapin_s / seconds if seconds > 0 else 0.0


def per_process(w: Waited) -> list[ProcessWait]:
    """The threads of w added up per process, most waiting first."""
    out: dict[int, ProcessWait] = {}
    for tgid, cg, ns, n, b, dl, dl_ns, sw, swn in zip(
            w.tgid.tolist(), w.cgroup.tolist(), w.waited_ns.tolist(), w.waits.tolist(), w.blocked_ns.tolist(),
            w.delayed.tolist(), w.delayed_ns.tolist(), w.swapin_ns.tolist(), w.swapins.tolist()):
        p = out.setdefault(tgid, ProcessWait(tgid, cg, 0.0, 0, 0, 0.0))
        p.waited_s += ns / 1e9
        p.swapin_s += sw / 1e9
        p.swapins += swn
        p.waits += n
        p.delayed += dl
        p.delayed_s += dl_ns / 1e9
        if b:
            p.blocked += 1
            p.oldest_s = max(p.oldest_s, b / 1e9)
            p.cgroup = cg
    return sorted(out.values(), key=lambda p: (p.waited_s, p.blocked, p.pid), reverse=True)


__all__ = ["EXPLAIN", "HOOKS", "LOST", "SWAPIN_FUNCTIONS", "IowaitReader", "ProcessWait", "SwapGate", "ThreadWaits",
           "Waited", "combine", "per_process", "set_swapin_functions", "swap_used_kb", "waited_between"]
