"""The kernel side of ioscope top: the top BPF object plus /proc/diskstats, read once per refresh.

The BPF maps are read with one batched dump each and emptied in the same
call (dump(delete=True)), so each read returns exactly what happened since
the previous one and user space never walks keys one by one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ioscope.base import cgroups, devices, psi, system
from ioscope.base.collector import Tick
from ioscope.base.losses import PENDING, Losses, StatsDelta, settle_unreported, unreported_completions
from ioscope.engines.context.throttle import HOOKS as THROTTLE_HOOKS
from ioscope.engines.context.throttle import ThrottleWatch
from ioscope.kernel import abi
from ioscope.kernel.inflight import EXPLAIN, SETTLE_S, OldestWatch, SlotTable
from ioscope.kernel.iowait import EXPLAIN as IOWAIT_EXPLAIN
from ioscope.kernel.iowait import HOOKS as IOWAIT_HOOKS
from ioscope.kernel.iowait import LOST as IOWAIT_LOST
from ioscope.kernel.iowait import IowaitReader, SwapGate, set_swapin_functions
from ioscope.kernel.loader import BPFObject
from ioscope.tools.top.model import Sample

PROC_MEMORY = 32 << 20  # bytes for the per-CPU process table (entries x CPUs x value size)
PROC_MAX_ENTRIES = 4096
PROC_MIN_ENTRIES = 256


def proc_entries(ncpus: int) -> int:
    """(process, disk, op) entries the per-CPU procs map gets on a machine with ncpus CPUs."""
    per = abi.TOP_PROC_VAL.itemsize * max(1, ncpus)
    return max(PROC_MIN_ENTRIES, min(PROC_MAX_ENTRIES, PROC_MEMORY // per))


class TopCollector:
    """Owns the top BPF object. sample() returns a Sample; close() detaches everything."""

    def __init__(self, btf: str | None = None, proc_root: str = "/proc", sys_root: str = "/sys",
                 disks: Sequence[int] = (), per_cgroup: bool = False, cgroup: str | None = None) -> None:
        self.proc_root = proc_root
        self.sys_root = sys_root
        self.filter = set(disks)
        self.names = devices.DevNames(sys_root)
        # -c: only the I/O charged to this cgroup and those under it; per_cgroup: each row's cgroup
        self.cgroup = cgroups.cgroup_filter(cgroup) if cgroup else None
        self.per_cgroup = per_cgroup or self.cgroup is not None
        self.cgroup_names = cgroups.CgroupNames()
        # the cgroups' io.pressure (base/psi.py): only where the io controller's hierarchy is v2 (a v1 blkio
        # cgroup has none; its v2 cgroup in a hybrid set-up is another one)
        io = cgroups.io_cgroup_root() if self.per_cgroup else None
        self.psi_root = io[0] if io is not None and io[1] == "v2" else None
        self.psi_watch: set[str] = set()               # cgroups whose pressure is read (the rows shown last)
        self._comms: dict[int, str] = {}              # tgid -> name seen by BPF at queue time
        self._live: dict[int, str] = {0: "[unknown]"}  # tgid -> name for the current refresh
        self.bpf = BPFObject("top", btf=btf)
        with self.bpf.closed_on_error():
            b = self.bpf
            b.choose(required=["bio_queue", "rq_complete", *IOWAIT_HOOKS],
                     optional=["split", "task_rename", *THROTTLE_HOOKS])
            self.throttle = ThrottleWatch(b, lambda: [d for d in devices.list_disks(sys_root)
                                                      if not self.filter or d.dev in self.filter])
            self.throttle.setup()
            from ioscope.kernel import _libbpf
            b.set_max_entries("procs", proc_entries(_libbpf.num_possible_cpus()))
            b.filter_disks(disks)
            b.set_global("targ_per_cgroup", self.per_cgroup, "?")
            no_swapin = set_swapin_functions(b)
            for name, (value, fmt) in (self.cgroup.bpf_globals() if self.cgroup else {}).items():
                b.set_global(name, value, fmt)
            b.load()
            if no_swapin:
                b.unavailable.append(no_swapin)
            self.procs = b.map("procs")
            self.disks = b.map("disks")
            self.comms = b.map("comms")
            self.stats = StatsDelta(b, b.map("stats"), abi.STAT_NAMES, abi.NR_STATS,
                                    [*(abi.STAT_NAMES[i] for i in range(abi.NR_LOST_STATS)), IOWAIT_LOST],
                                    explain={**EXPLAIN, **IOWAIT_EXPLAIN})
            self.slots = SlotTable(b.map("inflight"))
            # top has no issue program: whether the oldest bio's request was issued it cannot tell
            self.oldest = OldestWatch(self.slots, issue_known=False)
            self.iowait = IowaitReader(b.map("iowait_tids"), b.map("iowait_starts"), proc_root)
            self.swap_gate = SwapGate(b.map("iowait_swap_used"))
            self.swap_gate.check()
            self.throttle.loaded()
            # (the throttle's hooks: ThrottleWatch.tick)
            b.attach(["bio_queue", "rq_complete", "split", "task_rename", *IOWAIT_HOOKS])
            self.throttle.tick()   # a limit in force at the start: attached before the first snapshot's interval

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def whole_disks(self) -> list[str]:
        """The disks top shows: those of -d when given, else every whole disk."""
        return [d.name for d in devices.list_disks(self.sys_root) if not self.filter or d.dev in self.filter]

    def comm(self, tgid: int) -> str:
        """The process's name: its current one from /proc while it lives (a process that exec'ed after
        queueing I/O has a new name), else the name the BPF program saw at queue time."""
        c = self._live.get(tgid)
        if c is not None:
            return c
        c = system.proc_comm(tgid, self.proc_root) or self._comms.get(tgid, "[exited]")
        self._live[tgid] = c
        return c

    def _refresh_comms(self) -> None:
        self._live = {0: "[unknown]"}  # names are looked up again for each refresh
        kb, vb, n = self.comms.dump()
        if not n:
            return
        self._comms.update(abi.comms_from_dump(kb, vb, n))

    def sample(self, tick: Tick) -> Sample:
        """Read and empty the maps, read /proc/diskstats: one consistent moment. The last sample of a
        run (final) also counts the bios issued and never seen completing beyond what the kernel has
        in flight as completion_unseen (inflight.py: completions no BPF program saw)."""
        final = tick.final
        self.throttle.tick()
        mono, wall = time.monotonic(), time.time()
        waits = self.iowait.read()
        self.swap_gate.check()
        ds = devices.read_diskstats(self.proc_root)
        pressure = psi.host_io(self.proc_root)
        oldest = self.oldest.read(ds)
        pk, pv, pn = self.procs.dump(sum=False, delete=True)
        dk, dv, dn = self.disks.dump(sum=False, delete=True)
        proc_keys = np.frombuffer(pk, dtype=abi.TOP_PROC_KEY, count=pn).copy()
        proc_vals = combine_percpu_procs(pv, pn, self.procs.ncpus)
        disk_keys = np.frombuffer(dk, dtype=abi.TOP_DISK_KEY, count=dn).copy()
        disk_hists = abi.combine_percpu_hists(dv, dn, self.disks.ncpus)[:, 0]
        self._refresh_comms()
        cg_pressure: dict[str, psi.Pressure] = {}
        if self.psi_root is not None:   # the rows shown last and the cgroups of this interval's I/O
            paths = self.psi_watch | {self.cgroup_names.name(int(c)) for c in np.unique(proc_keys["cgroup"])}
            cg_pressure = {p: pr for p in paths if p.startswith("/")
                           and (pr := psi.cgroup_io(self.psi_root, p)) is not None}
        losses = self.losses()
        if final:
            traced = [n for n in self.whole_disks() if devices.is_mq(n, self.sys_root)]
            losses.counters[PENDING], in_flight = self.slots.pending_and_kernel(traced, settle_s=SETTLE_S)
            settle_unreported(losses, unreported_completions(losses, in_flight))
        return Sample(mono, wall, ds, proc_keys, proc_vals, disk_keys, disk_hists, losses.lost,
                      dict(losses.counters), self.throttle.read(self.names.name, self.cgroup_names.name), waits,
                      oldest, pressure, cg_pressure)

    def losses(self) -> Losses:
        """Losses since the previous call."""
        return self.stats.read(since_last=True)

    def close(self) -> None:
        self.bpf.close()


def combine_percpu_procs(raw: bytes, n: int, ncpus: int) -> np.ndarray:
    """Per-CPU TOP_PROC_VAL values of n keys -> n values (counters summed, max/min_inv maxed)."""
    per = np.frombuffer(raw, dtype=abi.TOP_PROC_VAL, count=n * ncpus).reshape(n, ncpus)
    out = np.zeros(n, dtype=abi.TOP_PROC_VAL)
    out["ios"] = per["ios"].sum(axis=1, dtype=np.uint64)
    out["bytes"] = per["bytes"].sum(axis=1, dtype=np.uint64)
    out["lat"] = abi.combine_percpu_hists(per["lat"].tobytes(), n, ncpus)[:, 0]
    return out
