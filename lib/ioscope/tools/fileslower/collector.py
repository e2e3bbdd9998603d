"""fileslower's collector: its BPF object (bpf/fileslower.bpf.c), the ring buffer of slow calls and the
in-kernel histograms, read into typed samples (model.FileSlowerSample)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from ioscope.base import cgroups, devices
from ioscope.base.collector import Tick
from ioscope.base.fmt import comm_str
from ioscope.base.losses import StatsDelta
from ioscope.engines.aggregate.names import file_path, mount_points
from ioscope.kernel import abi as kabi
from ioscope.kernel.loader import BPFObject
from ioscope.tools.fileslower import abi, calls
from ioscope.tools.fileslower.model import CallRecord, FileSlowerSample, HistRow

SYSCALL_HOOKS = ("sys_enter", "sys_exit")  # raw_syscalls': every call, those of o.calls kept by number
THREAD_EXIT = "thread_exit"  # sched_process_exit: a thread's entry in the map calls goes with it
OTHER_HOOKS = ("bio_queue", "rq_complete", "sched_switch", "sched_waking", "sched_wakeup")
EXPLAIN = {
    "events_lost_ring_full": "slow calls not shown: the ring buffer was full; raise -m or --ring",
    "calls_map_full": "calls not followed: more threads inside calls at once than the map holds",
    "bios_map_full": "bios of a call not timed",
    "hist_map_full": "calls not in a histogram: more (call, file) keys than the map holds",
}
NO_FILE = "-"


@dataclass
class FileSlowerOptions:
    calls: tuple[str, ...] = abi.CALLS
    min_ns: int = 10_000_000
    pid: int | None = None
    disks: list[devices.BlockDevice] = field(default_factory=list)
    cgroup: str | None = None
    per_pid: bool = False
    per_cgroup: bool = False
    ring_bytes: int = 4 << 20
    btf: str | None = None


class FileSlowerCollector:
    """Owns the fileslower object: poll() takes the slow calls waiting, sample() the rest and the
    histograms (emptied when the tick resets)."""

    def __init__(self, opts: FileSlowerOptions) -> None:
        self.opts = opts
        self.cgroup = cgroups.cgroup_filter(opts.cgroup) if opts.cgroup else None
        self.cgroup_names = cgroups.CgroupNames()
        self.names = devices.DevNames()
        self.mounts = mount_points()
        self.mono_to_wall = time.time() - time.monotonic()
        self._pending: list[CallRecord] = []
        self.bpf = BPFObject("fileslower", btf=opts.btf)
        with self.bpf.closed_on_error():
            self._setup()

    def _setup(self) -> None:
        o, b = self.opts, self.bpf
        b.choose(required=[*SYSCALL_HOOKS, THREAD_EXIT], optional=OTHER_HOOKS)
        b.need_kfunc("bpf_rdonly_cast", SYSCALL_HOOKS)  # the tp_btf programs' file from the fd (6.2 on)
        b.set_global("targ_nr_call", calls.nr_table(o.calls), f"{calls.MAX_NR}B")
        b.set_global("targ_min_ns", o.min_ns, "Q")
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.set_global("targ_self", os.getpid(), "I")
        b.set_global("targ_per_pid", o.per_pid, "?")
        b.set_global("targ_per_cgroup", o.per_cgroup, "?")
        for name, (value, fmt) in (self.cgroup.bpf_globals() if self.cgroup else {}).items():
            b.set_global(name, value, fmt)
        # -d: a file's device is its file system's (a partition or the disk) or, opened itself, the disk's
        wanted = {d.dev for d in o.disks}
        wanted |= {devices.kdev(p.major, p.minor) for p in devices.list_partitions() if p.disk.dev in wanted}
        b.filter_disks(wanted)
        b.set_max_entries("events", o.ring_bytes)
        b.load()
        b.attach()
        self.ring = b.obj.ring_buffer("events")
        self.hists = b.map("hists")
        self.files = b.map("files")
        self.stats = StatsDelta(b, b.map("stats"), {**kabi.STAT_NAMES, **abi.STAT_NAMES}, abi.NR_STATS,
                                [*abi.LOSSES, "hist_map_full", "iowait_map_full"], explain=EXPLAIN)

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def _file(self, rec: np.void) -> str:
        if not int(rec["ino"]) and not int(rec["dev"]):
            return NO_FILE
        return file_path(rec, self.mounts)

    def _records(self, raw: bytes) -> list[CallRecord]:
        n = len(raw) // abi.EVENT.itemsize
        out = []
        for e in np.frombuffer(raw, dtype=abi.EVENT, count=n):
            s = e["s"]
            cg = int(s["cgroup"])
            out.append(CallRecord(
                start_ns=int(s["start_ns"]), end_ns=int(e["end_ns"]), call=abi.CALLS[int(s["call"])],
                ret=int(e["ret"]), tid=int(e["tid"]), pid=int(e["tgid"]), comm=comm_str(bytes(e["comm"])),
                file=self._file(e["file"]), dev=self.names.name(int(s["dev"])) if int(s["dev"]) else NO_FILE,
                cgroup=self.cgroup_names.name(cg) if cg else None,
                iowait_ns=int(s["iowait_ns"]), iowaits=int(s["iowaits"]), offcpu_ns=int(s["offcpu_ns"]),
                runq_ns=int(s["runq_ns"]), dev_ns=int(s["dev_ns"]), bios_done=int(s["bios_done"]),
                rbios=int(s["rbios"]), wbios=int(s["wbios"]), obios=int(s["obios"]), rbytes=int(s["rbytes"]),
                wbytes=int(s["wbytes"]), flushes=int(s["flushes"]), fua=int(s["fua"]), sync=int(s["sync"])))
        return out

    def poll(self) -> list[CallRecord]:
        """The slow calls the kernel sent since the last poll (no waiting)."""
        return self._records(self.ring.poll(0))

    def _hist_rows(self, reset: bool) -> list[HistRow]:
        kb, vb, n = self.hists.dump(sum=False, delete=reset)
        if not n:
            return []
        keys = np.frombuffer(kb, dtype=abi.HIST_KEY, count=n)
        hists = kabi.hists_from_array(np.frombuffer(vb, dtype=kabi.HIST, count=n))
        fkb, fvb, fn = self.files.dump(sum=False)
        fkeys = np.frombuffer(fkb, dtype=abi.FILE_KEY, count=fn)
        fvals = np.frombuffer(fvb, dtype=abi.FILE, count=fn)
        names = {(int(k["dev"]), int(k["ino"])): self._file(v) for k, v in zip(fkeys, fvals)}
        rows = []
        for k, h in zip(keys, hists):
            dev, ino, pid, cg = int(k["dev"]), int(k["ino"]), int(k["tgid"]), int(k["cgroup"])
            fname = names.get((dev, ino)) or (NO_FILE if not ino else f"[inode {ino} on {self.names.name(dev)}]")
            rows.append(HistRow(call=abi.CALLS[int(k["call"])], file=fname, hist=h,
                                pid=pid if self.opts.per_pid else None,
                                comm=_comm(pid) if self.opts.per_pid else None,
                                cgroup=self.cgroup_names.name(cg) if self.opts.per_cgroup else None))
        return rows

    def sample(self, tick: Tick) -> FileSlowerSample:
        records = self.poll()
        return FileSlowerSample(records=records, hists=self._hist_rows(tick.reset), losses=self.stats.read(),
                                started=tick.started, now=time.time(), mono_to_wall=self.mono_to_wall)

    def close(self) -> None:
        self.bpf.close()


def _comm(pid: int) -> str:
    from ioscope.base.system import proc_comm
    return proc_comm(pid) or "[exited]"


__all__ = ["FileSlowerCollector", "FileSlowerOptions"]
