"""The flight recorder (`ioscope record --ring`): every block event kept in memory for the last window
only, and that window saved as a normal capture when something goes wrong (docs/record.md, "Flight
recorder").

- EventRing: the events in blocks of about a second each (EVENT arrays as the recorder's rings gave them),
  trimmed to the window by time (plus --after) and to a memory bound; the process names seen, and the
  loss counters at each block's start, so that a saved window has its names and its own losses.
- Triggers: conditions in agg's language evaluated in the kernel by the agg BPF object (KernelTriggers:
  one aggregation per condition, read every TRIGGER_POLL_S; InFlightConditions decides those on a time
  for the I/Os still in flight), the disks' percentiles against their usual (BaselineWatch, from
  histograms in the same object), the host's or a cgroup's I/O pressure (PressureTrigger, the kernel's PSI
  trigger), SIGUSR1 (the command), and a health check run every interval (CommandTrigger). Each asks
  FlightSession.request(); a trigger while a save is waiting for its --after time joins that save.
- FlightSession: the consumer thread (the recorder's rings -> the ring, the kernel triggers, the saves
  due) and the Saver thread, which writes each window with CaptureWriter (or into a collect bundle with
  the host's context), so that writing a large window never stops the rings from being emptied.

Windows never overlap: a save begins where the previous one ended, so consecutive saves of a long
incident read as one recording cut in pieces, and no event is written twice.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import re
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ioscope.base import live, psi
from ioscope.base.cgroups import CgroupNames
from ioscope.base.cgroups import label as cgroup_label
from ioscope.base.collector import Tick
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.base.hist import Hist
from ioscope.capture.events import EVENT, join_events, select_events
from ioscope.capture.store import require_writer

if TYPE_CHECKING:
    from ioscope.engines.aggregate.collector import AggCollector
    from ioscope.engines.aggregate.expr import Expr
    from ioscope.engines.recording.recorder import Recorder

DEFAULT_RING_MEMORY = 512 << 20   # a window given by time alone is also bounded by this much memory
BLOCK_S = 1.0                     # the ring's blocks: about a second of events each
BLOCK_BYTES = 4 << 20             # ... or this much, whichever comes first
TRIGGER_POLL_S = 0.1              # the kernel triggers' aggregations are read this often
SETTLE_NS = 50_000_000            # a window ends this long before the poll that closes it: every ring's
                                  # events up to then have arrived (they are microseconds out of order)
TIME_FIELDS = ("q2c", "d2c", "q2d")
DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, what: str) -> float:
    """'500ms', '30s', '10m', '2h', '1d' or a number of seconds -> seconds (ArgumentTypeError otherwise)."""
    s = text.strip().lower()
    for unit in sorted(DURATION_UNITS, key=len, reverse=True):
        if s.endswith(unit) and s[: -len(unit)].strip():
            num, mult = s[: -len(unit)], DURATION_UNITS[unit]
            break
    else:
        num, mult = s, 1.0
    try:
        v = float(num) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a duration like 30s, 10m or 2h, not '{text}'") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{what} must be a positive duration, not '{text}'")
    return v


@dataclass(frozen=True)
class RingSpec:
    """What --ring keeps: the last window_s seconds and/or at most max_bytes of events."""

    window_s: float | None
    max_bytes: int | None
    text: str = ""

    @property
    def memory(self) -> int:
        return self.max_bytes or DEFAULT_RING_MEMORY

    def describe(self) -> str:
        from ioscope.base.fmt import fmt_bytes
        if self.window_s and self.max_bytes:
            return f"the last {self.window_s:g} s, at most {fmt_bytes(self.max_bytes, prose=True)}"
        if self.window_s:
            return f"the last {self.window_s:g} s (at most {fmt_bytes(self.memory, prose=True)})"
        return f"the last {fmt_bytes(self.memory, prose=True)} of events"


def _is_size(text: str) -> bool:
    """Sizes end in K, M, G or T (and optionally iB or B); a lower-case m alone is minutes."""
    t = text.removesuffix("iB").removesuffix("ib").removesuffix("B").removesuffix("b")
    if t != text:
        return True
    return t[-1:] in ("K", "k", "M", "G", "g", "T", "t")


def parse_ring(text: str) -> RingSpec:
    """--ring DURATION, SIZE or DURATION,SIZE ('60s', '256M', '10m,1G')."""
    from ioscope.tools.common import parse_size
    window: float | None = None
    size: int | None = None
    parts = [p.strip() for p in text.split(",")]
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"--ring takes DURATION, SIZE or DURATION,SIZE (60s, 256M, 10m,1G), "
                                         f"not '{text}'")
    for p in parts:
        if _is_size(p):
            if size is not None:
                raise argparse.ArgumentTypeError(f"--ring '{text}' gives two sizes")
            size = parse_size(p, "--ring")
        else:
            if window is not None:
                raise argparse.ArgumentTypeError(f"--ring '{text}' gives two durations")
            try:
                window = parse_duration(p, "--ring")
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(f"--ring takes DURATION, SIZE or DURATION,SIZE (60s, 256M, 10m,1G), "
                                                 f"not '{text}'") from None
    if size is not None and size < (1 << 20):
        raise argparse.ArgumentTypeError(f"--ring {text}: at least 1M of events (a window of {size} bytes holds "
                                         f"{size // EVENT.itemsize} events)")
    return RingSpec(window, size, text)


# -- the ring -------------------------------------------------------------------------------

@dataclass
class Block:
    ev: np.ndarray          # EVENT rows, as the rings gave them (time-ordered per ring only)
    first_ts: int
    last_ts: int
    lost_before: dict[str, Any]  # the loss counters when its first events were taken


def lost_delta(now: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    """The loss counters of a capture (recorder.capture_lost) between two readings: numbers and lists of
    numbers subtracted, nested dicts alike."""
    out: dict[str, Any] = {}
    for k, v in now.items():
        b = before.get(k)
        if isinstance(v, Mapping):
            out[k] = lost_delta(v, b if isinstance(b, Mapping) else {})
        elif isinstance(v, list):
            bl = b if isinstance(b, list) else []
            out[k] = [int(x) - int(bl[i]) if i < len(bl) else int(x) for i, x in enumerate(v)]
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = v - (b if isinstance(b, (int, float)) else 0)
        else:
            out[k] = v
    return out


class EventRing:
    """The last keep_ns of events (None: no time bound) in at most max_bytes, in blocks."""

    def __init__(self, keep_ns: int | None, max_bytes: int, zero_lost: Mapping[str, Any] | None = None) -> None:
        self.keep_ns = keep_ns
        self.max_bytes = max_bytes
        self.block_rows = max(1024, min(BLOCK_BYTES, max_bytes // 16) // EVENT.itemsize)
        self.blocks: deque[Block] = deque()
        self.bytes = 0                 # in blocks
        self.rows = 0                  # events in blocks
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self._sealed_at = time.monotonic()
        self.comms: dict[int, str] = {}
        self.lost: dict[str, Any] = dict(zero_lost or {"total": 0})
        self._lost_at_pending = dict(self.lost)
        self.events_seen = 0           # every event put in (process notes included)
        self.aged_out = 0              # events dropped because they were older than the window
        self.squeezed_out = 0          # events dropped, younger than the window, for the memory bound
        self.squeezed_ts = 0           # the newest event dropped for the memory bound

    def add(self, ev: np.ndarray) -> None:
        if not len(ev):
            return
        from ioscope.capture.store import notes_to_comms
        if (ev["action"] == 0).any():
            self.comms.update(notes_to_comms(ev))
        self.events_seen += len(ev)
        # no block larger than block_rows: one poll at full rate can bring a megabyte, and the memory bound
        # drops whole blocks (a poll cut across blocks is copied, so that each block owns its memory)
        while self._pending_rows + len(ev) > self.block_rows:
            room = self.block_rows - self._pending_rows
            self._pending.append(select_events(ev, slice(0, room)))
            self._pending_rows += room
            ev = select_events(ev, slice(room, None))
            self.seal()
        if len(ev):
            self._pending.append(ev)
            self._pending_rows += len(ev)
        if self._pending_rows >= self.block_rows or time.monotonic() - self._sealed_at >= BLOCK_S:
            self.seal()

    def set_lost(self, lost: Mapping[str, Any]) -> None:
        self.lost = dict(lost)

    def seal(self) -> None:
        """The pending events become a block."""
        self._sealed_at = time.monotonic()
        if not self._pending:
            self._lost_at_pending = dict(self.lost)
            return
        ev = join_events(self._pending)
        ts = ev["ts"]
        self.blocks.append(Block(ev, int(ts.min()), int(ts.max()), self._lost_at_pending))
        self.bytes += ev.nbytes
        self.rows += len(ev)
        self._pending = []
        self._pending_rows = 0
        self._lost_at_pending = dict(self.lost)
        self._squeeze()

    def _squeeze(self) -> None:
        while self.bytes > self.max_bytes and len(self.blocks) > 1:
            b = self.blocks.popleft()
            self.bytes -= b.ev.nbytes
            self.rows -= len(b.ev)
            self.squeezed_out += len(b.ev)
            self.squeezed_ts = max(self.squeezed_ts, b.last_ts)

    def trim(self, now_ns: int) -> None:
        """Drop the blocks wholly older than the window."""
        if self.keep_ns is None:
            return
        cut = now_ns - self.keep_ns
        while self.blocks and self.blocks[0].last_ts < cut:
            b = self.blocks.popleft()
            self.bytes -= b.ev.nbytes
            self.rows -= len(b.ev)
            self.aged_out += len(b.ev)
        if len(self.comms) > 4 * max(1024, self.nevents // 64):
            self._prune_comms()

    @property
    def nevents(self) -> int:
        return self.rows + self._pending_rows

    def oldest_ts(self) -> int | None:
        return self.blocks[0].first_ts if self.blocks else None

    def _prune_comms(self) -> None:
        """Keep the names of the processes the ring still holds events of."""
        ids: set[int] = set()
        for b in self.blocks:
            ids.update(np.unique(b.ev["tgid"]).tolist())
            ids.update(np.unique(b.ev["pid"]).tolist())
        self.comms = {k: v for k, v in self.comms.items() if k in ids}

    def window(self, start_ns: int, end_ns: int) -> tuple[list[np.ndarray], dict[str, Any], dict[int, str]]:
        """The events with start_ns <= ts < end_ns (seal() first), the losses of the blocks they came from,
        and the names of their processes."""
        parts: list[np.ndarray] = []
        lost_before: dict[str, Any] | None = None
        ids: set[int] = set()
        for b in self.blocks:
            if b.last_ts < start_ns or b.first_ts >= end_ns:
                continue
            if lost_before is None:
                lost_before = b.lost_before
            ts = b.ev["ts"]
            if b.first_ts >= start_ns and b.last_ts < end_ns:
                ev = b.ev
            else:
                ev = select_events(b.ev, (ts >= start_ns) & (ts < end_ns))
            if len(ev):
                parts.append(ev)
                ids.update(np.unique(ev["tgid"]).tolist())
                ids.update(np.unique(ev["pid"]).tolist())
        lost = lost_delta(self.lost, lost_before if lost_before is not None else self._lost_at_pending)
        return parts, lost, {k: v for k, v in self.comms.items() if k in ids}


# -- triggers -------------------------------------------------------------------------------

@dataclass
class Trigger:
    """What asked for a save."""
    why: str                 # one line: "q2c > 500ms: loop7 read, q2c up to 612 ms (3 I/Os)", "SIGUSR1", ...
    mono_ns: int
    wall: float
    kind: str                # "condition", "signal", "command", "pressure", "exit"


# a trigger's I/Os are counted by these: the save line names the disks and ops, and who did the worst one
# (its process and the cgroup it is charged to: a service's throttled bios are the service's)
TRIGGER_KEYS = ("disk", "op", "comm", "cgroup")


def parse_triggers(texts: Sequence[str]) -> list[Expr]:
    """Each --trigger condition as the aggregation that counts the I/Os matching it, by disk and op; with
    the largest time it names (max(q2c) for 'q2c > 500ms'), to say how slow they were."""
    from ioscope.engines.aggregate.expr import MAX_EXPRS, Expr, ExprError, cond_fields, parse_condition
    if len(texts) > MAX_EXPRS:
        raise UsageError(f"at most {MAX_EXPRS} --trigger conditions, got {len(texts)}")
    out = []
    for t in texts:
        try:
            cond = parse_condition(t)
        except ExprError as exc:
            raise ExprError(f"--trigger '{t}': {exc.msg}", exc.col, exc.hint) from None
        fields = cond_fields(cond)
        value = next((f for f in TIME_FIELDS if f in fields), None)
        out.append(Expr(t, "max" if value else "count", value, TRIGGER_KEYS, cond))
    return out


# -- a trigger against the usual: 'p99(q2c) > 3x usual' ----------------------------------------------

DEFAULT_BASELINE_S = 600.0   # --baseline: how far back "usual" looks
CURRENT_MAX_S = 10           # the current value spans at most this many of the last seconds
_BASELINE = re.compile(r"^\s*p(\d{1,2}(?:\.\d+)?)\s*\(\s*(q2c|d2c|q2d)\s*\)\s*>\s*(\d+(?:\.\d+)?)\s*"
                       r"(?:x|\*|times)?\s*(?:(?:the\s+)?usual)?\s*$", re.I)


@dataclass(frozen=True)
class BaselineSpec:
    """--trigger-baseline 'p99(q2c) > 3x usual': a disk's percentile of a time over its last seconds passes
    factor times the same percentile over the --baseline before them."""

    text: str
    pct: float       # 99.0
    phase: str       # q2c, d2c or q2d
    factor: float    # 3.0

    @property
    def name(self) -> str:
        return f"p{self.pct:g}({self.phase})"

    @property
    def min_ios(self) -> int:
        """The I/Os a window needs for its percentile to be more than its largest value, twice over: 200 for
        p99, 20 for p90, 4 for p50 (a p99 of 100 I/Os is the slowest one, not a percentile)."""
        return math.ceil(2 / (1 - self.pct / 100) - 1e-9)


def parse_baseline(text: str) -> BaselineSpec:
    """'p99(q2c) > 3x usual' (or '> 3x', '> 3 x usual', '> 3 times usual') -> BaselineSpec (UsageError)."""
    m = _BASELINE.match(text)
    if not m:
        raise UsageError(f"--trigger-baseline '{text}': not PCT(TIME) > FACTORx usual",
                         "e.g. --trigger-baseline 'p99(q2c) > 3x usual' (PCT p50 to p99.9, TIME q2c, d2c or q2d)")
    pct, factor = float(m[1]), float(m[3])
    if not 0 < pct < 100:
        raise UsageError(f"--trigger-baseline '{text}': p{m[1]} is not a percentile between p0 and p100",
                         "e.g. p99 or p99.9")
    if not factor > 1:
        raise UsageError(f"--trigger-baseline '{text}': a factor of {m[3]} is not above the usual",
                         "give a factor above 1: 'p99(q2c) > 3x usual'")
    return BaselineSpec(text.strip(), pct, m[2].lower(), factor)


@dataclass(frozen=True)
class _Second:
    """One second's histogram of one disk, its non-zero buckets only: a Hist holds all of them (4 KiB), and
    --baseline 10m keeps 610 seconds per disk and time."""

    idx: np.ndarray     # bucket indexes
    n: np.ndarray       # their counts
    count: int
    lo: int             # the smallest and largest value seen
    hi: int

    @classmethod
    def of(cls, h: Hist) -> _Second:
        idx = np.flatnonzero(h.counts)
        return cls(idx, h.counts[idx].copy(), h.count, h.min, h.max)


def _joined(parts: Sequence[_Second]) -> Hist:
    """The histogram of several seconds."""
    from ioscope.base.hist import NBUCKETS
    full = [p for p in parts if p.count]
    if not full:
        return Hist()
    counts = np.zeros(NBUCKETS, dtype=np.uint64)
    np.add.at(counts, np.concatenate([p.idx for p in full]), np.concatenate([p.n for p in full]))
    return Hist(counts, sum(p.count for p in full), 0, min(p.lo for p in full), max(p.hi for p in full))


class BaselineWatch:
    """The --trigger-baseline conditions, per disk, from a histogram of the time per disk and second (agg's
    llquantize by disk, read with the other triggers' maps every 100 ms and summed into the second).

    Each second, for each condition and disk: the current value is the percentile over the fewest last
    seconds (at most CURRENT_MAX_S) that hold min_ios I/Os (too few I/Os in 10 s: nothing is decided);
    the usual is the same percentile over the --baseline seconds before those (the I/Os themselves, not
    an average of per-second values). Nothing is decided until the usual spans half of --baseline and
    holds ten times min_ios I/Os. A condition fires when current > factor x usual, once, and again only
    after the current value went back under it (a slow hour fires once, not every second)."""

    def __init__(self, specs: Sequence[BaselineSpec], baseline_s: float = DEFAULT_BASELINE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.specs = list(specs)
        self.phases = sorted({s.phase for s in self.specs})
        self.baseline_s = math.ceil(baseline_s)
        self.clock = clock
        self.second = 0                      # the index of the second being summed
        self.started = clock()
        self.cur: dict[tuple[str, str], Hist] = {}
        self.secs: dict[tuple[str, str], deque[tuple[int, _Second]]] = {}
        self.first: dict[tuple[str, str], int] = {}   # the first second a disk had I/O of the phase
        self.armed: dict[tuple[int, str], bool] = {}
        self.fired = 0

    def add(self, phase: str, disk: str, h: Hist) -> None:
        key = (phase, disk)
        was = self.cur.get(key)
        self.cur[key] = h if was is None else was.merge(h)

    def tick(self) -> list[str]:
        """Close the seconds that ended; the conditions that fired (one line each)."""
        out: list[str] = []
        while self.clock() - self.started >= self.second + 1:
            for key, h in self.cur.items():
                self.secs.setdefault(key, deque()).append((self.second, _Second.of(h)))
                self.first.setdefault(key, self.second)
            self.cur = {}
            self.second += 1
            keep = self.second - self.baseline_s - CURRENT_MAX_S
            for q in self.secs.values():
                while q and q[0][0] < keep:
                    q.popleft()
            out += self._decide()
        return out

    def _decide(self) -> list[str]:
        from ioscope.base.fmt import fmt_ns
        out = []
        for i, spec in enumerate(self.specs):
            for (phase, disk), cols in self.secs.items():
                if phase != spec.phase:
                    continue
                parts: list[_Second] = []
                n, start = 0, self.second
                for idx, sec in reversed(cols):
                    if idx < self.second - CURRENT_MAX_S or n >= spec.min_ios:
                        break
                    parts.append(sec)
                    n, start = n + sec.count, idx
                if n < spec.min_ios:
                    continue
                cur = _joined(parts)
                base = _joined([sec for idx, sec in cols if start - self.baseline_s <= idx < start])
                if base.count < 10 * spec.min_ios or start - self.first[(phase, disk)] < self.baseline_s / 2:
                    continue   # still learning what is usual
                now, usual = cur.percentile(spec.pct), base.percentile(spec.pct)
                key = (i, disk)
                if now > spec.factor * usual:
                    if self.armed.get(key, True):
                        self.armed[key] = False
                        self.fired += 1
                        span = self.second - start
                        base_s = start - max(self.first[(phase, disk)], start - self.baseline_s)
                        out.append(f"'{spec.text}': {disk} {spec.name} {fmt_ns(int(now))} over the last {span} s "
                                   f"({cur.count:,} I/Os), {now / usual if usual else float('inf'):.1f}x its usual "
                                   f"{fmt_ns(int(usual))} ({spec.name} of {base.count:,} I/Os in the {base_s} s "
                                   "before)")
                else:
                    self.armed[key] = True
        return out


class InFlightConditions:
    """The --trigger conditions that read q2c, q2d or d2c, decided for the I/Os still in flight: 'q2c > 2s'
    holds as soon as an I/O has been out 2 s, completed or not (a hung device completes nothing, and a
    condition the kernel evaluates at completion never fires on it).

    Only I/Os out longer than inflight.OVER_NS (1 s, top's hung-I/O line) are looked at: a shorter one
    completes within a read or two and fires then. They come from the slot table of the triggers' BPF
    object (the probes: each bio's queue and issue time, its process; kernel/inflight.py OldestWatch
    reads it at most once a second, and only while a traced disk has had requests in flight for 1 s),
    or, where no slot holds them (the request stamps, or a bio queued before the recorder started), from
    /proc/diskstats alone: a disk with requests in flight that has completed none for that long (who
    queued them, and anything but the disk and the time, is not known then; with a slot table, only once
    a read of it made after that moment found no slot there). A condition is decided with
    what an I/O in flight has (expr.decide): the disk, the process, its times so far; one on its size,
    op or cgroup is not known until it completes, and fires then. Each I/O fires each condition once
    while in flight (and once more when it completes, from the kernel's evaluation)."""

    FORGET_NS = 10_000_000_000   # an I/O that fired and has not been seen in flight for this long is forgotten

    def __init__(self, exprs: Sequence[Expr], disks: Sequence[Any], pid: int | None,
                 diskstats: Callable[[], Mapping[str, Any]] | None = None, proc_root: str = "/proc") -> None:
        from ioscope.base import devices
        from ioscope.engines.aggregate.expr import time_floor
        from ioscope.kernel.inflight import OVER_NS, OldestWatch
        floors = {e.text: f for e in exprs if e.where is not None and (f := time_floor(e.where)) is not None}
        self.exprs = [e for e in exprs if e.text in floors]
        floor = min(floors.values(), default=0)
        self.over_ns = max(OVER_NS, floor)
        self.watch = OldestWatch(None, issue_known=True, over_ns=self.over_ns)
        self.devs = {d.dev for d in disks} or {d.dev for d in devices.list_disks()}
        self.pid = pid
        self.diskstats = diskstats or devices.read_diskstats
        self.proc_root = proc_root
        self.fired: dict[tuple[Any, ...], int] = {}   # (condition, I/O) -> when it was last seen in flight
        self._reads = 0
        self.cpu_s = 0.0   # time.thread_time() spent in check(): its cost, said in the summary

    def _comm(self, tgid: int) -> str:
        from ioscope.base.system import proc_comm
        return proc_comm(tgid, self.proc_root) or "[exited]"

    def check(self, table: Any, issue_known: bool) -> list[str]:
        """The conditions that hold for an I/O in flight now, each once per I/O (table: the SlotTable
        the BPF object fills, None while no disk is followed by the probes; issue_known: its slots get
        each request's issue time, when a condition reads q2d or d2c)."""
        if not self.exprs:
            return []
        t0 = time.thread_time()
        try:
            return self._check(table, issue_known)
        finally:
            self.cpu_s += time.thread_time() - t0

    def _check(self, table: Any, issue_known: bool) -> list[str]:
        from ioscope.base import devices
        from ioscope.base.fmt import fmt_ns
        from ioscope.engines.aggregate.expr import decide
        self.watch.table = table
        stats = self.diskstats()
        current = self.watch.read(stats)
        now = self.watch.clock()
        names = {devices.kdev(st.major, st.minor): name for name, st in stats.items()}
        found: list[tuple[tuple[Any, ...], dict[str, int | str], dict[str, int], str]] = []
        if table is not None and self.watch.reads != self._reads:   # the table was read again
            self._reads = self.watch.reads
            vals = self.watch.vals
            q, d = vals["q_ns"].astype(np.int64), vals["d_ns"].astype(np.int64)
            ts = np.where(q > 0, q, d)
            for i in np.flatnonzero((ts > 0) & (now - ts >= self.over_ns)):
                dev = int(vals["dev"][i])
                idle = self.watch.due.get(dev)
                age = now - int(ts[i])
                if dev not in self.devs or idle is None or ts[i] <= max(idle, 1):
                    continue   # not a disk read for, or a slot from before it was last idle (a lost completion)
                tgid = int(vals["tgid"][i])
                disk = names.get(dev, devices.kdev_str(dev))
                known: dict[str, int | str] = {"disk": disk}
                lower = {"q2c": age}
                if tgid:
                    known |= {"tgid": tgid, "comm": self._comm(tgid)}
                if not issue_known:   # no issue program: d_ns is never set, where it is is not known
                    where = ""
                elif d[i] > 1:
                    lower["d2c"] = now - int(d[i])
                    if q[i] > 0:
                        known["q2d"] = int(d[i] - q[i])
                    where = f" (issued to the device {fmt_ns(now - int(d[i]))} ago)"
                else:
                    lower["q2d"] = age
                    where = " (not yet issued to the device)"
                who = f"by {known['comm']} (pid {tgid})" if tgid else "queued before the recorder started"
                found.append((("slot", int(vals["bio"][i]), int(ts[i])), known, lower,
                              f"an I/O in flight for {fmt_ns(age)} on {disk}{where}, {who}"))
        if self.pid is None:   # a stalled disk says nothing of whose I/O it holds
            for dev, o in current.items():
                if o.known or dev not in self.devs:
                    continue
                since = self.watch.done.get(dev, (0, now - o.age_ns))[1]
                if table is not None and (self.watch.read_at or 0) < since + self.over_ns:
                    continue   # the table, read since the stall grew this old, would name its I/O: wait for it
                disk = names.get(dev, devices.kdev_str(dev))
                found.append((("stall", dev, since), {"disk": disk}, {"q2c": o.age_ns, "d2c": o.age_ns},
                              f"{disk} has completed nothing for {fmt_ns(o.age_ns)} with {o.over} request"
                              f"{'s' if o.over != 1 else ''} in flight (who queued them is not known)"))
        out = []
        for ident, known, lower, what in found:
            for e in self.exprs:
                key = (e.text, *ident)
                if key in self.fired:
                    self.fired[key] = now
                elif e.where is not None and decide(e.where, known, lower):
                    self.fired[key] = now
                    out.append(f"'{e.text}': {what}")
        self.fired = {k: t for k, t in self.fired.items() if now - t < self.FORGET_NS}
        return out


class KernelTriggers:
    """The --trigger conditions, evaluated in the kernel by the agg BPF object; check() reads (and clears)
    its maps: the triggers that matched an I/O since the last read."""

    def __init__(self, exprs: list[Expr], disks: Sequence[Any], pid: int | None, btf: str | None,
                 progs: list[list[Any]], baseline: BaselineWatch | None = None) -> None:
        from ioscope.engines.aggregate.collector import AggCollector, AggOptions
        from ioscope.engines.aggregate.expr import parse
        from ioscope.kernel.stamps import TICK_S
        self.exprs = exprs
        # the baseline's histograms of each time it reads, by disk, beside the conditions (no WHERE)
        self.baseline = baseline
        self.base_exprs = [parse(f"llquantize({ph}) by disk") for ph in (baseline.phases if baseline else [])]
        progs = [*progs, *([] for _ in self.base_exprs)]
        # a condition on the time from the queue (q2c, q2d) is timed from each bio's queue event, not from
        # its request's stamps: the remainder of a split bio that blk-throttle holds again (an iops limit,
        # 6.1 on) becomes a request only when the throttle lets it go, and a request's own start would
        # miss that wait (issue 24 finding 1: 'q2c > 200ms' never fired on writes that took a second)
        from_queue = any(f in ("q2c", "q2d") for e in [*exprs, *self.base_exprs] for f in e.fields())
        self.collector: AggCollector = AggCollector(AggOptions(exprs=[*exprs, *self.base_exprs], disks=list(disks),
                                                               pid=pid, btf=btf,
                                                               programs=progs,
                                                               timing="probes" if from_queue else "auto"))
        self._tick_every = TICK_S
        self._ticked = time.monotonic()
        self.in_flight = InFlightConditions(exprs, disks, pid)

    def check(self) -> list[str]:
        from ioscope.base.fmt import fmt_ns
        now = time.monotonic()
        if now - self._ticked >= self._tick_every:
            self.collector.tick()
            self._ticked = now
        sample = self.collector.sample(Tick(time.time(), reset=True))
        out = []
        for e, rows in zip(self.exprs, sample.rows):
            if not rows:
                continue
            n = sum(r.stat.count for r in rows)
            where = ", ".join(sorted({f"{r.keys.get('disk')} {r.keys.get('op')}s" for r in rows}))
            if e.value:
                worst = max(rows, key=lambda r: r.stat.max)
                what = f", {e.value} up to {fmt_ns(worst.stat.max)}"
            else:
                worst = max(rows, key=lambda r: r.stat.count)
                what = ""
            who = f"{worst.keys.get('comm')} in {cgroup_label(str(worst.keys.get('cgroup')))}"
            ios = f"{n} I/O{'s' if n != 1 else ''}"
            out.append(f"'{e.text}': {ios} ({where}){what}, by {who}")
        if self.baseline is not None:
            for e, rows in zip(self.base_exprs, sample.rows[len(self.exprs):]):
                for r in rows:
                    if isinstance(r.stat, Hist) and r.stat.count:
                        self.baseline.add(str(e.value), str(r.keys.get("disk")), r.stat)
            out += self.baseline.tick()
        c = self.collector
        return out + self.in_flight.check(c.slots if c.slotted else None, c.issue_stamped)

    def close(self) -> None:
        self.collector.close()


class CommandTrigger:
    """--trigger-cmd: CMD run by sh every interval; a save is asked when it exits non-zero or does not end
    within the interval (it is then killed, with its process group)."""

    def __init__(self, cmd: str, every_s: float, request: Callable[[str, str], None]) -> None:
        self.cmd = cmd
        self.every_s = every_s
        self.request = request
        self.runs = 0
        self.failures = 0
        self._stop = live.Flag()
        self._proc: subprocess.Popen[bytes] | None = None
        self.thread = threading.Thread(target=self._run, name="ioscope-trigger-cmd", daemon=True)

    def start(self) -> None:
        live.start_thread(self.thread)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            why = self._once()
            if why is not None and not self._stop.is_set():
                self.failures += 1
                self.request(why, "command")

    def _once(self) -> str | None:
        try:
            self._proc = subprocess.Popen(["sh", "-c", self.cmd], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return f"--trigger-cmd could not run: {exc.strerror}"
        self.runs += 1
        try:
            out, _ = self._proc.communicate(timeout=self.every_s)
        except subprocess.TimeoutExpired:
            self._kill()
            self._proc.communicate()
            return f"--trigger-cmd did not finish within {self.every_s:g} s"
        rc = self._proc.returncode
        if self._stop.is_set() or rc == 0:
            return None
        last = next((ln.strip() for ln in reversed(out.decode(errors="replace").splitlines()) if ln.strip()), "")
        how = f"killed by signal {-rc}" if rc < 0 else f"exited {rc}"
        return f"--trigger-cmd {how}" + (f": {last[:160]}" if last else "")

    def _kill(self) -> None:
        p = self._proc
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self._stop.set()
        self._kill()
        self.thread.join(timeout=5)


class PressureTrigger:
    """--trigger-pressure: the kernel's own PSI trigger on /proc/pressure/io or a v2 cgroup's io.pressure
    (base/psi.py): it raises POLLPRI, at most once a window, when the stall in a moving window exceeds the
    threshold; each is a save asked for. Nothing is polled in between: the thread sleeps in poll() (woken
    every POLL_S to see a stop). A cgroup removed meanwhile raises POLLERR: one save, then the trigger is
    done."""

    POLL_S = 0.2

    def __init__(self, spec: psi.TriggerSpec, request: Callable[[str, str], None], path: str = psi.HOST_IO) -> None:
        self.spec = spec
        self.path = path
        self.request = request
        self.fired = 0
        try:
            self.fd = psi.open_trigger(spec, path)
        except OSError as exc:
            raise IoscopeError(f"--trigger-pressure {spec.describe()!r}: {psi.trigger_error(exc, path)}") from exc
        self._stop = live.Flag()
        self.thread = threading.Thread(target=self._run, name="ioscope-trigger-pressure", daemon=True)

    def start(self) -> None:
        live.start_thread(self.thread)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLPRI)
        while not self._stop.is_set():
            events = poller.poll(self.POLL_S * 1000)
            if self._stop.is_set():
                return
            for _fd, ev in events:
                if ev & select.POLLERR:   # the file went away (never for /proc/pressure/io)
                    self.request(f"--trigger-pressure: {self.path} went away", "pressure")
                    return
                if ev & select.POLLPRI:
                    self.fired += 1
                    now = psi.read(self.path)
                    line = None if now is None else now.full if self.spec.kind == "full" and now.full else now.some
                    avgs = f" (avg10 {line.avg10:.2f}%, avg60 {line.avg60:.2f}%)" if line is not None else ""
                    self.request(f"I/O pressure {self.spec.describe()}{avgs}", "pressure")

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        os.close(self.fd)


# -- saving ---------------------------------------------------------------------------------

@dataclass
class SaveJob:
    seq: int
    path: str
    trigger: Trigger
    more: int                       # further triggers that joined this save
    start_ns: int
    end_ns: int
    parts: list[np.ndarray]
    lost: dict[str, Any]
    comms: dict[int, str]
    cut_short: str = ""             # why the --after time was not waited for in full
    asked_start_ns: int | None = None   # where the window would have started, when the memory bound cut it
    pending: Pending | None = None  # what asked for it (with --context: the snapshot taken at the trigger)
    events: int = 0
    error: str = ""


@dataclass
class Pending:
    trigger: Trigger
    due_ns: int
    more: int = 0
    context: dict[str, Any] = field(default_factory=dict)
    context_thread: threading.Thread | None = None


def save_path(prefix: str, wall: float, seq: int) -> str:
    """PREFIX-YYYYmmddTHHMMSSZ-N.ioscope (the trigger's UTC time; N counts the saves of this run). A
    directory as PREFIX: files named ioscope-... inside it."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall))
    if prefix.endswith("/") or os.path.isdir(prefix):
        prefix = os.path.join(prefix, "ioscope")
    return f"{prefix}-{stamp}-{seq}.ioscope"


class FlightSession:
    """Recorder -> EventRing in a consumer thread; triggers -> saves; stop() ends it cleanly."""

    def __init__(self, rec: Recorder, spec: RingSpec, *, prefix: str, meta: Mapping[str, Any], after_s: float,
                 triggers: KernelTriggers | None = None, max_saves: int = 20, context: bool = False,
                 save_on_exit: bool = False, command: str = "ioscope record",
                 say: Callable[[str], None] | None = None) -> None:
        self.rec = rec
        self.spec = spec
        self.prefix = prefix
        self.meta = dict(meta)
        self.after_ns = int(after_s * 1e9)
        self.window_ns = int(spec.window_s * 1e9) if spec.window_s else None
        keep = self.window_ns + self.after_ns if self.window_ns is not None else None
        self.ring = EventRing(keep, spec.memory, rec.capture_lost())
        require_writer()   # now, not at the first save (its memory said from the start, its absence too)
        # the paths of the cgroups the saved queue events name, read when a window is saved
        self.cgroup_names = CgroupNames()
        self.kernel_triggers = triggers
        self.max_saves = max_saves
        self.context = context
        self.save_on_exit = save_on_exit
        self.command = command
        self.say = say or (lambda line: print(line, flush=True))
        self.requests: queue.SimpleQueue[tuple[str, str, int]] = queue.SimpleQueue()
        self.pending: Pending | None = None
        self.last_end_ns = 0
        self.saves: list[SaveJob] = []
        self.not_saved = 0
        self.stop_reason = ""
        self.error: BaseException | None = None
        self._stop = live.Flag()
        self.done = live.Flag()
        self.saved = live.Flag()   # a save was written (or failed): --until-trigger stops then
        self._jobs: queue.SimpleQueue[SaveJob | None] = queue.SimpleQueue()
        self._wall_off = time.time() - time.monotonic_ns() / 1e9   # wall time of CLOCK_MONOTONIC 0
        self.thread = threading.Thread(target=self._run, name="ioscope-flight", daemon=False)
        self.saver = threading.Thread(target=self._save_loop, name="ioscope-flight-save", daemon=False)

    # -- control (any thread) --

    def start(self) -> None:
        live.start_thread(self.saver)
        live.start_thread(self.thread)

    def request(self, why: str, kind: str = "signal") -> None:
        """Ask for a save (thread- and signal-safe: the consumer thread acts on it)."""
        self.requests.put((why, kind, time.monotonic_ns()))

    def stop(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason
        self._stop.set()

    def join(self) -> None:
        self.thread.join()
        self.saver.join()

    # -- the consumer thread --

    def _run(self) -> None:
        from ioscope.engines.recording.recorder import FAST_POLL_FILL, FAST_POLL_MS, POLL_MS
        rec, ring = self.rec, self.ring
        last_lost = last_trig = 0.0
        try:
            wait = POLL_MS
            while not self._stop.is_set():
                ring.add(rec.poll(wait))
                wait = FAST_POLL_MS if rec.ring.fill > FAST_POLL_FILL else POLL_MS
                now = time.monotonic()
                if now - last_lost >= 1.0:
                    ring.set_lost(rec.capture_lost())
                    last_lost = now
                if self.kernel_triggers is not None and now - last_trig >= TRIGGER_POLL_S:
                    last_trig = now
                    for why in self.kernel_triggers.check():
                        self.requests.put((why, "condition", time.monotonic_ns()))
                self._take_requests()
                now_ns = time.monotonic_ns()
                if self.pending is not None and now_ns >= self.pending.due_ns:
                    self._hand_over(now_ns)
                ring.trim(now_ns)
            rec.detach()
            ring.add(rec.drain())
            ring.set_lost(rec.capture_lost())
            self._take_requests()
            now_ns = time.monotonic_ns()
            if self.pending is not None:
                waited = (now_ns - self.pending.trigger.mono_ns) / 1e9
                self._hand_over(now_ns + SETTLE_NS, cut_short=f"stopped {waited:.1f} s after the trigger, "
                                                              f"before its --after {self.after_ns / 1e9:g} s")
            elif self.save_on_exit:
                self.pending = Pending(Trigger(f"stopped ({self.stop_reason or 'end'}), --save-on-exit", now_ns,
                                               time.time(), "exit"), now_ns)
                self._start_context(self.pending)
                self._hand_over(now_ns + SETTLE_NS)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self._jobs.put(None)
            self.done.set()

    def _take_requests(self) -> None:
        while True:
            try:
                why, kind, mono = self.requests.get_nowait()
            except queue.Empty:
                return
            if self.pending is not None:
                self.pending.more += 1
                continue
            if len(self.saves) >= self.max_saves:
                self.not_saved += 1
                if self.not_saved == 1:
                    self.say(f"ioscope record: trigger {why}: not saved, --max-saves {self.max_saves} reached "
                             "(later triggers are counted, not said)")
                continue
            wall = time.time() - (time.monotonic_ns() - mono) / 1e9
            self.pending = Pending(Trigger(why, mono, wall, kind), mono + self.after_ns)
            self._start_context(self.pending)

    def _start_context(self, p: Pending) -> None:
        if not self.context:
            return
        from ioscope.engines.context import context

        def snap() -> None:
            try:
                p.context["start"] = context.snapshot(self.command)
            except Exception as exc:   # a context that failed does not cost the window
                p.context["start"] = {"error": str(exc)}
        p.context_thread = threading.Thread(target=snap, name="ioscope-flight-context", daemon=True)
        live.start_thread(p.context_thread)

    def _hand_over(self, now_ns: int, cut_short: str = "") -> None:
        """The pending save's window goes to the saver thread."""
        p = self.pending
        assert p is not None
        self.pending = None
        end = now_ns - SETTLE_NS
        ring = self.ring
        ring.seal()
        if self.window_ns is not None:
            start = p.trigger.mono_ns - self.window_ns
        else:
            start = ring.oldest_ts() or end
        start = max(start, self.last_end_ns, self.rec.attached_ns)   # nothing was recorded before the attach
        asked = start
        oldest = ring.oldest_ts()
        if oldest is not None and ring.squeezed_ts >= start:
            start = max(start, oldest)   # the memory bound dropped the window's beginning: it starts where it can
        parts, lost, comms = ring.window(start, end)
        seq = len(self.saves) + 1
        job = SaveJob(seq, save_path(self.prefix, p.trigger.wall, seq), p.trigger, p.more, start, end,
                      parts, lost, comms, cut_short, asked_start_ns=asked if start > asked else None, pending=p)
        self.last_end_ns = end
        self.saves.append(job)
        self._jobs.put(job)

    # -- the saver thread --

    def _save_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._save(job)
            except Exception as exc:
                job.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            finally:
                job.parts = []   # the ring's memory is the ring's again
            self.say(self.save_line(job))
            self.saved.set()

    def _header(self, job: SaveJob) -> dict[str, Any]:
        t = job.trigger
        meta = dict(self.meta)
        meta["attached_mono_ns"] = job.start_ns   # every event of [start, end) is in the file
        meta["flight"] = {
            "ring": self.spec.text, "window_s": self.spec.window_s, "max_bytes": self.spec.memory,
            "after_s": self.after_ns / 1e9, "save": job.seq,
            "trigger": {"why": t.why, "kind": t.kind, "mono_ns": t.mono_ns, "wall": t.wall,
                        "more": job.more},
            "window_mono_ns": [job.start_ns, job.end_ns],
            "cut_short": job.cut_short or None,
            # the memory bound dropped the window's beginning: where it would have started
            "memory_cut_from_mono_ns": job.asked_start_ns,
        }
        return meta

    def _save(self, job: SaveJob) -> None:
        from ioscope.capture.store import CaptureFull, CaptureWriter
        header = self._header(job)
        end = {"stop_reason": f"flight recorder save {job.seq}: {job.trigger.why}",
               "detached_mono_ns": job.end_ns, "completions_check": {}}

        def write(path: str, force: bool) -> None:
            w = CaptureWriter(path, header, force=force, cgroup_names=self.cgroup_names.name)
            try:
                w.add_comms(job.comms)
                w.set_lost(job.lost)
                for ev in job.parts:
                    w.write(ev, 0)
                job.events = int(w.events_written)
            except BaseException:
                w.close(end)
                raise
            try:
                w.close(end)
            except CaptureFull as exc:
                job.error = str(exc)
            job.events = int(w.events_written)

        if not self.context:
            base = job.path.removesuffix(".ioscope")
            for k in range(1, 100):   # another run with the same prefix saved in the same second: -N.2, -N.3
                path = job.path if k == 1 else f"{base}.{k}.ioscope"
                try:
                    write(path, False)
                    job.path = path
                    return
                except IoscopeError as exc:
                    if "exists" not in str(exc):
                        raise
            raise IoscopeError(f"{base}.ioscope and {base}.2 to .99.ioscope all exist")
        from ioscope.engines.context import context
        from ioscope.engines.context.bundling import begin_bundle, finish_bundle, host_name, manifest, piped_into
        p = job.pending
        if p is not None and p.context_thread is not None:
            p.context_thread.join()
        start_ctx = p.context.get("start") if p is not None else None
        start_ctx = start_ctx or context.snapshot(self.command)
        now = time.time()
        w = begin_bundle(job.path, False, now, manifest(self.command, host_name(start_ctx), now, None), start_ctx)
        error: BaseException | None = None
        with piped_into(w) as fifo:
            try:
                write(fifo, True)
            except BaseException as exc:
                error = exc
        finish_bundle(w, job.path, self.command, context.snapshot(self.command), 0, (), error, quiet=True)

    def save_line(self, job: SaveJob) -> str:
        from ioscope.base.fmt import fmt_bytes
        off = self._wall_off

        def at(mono: int) -> str:
            t = off + mono / 1e9
            return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}"

        more = f" (and {job.more} more trigger{'s' if job.more != 1 else ''} while waiting)" if job.more else ""
        span = (job.end_ns - job.start_ns) / 1e9
        lost = int(job.lost.get("total", 0))
        size = fmt_bytes(os.path.getsize(job.path), prose=True) if os.path.exists(job.path) else "no file"
        line = (f"ioscope record: saved {job.path}: {job.trigger.why}{more}; window {at(job.start_ns)} to "
                f"{at(job.end_ns)} UTC ({span:.1f} s); {job.events:,} events, {size}; lost {lost}")
        if job.asked_start_ns is not None:
            asked = (job.end_ns - job.asked_start_ns) / 1e9
            line += (f"; the {fmt_bytes(self.spec.memory, prose=True)} memory bound kept {span:.1f} s of the "
                     f"{asked:.1f} s asked (--ring {self.spec.window_s or 0:g}s,SIZE keeps more)")
        if job.cut_short:
            line += f"; {job.cut_short}"
        if job.error:
            line += f"; error: {job.error}"
        return line


__all__ = ["CommandTrigger", "EventRing", "FlightSession", "KernelTriggers", "RingSpec", "lost_delta",
           "parse_duration", "parse_ring", "parse_triggers", "save_path"]
