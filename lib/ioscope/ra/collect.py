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
class DevRequests:
    disk: str
    op: str
    sizes: Hist

    def to_json(self) -> dict[str, object]:
        return {"disk": self.disk, "op": self.op, "count": self.sizes.count, "bytes": self.sizes.total,
                "buckets": [list(b) for b in self.sizes.nonzero_buckets()]}


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


def _need_kfunc(b: BPFObject, kfunc: str, hooks: list[str], force: bool = False) -> None:
    """tp_btf variants of these hooks call kfunc: without it in the kernel (before 6.2), use raw_tp."""
    import ioscope._libbpf as _libbpf

    if not force and _libbpf.has_type(kfunc, "func", b.btf):
        return
    for name in hooks:
        h = b.hooks[name]
        if h.chosen == "tp_btf" and "raw_tp" in h.variants:
            b.obj.set_autoload(h.variants["tp_btf"], False)
            b.obj.set_autoload(h.variants["raw_tp"], True)
            h.chosen = "raw_tp"


class ReadsizeCollector:
    """Owns bpf/readsize.bpf.o; read() returns per-process I/O since the last reset."""

    def __init__(self, opts: ReadsizeOptions) -> None:
        self.opts = opts
        self._last_stats = np.zeros(abi.RS_NR_STATS, dtype=np.uint64)
        self._last_misses = 0
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
        b.choose(required=[*syscalls, "bio_queue"], optional=["sync_ra", "async_ra", "rq_issue", "task_rename"])
        _need_kfunc(b, "bpf_rdonly_cast", syscalls, force_raw)
        self._syscalls_on_btf = any(b.hooks[h].chosen == "tp_btf" for h in syscalls)
        if any("page_cache" in u for u in b.unavailable):
            b.unavailable.append("read bios queued by kernel threads (blk-throttle, ...) stay with the thread")
        for name, nr in syscall_numbers().items():
            b.set_global(f"nr_{name}", nr, "i")
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.filter_disks(dev for d in o.disks for dev in filter_devs(d))
        b.set_global("targ_writes", o.writes, "?")
        if o.comm:
            b.set_global("targ_filter_comm", True, "?")
            b.obj.set_global("targ_comm", _comm_bytes(o.comm))
        b.load()
        self.procs = b.map("procs")
        self.stats = b.map("stats")
        self.rq_sizes = b.map("rq_sizes")
        self.names = devices.DevNames()
        b.attach()

    def requests(self, reset: bool) -> list[DevRequests]:
        """Request sizes as issued to the driver, per disk and direction."""
        kb, vb, n = self.rq_sizes.dump(sum=False, delete=reset)
        keys = np.frombuffer(kb, dtype=abi.RS_RQ_KEY, count=n)
        hists = core_abi.hists_from_array(np.frombuffer(vb, dtype=core_abi.HIST, count=n))
        out = [DevRequests(self.names.name(int(k["dev"])), abi.RS_OP_NAMES.get(int(k["op"]), "?"), h)
               for k, h in zip(keys, hists)]
        out.sort(key=lambda r: (r.disk, r.op))
        return out

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


# -- readahead --------------------------------------------------------------

RA_HOOKS = ("sync_ra", "async_ra", "ra_order", "ra_unbounded", "get_pages", "fault", "map_pages", "add_page",
            "delete_page", "task_rename")
# what each hook's absence costs
RA_HOOK_NUMBERS = {
    "sync_ra": "sync decisions",
    "async_ra": "async decisions",
    "ra_order": "window sizes of large-folio readahead (and the pages it adds)",
    "ra_unbounded": "window sizes of order-0 and forced readahead (and the pages it adds)",
    "get_pages": "used pages and age at first use (every page read ahead will look unused)",
    "fault": "used pages of memory-mapped files (faults)",
    "map_pages": "used pages of memory-mapped files (fault-around)",
    "add_page": "pages read ahead, used, wasted and still cached",
    "delete_page": "wasted pages (evicted pages will look still cached)",
    "task_rename": "process names that follow exec and renames (names are taken at the first I/O)",
}


