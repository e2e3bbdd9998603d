"""Bios blk-throttle held back, as the live tools (lat, top) see them: bpf/throttle.bpf.h's programs and
map, attached once a cgroup I/O limit is in force on a traced disk, read per interval.

A throttled bio waits in blk-throttle before its queue event and is then queued by the throttle's
kworker: its wait is in no q2c, its queueing task is a kworker (docs/design/containers.md, section 1).
This counts the bios held, exactly, per cgroup, disk and submitting process (the queue event runs inside
blk-throttle's dispatch work: tracepoints only, allowed under lockdown), and measures how long each
waited and who submitted it: from the hold's start where the kernel lets fentry attach to
throtl_add_bio_tg, else (under lockdown) from a submit note, a tracepoint in the submitter's context
when the bio was made or sent (bpf/throttle.bpf.h). A held bio without either is counted with its wait
not measured, and the tools say so.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ioscope.base.cgroups import io_cgroup_root, label
from ioscope.base.devices import BlockDevice
from ioscope.base.fmt import comm_str
from ioscope.base.hist import Hist
from ioscope.base.syscalls import NRS
from ioscope.engines.context import iolimits
from ioscope.kernel import abi
from ioscope.kernel.ksyms import kernel_function, kernel_function_range
from ioscope.kernel.loader import BPFObject

SUBMIT_HOOKS = ("sn_remap", "sn_alloc", "sn_alloc_site", "sn_sys")  # the submit notes (THROTTLE_SUBMIT_PROGRAMS)
HOOKS = ("thr_queue", "wq_start", "wq_end", "throtl_add", *SUBMIT_HOOKS)
WORK_FN = "blk_throtl_dispatch_work_fn"
MEMPOOL_ALLOC = "mempool_alloc"  # 5.10: the call site of a bio_set's allocations (sn_alloc_site)
CHECK_EVERY_S = 2.0  # how often the limits are read (every cgroup of both hierarchies)
NOTES_MAX = 65536    # submit notes held at once: bios between their allocation and their queue event
LIMITED_MAX = 1024   # limited_cgroups' size (bpf/throttle.bpf.h); more cgroups: every task's syscalls noted
# the syscalls that may put a bio on the caller's stack (synchronous O_DIRECT on a block device)
STACK_BIO_SYSCALLS = ("read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2",
                      "pwritev2")
WAIT_FROM = {"fentry": "the hold's start", "submit notes": "the bio's submission"}
# IOSCOPE_THROTTLE_WAIT=notes: submit notes even where fentry attaches (the kernel matrix compares both)
WAIT_ENV = "IOSCOPE_THROTTLE_WAIT"


@dataclass
class Submitter:
    """A process whose bios blk-throttle held (from the bios' notes: the submitter, not the kworker that
    queued them once the throttle let them go)."""

    pid: int
    comm: str
    held: int


@dataclass
class HeldBios:
    """Bios of one cgroup on one disk that blk-throttle held in an interval: all of them (held, exact),
    and the wait of those with a note (fentry's hold start or a submit note: wait.count of them), by
    submitter (the held bios without a note have none)."""

    dev: int
    disk: str
    cgroup: str
    held: int
    wait: Hist
    # the cgroup's io.pressure "some avg10" (cgroup v2 with PSI): the share of the last 10 s in which some
    # of its tasks stalled on I/O, the kernel's own figure of what the throttle cost it; None elsewhere
    pressure: float | None = None
    submitters: list[Submitter] = field(default_factory=list)
    wait_from: str = ""  # how the wait is measured: "fentry" (the hold's start), "submit notes", "" (not)


def io_pressure_avg10(cgroup_dir: Path) -> float | None:
    """io.pressure's "some avg10=N.NN" of a cgroup v2 directory, in percent; None without it."""
    try:
        text = (cgroup_dir / "io.pressure").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        w = line.split()
        if w and w[0] == "some":
            for kv in w[1:]:
                k, _, v = kv.partition("=")
                if k == "avg10":
                    try:
                        return float(v)
                    except ValueError:
                        return None
    return None


def limited_cgroup_ids(limits: Sequence[dict[str, Any]], root: tuple[Path, str] | None = None) -> set[int]:
    """The ids (directory inode numbers: the kernel's kernfs ids) of the cgroups of the io controller's
    hierarchy that have a limit (in_force()'s list), and of every cgroup under them (a limit holds their
    I/O too); {0} (every task) when a limit is on the hierarchy's root."""
    root = root if root is not None else io_cgroup_root()
    if root is None:
        return set()
    mount, hierarchy = root
    ids: set[int] = set()
    for e in limits:
        if not str(e.get("hierarchy", "")).startswith(hierarchy.split()[0]):
            continue  # the other hierarchy's limits hold nothing here (the io controller is not on it)
        rel = str(e.get("cgroup", "")).strip("/")
        if not rel:
            return {0}
        top = mount / rel
        for d, _subdirs, _files in os.walk(top):
            try:
                ids.add(os.stat(d).st_ino)
            except OSError:
                pass  # removed while walked
            if len(ids) > LIMITED_MAX:
                return {0}
    return ids


class ThrottleWatch:
    """The throttle programs of one tool's BPF object. Give HOOKS to the object's choose() (optional),
    then setup() before load, loaded() after it; tick() attaches the programs once a limit is in force
    on a traced disk (read every CHECK_EVERY_S until then), read() returns the held bios since the
    last read."""

    def __init__(self, bpf: BPFObject, disks: Callable[[], Iterable[BlockDevice]], kallsyms: str = "/proc/kallsyms",
                 enabled: bool = True) -> None:
        self.bpf = bpf
        self.enabled = enabled  # False: the tool did not choose HOOKS (it reads no held bios)
        self.disks = disks
        self.kallsyms = kallsyms
        self.work_fn = kernel_function(WORK_FN, kallsyms)
        self.limits: list[dict[str, Any]] = []
        self.watching = False
        self._next_check = 0.0
        self.no_wait = ""   # why the wait is not measured here ("" when it is)
        self.no_held = ""   # why held bios are not seen here ("" when they are)
        self.wait_from = ""  # "fentry" (the hold's start) or "submit notes"; "" when not measured
        self.stats: Any = None
        self.limited: Any = None
        self._limited_ids: set[int] = set()

    def setup(self) -> None:
        """After choose(), before load: the work function's address, how each hold's wait is measured
        (fentry, else the submit notes); the hooks' absences are this watch's to explain (only when a
        limit is in force), not the tool's."""
        b = self.bpf
        b.deferred.update(HOOKS)
        if not self.enabled:
            self.no_held = "not asked for"
            return
        missing = {h: b.absent(b.hooks[h]) for h in HOOKS if not b.hooks[h].chosen}
        b.unavailable[:] = [u for u in b.unavailable if u not in missing.values()]
        if not self.work_fn:
            self.no_held = f"{WORK_FN} is not in /proc/kallsyms (or its address is hidden: kptr_restrict)"
        elif any(h in missing for h in ("thr_queue", "wq_start", "wq_end")):
            self.no_held = "; ".join(v for k, v in missing.items() if k in ("thr_queue", "wq_start", "wq_end"))
        fentry = "throtl_add" not in missing and os.environ.get(WAIT_ENV) != "notes"
        if fentry:
            b.leave_out(SUBMIT_HOOKS)
            self.wait_from = "fentry"
        else:
            b.leave_out(["throtl_add"])
            self._setup_notes(missing)
        b.set_global("targ_throtl_work_fn", self.work_fn if not self.no_held else 0, "Q")
        b.set_global("targ_throttle", fentry, "?")

    def _setup_notes(self, missing: dict[str, str]) -> None:
        """The submit notes (bpf/throttle.bpf.h): kmem_cache_alloc's twin for this kernel's arguments,
        mempool_alloc's text on 5.10, the syscalls that may make an on-stack bio."""
        b = self.bpf
        params = b.tp_param_types("kmem_cache_alloc") or []
        site = len(params) > 2 and params[2] != "struct kmem_cache *"  # 5.10: (call_site, ptr, bytes_req, ...)
        b.leave_out(["sn_alloc"] if site else ["sn_alloc_site"])
        lo, hi = kernel_function_range(MEMPOOL_ALLOC, self.kallsyms) if site else (0, 0)
        if site and not lo:
            b.leave_out(["sn_alloc_site"])
        b.set_global("targ_mempool_lo", lo, "Q")
        b.set_global("targ_mempool_hi", hi, "Q")
        nrs = NRS.get(platform.machine(), {})
        bits = [0] * 8
        for name in STACK_BIO_SYSCALLS:
            if name in nrs and nrs[name] < 512:
                bits[nrs[name] >> 6] |= 1 << (nrs[name] & 63)
        b.set_global("targ_sys_nrs", tuple(bits), "8Q")
        if not nrs:
            b.leave_out(["sn_sys"])
        alloc = "sn_alloc_site" if site else "sn_alloc"
        why = {"sn_remap": "a partition's bios", alloc: "bios from a bio slab (libaio, io_uring, file systems)",
               "sn_sys": "on-stack bios (synchronous O_DIRECT on a disk)"}
        absent = [f"{what}: {missing.get(h) or 'not known on this kernel'}"
                  for h, what in why.items() if not b.hooks[h].chosen]
        if len(absent) == len(why):
            self.no_wait = ("their wait needs fentry or a submit note, and neither is available here: "
                            + "; ".join(absent))
        else:
            b.set_global("targ_submit_notes", True, "?")
            b.set_max_entries("throttled", NOTES_MAX)
            self.wait_from = "submit notes"

    def loaded(self) -> None:
        self.stats = self.bpf.map("throttle_stats")
        self.limited = self.bpf.map("limited_cgroups")

    def tick(self) -> None:
        """Attach the programs once a limit is in force on a traced disk (then they stay attached: limits
        come and go); the limits are read again at each check, for the views."""
        now = time.monotonic()
        if not self.enabled or now < self._next_check:
            return
        self._next_check = now + CHECK_EVERY_S
        got = iolimits.in_force(list(self.disks()))
        self.limits = got if isinstance(got, list) else []
        if self.wait_from == "submit notes" and not self.no_held:
            self._set_limited(limited_cgroup_ids(self.limits))
        if self.limits and not self.watching and not self.no_held:
            self.bpf.attach([h for h in HOOKS if self.bpf.hooks[h].chosen])
            self.watching = True

    def _set_limited(self, ids: set[int]) -> None:
        """limited_cgroups := ids (the syscall note's filter); 0 alone when there are more than it holds."""
        if self.limited is None:
            return
        if len(ids) > LIMITED_MAX:
            ids = {0}
        one = b"\x01"
        for i in self._limited_ids - ids:
            self.limited.delete(i.to_bytes(8, "little"))
        for i in ids - self._limited_ids:
            self.limited.update(i.to_bytes(8, "little"), one)
        self._limited_ids = ids

    def read(self, disk_name: Callable[[int], str], cgroup_name: Callable[[int], str]) -> list[HeldBios]:
        """The held bios since the last read (the map is emptied), busiest first."""
        if self.stats is None or not self.watching:
            return []
        kb, vb, n = self.stats.dump(sum=False, delete=True)
        if not n:
            return []
        keys = np.frombuffer(kb, dtype=abi.THROTTLE_KEY, count=n)
        vals = np.frombuffer(vb, dtype=abi.THROTTLE_VAL, count=n)
        waits = abi.hists_from_array(vals["wait"])
        groups: dict[tuple[int, int], HeldBios] = {}
        for k, v, w in zip(keys, vals, waits):
            dev, cg = int(k["dev"]), int(k["cgroup"])
            h = groups.get((dev, cg))
            if h is None:
                h = groups[(dev, cg)] = HeldBios(dev, disk_name(dev), cgroup_name(cg), 0, w)
            else:
                h.wait = h.wait.merge(w)
            h.held += int(v["held"])
            if int(k["tgid"]):
                h.submitters.append(Submitter(int(k["tgid"]), comm_str(k["comm"]), int(v["held"])))
        out = list(groups.values())
        for h in out:
            h.wait_from = self.wait_from
            h.submitters.sort(key=lambda s: (-s.held, s.comm, s.pid))
        io = io_cgroup_root()
        if io is not None and io[1] == "v2":
            for h in out:
                if h.cgroup.startswith("/"):
                    h.pressure = io_pressure_avg10(io[0] / h.cgroup.lstrip("/"))
        return sorted(out, key=lambda h: (-h.held, h.disk, h.cgroup))


class HeldWatch:
    """blk-throttle's held bios for a tool whose own BPF object has no throttle programs (snoop, fair):
    lat's object with those programs alone, opened, loaded and attached only once a limit is in force on a
    traced disk (a host without limits pays nothing). tick() at least every CHECK_EVERY_S; read() gives
    the held bios since the last read. A kernel that refuses the object leaves why in `failed`."""

    def __init__(self, disks: Callable[[], Iterable[BlockDevice]], devs: Iterable[int] = (),
                 eager: bool = False) -> None:
        """eager: load the programs now, whether a limit is in force or not (they attach once one is), so
        that a later tick() never pauses its caller for a load (record's consumer thread)."""
        self.disks = disks
        self.devs = list(devs)
        self.watch: ThrottleWatch | None = None
        self.failed = ""
        self._next = 0.0
        self._names: Any = None
        self._cgroups: Any = None
        if eager:
            self._open()

    def tick(self) -> None:
        if self.watch is not None:
            self.watch.tick()
            return
        now = time.monotonic()
        if self.failed or now < self._next:
            return
        self._next = now + CHECK_EVERY_S
        got = iolimits.in_force(list(self.disks()))
        if isinstance(got, list) and got:
            self._open()

    def _open(self) -> None:
        from ioscope.base import devices
        from ioscope.base.cgroups import CgroupNames
        from ioscope.base.errors import IoscopeError

        try:
            b = BPFObject("lat")
        except IoscopeError as exc:
            self.failed = str(exc)
            return
        try:
            b.choose(required=[], optional=list(HOOKS))
            w = ThrottleWatch(b, self.disks)
            w.setup()
            if self.devs:
                b.filter_disks(self.devs)
            b.load()
            w.loaded()
            w.tick()
        except IoscopeError as exc:
            b.close()
            self.failed = str(exc)
            return
        self.watch = w
        self._names, self._cgroups = devices.DevNames(), CgroupNames()

    @property
    def no_wait(self) -> str:
        return self.watch.no_wait if self.watch is not None else ""

    @property
    def no_held(self) -> str:
        return self.failed or (self.watch.no_held if self.watch is not None else "")

    def read(self) -> list[HeldBios]:
        if self.watch is None:
            return []
        return self.watch.read(self._names.name, self._cgroups.name)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.bpf.close()
            self.watch = None


def submitted_by(doc: dict[str, Any]) -> str:
    """Who submitted the held bios (the notes' processes, busiest first), and how many no note names; doc:
    held_json()'s."""
    subs = doc.get("submitters") or []
    parts = [f"{s['comm']} pid {s['pid']}: {s['held']}" for s in subs[:3]]
    if len(subs) > 3:
        parts.append(f"{len(subs) - 3} more: {sum(int(s['held']) for s in subs[3:])}")
    unknown = int(doc["held"]) - sum(int(s["held"]) for s in subs)
    if unknown and parts:
        parts.append(f"not known: {unknown}")
    return f"submitted by {', '.join(parts)}" if parts else ""


def held_line(doc: dict[str, Any], no_wait: str, fmt: Callable[[float], str]) -> str:
    """One cgroup and disk: how many bios the throttle held, who submitted them, and their wait or why it is
    not measured; doc: held_json()'s (a live read's, or one a capture stored), fmt formats nanoseconds."""
    n, measured = int(doc["held"]), int(doc.get("wait_measured", 0))
    line = (f"blk-throttle held {n} bio{'s' if n != 1 else ''} of cgroup {label(str(doc['cgroup']))} on {doc['disk']}: "
            f"{'their' if n != 1 else 'its'} wait is not in q2c")
    who = submitted_by(doc)
    if who:
        line += f" ({who})"
    if measured:
        src = doc.get("wait_from", "")
        src = f", from {WAIT_FROM.get(src, src)}" if src else ""
        line += (f"; waited (measured for {measured}{src}) "
                 f"p50 {fmt(float(doc['wait_p50']))} p99 {fmt(float(doc['wait_p99']))} "
                 f"max {fmt(float(doc['wait_max']))}")
        if measured < n:
            line += f"; not measured for {n - measured} (no note of their submission was found)"
    else:
        line += f" and not measured ({no_wait or 'no note of their submission was found'})"
    if doc.get("io_pressure_some_avg10") is not None:
        line += f"; the cgroup's io.pressure: some {float(doc['io_pressure_some_avg10']):.2f}% (avg10)"
    return line


def summary(held: Sequence[HeldBios], no_wait: str, fmt: Callable[[float], str]) -> list[str]:
    """One line per cgroup and disk (held_line)."""
    return [held_line(held_json(h), no_wait, fmt) for h in held]


def merge_held(into: dict[tuple[int, str], HeldBios], new: Iterable[HeldBios]) -> None:
    """Add reads of held bios up per disk and cgroup (a recording's total): counts and waits summed, the
    submitters' counts per process."""
    for h in new:
        key = (h.dev, h.cgroup)
        got = into.get(key)
        if got is None:
            into[key] = HeldBios(h.dev, h.disk, h.cgroup, h.held, h.wait, h.pressure, list(h.submitters),
                                 h.wait_from)
            continue
        got.held += h.held
        got.wait = got.wait.merge(h.wait)
        got.wait_from = got.wait_from or h.wait_from
        got.pressure = h.pressure if h.pressure is not None else got.pressure
        by_pid = {s.pid: s for s in got.submitters}
        for s in h.submitters:
            if s.pid in by_pid:
                by_pid[s.pid].held += s.held
            else:
                by_pid[s.pid] = Submitter(s.pid, s.comm, s.held)
        got.submitters = sorted(by_pid.values(), key=lambda x: (-x.held, x.comm, x.pid))


def held_json(h: HeldBios) -> dict[str, Any]:
    p = h.wait.percentiles((50, 90, 99)) if h.wait.count else {}
    return {"disk": h.disk, "cgroup": h.cgroup, "held": h.held, "wait_measured": h.wait.count,
            **({"wait_from": h.wait_from} if h.wait.count else {}),
            "submitters": [{"pid": s.pid, "comm": s.comm, "held": s.held} for s in h.submitters],
            **({"io_pressure_some_avg10": h.pressure} if h.pressure is not None else {}),
            "wait_unit": "ns", **({"wait_p50": round(p[50], 1), "wait_p90": round(p[90], 1),
                                   "wait_p99": round(p[99], 1), "wait_max": h.wait.max,
                                   "wait_sum": h.wait.total} if h.wait.count else {})}


__all__ = ["CHECK_EVERY_S", "HOOKS", "SUBMIT_HOOKS", "HeldBios", "HeldWatch", "Submitter", "ThrottleWatch", "held_json",
           "held_line", "limited_cgroup_ids", "merge_held",
           "submitted_by", "summary"]
