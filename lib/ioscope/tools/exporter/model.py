"""The exporter's model: what one scrape exports, from what the collector read. Pure: no kernel, no
files, no clock (the time is given), no prometheus_client.

Everything exported is cumulative and every series is stable (docs/exporter.md, "Series"):

- latency histograms: lat's in-kernel histograms are read without reset (the kernel keeps the totals
  since the attach), mapped here onto round `le` bounds (LE_NS);
- per-process and per-cgroup counters (SeriesSet): agg's maps are read with reset and the deltas added
  to one counter per key; a key gets a series when it first does I/O and there is room (at most
  `limit` series), keeps it while it does I/O, and loses it only after `idle_s` seconds without any;
  the I/O of keys without a series is summed in one `other` series;
- per-process and per-cgroup time blocked in I/O waits (the same SeriesSet, chosen by time blocked):
  agg's `sum(iowait)`, one record per wait when it ends, so a wait counts when it ends; of it, the
  swap-ins (agg's `sum(swapin)`, iotop's SWAPIN), in the same series;
- completions no program counted (CompletionCheck): per disk, the requests the kernel completed since
  the attach (/proc/diskstats, read before the maps) beyond those counted, as a counter that never
  goes down;
- bios blk-throttle held (ThrottleSeries): per disk and cgroup, the held bios (exact) and the waits
  measured where fentry loads, read with reset and added up; at most MAX_THROTTLE_SERIES series, the
  rest in one `other`; a series idle for `idle_s` (no bio held, no limit in force) goes.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from ioscope.base import hist, psi
from ioscope.base.devices import DiskStats, completed_requests
from ioscope.base.losses import UNSEEN
from ioscope.engines.context.throttle import HeldBios
from ioscope.engines.latency.model import completion_shortfall
from ioscope.kernel.inflight import OldestIO

DEFAULT_SERIES_IDLE_S = 600.0

# `le` bounds: 1-2-5 per decade from 1 us to 10 s, in ns
LE_NS = [m * 10 ** d for d in range(3, 10) for m in (1, 2, 5)] + [10 ** 10]


def _split(bound: int) -> tuple[int, int, int]:
    """Where `le` bound falls in ioscope's log-linear scheme: (bucket, part, width). Latencies are
    integer ns, so le means < bound + 1: that bucket holds width values, of which part are <= bound."""
    i = hist.bucket_index(bound)
    low, high = hist.bucket_low(i), hist.bucket_high(i)
    return i, bound + 1 - low, high - low


LE_SPLIT = [_split(b) for b in LE_NS]


def le_counts(counts: Iterable[int]) -> list[int]:
    """Cumulative counts at each LE_NS bound, then +Inf, from one histogram's log-linear bucket counts.

    A bound is not a bucket boundary of the kernel's histogram (those are m * 2^k ns, m = 8..15), so
    the one bucket that holds it (at most 1/8 of the bound wide) is split linearly, rounded down, the
    way histogram_quantile() reads a bucket anyway; every other bucket is counted exactly. Each count
    is non-decreasing across bounds and, as the buckets only grow, across scrapes."""
    c = [int(x) for x in counts]
    below = [0] * (len(c) + 1)
    for i, n in enumerate(c):
        below[i + 1] = below[i] + n
    return [below[i] + c[i] * part // width for i, part, width in LE_SPLIT] + [below[-1]]


@dataclass(frozen=True)
class HistSeries:
    """One exported histogram: cumulative counts per LE_NS bound and +Inf, and the sum (ns)."""

    disk: str
    op: str
    phase: str
    buckets: list[int]
    sum_ns: int

    @property
    def count(self) -> int:
        return self.buckets[-1]


def hist_series(disk: str, op: str, phase: str, h: hist.Hist) -> HistSeries:
    """A histogram as exported; its count is its buckets' (the +Inf bucket), never torn from them."""
    return HistSeries(disk, op, phase, le_counts(h.counts), int(h.total))


