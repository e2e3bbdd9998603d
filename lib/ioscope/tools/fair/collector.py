"""The fair collector: readsize's BPF object (reads and writes), /proc/diskstats, the disks' queue
settings and the processes' cgroup I/O limits, read into one FairSample per interval."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ioscope.base import devices
from ioscope.base.cgroups import within
from ioscope.base.collector import Tick
from ioscope.engines.context import iolimits
from ioscope.engines.context.throttle import HeldWatch
from ioscope.engines.procio.collector import ReadsizeCollector, ReadsizeOptions
from ioscope.engines.procio.model import DiskIO, ProcIO, merge_procs
from ioscope.tools.fair.model import FairSample, active_disks


def blkio_limits(pid: int, proc_root: str = "/proc", cg_root: str = "/sys/fs/cgroup") -> list[str]:
    """Block I/O throttling that applies to a process (cgroup v1 blkio, cgroup v2 io.max)."""
    out: list[str] = []
    try:
        lines = Path(proc_root, str(pid), "cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        rel = path.lstrip("/")
        if "blkio" in ctrls.split(",") and rel:
            for f in ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                      "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"):
                try:
                    for v in Path(cg_root, "blkio", rel, f).read_text().split("\n"):
                        if v.strip():
                            out.append(f"cgroup {path} {f.split('.')[-1]} {v.strip()}")
                except OSError:
                    pass
        if ctrls == "" and rel:
            for base in (Path(cg_root, "unified"), Path(cg_root)):
                try:
                    for v in (base / rel / "io.max").read_text().splitlines():
                        if v.strip():
                            out.append(f"cgroup {path} io.max {v.strip()}")
                    break
                except OSError:
                    continue
    return out


@dataclass
class FairOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    comm: str | None = None
    btf: str | None = None
    per_disk: bool = True  # group processes by disk (False: --across-disks, every process against every other)
    cgroup: str | None = None  # -c: only processes in this cgroup (its path) or one under it
    cgroups: bool = False      # -G: each process's cgroup


class FairCollector:
    """readsize's collector with writes, plus what fair's causes need from /proc and /sys."""

    def __init__(self, opts: FairOptions) -> None:
        self.opts = opts
        # bytes per disk in both modes: only I/O on disks is judged (--across-disks sums a process's disks)
        self.rs = ReadsizeCollector(ReadsizeOptions(disks=opts.disks, pid=opts.pid, comm=opts.comm, writes=True,
                                                    btf=opts.btf, per_disk=True, cgroup=opts.cgroup,
                                                    cgroups=opts.cgroups))
        self.bpf = self.rs.bpf
        self._cumulative: dict[tuple[int, str], ProcIO] = {}
        self._cum_disks: dict[tuple[int, str, str], DiskIO] = {}
        self._stats = devices.read_diskstats()
        self._start = self._t0 = time.monotonic()
        # the bios blk-throttle holds (lat's throttle programs alone, loaded once a limit is in force on a
        # traced disk: looked for now and at each sample; one set while an interval runs is watched from its end)
        self.held = HeldWatch(lambda: opts.disks or devices.list_disks(), [d.dev for d in opts.disks])
        self.held.tick()

    @property
    def unavailable(self) -> list[str]:
        return self.rs.unavailable

    def sample(self, tick: Tick) -> FairSample:
        """The interval since the last sample when reset (totals kept since the start), else all since the start."""
        wall, now = time.time(), time.monotonic()
        reset = tick.reset
        procs = self.rs.read(reset=reset)
        per_disk = self.rs.read_disks(reset=reset)
        losses = self.rs.losses()
        stats = devices.read_diskstats()
        seconds = now - (self._t0 if reset else self._start)
        if reset:
            merge_procs(self._cumulative, procs)
            cumulative = list(self._cumulative.values())
            for d in per_disk:
                k = (d.pid, d.op, d.disk)
                self._cum_disks[k] = self._cum_disks[k].merge(d) if k in self._cum_disks else d
            cum_disks = list(self._cum_disks.values())
        else:
            cumulative, cum_disks = procs, per_disk
        before = self._stats
        self._stats, self._t0 = stats, now
        names = [d.name for d in self.opts.disks]
        whole = [d.name for d in devices.list_disks()]
        # settings only for the disks the report will show (the model picks the same ones)
        shown = sorted(set(names or active_disks(before, stats, whole)) | {d.disk for d in per_disk if d.disk in whole})
        lim = iolimits.in_force(d for d in devices.list_disks() if d.name in shown)
        lims = lim if isinstance(lim, list) else []
        self.held.tick()
        held = self.held.read()
        if self.opts.cgroup is not None:   # -c: the limit's bios of the cgroup and those under it
            held = [h for h in held if within(h.cgroup, self.opts.cgroup)]
        return FairSample(
            wall=wall, seconds=seconds, procs=procs, cumulative=cumulative, losses=losses,
            held=held, held_no_wait=self.held.no_wait or self.held.no_held,
            per_disk=per_disk, cum_per_disk=cum_disks, across_disks=not self.opts.per_disk,
            diskstats_before=before, diskstats_after=stats, disks=names, whole_disks=whole,
            settings={n: {**devices.queue_settings(n), "io_limits": [e for e in lims if e["disk"] == n]}
                      for n in shown},
            limits={pid: blkio_limits(pid) for pid in sorted({p.pid for p in procs})},
        )

    def close(self) -> None:
        self.held.close()
        self.rs.close()


__all__ = ["FairCollector", "FairOptions", "blkio_limits"]
