"""The collector of `ioscope record` and `ioscope snoop`: every block-layer event, from bpf/record.bpf.c.

Recorder owns the BPF object and hands out batches of events as EVENT arrays
(one numpy view per ring-buffer batch, no Python per event); beside them: what
was lost (record_losses, capture_lost), the completions check against
/proc/diskstats, and the host context a capture stores (capture_meta).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ioscope.base import devices, system
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.losses import RECURSION_MISSES, Losses
from ioscope.capture.events import (
    EVENT,
    TA_COMPLETE,
    TA_QUEUE,
    TA_SPLIT,
    TC_FLUSH,
    TC_FUA,
    TC_WRITE,
    select_events,
)
from ioscope.engines.context import iolimits
from ioscope.kernel import _libbpf
from ioscope.kernel.loader import BPFObject

# hook name -> (blktrace letter(s), required)
HOOKS: dict[str, tuple[str, bool]] = {
    "bio_queue": ("Q", True),
    "getrq": ("G", False),
    "rq_insert": ("I", False),
    "bio_backmerge": ("M", False),
    "bio_frontmerge": ("F", False),
    "rq_merge": ("M", False),
    "rq_issue": ("D", True),
    "rq_complete": ("C", True),
    "bio_complete": ("C", False),
    "rq_requeue": ("R", False),
    "plug": ("P", False),
    "unplug": ("U/UT", False),
    "split": ("X", False),
    "bio_remap": ("A", False),
    "rq_remap": ("A", False),
    "task_rename": ("", False),   # no event: process notes follow exec and renames at once
}

# hook -> the blktrace action category of its events (a `-a` name, capture.masks.MASKS); split (X) has none:
# blktrace records it only under a read/write-type category (read, write, sync, ...), as every other event
HOOK_CLASS: dict[str, str | None] = {
    "bio_queue": "queue", "getrq": "queue", "rq_insert": "queue", "bio_backmerge": "queue",
    "bio_frontmerge": "queue", "rq_merge": "queue", "rq_issue": "issue", "rq_complete": "complete",
    "bio_complete": "complete", "rq_requeue": "requeue", "plug": "queue", "unplug": "queue", "split": None,
    "bio_remap": "queue", "rq_remap": "queue", "task_rename": "notify",
}
ALL_ACTIONS = 0xFFFF
# the -p filter follows the process's bios from these hooks (track_bio in bpf/record.bpf.c)
PID_TRACKING_HOOKS = ("bio_queue", "split")


def mask_hooks(mask: int, pid: bool) -> tuple[list[str], bool]:
    """The hooks to attach for a blktrace action mask (capture.masks.MASKS bits), and whether their events
    must be filtered in user space too.

    Action categories only (queue, requeue, issue, complete, notify): the other programs are not
    attached, which is what makes a mask cheaper. A read/write-type category (read, write, sync, fs,
    ...) is a property of every event: every program runs and the events are kept by their category.
    Process notes are always kept (blktrace writes them whatever the mask)."""
    from ioscope.capture.masks import MASKS
    if mask & ALL_ACTIONS == ALL_ACTIONS:
        return list(HOOKS), False
    classes = {MASKS[c] for c in ("queue", "requeue", "issue", "complete", "notify", "drv_data")}
    if mask & ~sum(classes):
        return list(HOOKS), True
    hooks = [h for h, c in HOOK_CLASS.items() if c == "notify" or (c is not None and mask & MASKS[c])]
    extra = [h for h in PID_TRACKING_HOOKS if pid and h not in hooks]
    return hooks + extra, bool(extra)


def mask_names(mask: int) -> list[str]:
    from ioscope.capture.masks import MASKS
    return [name for name, bit in MASKS.items() if mask & bit]


# enum rec_stat in bpf/record.h
STAT_LOST_EVENT, STAT_LOST_NOTE, STAT_PID_MAP_FULL, STAT_LOST_NEST, STAT_RING_RACE, STAT_NO_RING = range(6)
NR_STATS = 6
LEVELS = 3  # IOS_REC_LEVELS: rings per CPU (task, softirq, hardirq)
MIN_RING_SLOTS = 1024  # with an explicit --buffer
DEFAULT_MIN_RING_SLOTS = 8192  # without: at least ~400,000 events/s per ring between two polls
FAST_POLL_MS = 2  # the next poll, when a ring was more than FAST_POLL_FILL full at the last one
FAST_POLL_FILL = 0.25

DEFAULT_BUFFER = 32 << 20
ATTACH_SLACK_NS = 2_000_000  # see Recorder.attached_window
POLL_MS = 20


# What the recorder did not record: Losses counters (losses.py, the one loss type), all of them losses.
STAT_LOSSES = {STAT_LOST_EVENT: "ringbuf_full_events", STAT_LOST_NOTE: "ringbuf_full_notes",
               STAT_PID_MAP_FULL: "pid_map_full", STAT_LOST_NEST: "nested_too_deep", STAT_RING_RACE: "ring_race",
               STAT_NO_RING: "cpu_without_ring"}
LOSS_EXPLAIN = {
    "ringbuf_full_events": "events, ring full: raise --buffer",
    "ringbuf_full_notes": "process notes, ring full: raise --buffer",
    "pid_map_full": "bios of the -p process not followed, map full: their request events are missing",
    "nested_too_deep": f"events of programs nested {LEVELS} deep on a CPU",
    "ring_race": "records of two programs writing one ring: please report",
    "cpu_without_ring": "events on CPUs brought online after the start, which have no ring",
    RECURSION_MISSES: "program runs the kernel skipped",
}


def record_losses(per_cpu: np.ndarray, recursion_misses: int, map_errors: dict[str, int] | None = None) -> Losses:
    """rec_stats per CPU (ncpus, NR_STATS), the kernel's recursion_misses and the failed map operations
    (explanations, not losses: bpf/maperr.bpf.h) -> Losses."""
    counters = {name: int(per_cpu[:, i].sum()) for i, name in STAT_LOSSES.items()}
    counters[RECURSION_MISSES] = recursion_misses
    losses = frozenset(counters)
    counters.update(map_errors or {})
    return Losses(counters, losses, LOSS_EXPLAIN)


def capture_lost(losses: Losses, per_cpu: np.ndarray) -> dict[str, Any]:
    """A capture's meta['lost'] (docs/capture-format.md): the total, every counter, and the ring-full
    counts per CPU (which CPU's ring was too small)."""
    return {"total": losses.lost, **losses.counters,
            "per_cpu": {"ringbuf_full_events": [int(x) for x in per_cpu[:, STAT_LOST_EVENT]],
                        "ringbuf_full_notes": [int(x) for x in per_cpu[:, STAT_LOST_NOTE]]}}


@dataclass
class RecorderOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    buffer_bytes: int | None = None  # None: DEFAULT_BUFFER, and never fewer than DEFAULT_MIN_RING_SLOTS per ring
    btf: str | None = None
    hooks: list[str] | None = None  # None: the hooks of act_mask (mask_hooks)
    act_mask: int = ALL_ACTIONS  # blktrace -a categories (capture.masks.MASKS bits)
    stop_at: int = 0  # bench/record_overhead.py only: programs stop early (see targ_stop_at in record.bpf.c)


def ring_slots(buffer_bytes: int | None, nrings: int) -> int:
    """Slots per ring: buffer_bytes shared by nrings rings, rounded up to a power of two. Without
    an explicit size, DEFAULT_BUFFER, but at least DEFAULT_MIN_RING_SLOTS per ring (hosts with many
    CPUs get more memory: 1.3 MiB per CPU at the least)."""
    least = MIN_RING_SLOTS if buffer_bytes is not None else DEFAULT_MIN_RING_SLOTS
    size = buffer_bytes if buffer_bytes is not None else DEFAULT_BUFFER
    n = max(least, size // (nrings * EVENT.itemsize))
    return 1 << (n - 1).bit_length()


class Recorder:
    """The record BPF object, loaded and attached; poll() returns EVENT arrays."""

    def __init__(self, opts: RecorderOptions) -> None:
        self.opts = opts
        # rings for the CPUs present now (a VM may declare many more possible CPUs than it has)
        self.ring_cpus = min(system.present_cpus(), _libbpf.num_possible_cpus())
        self.nrings = self.ring_cpus * LEVELS
        self.ring_slots = ring_slots(opts.buffer_bytes, self.nrings)
        self.ring_bytes = self.nrings * self.ring_slots * EVENT.itemsize
        self.bpf = BPFObject("record", btf=opts.btf)
        self.detached = False
        with self.bpf.closed_on_error():
            self._setup()

    def _setup(self) -> None:
        b, o = self.bpf, self.opts
        wanted, self.filter_events = mask_hooks(o.act_mask, bool(o.pid))
        if o.hooks is not None:
            wanted, self.filter_events = o.hooks, False
        # every C is recorded: the completions check applies
        self.records_completions = "rq_complete" in wanted and not (self.filter_events and
                                                                    not o.act_mask & (1 << 7))
        b.choose(required=[h for h in wanted if HOOKS[h][1]], optional=[h for h in wanted if not HOOKS[h][1]])
        b.filter_disks(d.dev for d in o.disks)
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.set_global("targ_ring_slots", self.ring_slots, "I")
        b.set_global("targ_ring_cpus", self.ring_cpus, "I")
        b.set_global("targ_stop_at", o.stop_at, "I")
        # 5.10's block_rq_complete passes the errno (an int), later kernels the blk_status_t
        params = b.tp_param_types("block_rq_complete") or []
        b.set_global("targ_complete_errno", len(params) > 1 and params[1] == "int", "?")
        b.set_max_entries("rec_ring", self.nrings * self.ring_slots)
        b.set_max_entries("rec_pos", self.nrings)
        b.load()
        self.ring = b.obj.slot_rings("rec_ring", "rec_pos", self.nrings, self.ring_slots)
        self.stats = b.map("rec_stats")
        self.flush_machines = flush_machines(devices.device_meta(o.disks or None))
        # /proc/diskstats around attaching and detaching: I/Os completed while the programs were being
        # attached or detached (some running, some not) are told apart from I/Os completed while every
        # program ran (completions_check)
        self.completions_before = _completions(o.disks)
        names = devices.DevNames()
        self.disk_names = {dev: names.name(dev) for dev in self.completions_before}  # a removed disk's too
        b.attach()
        self.attached_ns = time.monotonic_ns()  # every program runs from here on
        self.completions_attached = _completions(o.disks)
        self.detached_ns = 0
        self.completions_detaching: dict[int, int] = {}
        self.completions_after: dict[int, int] = {}

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def tracepoints(self) -> dict[str, str]:
        """tracepoint -> attach variant (tp_btf, raw_tp) for every attached hook."""
        return {h.tracepoint: h.chosen for h in self.bpf.hooks.values() if h.chosen}

    def poll(self, timeout_ms: int) -> np.ndarray:
        """Every event waiting in the rings, after sleeping timeout_ms (0: no wait), in ring order:
        time-ordered within a ring (one CPU and context level), not across rings."""
        raw = self.ring.poll(timeout_ms)
        n = len(raw) // EVENT.itemsize
        ev = np.frombuffer(raw, dtype=EVENT, count=n)
        if self.filter_events and n:  # the action mask, where not attaching programs could not do it
            ev = select_events(ev, ((ev["category"] & self.opts.act_mask) != 0) | (ev["action"] == 0))
        return ev

    def counters(self) -> np.ndarray:
        """rec_stats per CPU: shape (ncpus, NR_STATS)."""
        keys, vals, n = self.stats.dump(sum=False)  # one batched read of every index
        per = np.frombuffer(vals, dtype=np.uint64, count=n * self.stats.ncpus).reshape(n, self.stats.ncpus)
        out = np.zeros((self.stats.ncpus, NR_STATS), dtype=np.uint64)
        idx = np.frombuffer(keys, dtype=np.uint32, count=n)
        keep = idx < NR_STATS
        out[:, idx[keep]] = per[keep].T
        return out

    def losses(self) -> Losses:
        """Everything not recorded since the start."""
        return record_losses(self.counters(), self.bpf.recursion_misses(), self.bpf.map_errors())

    def capture_lost(self) -> dict[str, Any]:
        """The losses as the capture stores them (meta['lost'])."""
        c = self.counters()
        return capture_lost(record_losses(c, self.bpf.recursion_misses(), self.bpf.map_errors()), c)

    def detach(self) -> None:
        if not self.detached:
            self.completions_detaching = _completions(self.opts.disks)
            self.detached_ns = time.monotonic_ns()  # every program ran until here
            self.bpf.detach()
            self.completions_after = _completions(self.opts.disks)
            self.detached = True

    def attached_window(self) -> tuple[int, int]:
        """(first, last) CLOCK_MONOTONIC ns of the time every program ran (last: 2**64-1 until detached),
        for the C events of the I/Os the kernel counted between completions_attached and
        completions_detaching.

        The kernel counts a completion (blk_account_io_done) a little after its C event
        (block_rq_complete, in blk_update_request): a C stamped just before the diskstats read after
        attaching may be counted after it. The window starts ATTACH_SLACK_NS early for those (a C
        that was counted before the read then hides a miss, it never makes one up). At the end the
        window closes after the diskstats read before detaching (a C counted by then is inside)."""
        return self.attached_ns - ATTACH_SLACK_NS, self.detached_ns or (1 << 64) - 1

    def count_completions(self, ev: np.ndarray, recorded: dict[int, int], attached: dict[int, int]) -> None:
        """Add a batch's C events per disk to recorded (all of them) and to attached (those inside
        attached_window()): the two counts completions_check compares with the kernel's."""
        if not len(ev):
            return
        counted: dict[int, int] = {}
        count_completions(ev, counted, self.flush_machines)
        lo, hi = self.attached_window()
        ts = ev["ts"]
        inside = counted
        if int(ts.min()) < lo or int(ts.max()) > hi:  # at the edges only: C events outside the window
            inside = {}
            count_completions(ev[(ts >= lo) & (ts <= hi)], inside, self.flush_machines)
        for into, add in ((recorded, counted), (attached, inside)):
            for dev, n in add.items():
                into[dev] = into.get(dev, 0) + n

    def completions_check(self, recorded: dict[int, int],
                          attached: dict[int, int] | None = None) -> dict[str, dict[str, Any]]:
        """Per disk: I/Os the kernel completed (/proc/diskstats) while recording vs. C events recorded
        (recorded: every C; attached: the C events inside attached_window()).

        "kernel"/"recorded": from before attaching to after detaching. "attached": the same while every
        program ran, the check proper: an I/O completed while the programs were being attached or
        detached ("edges") may or may not have its C in the capture, and is no loss either way. A disk
        that left /proc/diskstats while recording (removed: losetup -d, a hot-unplugged disk) is
        "removed", its kernel count unknown."""
        out: dict[str, dict[str, Any]] = {}
        names = devices.DevNames()
        before, after = self.completions_before, self.completions_after
        for dev in sorted(set(before) | set(after)):
            ma, mi = devices.kdev_split(dev)
            rec = int(recorded.get(dev, 0))
            name = self.disk_names.get(dev) or names.name(dev)
            if dev not in after or after[dev] < before.get(dev, 0):  # gone, or gone and another disk took the number
                out[f"{ma},{mi}"] = {"name": name, "kernel": None, "recorded": rec, "removed": True}
                continue
            kernel = after[dev] - before.get(dev, after[dev])
            if kernel <= 0 and not rec:
                continue
            c: dict[str, Any] = {"name": name, "kernel": kernel, "recorded": rec}
            a, d = self.completions_attached.get(dev), self.completions_detaching.get(dev)
            if attached is not None and a is not None and d is not None:
                inside = int(attached.get(dev, 0))
                c["attached"] = {"kernel": d - a, "recorded": inside}
                c["edges"] = {"kernel": kernel - (d - a), "recorded": rec - inside}
            out[f"{ma},{mi}"] = c
        return out

    def drain(self) -> np.ndarray:
        """Everything left in the rings (after detach(): the last events)."""
        parts = []
        while True:
            ev = self.poll(0)
            if not len(ev):
                break
            parts.append(ev)
        return np.concatenate(parts) if parts else np.empty(0, EVENT)

    def close(self) -> None:
        self.bpf.close()


def _add_per_dev(devs: np.ndarray, into: dict[int, int]) -> None:
    if not len(devs):
        return
    if bool((devs == devs[0]).all()):  # one disk: no sort
        into[int(devs[0])] = into.get(int(devs[0]), 0) + len(devs)
        return
    uniq, n = np.unique(devs, return_counts=True)
    for d, k in zip(uniq.tolist(), n.tolist()):
        into[d] = into.get(d, 0) + k


def flush_machines(devs: dict[str, Any]) -> dict[int, bool]:
    """kernel dev_t -> whether the disk supports FUA, for the disks with a volatile write cache,
    from device metadata as captures store it (devices.device_meta()).

    Only on those does the block layer run writes with PREFLUSH (or FUA, when the disk lacks
    it) through its flush sequence (see count_completions)."""
    out = {}
    for d in devs.values():
        if d.get("write_cache") == "write back":
            out[devices.kdev(int(d["major"]), int(d["minor"]))] = bool(d.get("fua", 0))
    return out


def count_completions(ev: np.ndarray, into: dict[int, int], flush_machines: dict[int, bool] | None = None) -> None:
    """Add to into (kernel dev_t -> count) the completions of ev as /proc/diskstats counts them,
    for Recorder.completions_check().

    Every C event is one completion, but one: on a disk with a volatile write cache, a write with
    data and PREFLUSH (or FUA, if the disk has no FUA) goes through the block layer's flush
    sequence, which completes its data (a C with bytes, not yet counted by the kernel) and later
    ends the original request (a C of 0 bytes, counted once, as a write). So one C per such
    request is not a completion of the kernel's: per bio queued (Q) and per extra piece it was
    split into (X), the flags and data being those of the request. A flush request (C of a
    data-less flush) is counted by the kernel as a flush."""
    act = ev["action"]
    _add_per_dev(ev["dev"][act == TA_COMPLETE], into)
    if not flush_machines or not len(ev):
        return
    cat = ev["category"]
    cand = (((act == TA_QUEUE) | (act == TA_SPLIT)) & (ev["bytes"] > 0) & ((cat & TC_WRITE) != 0)
            & ((cat & (TC_FLUSH | TC_FUA)) != 0))
    if not cand.any():
        return
    devs, preflush = ev["dev"][cand], (cat[cand] & TC_FLUSH) != 0
    for d in np.unique(devs).tolist():
        has_fua = flush_machines.get(d)
        if has_fua is not None:
            mine = devs == d
            into[d] = into.get(d, 0) - int(np.count_nonzero(mine if not has_fua else mine & preflush))


def completions_warnings(tool: str, check: dict[str, dict[str, Any]]) -> list[str]:
    """One line per disk whose completions (/proc/diskstats) outnumber the C events seen while every
    program ran (a warning: they were not seen), whose only difference is at the edges (a note: I/Os
    completed while the programs were being attached or detached), or that was removed."""
    out = []
    see = "(see 'Completions check' in docs/record.md)"
    for dev, c in check.items():
        if c.get("removed"):
            out.append(f"ioscope {tool}: warning: {c['name']} ({dev}) was removed while tracing (it left "
                       f"/proc/diskstats): its completions cannot be checked; {c['recorded']:,} were seen {see}")
            continue
        whole, att = c["kernel"] - c["recorded"], c.get("attached")
        if att is not None:
            miss = att["kernel"] - att["recorded"]
            if miss > 0:
                out.append(f"ioscope {tool}: warning: {c['name']} ({dev}) completed {att['kernel']:,} I/Os while "
                           f"every program ran (/proc/diskstats) but {att['recorded']:,} completions were seen: "
                           f"{miss:,} {'was' if miss == 1 else 'were'} not {see}")
            elif whole != 0:
                edges = c["edges"]
                out.append(f"ioscope {tool}: note: {c['name']} ({dev}): {edges['kernel']:,} I/Os completed while the "
                           f"programs were being attached or detached ({edges['recorded']:,} of their completions "
                           f"seen): I/O at the edges of the recording, not a loss {see}")
        elif whole > 0:
            out.append(f"ioscope {tool}: warning: {c['name']} ({dev}) completed {c['kernel']:,} I/Os while tracing "
                       f"(/proc/diskstats) but {c['recorded']:,} completions were seen: {whole:,} "
                       f"{'was' if whole == 1 else 'were'} not {see}")
    return out


def _completions(disks: list[devices.BlockDevice]) -> dict[int, int]:
    """kernel dev_t -> I/Os completed so far (reads + writes + discards + flushes, /proc/diskstats)."""
    want = {d.dev for d in disks} or {d.dev for d in devices.list_disks()}  # whole disks, not partitions
    out = {}
    try:
        stats = devices.read_diskstats()
    except OSError:
        return {}
    for st in stats.values():
        dev = devices.kdev(st.major, st.minor)
        if dev in want:
            out[dev] = devices.completed_requests(st)
    return out


# -- capture metadata -----------------------------------------------------


def capture_meta(rec: Recorder, argv: Sequence[str] | None = None) -> dict[str, Any]:
    o = rec.opts
    return {
        "devices": devices.device_meta(o.disks or None),
        "partitions": devices.partition_meta(),
        "stacks": devices.stack_meta(),
        "tracepoints": rec.tracepoints(),
        "attach": rec.bpf.variant_summary(),
        "unavailable": list(rec.unavailable),
        "filters": {"disks": [d.name for d in o.disks], "pid": o.pid},
        # the hierarchy whose cgroup ids the queue events carry (their paths: the capture's cgroup names)
        "cgroup_hierarchy": (io_cgroup_root() or (None, None))[1],
        # cgroup throttle limits on the traced disks: their bios wait before the queue event (iolimits)
        "io_limits": iolimits.in_force(o.disks or devices.list_disks()),
        # blktrace -a: the action categories recorded (an event of another category is not in the capture)
        "action_mask": {"mask": f"0x{o.act_mask & ALL_ACTIONS:04x}", "names": mask_names(o.act_mask),
                        "all": o.act_mask & ALL_ACTIONS == ALL_ACTIONS},
        "attached_mono_ns": rec.attached_ns,
        "ring_buffer_bytes": rec.ring_bytes,
        "rings": {"count": rec.nrings, "cpus": rec.ring_cpus, "per_cpu": LEVELS, "slots": rec.ring_slots,
                  "slot_bytes": EVENT.itemsize},
        "command": " ".join(["ioscope", *(argv or [])]),
    }


__all__ = ["ALL_ACTIONS", "HOOKS", "HOOK_CLASS", "LOSS_EXPLAIN", "POLL_MS", "Recorder", "RecorderOptions",
           "capture_lost", "capture_meta", "completions_warnings", "count_completions", "flush_machines",
           "mask_hooks", "mask_names", "record_losses", "ring_slots"]
