"""The readsize collector: bpf/readsize.bpf.o (readsize's and fair's), read into one ReadsizeSample."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ioscope.base import devices, syscalls
from ioscope.base.cgroups import ProcessCgroups
from ioscope.base.collector import Tick
from ioscope.base.errors import IoscopeError
from ioscope.base.fmt import comm_str
from ioscope.base.losses import Losses, StatsDelta
from ioscope.engines.procio import abi
from ioscope.engines.procio.model import DevRequests, DiskIO, ProcIO, ReadsizeSample
from ioscope.kernel import abi as core_abi
from ioscope.kernel.loader import BPFObject


def filter_devs(disk: devices.BlockDevice, sys_root: str = "/sys") -> list[int]:
    """Kernel dev_t of a disk and of its partitions (a filesystem's s_dev is the partition's)."""
    out = [disk.dev]
    base = Path(sys_root) / "block" / disk.name
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        try:
            ma, mi = (base / name / "dev").read_text().strip().split(":")
        except (OSError, ValueError):
            continue
        if (base / name / "partition").exists():
            out.append(devices.kdev(int(ma), int(mi)))
    return out


def syscall_numbers(machine: str | None = None) -> dict[str, int]:
    return syscalls.numbers(abi.RS_SYSCALLS, machine)


@dataclass
class ReadsizeOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    comm: str | None = None
    writes: bool = False
    btf: str | None = None
    per_disk: bool = False  # fair: also bytes per process, direction and disk (read_disks)
    cgroup: str | None = None  # -c: only processes in this cgroup (a path, cgroup_filter's) or one under it
    cgroups: bool = False   # -G: each process's cgroup read (ProcIO.cgroup)


def _comm_bytes(comm: str) -> bytes:
    b = comm.encode()[:15]
    return b + b"\0" * (16 - len(b))


def uring_hooks(b: BPFObject) -> tuple[list[str], str | None]:
    """The io_uring submit and complete programs that match this kernel's tracepoints (their arguments
    in BTF: they changed in 5.10, 6.1, 6.5 and 6.18), or ([], why not)."""
    sqe, req, cqe = (b.tp_param_types(f"io_uring_{t}") for t in ("submit_sqe", "submit_req", "complete"))
    if req == ["struct io_kiocb *"]:
        submit = "uring_req"                 # 6.5+: io_uring_submit_req(req)
    elif sqe and sqe[0] == "struct io_kiocb *":
        submit = "uring_sqe"                 # 6.1: io_uring_submit_sqe(req, force_nonblock)
    elif sqe and len(sqe) >= 4 and sqe[1].endswith("*") and sqe[3] == "u64":
        submit = "uring_sqe_ud"              # 5.10: io_uring_submit_sqe(ctx, req, opcode, user_data, ...)
    else:
        return [], f"io_uring requests not counted: no io_uring submit tracepoint with the request ({sqe or req})"
    if cqe and len(cqe) == 3 and cqe[2].endswith("io_uring_cqe *"):
        complete = "uring_cqe_ptr"           # 6.18: io_uring_complete(ctx, req, cqe)
    elif cqe and len(cqe) >= 4 and cqe[1].endswith("*") and cqe[2] == "u64":
        complete = "uring_cqe"               # 6.1-6.12: io_uring_complete(ctx, req, user_data, res, ...)
    elif cqe and len(cqe) >= 3 and cqe[1] == "u64":
        complete = "uring_cqe_ud"            # 5.10: io_uring_complete(ctx, user_data, res, cflags)
    else:
        return [], f"io_uring requests not counted: io_uring_complete has arguments ioscope does not know ({cqe})"
    if (submit == "uring_sqe_ud") != (complete == "uring_cqe_ud"):
        return [], "io_uring requests not counted: its submit and complete tracepoints name requests differently"
    return [submit, complete], None


def _need_kfunc(b: BPFObject, kfunc: str, hooks: list[str], force: bool = False) -> None:
    """tp_btf variants of these hooks call kfunc: without it in the kernel (before 6.2), use raw_tp."""
    b.need_kfunc(kfunc, hooks, force)


class ReadsizeCollector:
    """Owns bpf/readsize.bpf.o; read() returns per-process I/O since the last reset."""

    def __init__(self, opts: ReadsizeOptions) -> None:
        self.opts = opts
        # a process's cgroup: /proc/PID/cgroup, read in user space for the processes read (a few per interval)
        self.pcg = ProcessCgroups(opts.cgroup) if opts.cgroup is not None or opts.cgroups else None
        self.bpf = BPFObject("readsize", btf=opts.btf)
        try:
            try:
                self._setup(force_raw=False)
            except IoscopeError:
                # a kernel with bpf_rdonly_cast that refuses the void * cast (btf_id 0): the
                # tp_btf syscall program does not load; the raw_tp one does the same with probe reads
                if not self._syscalls_on_btf:
                    raise
                self.bpf.close()
                self.bpf = BPFObject("readsize", btf=opts.btf)
                self._setup(force_raw=True)
        except BaseException:
            self.bpf.close()
            raise

    def _setup(self, force_raw: bool) -> None:
        o, b = self.opts, self.bpf
        # x86-64 builds see syscalls at sys_exit alone (see readsize.bpf.c)
        syscalls = ["sys_enter", "sys_exit"] if "sys_enter" in b.hooks else ["sys_exit"]
        uring, no_uring = uring_hooks(b)
        b.choose(required=[*syscalls, "bio_queue"],
                 optional=["sync_ra", "async_ra", "rq_issue", "task_rename", *uring])
        if no_uring:
            b.unavailable.append(no_uring)
        elif any(b.hooks[h].chosen is None for h in uring):
            b.unavailable.append("io_uring requests not counted (its tracepoints are not available)")
        _need_kfunc(b, "bpf_rdonly_cast", syscalls, force_raw)
        self._syscalls_on_btf = any(b.hooks[h].chosen == "tp_btf" for h in syscalls)
        if any("page_cache" in u for u in b.unavailable):
            b.unavailable.append("read bios queued by kernel threads (blk-throttle, ...) stay with the thread")
        for name, nr in syscall_numbers().items():
            b.set_global(f"nr_{name}", nr, "i")
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.filter_disks(dev for d in o.disks for dev in filter_devs(d))
        b.set_global("targ_writes", o.writes, "?")
        b.set_global("targ_per_disk", o.per_disk, "?")
        b.set_global("targ_proc_cgroup", self.pcg is not None, "?")
        if o.comm:
            b.set_global("targ_filter_comm", True, "?")
            b.obj.set_global("targ_comm", _comm_bytes(o.comm))
        b.load()
        self.procs = b.map("procs")
        self.stats = StatsDelta(b, b.map("stats"), abi.RS_STAT_NAMES, abi.RS_NR_STATS,
                                [abi.RS_STAT_NAMES[i] for i in range(abi.RS_NR_LOST_STATS)])
        self.rq_sizes = b.map("rq_sizes")
        self.proc_disks = b.map("proc_disks")
        self.names = devices.DevNames()
        self._disk_of: dict[int, str] = {}
        b.attach()

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def requests(self, reset: bool) -> list[DevRequests]:
        """Request sizes as issued to the driver, per disk and direction, beside max_sectors_kb."""
        kb, vb, n = self.rq_sizes.dump(sum=False, delete=reset)
        keys = np.frombuffer(kb, dtype=abi.RS_RQ_KEY, count=n)
        hists = core_abi.hists_from_array(np.frombuffer(vb, dtype=core_abi.HIST, count=n))
        out = []
        limits: dict[str, object] = {}
        for k, h in zip(keys, hists):
            disk = self.names.name(int(k["dev"]))
            if disk not in limits:
                limits[disk] = devices.queue_settings(disk).get("max_sectors_kb", "?")
            out.append(DevRequests(disk, abi.RS_OP_NAMES.get(int(k["op"]), "?"), h, limits[disk]))
        return out

    def read(self, reset: bool) -> list[ProcIO]:
        """Per process and direction since the last reset; reset=True empties the map."""
        kb, vb, n = self.procs.dump(sum=False, delete=reset)
        keys = np.frombuffer(kb, dtype=abi.RS_KEY, count=n)
        vals = np.frombuffer(vb, dtype=abi.RS_VAL, count=n)
        out = []
        cgroup_ids: dict[int, int] = {}
        for k, v in zip(keys, vals):
            if int(v["cgroup"]):
                cgroup_ids[int(k["tgid"])] = int(v["cgroup"])
            req, ret, dev = (core_abi.hists_from_array(v[name].reshape(1))[0] for name in ("app_req", "app_ret", "dev"))
            out.append(ProcIO(
                pid=int(k["tgid"]), comm=comm_str(bytes(v["comm"])),
                op=abi.RS_OP_NAMES.get(int(k["op"]), "?"), app_req=req, app_ret=ret, dev=dev,
                app_errors=int(v["app_errors"]), app_short=int(v["app_short"]),
                ra_count=int(v["ra_count"]), ra_bytes=int(v["ra_bytes"]),
            ))
        if self.pcg is not None:
            self.pcg.forget({p.pid for p in out})
            for p in out:   # one /proc read per process and interval; read_disks() keeps the same ones
                p.cgroup = self.pcg.path(p.pid, cgroup_ids.get(p.pid, 0))
            out = [p for p in out if self.pcg.wanted(p.pid)]
        out.sort(key=ProcIO.sort_key)
        return out

    def read_disks(self, reset: bool) -> list[DiskIO]:
        """With per_disk: bytes per process, direction and whole disk since the last reset (a partition's
        bytes are its disk's; a filesystem without a disk, tmpfs say, is named by its major:minor)."""
        kb, vb, n = self.proc_disks.dump(sum=False, delete=reset)
        keys = np.frombuffer(kb, dtype=abi.RS_DISK_KEY, count=n)
        vals = np.frombuffer(vb, dtype=abi.RS_DISK_VAL, count=n)
        merged: dict[tuple[int, str, str], DiskIO] = {}
        for k, v in zip(keys, vals):
            pid, op, disk = int(k["tgid"]), abi.RS_OP_NAMES.get(int(k["op"]), "?"), self.disk_of(int(k["dev"]))
            if self.pcg is not None and not self.pcg.wanted(pid):
                continue
            d = merged.setdefault((pid, op, disk), DiskIO(pid, op, disk))
            d.app_bytes += int(v["app_bytes"])
            d.dev_bytes += int(v["dev_bytes"])
            d.ra_bytes += int(v["ra_bytes"])
            d.app_count += int(v["app_count"])
        return sorted(merged.values(), key=lambda d: (d.disk, d.op, d.pid))

    def disk_of(self, dev: int) -> str:
        """The whole disk of a kernel dev_t (a disk's or a partition's), else its major:minor."""
        if dev not in self._disk_of:
            self._disk_of = {d.dev: d.name for d in devices.list_disks()}
            self._disk_of.update({devices.kdev(p.major, p.minor): p.disk.name for p in devices.list_partitions()})
        return self._disk_of.get(dev) or devices.kdev_str(dev, ":")

    def losses(self, since_last: bool = True) -> Losses:
        """Values the programs could not record, since the last call (or since the start)."""
        return self.stats.read(since_last)

    def sample(self, tick: Tick) -> ReadsizeSample:
        wall = time.time()
        procs = self.read(reset=tick.reset)
        return ReadsizeSample(wall=wall, started=tick.started, procs=procs, requests=self.requests(reset=tick.reset),
                              losses=self.losses())

    def close(self) -> None:
        self.bpf.close()


__all__ = ["ReadsizeCollector", "ReadsizeOptions", "filter_devs", "syscall_numbers"]
