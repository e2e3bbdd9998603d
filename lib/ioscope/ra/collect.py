"""Collectors over bpf/readsize.bpf.c (readsize, fair) and bpf/readahead.bpf.c (readahead)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ioscope import abi as core_abi
from ioscope import devices
from ioscope.errors import IoscopeError
from ioscope.hist import Hist
from ioscope.loader import BPFObject
from ioscope.ra import abi


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
    m = machine or platform.machine()
    nrs = abi.SYSCALL_NRS.get(m)
    if nrs is None:
        raise IoscopeError(f"ioscope does not know the syscall numbers of {m}",
                           f"supported: {', '.join(abi.SYSCALL_NRS)}")
    return nrs


@dataclass
class ProcIO:
    """One process, one direction (read or write), over an interval."""

    pid: int
    comm: str
    op: str
    app_req: Hist    # sizes asked for
    app_ret: Hist    # sizes returned
    dev: Hist        # bios queued by the process
    app_errors: int = 0
    app_short: int = 0
    ra_count: int = 0
    ra_bytes: int = 0

    @property
    def app_bytes(self) -> int:
        """Bytes the syscalls returned to the application."""
        return self.app_ret.total

    @property
    def amplification(self) -> float | None:
        """Device bytes per application byte (None when the application got nothing)."""
        return self.dev.total / self.app_bytes if self.app_bytes else None

    @property
    def size_ratio(self) -> float | None:
        """Average device request size over average application request size."""
        if not self.dev.count or not self.app_req.count or not self.app_req.mean:
            return None
        return self.dev.mean / self.app_req.mean

    def merge(self, other: ProcIO) -> ProcIO:
        return ProcIO(self.pid, other.comm or self.comm, self.op, self.app_req.merge(other.app_req),
                      self.app_ret.merge(other.app_ret), self.dev.merge(other.dev),
                      self.app_errors + other.app_errors, self.app_short + other.app_short,
                      self.ra_count + other.ra_count, self.ra_bytes + other.ra_bytes)

    def to_json(self) -> dict[str, object]:
        amp, ratio = self.amplification, self.size_ratio
        return {
            "pid": self.pid, "comm": self.comm, "op": self.op,
            "app": {"count": self.app_req.count, "bytes": self.app_bytes, "req_bytes": self.app_req.total,
                    "buckets": [list(b) for b in self.app_req.nonzero_buckets()],
                    "ret_buckets": [list(b) for b in self.app_ret.nonzero_buckets()],
                    "errors": self.app_errors, "short": self.app_short},
            "dev": {"count": self.dev.count, "bytes": self.dev.total, "ra_count": self.ra_count,
                    "ra_bytes": self.ra_bytes, "buckets": [list(b) for b in self.dev.nonzero_buckets()]},
            "amplification": None if amp is None else round(amp, 4),
            "size_ratio": None if ratio is None else round(ratio, 4),
        }


@dataclass
class ReadsizeOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    comm: str | None = None
    writes: bool = False
    btf: str | None = None


def _comm_bytes(comm: str) -> bytes:
    b = comm.encode()[:15]
    return b + b"\0" * (16 - len(b))


class ReadsizeCollector:
    """Owns bpf/readsize.bpf.o; read() returns per-process I/O since the last reset."""

    def __init__(self, opts: ReadsizeOptions) -> None:
        self.opts = opts
        self.bpf = BPFObject("readsize", btf=opts.btf)
        self._last_stats = np.zeros(abi.RS_NR_STATS, dtype=np.uint64)
        self._last_misses = 0
        try:
            self._setup()
        except BaseException:
            self.bpf.close()
            raise

    def _setup(self) -> None:
        o, b = self.opts, self.bpf
        b.choose(required=["sys_enter", "sys_exit", "bio_queue"])
        for name, nr in syscall_numbers().items():
            b.set_global(f"nr_{name}", nr, "i")
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.set_global("targ_filter_dev", bool(o.disks), "?")
        b.set_global("targ_writes", o.writes, "?")
        if o.comm:
            b.set_global("targ_filter_comm", True, "?")
            b.obj.set_global("targ_comm", _comm_bytes(o.comm))
        b.load()
        filt = b.map("dev_filter")
        for d in o.disks:
            for dev in filter_devs(d):
                filt.update(np.uint32(dev).tobytes(), b"\x01")
        self.procs = b.map("procs")
        self.stats = b.map("stats")
        b.attach()

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def read(self, reset: bool) -> list[ProcIO]:
        kb, vb, n = self.procs.dump(sum=False, delete=reset)
        keys = np.frombuffer(kb, dtype=abi.RS_KEY, count=n)
        vals = np.frombuffer(vb, dtype=abi.RS_VAL, count=n)
        out = []
        for k, v in zip(keys, vals):
            req, ret, dev = (core_abi.hists_from_array(v[name].reshape(1))[0] for name in ("app_req", "app_ret", "dev"))
            out.append(ProcIO(
                pid=int(k["tgid"]), comm=bytes(v["comm"]).split(b"\0")[0].decode(errors="replace"),
                op=abi.RS_OP_NAMES.get(int(k["op"]), "?"), app_req=req, app_ret=ret, dev=dev,
                app_errors=int(v["app_errors"]), app_short=int(v["app_short"]),
                ra_count=int(v["ra_count"]), ra_bytes=int(v["ra_bytes"]),
            ))
        out.sort(key=lambda p: (p.op, -(p.dev.total + p.app_bytes), p.pid))
        return out

    def losses(self, since_last: bool) -> tuple[int, dict[str, int]]:
        """(values lost, every counter) since the last call (or since the start)."""
        _kb, vb, n = self.stats.dump(sum=True)
        cur = np.zeros(abi.RS_NR_STATS, dtype=np.uint64)
        vals = np.frombuffer(vb, dtype=np.uint64, count=n)
        cur[: len(vals)] = vals
        misses = self.bpf.recursion_misses()
        if since_last:
            delta, dmiss = cur - self._last_stats, misses - self._last_misses
            self._last_stats, self._last_misses = cur, misses
        else:
            delta, dmiss = cur, misses
        counters = {name: int(delta[i]) for i, name in abi.RS_STAT_NAMES.items()}
        counters["recursion_misses"] = dmiss
        lost = sum(int(delta[i]) for i in range(abi.RS_NR_LOST_STATS)) + dmiss
        return lost, counters

    def close(self) -> None:
        self.bpf.close()


def merge_procs(acc: dict[tuple[int, str], ProcIO], procs: list[ProcIO]) -> None:
    """Add an interval's per-process values into running totals keyed by (pid, op)."""
    for p in procs:
        key = (p.pid, p.op)
        acc[key] = acc[key].merge(p) if key in acc else p