K = TypeVar("K", bound=Hashable)

DEFAULT_SERIES_WINDOW_S = 60.0
WINDOW_STEPS = 6        # the sliding window moves in steps of window / WINDOW_STEPS
REPLACE_FACTOR = 2.0    # a key takes the place of the lightest series only with more than twice its bytes


@dataclass
class Delta:
    """What one key did since the previous read: I/Os and bytes queued, and (per-cgroup latency) the
    histograms of its I/O's phases (phase -> log-linear histogram, agg's); or, for the I/O wait series, the
    waits its threads ended and their time blocked, and of those the swap-ins."""

    ios: int = 0
    bytes: int = 0
    hists: dict[str, hist.Hist] = field(default_factory=dict)
    waits: int = 0
    waited_ns: int = 0
    swapins: int = 0
    swapin_ns: int = 0


@dataclass
class Counter:
    """One exported series: cumulative I/Os, bytes and histograms since it started."""

    ios: int = 0
    bytes: int = 0
    hists: dict[str, hist.Hist] = field(default_factory=dict)
    waits: int = 0
    waited_ns: int = 0
    swapins: int = 0       # of the waits, the swap-ins (iotop's SWAPIN), and their time
    swapin_ns: int = 0
    since: float = 0.0     # when it (last) got its place
    last_io: float = 0.0   # when it last grew (the collector's monotonic clock)

    def add(self, d: Delta, now: float) -> None:
        self.ios += d.ios
        self.bytes += d.bytes
        self.waits += d.waits
        self.waited_ns += d.waited_ns
        self.swapins += d.swapins
        self.swapin_ns += d.swapin_ns
        for phase, h in d.hists.items():
            have = self.hists.get(phase)
            self.hists[phase] = have.merge(h) if have is not None else h
        self.last_io = now

    def copy(self) -> Counter:
        return replace(self, hists=dict(self.hists))  # Hist objects are never changed in place (merge makes new)