@dataclass
class RaFile:
    """Readahead on one file by one process (cumulative since the start)."""

    pid: int
    comm: str
    dev: int
    ino: int
    decisions: dict[str, int]
    window_pages: dict[str, int]
    max_ra_pages: int
    max_window: int
    pages: int
    used: int
    wasted: int
    cached: int
    untracked: int
    path: str | None = None

    @property
    def efficiency(self) -> float | None:
        return self.used / self.pages if self.pages else None

    def to_json(self) -> dict[str, object]:
        ma, mi = devices.kdev_split(self.dev)
        eff = self.efficiency
        return {"pid": self.pid, "comm": self.comm, "dev": f"{ma}:{mi}", "ino": self.ino, "path": self.path,
                "decisions": self.decisions, "window_pages": self.window_pages, "max_ra_pages": self.max_ra_pages,
                "max_window": self.max_window, "pages": self.pages, "used": self.used, "wasted": self.wasted,
                "cached": self.cached, "untracked": self.untracked,
                "efficiency": None if eff is None else round(eff, 4)}


@dataclass
class RaSnapshot:
    files: list[RaFile]
    hists: list[Hist]        # indexed by abi.RA_H_*
    lost: int
    counters: dict[str, int]

    def window_hist(self, kind: int, what: int) -> Hist:
        return self.hists[kind * abi.RA_H_PER_KIND + what]

    @property
    def age(self) -> Hist:
        return self.hists[abi.RA_H_AGE]

    def totals(self) -> dict[str, int]:
        keys = ("pages", "used", "wasted", "cached", "untracked")
        return {k: sum(int(getattr(f, k)) for f in self.files) for k in keys}


@dataclass
class ReadaheadOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    max_pages: int = 262144
    btf: str | None = None


def group_cached(keys: np.ndarray, vals: np.ndarray) -> dict[tuple[int, int, int], int]:
    """Pages still tracked, counted per (dev, ino, tgid)."""
    if not len(keys):
        return {}
    rec = np.zeros(len(keys), dtype=[("dev", np.uint32), ("ino", np.uint64), ("tgid", np.uint32)])
    rec["dev"], rec["ino"], rec["tgid"] = keys["dev"], keys["ino"], vals["tgid"]
    uniq, counts = np.unique(rec, return_counts=True)
    return {(int(u["dev"]), int(u["ino"]), int(u["tgid"])): int(c) for u, c in zip(uniq, counts)}


