"""The readahead collector: bpf/readahead.bpf.o (with the files' names, as agg keeps them), sysfs
(read_ahead_kb, device names), read into one RaSample of totals since the start."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ioscope.base import devices
from ioscope.base.collector import Tick
from ioscope.base.errors import IoscopeError
from ioscope.base.hist import Hist
from ioscope.base.losses import StatsDelta
from ioscope.engines.aggregate import abi as agg_abi
from ioscope.engines.aggregate import names as agg_names
from ioscope.engines.procio import abi
from ioscope.engines.procio.collector import filter_devs
from ioscope.kernel import _libbpf
from ioscope.kernel import abi as core_abi
from ioscope.kernel.loader import BPFObject
from ioscope.tools.readahead.model import DevInfo, RaFile, RaSample

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
# hooks whose kernel function is the mechanism itself: no function, nothing to miss
RA_MECHANISM = {"ra_order": "page_cache_ra_order"}
RA_LOSSES = ("page_map_full", "file_map_full", "task_map_full")
RA_EXPLAIN = {"page_map_full": "pages beyond --max-pages, counted as untracked"}
RESOLVE_PATHS = 50
# pages one program run walks (bpf/readahead.bpf.c MAX_READ_PAGES; RA_LOOP_MAX without bpf_loop)
RANGE_MAX = {"readahead": 4096, "readahead_noloop": 32}


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


def block_device_names(sys_root: str = "/sys") -> dict[int, str]:
    """kernel dev_t -> name of every disk and partition."""
    out = {d.dev: d.name for d in devices.list_disks(sys_root)}
    out.update({devices.kdev(p.major, p.minor): p.name for p in devices.list_partitions(sys_root)})
    return out


def bdev_path(rdev: int, names: dict[int, str]) -> str:
    """The path of a block device read through its own page cache (dd if=/dev/sdb)."""
    if rdev in names:
        return f"/dev/{names[rdev]}"
    ma, mi = devices.kdev_split(rdev)
    return f"/dev/block/{ma}:{mi}"


def dev_info(dev: int) -> DevInfo:
    ma, mi = devices.kdev_split(dev)
    try:
        disk = devices.resolve_disk(f"{ma}:{mi}")
    except IoscopeError:  # an anonymous device (btrfs, overlay, tmpfs): no queue settings
        return DevInfo(None, None)
    ra = devices.queue_settings(disk.name).get("read_ahead_kb")
    return DevInfo(disk.name, ra if isinstance(ra, int) else None)


class ReadaheadCollector:
    """Owns bpf/readahead.bpf.o; read() returns cumulative readahead accounting."""

    def __init__(self, opts: ReadaheadOptions) -> None:
        self.opts = opts
        # without bpf_loop (5.10) the object whose loops are bounded (and shorter)
        self.object = "readahead" if _libbpf.probe_helper("loop") else "readahead_noloop"
        self.bpf = BPFObject(self.object, btf=opts.btf)
        # file key (dev, ino) -> (the disk it is on, its name): a block device's own page cache is
        # keyed by the kernel's bdev pseudo file system, its disk is the device itself
        self.keys: dict[tuple[int, int], tuple[int, str]] = {}
        self.comms: dict[int, str] = {}
        self._mounts: dict[int, str] = {}
        self._bdev_names: dict[int, str] = {}
        with self.bpf.closed_on_error():
            self._setup()
        self.started = time.time()  # the totals count from here

    def _setup(self) -> None:
        o, b = self.opts, self.bpf
        b.choose(required=[], optional=list(RA_HOOKS))
        chosen = {h for h in RA_HOOKS if b.hooks[h].chosen}
        if not chosen & {"sync_ra", "async_ra", "ra_order", "ra_unbounded"}:
            why = b.absent(b.hooks["sync_ra"])
            raise IoscopeError(f"readahead cannot be traced here: {why}",
                               "it needs the readahead tracepoints (Linux 6.18 has them, 6.12 not) or fentry "
                               "on the kernel's readahead functions (refused under lockdown)")
        # a kernel without page_cache_ra_order (before large folios in the page cache) lacks nothing
        self.missing = [f"{RA_HOOK_NUMBERS[h]}: unavailable" for h in RA_HOOKS if h not in chosen
                        and not (h in RA_MECHANISM and b.func_param_types(RA_MECHANISM[h]) is None)]
        # hooks that run on the kernel function their tracepoint would sit in
        self.functions = {h: fn for h in RA_HOOKS if (fn := b.chosen_function(h))}
        self._set_signatures()
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.filter_disks(dev for d in o.disks for dev in filter_devs(d))
        b.set_max_entries("pages", o.max_pages)
        b.load()
        self.files = b.map("files")
        self.pages = b.map("pages")
        self.hists = b.map("hists")
        self.comm_map = b.map("comms")
        self.bdevs = b.map("bdevs")
        self.names = b.map("names")
        self.stats = StatsDelta(b, b.map("stats"), abi.RA_STAT_NAMES, abi.RA_NR_STATS, RA_LOSSES, RA_EXPLAIN)
        b.attach()

    def _set_signatures(self) -> None:
        """The fentry program for each function's arguments on this kernel (its BTF prototype)."""
        b = self.bpf
        for hook in ("sync_ra", "async_ra"):
            fn = self.functions.get(hook)
            params = b.func_param_types(fn) or [] if fn else []
            if len(params) > 1 and params[1] == "struct file_ra_state *":  # 5.10: the state is an argument
                b.use_function(hook, f"fn_{hook}__ra")
        if self.functions.get("get_pages") == "filemap_get_pages":
            params = b.func_param_types("filemap_get_pages") or []
            if len(params) > 1 and params[1] != "struct iov_iter *":  # (iocb, count, fbatch, need_uptodate)
                b.use_function("get_pages", "fn_get_pages__count")

    @property
    def range_max(self) -> int:
        """Pages of one read range checked for use; more counts as read_range_truncated."""
        return RANGE_MAX[self.object]

    @property
    def unavailable(self) -> list[str]:
        """What each missing tracepoint costs (one line each; the report's "unavailable" too)."""
        return self.missing

    def _mount(self, dev: int) -> str | None:
        if dev not in self._mounts:
            self._mounts = agg_names.mount_points()
        return self._mounts.get(dev)

    def _key(self, dev: int, ino: int, pid: int, busiest: bool) -> tuple[int, str | None]:
        """The disk of a file key and the file's name: /dev/NAME for a block device's own page cache,
        the path agg gives its file key (names map), else the reader's fd table, else
        '<mount point> ino N'."""
        if (dev, ino) in self.keys:
            return self.keys[(dev, ino)]
        key = np.array([(ino, dev, 0)], dtype=abi.RA_FILE).tobytes()
        raw = self.bdevs.lookup(key)
        if raw is not None:
            rdev = int(np.frombuffer(raw, dtype=np.uint32)[0])
            if rdev not in self._bdev_names:
                self._bdev_names = block_device_names()
            self.keys[(dev, ino)] = (rdev, bdev_path(rdev, self._bdev_names))
            return self.keys[(dev, ino)]
        raw = self.names.lookup(key)
        if raw is not None:
            rec = np.frombuffer(raw, dtype=agg_abi.FILE)[0]
            if int(rec["depth"]) and self._mount(dev) is not None:
                self.keys[(dev, ino)] = (dev, agg_names.file_path(rec, self._mounts))
                return self.keys[(dev, ino)]
        # no name kept (names map full, no dentry, file system not mounted here)
        path = resolve_path(pid, dev, ino) if busiest else None
        if path:
            self.keys[(dev, ino)] = (dev, path)
            return self.keys[(dev, ino)]
        mnt = self._mount(dev)
        return dev, f"{mnt} ino {ino}" if mnt else None

    def sample(self, tick: Tick | None = None) -> RaSample:
        """Totals since the start (the report is cumulative: readahead's pages live longer than an interval)."""
        wall = time.time()
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
        self.comms.update(core_abi.comms_from_dump(*self.comm_map.dump()))
        files = []
        # files without a kept name are looked up in the reader's fd table, the busiest only
        order = np.argsort(-vals["pages"].astype(np.int64), kind="stable") if n else np.zeros(0, dtype=np.int64)
        busiest = {int(j) for j in order[:RESOLVE_PATHS]}
        for j, (k, v) in enumerate(zip(keys, vals)):
            dev, ino, pid = int(k["dev"]), int(k["ino"]), int(k["tgid"])
            disk, path = self._key(dev, ino, pid, j in busiest)
            files.append(RaFile(
                pid=pid, comm=self.comms.get(pid, "?"), dev=disk, ino=ino,
                decisions={abi.RA_KIND_NAMES[i]: int(v["decisions"][i]) for i in range(abi.RA_NR_KINDS)},
                window_pages={abi.RA_KIND_NAMES[i]: int(v["window_pages"][i]) for i in range(abi.RA_NR_KINDS)},
                max_ra_pages=int(v["max_ra_pages"]), max_window=int(v["max_window"]), pages=int(v["pages"]),
                used=int(v["used"]), wasted=int(v["wasted"]), cached=cached.get((dev, ino, pid), 0),
                untracked=int(v["untracked"]), path=path,
            ))
        return RaSample(wall=wall, started=self.started, files=files, hists=hists,
                        losses=self.stats.read(since_last=False),
                        devices={dev: dev_info(dev) for dev in sorted({f.dev for f in files})},
                        missing=list(self.missing), functions=dict(self.functions), range_max=self.range_max)

    def close(self) -> None:
        self.bpf.close()


__all__ = ["RA_HOOKS", "RA_HOOK_NUMBERS", "ReadaheadCollector", "ReadaheadOptions", "bdev_path",
           "block_device_names", "group_cached", "resolve_path"]
