"""The lat collector: the lat BPF object and /proc/diskstats, read into one LatSample per interval."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ioscope.base import cgroups, devices
from ioscope.base.collector import Tick
from ioscope.base.losses import PENDING, Losses, StatsDelta
from ioscope.engines.context.throttle import HOOKS as THROTTLE_HOOKS
from ioscope.engines.context.throttle import ThrottleWatch
from ioscope.engines.latency.model import LatHist, LatSample, stamps_shortfall
from ioscope.kernel import abi
from ioscope.kernel.inflight import EXPLAIN, SETTLE_S, OldestIO, OldestWatch, SlotTable, kernel_in_flight
from ioscope.kernel.loader import BPFObject
from ioscope.kernel.stamps import LOSS_EXPLAIN, PROBES, STAMPS, StampTiming

HIST_MAX_ENTRIES = 1024
HIST_MAX_ENTRIES_PER_PID = 16384


@dataclass
class LatOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    per_disk: bool = False
    per_op: bool = False
    per_pid: bool = False
    per_cgroup: bool = False
    cgroup: str | None = None  # -c: this cgroup and those under it
    # the bios blk-throttle holds (engines/context/throttle.py), read by sample(): lat's; the exporter and
    # the web page read the histograms alone and leave it off
    throttle: bool = False
    phases: tuple[str, ...] = ("q2c", "q2d", "d2c")
    btf: str | None = None
    timing: str = "auto"  # TIMINGS: auto uses the kernel's request stamps where they are kept
    # the oldest I/O in flight per disk (kernel/inflight.py: OldestWatch), read by tick(): the exporter's
    in_flight_oldest: bool = False


class LatCollector:
    """Owns the lat BPF object; read() returns the histograms since the last read."""

    def __init__(self, opts: LatOptions) -> None:
        self.opts = opts
        self.names = devices.DevNames()
        self.cgroup = cgroups.cgroup_filter(opts.cgroup) if opts.cgroup else None
        self.cgroup_names = cgroups.CgroupNames()
        self.bpf = BPFObject("lat", btf=opts.btf)
        names = [d.name for d in opts.disks] or [d.name for d in devices.list_disks()]
        self.cross_disks = [n for n in names if devices.is_mq(n)]
        # -D: the stacks (dm, md, btrfs) with a traced member, as sysfs has them at the start
        self.stacks = {k: v for k, v in devices.stack_meta().items()
                       if any(m in names for m in v.get("members", []))} if opts.per_disk else {}
        with self.bpf.closed_on_error():
            self._setup()
        # the kernel's counts from after the attach: a request completed in between is seen by the
        # program and not in the kernel's delta, never the other way round
        self._last_kernel = self._kernel_counts()
        self._kernel_base = dict(self._last_kernel)
        # with the kernel's stamps alone: requests the program ended (d2c, not_stamped) since the attach,
        # and the completions it was found not to have run for, reported so far (model.stamps_shortfall)
        self._d2c_total: dict[str, int] = {}
        self._not_stamped_total = 0
        self._shortfall_total = 0
        self._d2c_by_disk: dict[str, int] = {}  # read(): d2c counts per disk, before any merge

    def _setup(self) -> None:
        o, b = self.opts, self.bpf
        # the kernel's stamps carry no process: -P and -p need the queue program
        stamps = o.timing != "probes" and not o.per_pid and o.pid is None
        b.choose(required=["bio_queue", "rq_issue", "rq_complete"],
                 optional=["split", "task_rename", *(THROTTLE_HOOKS if o.throttle else ())])
        self.throttle = ThrottleWatch(b, lambda: o.disks or devices.list_disks(), enabled=o.throttle)
        self.throttle.setup()
        # per disk in the map whenever the processes are not (-P): the kernel's count of completed
        # requests is compared per disk (sample()); merged here when -D was not asked for
        b.set_global("targ_per_disk", o.per_disk or not o.per_pid, "?")
        b.set_global("targ_per_op", o.per_op, "?")
        b.set_global("targ_per_pid", o.per_pid, "?")
        b.set_global("targ_per_cgroup", o.per_cgroup, "?")
        for name, (value, fmt) in (self.cgroup.bpf_globals() if self.cgroup else {}).items():
            b.set_global(name, value, fmt)
        b.set_global("targ_stamps", stamps, "?")
        b.filter_disks(d.dev for d in o.disks)
        b.set_global("targ_tgid", o.pid or 0, "I")
        mask = sum(1 << abi.PHASES[p] for p in o.phases)
        b.set_global("targ_phases", mask, "B")
        if o.per_pid or o.per_cgroup:
            # per-CPU values for thousands of keys (processes, containers) would cost ncpus x 7.4 KiB each
            from ioscope.kernel import _libbpf
            b.set_map_type("hists", _libbpf.MAP_TYPE_HASH)
            b.set_global("targ_shared_hists", True, "?")
            b.set_max_entries("hists", HIST_MAX_ENTRIES_PER_PID)
        else:
            b.set_max_entries("hists", HIST_MAX_ENTRIES)
        b.load()
        self.hists = b.map("hists")
        self.throttle.loaded()
        self.stats = StatsDelta(b, b.map("stats"), abi.STAT_NAMES, abi.NR_STATS,
                                [abi.STAT_NAMES[i] for i in range(abi.NR_LOST_STATS)] + ["not_stamped"],
                                explain={**LOSS_EXPLAIN, **EXPLAIN})
        self.slots = SlotTable(b.map("inflight"))
        self.oldest = OldestWatch(self.slots, issue_known=True)
        self.comms = b.map("comms")
        self.stamps = StampTiming(b, self.names, self.cross_disks, o.timing, stamps, o.btf)
        self.stamps.attach("rq_complete", ["bio_queue", "rq_issue", "split", "task_rename"])
        self.throttle.tick()   # a limit in force at the start: its programs attached before "Tracing" is said

    @property
    def filtered(self) -> bool:
        """-p or -c: /proc/diskstats counts every process's I/O, the histograms some."""
        return self.opts.pid is not None or self.cgroup is not None

    @property
    def timing(self) -> dict[str, str]:
        return self.stamps.timing

    def tick(self) -> None:
        """Housekeeping, every second: disks without stamps, and stale slots every SWEEP_EVERY_S."""
        self.stamps.tick()
        self.throttle.tick()
        # the slot table holds bios only where a disk is followed by the probes
        if not self.stamps.stamps_only:
            self.slots.tick()
        if self.opts.in_flight_oldest:
            # every disk's stall from /proc/diskstats; the slot table's bios only where it follows some
            self.oldest.table = None if self.stamps.stamps_only else self.slots
            self.oldest.read(devices.read_diskstats())

    def in_flight_oldest(self) -> tuple[dict[str, OldestIO], list[str]]:
        """The oldest I/O in flight over OVER_NS per disk as the last tick() read it (from the slot table
        on the disks it follows, those timed by the probes; else what /proc/diskstats says: OldestIO.known
        False), and the disks the slot table follows."""
        followed = [n for n, t in self.timing.items() if t == PROBES]
        return {self.names.name(dev): o for dev, o in self.oldest.current.items()}, followed

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def read(self, reset: bool) -> list[LatHist]:
        """Histograms since the last reset; reset=True empties them atomically per key."""
        keys_b, vals_b, n = self.hists.dump(sum=False, delete=reset)
        keys = np.frombuffer(keys_b, dtype=abi.LAT_KEY, count=n)
        vals = abi.combine_percpu_hists(vals_b, n, self.hists.ncpus, per_value=abi.NR_PHASES)
        comms: dict[int, str] = {}
        if self.opts.per_pid and n:
            comms = abi.comms_from_dump(*self.comms.dump())
        out: dict[tuple[int, str, int | None, str | None, str], LatHist] = {}
        self._d2c_by_disk = {}
        for k, phases in zip(keys, vals):
            kdev = int(k["dev"])
            dev = kdev if self.opts.per_disk else 0
            pid = int(k["pid"]) if self.opts.per_pid else None
            cg = self.cgroup_names.name(int(k["cgroup"])) if self.opts.per_cgroup else None
            op = abi.OP_NAMES.get(int(k["op"]), "other")
            for phase, h in zip(abi.PHASES, abi.hists_from_array(phases)):
                if phase not in self.opts.phases or not h.count:
                    continue
                if phase == "d2c" and kdev:
                    name = self.names.name(kdev)
                    self._d2c_by_disk[name] = self._d2c_by_disk.get(name, 0) + h.count
                have = out.get((dev, op, pid, cg, phase))
                if have is not None:  # the disks merged (no -D)
                    have.hist = have.hist.merge(h)
                    continue
                out[(dev, op, pid, cg, phase)] = LatHist(
                    dev=dev,
                    disk=self.names.name(dev) if dev else "all",
                    op=op,
                    pid=pid,
                    comm=(comms.get(pid, "[unknown]") if pid else "[kernel]") if pid is not None else None,
                    phase=phase,
                    hist=h,
                    cgroup=cg,
                )
        return sorted(out.values(), key=LatHist.sort_key)

    def losses(self, since_last: bool, final: bool = False) -> tuple[Losses, int]:
        """The losses since the last read, and the requests the kernel has in flight now (final: after
        the bios pending now were given time to complete, inflight.SETTLE_S)."""
        losses = self.stats.read(since_last)
        losses.counters["stale"] = self.slots.take_stale()
        if self.stamps.stamps_only:  # no slots
            losses.counters[PENDING] = 0
            return losses, self.kernel_in_flight()
        settle = SETTLE_S if final else 0.0
        losses.counters[PENDING], in_flight = self.slots.pending_and_kernel(self.cross_disks, settle_s=settle)
        return losses, in_flight

    def sample(self, tick: Tick) -> LatSample:
        """Histograms since the last reset (emptied when reset), losses since the last sample."""
        wall = time.time()
        # the kernel's count is read first: a request completed between the two reads is then one the
        # program saw and the kernel's count does not hold (a shortfall is never overstated)
        kernel_now = self._kernel_counts()
        started, reset, final = tick.started, tick.reset, tick.final
        hists = self.read(reset=reset)
        losses, in_flight = self.losses(since_last=True, final=final)
        shortfall = 0
        if "d2c" in self.opts.phases and not self.opts.per_pid and not self.filtered:
            for name, n in self._d2c_by_disk.items():  # without reset the histograms add up
                self._d2c_total[name] = self._d2c_total.get(name, 0) + n if reset else n
            self._not_stamped_total += losses.counters.get("not_stamped", 0)
            stamped = [n for n, t in self.timing.items() if t == STAMPS and n in kernel_now]
            shortfall = stamps_shortfall({n: kernel_now[n] - self._kernel_base.get(n, kernel_now[n]) for n in stamped},
                                         self._d2c_total, self._not_stamped_total, self._shortfall_total)
            self._shortfall_total += shortfall
        return LatSample(wall=wall, started=started, hists=hists, losses=losses,
                         kernel_completed=self.kernel_completed(since_last=reset, cur=kernel_now),
                         kernel_in_flight=in_flight, final=final,
                         pid_filtered=self.filtered, stacks=self.stacks, timing=dict(self.timing),
                         programs=list(self.bpf.attached), stamps_shortfall=shortfall,
                         throttled=self.throttle.read(self.names.name, self.cgroup_names.name),
                         throttle_limits=list(self.throttle.limits), throttle_no_wait=self.throttle.no_wait,
                         throttle_no_held=self.throttle.no_held)

    def _kernel_counts(self) -> dict[str, int]:
        stats = devices.read_diskstats()
        return {n: devices.completed_requests(stats[n]) for n in self.cross_disks if n in stats}

    def kernel_in_flight(self) -> int:
        """Requests the kernel has in flight now on the traced blk-mq disks (/proc/diskstats)."""
        return kernel_in_flight(self.cross_disks)

    def kernel_completed(self, since_last: bool, cur: dict[str, int] | None = None) -> dict[str, int]:
        """Requests the kernel completed on the traced blk-mq disks (from /proc/diskstats, or cur read
        from it) since the last call with since_last."""
        cur = self._kernel_counts() if cur is None else cur
        delta = {n: v - self._last_kernel.get(n, v) for n, v in cur.items()}
        if since_last:
            self._last_kernel = cur
        return delta

    def close(self) -> None:
        self.bpf.close()


__all__ = ["LatCollector", "LatOptions", "LatSample"]