def resolve_path(pid: int, dev: int, ino: int, proc_root: str = "/proc") -> str | None:
    """The path of (dev, ino) if process pid has it open (the cheap way: its fd table)."""
    ma, mi = devices.kdev_split(dev)
    want = (os.makedev(ma, mi), ino)
    base = Path(proc_root) / str(pid) / "fd"
    try:
        fds = os.listdir(base)
    except OSError:
        return None
    for fd in fds:
        try:
            st = os.stat(base / fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == want:
            try:
                return os.readlink(base / fd)
            except OSError:
                return None
    return None


def mountpoints(proc_root: str = "/proc") -> dict[int, str]:
    """kernel dev_t of each mounted filesystem -> its first mount point (from mountinfo)."""
    out: dict[int, str] = {}
    try:
        lines = Path(proc_root, "self", "mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 5 or ":" not in parts[2]:
            continue
        ma, mi = parts[2].split(":")
        try:
            dev = devices.kdev(int(ma), int(mi))
        except ValueError:
            continue
        out.setdefault(dev, parts[4].replace("\\040", " "))
    return out


RESOLVE_PATHS = 50


class ReadaheadCollector:
    """Owns bpf/readahead.bpf.o; read() returns cumulative readahead accounting."""

    def __init__(self, opts: ReadaheadOptions) -> None:
        self.opts = opts
        self.bpf = BPFObject("readahead", btf=opts.btf)
        self.paths: dict[tuple[int, int], str] = {}
        self.comms: dict[int, str] = {}
        self._mounts: dict[int, str] = {}
        try:
            self._setup()
        except BaseException:
            self.bpf.close()
            raise

    def _setup(self) -> None:
        o, b = self.opts, self.bpf
        b.choose(required=[], optional=list(RA_HOOKS))
        chosen = {h for h in RA_HOOKS if b.hooks[h].chosen}
        if not chosen & {"sync_ra", "async_ra", "ra_order", "ra_unbounded"}:
            raise IoscopeError("this kernel has none of the readahead tracepoints (page_cache_sync_ra, ...)",
                               "they arrived in Linux 6.10; readahead accounting needs them")
        self.missing = [f"{RA_HOOK_NUMBERS[h]}: unavailable" for h in RA_HOOKS if h not in chosen]
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.filter_disks(dev for d in o.disks for dev in filter_devs(d))
        b.set_max_entries("pages", o.max_pages)
        b.load()
        self.files = b.map("files")
        self.pages = b.map("pages")
        self.hists = b.map("hists")
        self.comm_map = b.map("comms")
        self.stats = b.map("stats")
        b.attach()

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def _mount_name(self, dev: int, ino: int) -> str | None:
        """'<mount point> inode N' when the file is not open any more."""
        mnt = self._mounts.get(dev)
        if mnt is None:
            self._mounts = mountpoints()
            mnt = self._mounts.get(dev)
        return f"{mnt} ino {ino}" if mnt else None

    def _comms(self) -> None:
        kb, vb, n = self.comm_map.dump()
        pids = np.frombuffer(kb, dtype=np.uint32, count=n)
        raw = np.frombuffer(vb, dtype="S16", count=n)
        for p, c in zip(pids, raw):
            self.comms[int(p)] = bytes(c).split(b"\0")[0].decode(errors="replace")

    def read(self) -> RaSnapshot:
        kb, vb, n = self.files.dump(sum=False)
        keys = np.frombuffer(kb, dtype=abi.RA_KEY, count=n)
        vals = np.frombuffer(vb, dtype=abi.RA_STATS, count=n)
        # the histograms right after the counters, the page map (larger, slower) last: while
        # readahead goes on, only pages used during this read can be off by one state
        hk, hv, hn = self.hists.dump(sum=False)
        idx = np.frombuffer(hk, dtype=np.uint32, count=hn)
        harr = np.frombuffer(hv, dtype=core_abi.HIST, count=hn)
        hists = [Hist() for _ in range(abi.RA_NR_HISTS)]
        for i, h in zip(idx, core_abi.hists_from_array(harr)):
            if int(i) < abi.RA_NR_HISTS:
                hists[int(i)] = h
        pk, pv, pn = self.pages.dump(sum=False)
        cached = group_cached(np.frombuffer(pk, dtype=abi.RA_PAGE_KEY, count=pn),
                              np.frombuffer(pv, dtype=abi.RA_PAGE, count=pn))
        self._comms()
        files = []
        # paths are looked up (in the reader's fd table) for the files with most pages only
        order = np.argsort(-vals["pages"].astype(np.int64), kind="stable") if n else np.zeros(0, dtype=np.int64)
        busiest = {int(j) for j in order[:RESOLVE_PATHS]}
        for j, (k, v) in enumerate(zip(keys, vals)):
            dev, ino, pid = int(k["dev"]), int(k["ino"]), int(k["tgid"])
            if (dev, ino) not in self.paths and j in busiest:
                path = resolve_path(pid, dev, ino)
                if path:
                    self.paths[(dev, ino)] = path
            files.append(RaFile(
                pid=pid, comm=self.comms.get(pid, "?"), dev=dev, ino=ino,
                decisions={abi.RA_KIND_NAMES[i]: int(v["decisions"][i]) for i in range(abi.RA_NR_KINDS)},
                window_pages={abi.RA_KIND_NAMES[i]: int(v["window_pages"][i]) for i in range(abi.RA_NR_KINDS)},
                max_ra_pages=int(v["max_ra_pages"]), max_window=int(v["max_window"]), pages=int(v["pages"]),
                used=int(v["used"]), wasted=int(v["wasted"]), cached=cached.get((dev, ino, pid), 0),
                untracked=int(v["untracked"]), path=self.paths.get((dev, ino)) or self._mount_name(dev, ino),
            ))
        files.sort(key=lambda f: (-f.pages, f.pid, f.dev, f.ino))
        _sk, sv, sn = self.stats.dump(sum=True)
        svals = np.frombuffer(sv, dtype=np.uint64, count=sn)
        counters = {name: int(svals[i]) for i, name in abi.RA_STAT_NAMES.items() if i < sn}
        counters["recursion_misses"] = self.bpf.recursion_misses()
        lost = counters.get("page_map_full", 0) + counters.get("file_map_full", 0) + \
            counters.get("task_map_full", 0) + counters["recursion_misses"]
        return RaSnapshot(files, hists, lost, counters)

    def close(self) -> None:
        self.bpf.close()
