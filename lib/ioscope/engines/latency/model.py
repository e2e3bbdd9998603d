"""Pure model of ioscope lat: one LatSample -> one LatReport. No kernel, no files, no printing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ioscope.base.hist import Hist
from ioscope.base.losses import RECURSION_MISSES, Losses, settle_unreported, unreported_completions
from ioscope.base.phases import PHASE_TITLES
from ioscope.engines.context.throttle import HeldBios
from ioscope.kernel import abi
from ioscope.kernel.stamps import stamps_only


@dataclass
class LatHist:
    dev: int  # kernel dev_t, 0 = all disks
    disk: str
    op: str
    pid: int | None
    comm: str | None
    phase: str
    hist: Hist
    cgroup: str | None = None  # the cgroup's path with --per-cgroup, else None

    def sort_key(self) -> tuple[str, str, str, int, int]:
        return (self.disk, self.op, self.cgroup or "", self.pid or 0, list(abi.PHASES).index(self.phase))


@dataclass
class LatSample:
    """What the collector read at one moment: the histograms and every counter beside them."""

    wall: float                       # time.time() of the read
    started: float                    # wall time the interval began
    hists: list[LatHist]
    losses: Losses                    # counters since the previous sample
    kernel_completed: dict[str, int]  # /proc/diskstats: requests completed per traced blk-mq disk
    kernel_in_flight: int             # /proc/diskstats: requests in flight now on those disks
    final: bool                       # the last sample: nothing more can complete
    pid_filtered: bool                # -p or -c: /proc/diskstats counts every process, we some
    stacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # devices.stack_meta() of the traced disks
    timing: dict[str, str] = field(default_factory=dict)  # traced disk -> how it is timed (stamps.STAMPS/PROBES)
    programs: list[str] = field(default_factory=list)     # the BPF programs attached
    # with the kernel's stamps alone: requests the kernel completed that the program did not end, found
    # in this sample (stamps_shortfall())
    stamps_shortfall: int = 0
    # blk-throttle (engines/context/throttle.py): the bios it held in the interval, the limits in force on
    # the traced disks, and why the wait (or the held bios) cannot be seen here ("" when they can)
    throttled: list[HeldBios] = field(default_factory=list)
    throttle_limits: list[dict[str, Any]] = field(default_factory=list)
    throttle_no_wait: str = ""
    throttle_no_held: str = ""


@dataclass
class StackShare:
    """A stacked device (dm, md, btrfs) and, per member disk, the requests it completed in the interval
    (its d2c count), their share, and its d2c p99 (ns; None when it completed none)."""

    name: str
    kind: str
    label: str
    members: list[tuple[str, int, float, float | None]]


@dataclass
class LatReport:
    wall: float
    interval_s: float
    hists: list[LatHist]
    losses: Losses
    kernel_completed: dict[str, int]
    completions_unreported: int
    pid_filtered: bool = False
    timed_d2c: int = 0
    inflight_at_start: int = 0
    one_clock: int = 0  # stamped requests whose start and issue are one clock reading (q2d 0)
    attach: str = ""
    phases: tuple[str, ...] = field(default=("q2c", "q2d", "d2c"))
    stacks: list[StackShare] = field(default_factory=list)
    timing: dict[str, str] = field(default_factory=dict)
    programs: list[str] = field(default_factory=list)
    throttled: list[HeldBios] = field(default_factory=list)
    throttle_limits: list[dict[str, Any]] = field(default_factory=list)
    throttle_no_wait: str = ""
    throttle_no_held: str = ""


def stack_shares(hists: list[LatHist], stacks: dict[str, dict[str, Any]]) -> list[StackShare]:
    """Each stack's members with their d2c counts (-D: one histogram per disk, or per disk and op)."""
    per: dict[str, Hist] = {}
    for h in hists:
        if h.phase == "d2c" and h.dev and not h.pid:
            per[h.disk] = per[h.disk].merge(h.hist) if h.disk in per else h.hist
    out = []
    for name, st in sorted(stacks.items()):
        members = list(st.get("members", []))
        counts = [per[m].count if m in per else 0 for m in members]
        total = sum(counts) or 1
        out.append(StackShare(name, str(st.get("kind")), str(st.get("label") or ""),
                              [(m, n, n / total, per[m].percentile(99) if n else None)
                               for m, n in zip(members, counts)]))
    return out