@dataclass
class SlidingBytes(Generic[K]):
    """Bytes (or another weight: SeriesSet.weight) per key over the last `seconds`, in WINDOW_STEPS steps: a
    key's weight is what it did in the current step and the WINDOW_STEPS - 1 before it."""

    seconds: float
    steps: dict[K, list[tuple[int, int]]] = field(default_factory=dict)  # key -> [(step, bytes)]

    def _step(self, now: float) -> int:
        return int(now // (self.seconds / WINDOW_STEPS))

    def add(self, key: K, nbytes: int, now: float) -> None:
        cur = self._step(now)
        rows = self.steps.setdefault(key, [])
        if rows and rows[-1][0] == cur:
            rows[-1] = (cur, rows[-1][1] + nbytes)
        else:
            rows.append((cur, nbytes))

    def weights(self, now: float) -> dict[K, int]:
        """Every key with bytes in the window, and its bytes; keys without any are forgotten."""
        first = self._step(now) - WINDOW_STEPS + 1
        out = {}
        for k in list(self.steps):
            rows = [r for r in self.steps[k] if r[0] >= first]
            if rows:
                self.steps[k] = rows
                out[k] = sum(b for _, b in rows)
            else:
                del self.steps[k]
        return out


@dataclass
class SeriesSet(Generic[K]):
    """Named series, the heaviest keys by bytes over a sliding window (or by time blocked in I/O waits:
    `weight`, a Delta field), at most `limit`, and `other` for the rest; stable on a host where processes
    and cgroups come and go.

    add() takes what each key did since the previous add() (any reader's: the tick or a scrape; the
    result does not depend on how often it runs, but for where a window's step falls), at time now:
    - a key with a series adds to it (its counters never go down); any other key's I/O is added to
      `other`, which therefore holds exactly the I/O no series shows: the increases of all series over
      any window (named and other) add up to the I/O of that window;
    - a key without a series gets one (from 0, from the next read on) when fewer than `limit` exist
      and it is among the heaviest keys without one; when `limit` exist, it takes the place of the
      lightest series (by bytes over the window) if it did more than REPLACE_FACTOR times its bytes and
      that series has held its place for at least the window (hysteresis: two keys of about the same
      weight do not swap places, and none loses its place within a window of getting it);
    - a series that lost its place is kept, frozen (its last values, no longer growing), for the
      window, so that every scraper whose interval is at most the window sees its final value; a key
      that gets its place back while frozen continues from those values (no counter reset);
    - a series whose key did no I/O for idle_s seconds is dropped (idle long enough that every scraper
      has seen its final value).
    At most 2 x limit + 1 series are exported (limit named, at most limit frozen, other)."""

    limit: int
    idle_s: float = DEFAULT_SERIES_IDLE_S
    window_s: float = DEFAULT_SERIES_WINDOW_S
    weight: str = "bytes"  # the Delta field the heaviest are chosen by: bytes, or waited_ns
    series: dict[K, Counter] = field(default_factory=dict)
    frozen: dict[K, tuple[Counter, float]] = field(default_factory=dict)  # key -> (final values, frozen at)
    other: Counter = field(default_factory=Counter)
    replaced: int = 0      # places given to a heavier key since the start
    window: SlidingBytes[K] = field(init=False)

    def __post_init__(self) -> None:
        self.window = SlidingBytes[K](self.window_s)

    def add(self, deltas: Mapping[K, Delta], now: float) -> None:
        for k, d in deltas.items():
            if not d.ios and not d.bytes and not d.waits and not d.waited_ns:
                continue
            c = self.series.get(k)
            (c if c is not None else self.other).add(d, now)
            self.window.add(k, getattr(d, self.weight), now)
        self.expire(now)
        self._choose(now)

    def _choose(self, now: float) -> None:
        w = self.window.weights(now)
        waiting = sorted((k for k in w if k not in self.series and w[k] > 0), key=lambda k: (-w[k], repr(k)))
        for k in waiting:
            if len(self.series) >= self.limit:
                held = [s for s, c in self.series.items() if now - c.since >= self.window_s]
                if not held:
                    return
                lightest = min(held, key=lambda s: (w.get(s, 0), repr(s)))
                if w[k] <= REPLACE_FACTOR * w.get(lightest, 0):
                    return  # the others waiting are lighter still
                self.frozen[lightest] = (self.series.pop(lightest), now)
                self.replaced += 1
            back = self.frozen.pop(k, None)
            c = back[0] if back is not None else Counter()
            c.since = c.last_io = now
            self.series[k] = c

    def expire(self, now: float) -> None:
        for k in [k for k, c in self.series.items() if now - c.last_io >= self.idle_s]:
            del self.series[k]
        for k in [k for k, (_, at) in self.frozen.items() if now - at >= self.window_s]:
            del self.frozen[k]

    def snapshot(self) -> dict[K, Counter]:
        """Every exported series but other: the named ones and the frozen ones."""
        out = {k: c.copy() for k, (c, _) in self.frozen.items()}
        out.update((k, c.copy()) for k, c in self.series.items())
        return out


@dataclass
class CompletionCheck:
    """Per traced blk-mq disk: the requests the kernel completed (/proc/diskstats) since the attach,
    against those the exporter counted (its d2c histograms: one per request) and those ended untimed
    (reported as losses of their own), on every read. The difference is a lower bound of the
    completions no program counted (lat.model.completion_shortfall; the kernel is read first, so a
    request completed between the two reads is counted and not yet in the kernel's number, never the
    reverse); unseen keeps, per disk, the largest found, so it never goes down.

    A disk first seen after the start is compared from that read on: the kernel's count then, against
    what was counted at the read before (a request completed in between is then counted, not missed).
    A disk whose kernel count went back (removed and made again) starts over the same way, keeping
    what was found before."""

    base: dict[str, tuple[int, int]] = field(default_factory=dict)  # disk -> (kernel, counted) at its start
    found: dict[str, int] = field(default_factory=dict)    # found since base, the largest so far
    carried: dict[str, int] = field(default_factory=dict)  # found before a restart
    _last_counted: dict[str, int] = field(default_factory=dict)

    @classmethod
    def at_attach(cls, kernel: Mapping[str, int]) -> CompletionCheck:
        """Right after the programs were attached: nothing counted yet."""
        return cls(base={d: (n, 0) for d, n in kernel.items()})

    def update(self, kernel: Mapping[str, int], counted: Mapping[str, int], untimed: int) -> None:
        """kernel: per disk, requests completed (read first); counted: per disk, requests counted since
        the attach (read after); untimed: requests ended without being timed, on any disk (subtracted
        from each: a lower bound)."""
        since_k, since_c = {}, {}
        for d, k in kernel.items():
            b = self.base.get(d)
            if b is None or k < b[0]:
                if b is not None:
                    self.carried[d] = self.unseen(d)
                    self.found[d] = 0
                self.base[d] = (k, self._last_counted.get(d, 0))
                continue
            since_k[d] = k - b[0]
            since_c[d] = counted.get(d, 0) - b[1]
        for d, n in completion_shortfall(since_k, since_c, untimed).items():
            self.found[d] = max(self.found.get(d, 0), n)
        self._last_counted = dict(counted)

    def unseen(self, disk: str) -> int:
        return self.carried.get(disk, 0) + self.found.get(disk, 0)

    @property
    def disks(self) -> list[str]:
        return sorted(self.base)

    @property
    def total(self) -> int:
        return sum(self.unseen(d) for d in self.base)


MAX_THROTTLE_SERIES = 256   # (disk, cgroup) series of held bios; the rest is summed in THROTTLE_OTHER
THROTTLE_OTHER = ("", "")      # the key of the other series: no disk, no cgroup


@dataclass
class HeldTotal:
    """The bios blk-throttle held of one cgroup on one disk since the exporter started: all of them
    (exact) and the waits measured (wait.count of them), and when the series last changed."""

    held: int = 0
    wait: hist.Hist = field(default_factory=hist.Hist)
    changed: float = 0.0


@dataclass
class ThrottleSeries:
    """Held bios per (disk, cgroup), cumulative (docs/exporter.md, 'Throttled I/O')."""

    limit: int = MAX_THROTTLE_SERIES
    series: dict[tuple[str, str], HeldTotal] = field(default_factory=dict)

    def add(self, held: Iterable[HeldBios], now: float) -> None:
        for h in held:
            key = (h.disk, h.cgroup)
            if key not in self.series and len(self.series) >= self.limit:
                key = THROTTLE_OTHER
            t = self.series.setdefault(key, HeldTotal(changed=now))
            t.held += h.held
            t.wait = t.wait.merge(h.wait)
            t.changed = now

    def expire(self, now: float, idle_s: float, limited: set[tuple[str, str]]) -> None:
        """Series idle for idle_s whose cgroup has no limit on the disk any more go (a pod that ended)."""
        for key in [k for k, t in self.series.items() if now - t.changed >= idle_s and k not in limited]:
            del self.series[key]

    def snapshot(self) -> dict[tuple[str, str], HeldTotal]:
        return {k: HeldTotal(t.held, t.wait, t.changed) for k, t in sorted(self.series.items())}


@dataclass
class ScrapeSample:
    """What the collector read for one scrape, in this order: /proc/diskstats, then lat's maps."""

    now: float                                  # the collector's monotonic clock
    diskstats: dict[str, DiskStats]             # every disk the exporter exports (-d, or /sys/block filtered)
    mq: list[str]                               # those of them that are blk-mq (have requests to count)
    hists: list[tuple[str, str, str, hist.Hist]]  # (disk, op, phase, histogram since the attach)
    losses: dict[str, int]                      # lat's counters since the previous sample
    loss_names: frozenset[str]                  # which of them are losses
    timing: dict[str, str]
    unstamped: dict[str, int] = field(default_factory=dict)  # per disk: requests not stamped, since the attach
    # blk-throttle: the bios it held since the previous sample, the limits in force on the exported disks
    # (iolimits.in_force), and why the waits (or the held bios) cannot be seen here ("" when they can)
    held: list[HeldBios] = field(default_factory=list)
    limits: list[dict[str, Any]] = field(default_factory=list)
    throttle_no_wait: str = ""
    throttle_no_held: str = ""
    # the oldest I/O in flight over 1 s per disk (kernel/inflight.py, read at the tick), and the disks the
    # slot table follows (timed by the probes): those get the gauges
    oldest: dict[str, OldestIO] = field(default_factory=dict)
    followed: list[str] = field(default_factory=list)
    # I/O pressure (base/psi.py): the host's, and each cgroup's with a series (v2 io.pressure)
    pressure: psi.Pressure | None = None
    cgroup_pressure: dict[str, psi.Pressure] = field(default_factory=dict)


@dataclass
class AggDeltas:
    """agg's maps, read with reset: what each process (comm, or (pid, comm)) and cgroup (its path)
    queued since the previous read, and the I/O waits their threads ended."""

    now: float
    processes: dict[Hashable, Delta]
    cgroups: dict[str, Delta]
    losses: dict[str, int]
    loss_names: frozenset[str]
    process_waits: dict[Hashable, Delta] = field(default_factory=dict)
    cgroup_waits: dict[str, Delta] = field(default_factory=dict)


# the completions of requests the programs did not time, per request, so not missed (CompletionCheck):
# ended without the kernel's stamps, or (the probes) issued before the attach
NOT_STAMPED = "not_stamped"
UNTIMED = (NOT_STAMPED, "completed_without_start")


HistKey = tuple[str, str, str]  # (disk, op, phase)


@dataclass
class KernelHists:
    """lat's histograms as the kernel keeps them (cumulative since the attach, read without reset), made
    safe to export as counters: a key whose count went down was deleted from the map (by someone else:
    lat never deletes) and made again, so its new counts are added to what it held at the previous
    read; a key gone from the map keeps that. The I/O counted between that read and the deletion is
    lost, and the completions check finds it (completion_unseen)."""

    base: dict[HistKey, hist.Hist] = field(default_factory=dict)
    last: dict[HistKey, hist.Hist] = field(default_factory=dict)

    def update(self, read: Iterable[tuple[str, str, str, hist.Hist]]) -> dict[HistKey, hist.Hist]:
        now = {(d, o, p): h for d, o, p, h in read}
        out = {}
        for key in sorted(set(self.last) | set(now)):
            h = now.get(key) or hist.Hist()
            last = self.last.get(key)
            if last is not None and h.count < last.count:
                self.base[key] = self.base[key].merge(last) if key in self.base else last
            self.last[key] = h
            out[key] = self.base[key].merge(h) if key in self.base else h
        return out


LossKey = tuple[str, str]  # (reason, device): device "" where the loss is not known per disk


@dataclass
class ExporterState:
    """Everything the exporter keeps between scrapes; scrape() and add_agg() are all that change it."""

    check: CompletionCheck
    processes: SeriesSet[Hashable] | None = None
    cgroups: SeriesSet[str] | None = None
    idle_s: float = DEFAULT_SERIES_IDLE_S
    process_waits: SeriesSet[Hashable] | None = None  # the processes, cgroups blocked longest in I/O waits
    cgroup_waits: SeriesSet[str] | None = None
    losses: dict[str, int] = field(default_factory=dict)   # reason -> count since the start (losses only)
    lat_counts: dict[str, int] = field(default_factory=dict)  # lat's every counter since the start
    hists: KernelHists = field(default_factory=KernelHists)
    throttle: ThrottleSeries = field(default_factory=ThrottleSeries)
    _hist_changed: dict[HistKey, tuple[int, float]] = field(default_factory=dict)  # count, when it last changed
    _unstamped: dict[str, int] = field(default_factory=dict)  # per disk, the largest read (never goes down)

    def _add_losses(self, counters: Mapping[str, int], names: frozenset[str]) -> None:
        for k, v in counters.items():
            # the probes' own completion_unseen counts bios whose slot came back; the request-level
            # count is CompletionCheck's, which finds the same losses (and those of the stamps)
            if k in names and k != UNSEEN:
                self.losses[k] = self.losses.get(k, 0) + v

    def add_agg(self, d: AggDeltas) -> None:
        if self.processes is not None:
            self.processes.add(d.processes, d.now)
        if self.cgroups is not None:
            self.cgroups.add(d.cgroups, d.now)
        if self.process_waits is not None:
            self.process_waits.add(d.process_waits, d.now)
        if self.cgroup_waits is not None:
            self.cgroup_waits.add(d.cgroup_waits, d.now)
        self._add_losses(d.losses, d.loss_names)

    def _losses_by_device(self, disks: Iterable[str]) -> dict[LossKey, int]:
        """Each reason, on the disks where it is known per disk (not_stamped, completion_unseen) and
        the rest (device "": the map-full and other reasons, which the kernel counts for all disks)."""
        out: dict[LossKey, int] = {}
        for reason, n in self.losses.items():
            if reason == UNSEEN:
                for d in self.check.disks:
                    out[(UNSEEN, d)] = self.check.unseen(d)
                continue
            if reason == NOT_STAMPED:
                per = {d: self._unstamped.get(d, 0) for d in disks}
                for d, k in per.items():
                    out[(reason, d)] = k
                # the per-disk map of the kernel can be full; what it could not note has no disk
                out[(reason, "")] = max(0, n - sum(self._unstamped.values()))
                continue
            out[(reason, "")] = n
        return dict(sorted(out.items()))

    def scrape(self, s: ScrapeSample) -> Exposition:
        self._add_losses(s.losses, s.loss_names)
        for k, v in s.losses.items():
            self.lat_counts[k] = self.lat_counts.get(k, 0) + v
        for d, n in s.unstamped.items():
            self._unstamped[d] = max(n, self._unstamped.get(d, 0))
        totals = self.hists.update(s.hists)
        counted: dict[str, int] = {}
        for (disk, _op, phase), h in totals.items():
            if phase == "d2c":
                counted[disk] = counted.get(disk, 0) + int(h.counts.sum())  # as exported (+Inf)
        kernel = {d: completed_requests(s.diskstats[d]) for d in s.mq if d in s.diskstats}
        self.check.update(kernel, counted, sum(self.lat_counts.get(k, 0) for k in UNTIMED))
        self.losses[UNSEEN] = self.check.total
        self.losses.setdefault(NOT_STAMPED, 0)
        hists = []
        for key, h in totals.items():
            n, since = self._hist_changed.get(key, (-1, s.now))
            if h.count != n:
                self._hist_changed[key] = (h.count, s.now)
                since = s.now
            # a disk that went away keeps its series until they have been idle for idle_s
            if key[0] in s.diskstats or s.now - since < self.idle_s:
                hists.append(hist_series(*key, h))
        procs, cgs, pwaits, cwaits = (SeriesView.of(x, s.now) for x in (
            self.processes, self.cgroups, self.process_waits, self.cgroup_waits))
        self.throttle.add(s.held, s.now)
        self.throttle.expire(s.now, self.idle_s, {(str(x.get("disk")), str(x.get("cgroup"))) for x in s.limits})
        return Exposition(
            hists=hists,
            diskstats=dict(s.diskstats),
            unseen={d: self.check.unseen(d) for d in self.check.disks},
            losses=self._losses_by_device(s.timing),
            timing=dict(s.timing),
            # copies: the tick adds to the series while the view writes this one out
            processes=procs,
            cgroups=cgs,
            process_waits=pwaits,
            cgroup_waits=cwaits,
            held=self.throttle.snapshot(),
            limits=list(s.limits),
            throttle_no_wait=s.throttle_no_wait,
            throttle_no_held=s.throttle_no_held,
            in_flight_oldest=in_flight_oldest(s),
            pressure=s.pressure,
            cgroup_pressure=dict(s.cgroup_pressure),
        )


def in_flight_oldest(s: ScrapeSample) -> dict[str, tuple[float, int]]:
    """Per exported disk: the age (s) of its oldest I/O in flight and the bios (requests, where /proc/diskstats
    alone says it) in flight longer than 1 s; (0, 0) when none is in flight that long. On a disk the slot
    table does not follow, a lower bound: how long it has had requests in flight and completed none."""
    out = {}
    for d in sorted(s.diskstats):
        o = s.oldest.get(d)
        out[d] = (o.age_ns / 1e9, o.over) if o is not None else (0.0, 0)
    return out


@dataclass
class SeriesView:
    """A SeriesSet as one scrape exports it (copies)."""

    series: dict[Any, Counter]   # key (comm, (pid, comm), cgroup path) -> its counters
    other: Counter
    replaced: int

    @classmethod
    def of(cls, s: SeriesSet[Any] | None, now: float) -> SeriesView | None:
        """The set's series now (after dropping the idle ones); None for a set not asked for."""
        if s is None:
            return None
        s.expire(now)
        return cls(s.snapshot(), s.other.copy(), s.replaced)


@dataclass
class Exposition:
    """Everything one scrape exports (view.py turns it into metric families)."""

    hists: list[HistSeries]
    diskstats: dict[str, DiskStats]            # the disks exported, as read at the scrape (first)
    unseen: dict[str, int]                     # per traced blk-mq disk: completions no program counted
    losses: dict[LossKey, int]                 # (reason, device) -> count since the start
    timing: dict[str, str]                     # disk -> stamps.STAMPS / PROBES
    processes: SeriesView | None = None        # None: not asked for
    cgroups: SeriesView | None = None
    process_waits: SeriesView | None = None    # the I/O wait series (None: not asked for)
    cgroup_waits: SeriesView | None = None
    held: dict[tuple[str, str], HeldTotal] = field(default_factory=dict)   # (disk, cgroup) -> held since start
    limits: list[dict[str, Any]] = field(default_factory=list)             # the limits in force (iolimits)
    throttle_no_wait: str = ""
    throttle_no_held: str = ""
    # disk -> (the age of its oldest I/O in flight over 1 s, the bios in flight over 1 s): the disks the
    # slot table follows (timed by the probes)
    in_flight_oldest: dict[str, tuple[float, int]] = field(default_factory=dict)
    pressure: psi.Pressure | None = None                                   # the host's (None: no PSI)
    cgroup_pressure: dict[str, psi.Pressure] = field(default_factory=dict)  # cgroup path -> its (v2)


__all__ = [
    "DEFAULT_SERIES_IDLE_S",
    "DEFAULT_SERIES_WINDOW_S",
    "LE_NS",
    "MAX_THROTTLE_SERIES",
    "NOT_STAMPED",
    "REPLACE_FACTOR",
    "THROTTLE_OTHER",
    "UNTIMED",
    "AggDeltas",
    "CompletionCheck",
    "Counter",
    "Delta",
    "ExporterState",
    "Exposition",
    "HeldTotal",
    "HistSeries",
    "KernelHists",
    "ScrapeSample",
    "SeriesSet",
    "SeriesView",
    "SlidingBytes",
    "ThrottleSeries",
    "hist_series",
    "le_counts",
]
