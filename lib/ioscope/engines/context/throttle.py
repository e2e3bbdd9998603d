"""Bios blk-throttle held back, as the live tools (lat, top) see them: bpf/throttle.bpf.h's programs and
map, attached once a cgroup I/O limit is in force on a traced disk, read per interval.

A throttled bio waits in blk-throttle before its queue event and is then queued by the throttle's
kworker: its wait is in no q2c, its queueing task is a kworker (docs/design/containers.md, section 1).
This counts the bios held, exactly, per cgroup and disk (the queue event runs inside blk-throttle's
dispatch work: tracepoints only, allowed under lockdown), and measures how long each waited where the
kernel lets fentry attach to throtl_add_bio_tg (not under lockdown); where it cannot, the tools say that
the held bios' wait is not in their numbers, and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.devices import BlockDevice
from ioscope.base.hist import Hist
from ioscope.engines.context import iolimits
from ioscope.kernel import abi
from ioscope.kernel.loader import BPFObject

HOOKS = ("thr_queue", "wq_start", "wq_end", "throtl_add")
WORK_FN = "blk_throtl_dispatch_work_fn"
CHECK_EVERY_S = 2.0  # how often the limits are read until one is found (every cgroup of both hierarchies)


def kernel_function(name: str, kallsyms: str = "/proc/kallsyms") -> int:
    """A kernel function's address from /proc/kallsyms; 0 when it is not there or addresses are hidden
    (kptr_restrict)."""
    try:
        with open(kallsyms) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == name and parts[1] in "tT":
                    return int(parts[0], 16)
    except OSError:
        return 0
    return 0


@dataclass
class HeldBios:
    """Bios of one cgroup on one disk that blk-throttle held in an interval: all of them (held, exact),
    and the wait of those whose hold fentry saw begin (wait.count of them; 0 where fentry is refused)."""

    dev: int
    disk: str
    cgroup: str
    held: int
    wait: Hist
    # the cgroup's io.pressure "some avg10" (cgroup v2 with PSI): the share of the last 10 s in which some
    # of its tasks stalled on I/O, the kernel's own figure of what the throttle cost it; None elsewhere
    pressure: float | None = None


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
        self.work_fn = kernel_function(WORK_FN, kallsyms)
        self.limits: list[dict[str, Any]] = []
        self.watching = False
        self._next_check = 0.0
        self.no_wait = ""   # why the wait is not measured here ("" when it is)
        self.no_held = ""   # why held bios are not seen here ("" when they are)
        self.stats: Any = None

    def setup(self) -> None:
        """After choose(), before load: the work function's address, whether fentry notes each hold; the
        hooks' absences are this watch's to explain (only when a limit is in force), not the tool's."""
        b = self.bpf
        b.deferred.update(HOOKS)
        if not self.enabled:
            self.no_held = "not asked for"
            return
        missing = {h: b.absent(b.hooks[h]) for h in HOOKS if not b.hooks[h].chosen}
        b.unavailable[:] = [u for u in b.unavailable if u not in missing.values()]
        if "throtl_add" in missing:
            self.no_wait = f"their wait needs fentry: {missing['throtl_add']}"
        if not self.work_fn:
            self.no_held = f"{WORK_FN} is not in /proc/kallsyms (or its address is hidden: kptr_restrict)"
        elif any(h in missing for h in ("thr_queue", "wq_start", "wq_end")):
            self.no_held = "; ".join(v for k, v in missing.items() if k != "throtl_add")
        b.set_global("targ_throtl_work_fn", self.work_fn if not self.no_held else 0, "Q")
        b.set_global("targ_throttle", "throtl_add" not in missing, "?")

    def loaded(self) -> None:
        self.stats = self.bpf.map("throttle_stats")

    def tick(self) -> None:
        """Attach the programs once a limit is in force on a traced disk (then they stay attached: limits
        come and go); the limits are read again at each check, for the views."""
        now = time.monotonic()
        if not self.enabled or now < self._next_check:
            return
        self._next_check = now + CHECK_EVERY_S
        got = iolimits.in_force(list(self.disks()))
        self.limits = got if isinstance(got, list) else []
        if self.limits and not self.watching and not self.no_held:
            self.bpf.attach([h for h in HOOKS if self.bpf.hooks[h].chosen])
            self.watching = True

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
        out = [HeldBios(int(k["dev"]), disk_name(int(k["dev"])), cgroup_name(int(k["cgroup"])), int(v["held"]), w)
               for k, v, w in zip(keys, vals, waits)]
        io = io_cgroup_root()
        if io is not None and io[1] == "v2":
            for h in out:
                if h.cgroup.startswith("/"):
                    h.pressure = io_pressure_avg10(io[0] / h.cgroup.lstrip("/"))
        return sorted(out, key=lambda h: (-h.held, h.disk, h.cgroup))


def summary(held: Sequence[HeldBios], no_wait: str, fmt: Callable[[float], str]) -> list[str]:
    """One line per cgroup and disk: how many bios the throttle held, and their wait or why it is not
    measured. fmt formats nanoseconds."""
    lines = []
    for h in held:
        line = f"blk-throttle held {h.held} bios of cgroup {h.cgroup} on {h.disk}: their wait is not in q2c"
        if h.wait.count:
            p = h.wait.percentiles((50, 99))
            line += (f"; waited (measured for {h.wait.count}) p50 {fmt(p[50])} p99 {fmt(p[99])} "
                     f"max {fmt(float(h.wait.max))}")
        else:
            line += f" and not measured ({no_wait or 'no hold was seen beginning'})"
        if h.pressure is not None:
            line += f"; the cgroup's io.pressure: some {h.pressure:.2f}% (avg10)"
        lines.append(line)
    return lines


def held_json(h: HeldBios) -> dict[str, Any]:
    p = h.wait.percentiles((50, 90, 99)) if h.wait.count else {}
    return {"disk": h.disk, "cgroup": h.cgroup, "held": h.held, "wait_measured": h.wait.count,
            **({"io_pressure_some_avg10": h.pressure} if h.pressure is not None else {}),
            "wait_unit": "ns", **({"wait_p50": round(p[50], 1), "wait_p90": round(p[90], 1),
                                   "wait_p99": round(p[99], 1), "wait_max": h.wait.max,
                                   "wait_sum": h.wait.total} if h.wait.count else {})}


__all__ = ["CHECK_EVERY_S", "HOOKS", "HeldBios", "ThrottleWatch", "held_json", "kernel_function", "summary"]