def completions_unreported(losses: Losses, kernel_in_flight: int, pid_filtered: bool,
                           stamps_only: bool = False, shortfall: int = 0) -> int:
    """Completions that ran no program of ours (docs/lat.md). With the probes: bios issued and still
    waiting for a completion beyond what the kernel has in flight (inflight.py). With the kernel's
    stamps alone (one program, no slots): the runs of it the kernel skipped as recursion, or the
    requests the kernel completed (/proc/diskstats) beyond those the program ended, found in this
    report (shortfall: stamps_shortfall())."""
    if stamps_only:
        return max(losses.counters.get(RECURSION_MISSES, 0), shortfall)
    if pid_filtered:
        return 0
    return unreported_completions(losses, kernel_in_flight)


def stamps_shortfall(kernel: Mapping[str, int], d2c: Mapping[str, int], not_stamped: int, reported: int) -> int:
    """On the disks timed from the kernel's stamps (no slots): the completions the program was not run
    for, found now and not reported before. kernel: per such disk, the requests the kernel completed
    since the attach (/proc/diskstats, read before the program's counts); d2c: per disk, those the
    program timed since then; not_stamped: those it ended untimed, on any of them (so subtracted from
    each); reported: found before. A lower bound: reading the kernel first, a request completed
    between the reads is one the program ended and the kernel's count does not hold yet, never the
    reverse; one disk's surplus never hides another's shortfall."""
    found = sum(completion_shortfall(kernel, d2c, not_stamped).values())
    return max(0, found - reported)


def completion_shortfall(kernel: Mapping[str, int], counted: Mapping[str, int], untimed: int) -> dict[str, int]:
    """Per disk: the requests the kernel completed (kernel, /proc/diskstats, read before the program's
    counts) beyond those the program counted (its d2c: one per request) and those it ended untimed
    on any disk (untimed, subtracted from each): completions no program counted, a lower bound."""
    return {disk: max(0, n - counted.get(disk, 0) - untimed) for disk, n in kernel.items()}


def build_report(s: LatSample, attach: str = "", phases: tuple[str, ...] = ("q2c", "q2d", "d2c")) -> LatReport:
    losses = Losses(dict(s.losses.counters), s.losses.loss_names, s.losses.explain)
    only = stamps_only(s.timing)
    shortfall = s.stamps_shortfall if "d2c" in phases else 0
    unreported = completions_unreported(losses, s.kernel_in_flight, s.pid_filtered, only, shortfall)
    if only:  # found as it happened, in every report (recursion misses are counted as such already)
        settle_unreported(losses, max(0, unreported - losses.counters.get(RECURSION_MISSES, 0)), from_pending=False)
    else:
        # the stamped disks of a run that follows others with the probes: found as it happened
        settle_unreported(losses, shortfall, from_pending=False)
        if s.final:  # nothing more can arrive: the bios still waiting are lost
            settle_unreported(losses, unreported)
        unreported += shortfall
    hists = sorted((h for h in s.hists if h.phase in phases and h.hist.count), key=LatHist.sort_key)
    return LatReport(
        wall=s.wall, interval_s=s.wall - s.started, hists=hists, losses=losses,
        kernel_completed=dict(s.kernel_completed), completions_unreported=unreported,
        pid_filtered=s.pid_filtered,
        timed_d2c=sum(h.hist.count for h in hists if h.phase == "d2c"),
        inflight_at_start=losses.counters.get("inflight_at_start", 0),
        one_clock=losses.counters.get("one_clock_reading", 0),
        attach=attach, phases=phases,
        stacks=stack_shares(hists, s.stacks) if "d2c" in phases else [],
        timing=dict(s.timing), programs=list(s.programs),
        throttled=list(s.throttled), throttle_limits=list(s.throttle_limits),
        throttle_no_wait=s.throttle_no_wait, throttle_no_held=s.throttle_no_held,
    )


__all__ = [
    "PHASE_TITLES",
    "LatHist",
    "LatReport",
    "LatSample",
    "StackShare",
    "build_report",
    "completion_shortfall",
    "completions_unreported",
    "stack_shares",
]
