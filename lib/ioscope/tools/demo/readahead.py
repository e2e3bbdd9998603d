"""`ioscope demo readahead`: the study's case (N sequential readers, small vs very large readahead) on a loop device.

Builds ext4 on a tmpfs-backed loop device with N files, then for each
read_ahead_kb setting drops the page cache and runs N concurrent buffered
readers, each reading its own file sequentially with 32 KiB reads for a fixed
time (at the end of its file a reader drops the file from the cache and starts
again, so every byte keeps coming from the device). ioscope readsize and
readahead are attached for the whole run; fair's balance is computed from
readsize's per-process bytes. Each reader (ioscope.tools.demo.reader, a process of
its own) also counts its own bytes: that is printed beside what ioscope measured.

A product demo, not a test harness: collect (run_setting) -> the tools' own pure
models (build_result) -> text or JSON (render, to_json). The live test
tests/test_ra_scenario.py checks its JSON against the readers' counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ioscope.base.collector import Tick
from ioscope.base.errors import IoscopeError
from ioscope.tools import common

if TYPE_CHECKING:  # the collectors (numpy, the BPF loader) are imported when the demo runs, not for --help
    from ioscope.base.fairness import Balance
    from ioscope.base.testbed import LoopFS
    from ioscope.engines.procio.model import ReadsizeReport, ReadsizeSample
    from ioscope.tools.fair.model import DiskState
    from ioscope.tools.readahead.model import RaReport

READ_SIZE = 32 * 1024
PAGE = 4096


@dataclass
class ReaderRate:
    """One reader: what ioscope saw it get and queue, beside what it counted itself."""

    pid: int
    counted: int     # bytes the reader counted itself
    read: int        # bytes readsize saw returned to it
    dev_read: int    # block read bytes it queued


@dataclass
class SettingResult:
    """One read_ahead_kb setting: the tools' reports and what the demo derives from them."""

    read_ahead_kb: int
    seconds: float
    settings: dict[str, object]   # the loop device's queue settings (sysfs)
    disk_read_bytes: int          # /proc/diskstats over the run
    readsize: ReadsizeReport      # the readers only
    readahead: RaReport
    readers: list[ReaderRate]     # the most bytes first
    silent: list[int]             # readers readsize saw nothing of
    balance: Balance | None       # fair's balance over the readers' bytes
    disk: DiskState | None = None
    causes: list[str] | None = None
    # readsize over all readers
    app_reads: int = 0
    app_bytes: int = 0
    dev_bios: int = 0
    dev_bytes: int = 0
    ra_bytes: int = 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("readahead scenario")
    g.add_argument("--readers", type=common.positive_int, default=16,
                   help="concurrent readers, one file each (default 16)")
    g.add_argument("--file-mb", type=common.positive_int, default=32, help="size of each file (default 32)")
    g.add_argument("--small-kb", type=common.positive_int, default=512,
                   help="the small read_ahead_kb (default 512, the study's good setting)")
    g.add_argument("--large-kb", type=common.positive_int, default=12288,
                   help="the very large read_ahead_kb (default 12288, the study's 12 MiB)")
    g.add_argument("--limit-mbs", type=float, default=400.0,
                   help="make the device the bottleneck, as the study's HBA was: all readers share one blkio "
                        "cgroup limited to this many MiB/s on the loop device (default 400; 0 = no limit, the "
                        "tmpfs-backed loop device is then CPU-bound)")
    g.add_argument("--max-kb", type=common.positive_int, default=512,
                   help="max_sectors_kb of the loop device, the largest request (default 512, the study's "
                        "maximum I/O size)")
    g.add_argument("--memory-mb", type=int, default=0,
                   help="also put the readers in one memory cgroup of this size (page cache included), "
                        "to see readahead against memory (default 0 = no limit)")
    g.add_argument("--json", action="store_true", help="one JSON object per setting instead of text")


class SharedLimit:
    """cgroups every reader joins: a shared read bandwidth limit on one device (blkio v1, else io.max on
    v2) and, optionally, a shared memory limit (memory v1, else memory.max on v2)."""

    def __init__(self, majmin: str, bps: int, memory_bytes: int = 0) -> None:
        self.paths: list[str] = []
        name = f"ioscope-demo-{os.getpid()}"
        v1 = "/sys/fs/cgroup"
        v2 = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
        try:
            if bps:
                if os.path.isfile(f"{v1}/blkio/blkio.throttle.read_bps_device"):
                    self._make(f"{v1}/blkio/{name}", "blkio.throttle.read_bps_device", f"{majmin} {bps}")
                elif "io" in self._controllers(v2):
                    self._make(f"{v2}/{name}", "io.max", f"{majmin} rbps={bps}")
                else:
                    raise IoscopeError("no blkio cgroup controller to limit the device with", "use --limit-mbs 0")
            if memory_bytes:
                if os.path.isfile(f"{v1}/memory/memory.limit_in_bytes"):
                    self._make(f"{v1}/memory/{name}", "memory.limit_in_bytes", str(memory_bytes))
                elif "memory" in self._controllers(v2):
                    self._make(f"{v2}/{name}", "memory.max", str(memory_bytes))
                else:
                    raise IoscopeError("no memory cgroup controller to limit the readers with", "use --memory-mb 0")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _controllers(v2: str) -> list[str]:
        try:
            return Path(v2, "cgroup.subtree_control").read_text().split()
        except OSError:
            return []

    def _make(self, path: str, knob: str, value: str) -> None:
        if path not in self.paths:
            os.mkdir(path)
            self.paths.append(path)
        try:
            Path(path, knob).write_text(value)
        except OSError as exc:
            raise IoscopeError(f"cannot set {knob}={value} in {path}: {exc.strerror}") from None

    def wrap(self, cmd: list[str]) -> list[str]:
        """cmd run inside the cgroups (the shell moves itself in, then execs cmd under the same pid)."""
        moves = " && ".join(f"echo $$ > {p}/cgroup.procs" for p in self.paths)
        return ["sh", "-c", f'{moves} && exec "$@"', "sh", *cmd]

    def close(self) -> None:
        for path in reversed(self.paths):
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        self.paths = []


def run_setting(fs: LoopFS, files: list[str], ra_kb: int, seconds: float, btf: str | None,
                limit: SharedLimit | None = None) -> SettingResult:
    """Collect: the readers run with readsize and readahead attached to the loop device."""
    from ioscope.base import devices
    from ioscope.base.testbed import drop_caches
    from ioscope.engines.procio.collector import ReadsizeCollector, ReadsizeOptions
    from ioscope.tools.readahead.collector import ReadaheadCollector, ReadaheadOptions
    from ioscope.tools.readahead.model import build_report as ra_report

    fs.set_read_ahead_kb(ra_kb)
    drop_caches()
    disk = fs.loop.device
    rs = ReadsizeCollector(ReadsizeOptions(disks=[disk], btf=btf))
    try:
        ra = ReadaheadCollector(ReadaheadOptions(disks=[disk], btf=btf))
    except BaseException:
        rs.close()
        raise
    try:
        before = devices.read_diskstats()
        t0 = time.time()
        start = t0 + 0.3
        stop = start + seconds
        cmds = [[sys.executable, "-m", "ioscope.tools.demo.reader", f, str(READ_SIZE), str(start), str(stop)]
                for f in files]
        procs = [subprocess.Popen(limit.wrap(c) if limit else c, stdout=subprocess.PIPE, text=True) for c in cmds]
        counted: dict[int, int] = {}
        for p in procs:
            out, _ = p.communicate(timeout=seconds + 60)
            counted[p.pid] = int(out.strip() or 0)
        after = devices.read_diskstats()
        rs_sample = rs.sample(Tick(t0))
        ra_sample = ra.sample(Tick(t0))
    finally:
        ra.close()
        rs.close()
    return build_result(ra_kb, seconds, counted, rs_sample, ra_report(ra_sample), before, after, fs.name,
                        devices.queue_settings(fs.name))


def build_result(ra_kb: int, seconds: float, counted: dict[int, int], rs_sample: ReadsizeSample, ra: RaReport,
                 before: dict[str, Any], after: dict[str, Any], disk: str,
                 settings: dict[str, object]) -> SettingResult:
    """Pure: the tools' models over what run_setting collected (fair's balance over the readers' bytes)."""
    from ioscope.engines.procio.model import build_report
    from ioscope.tools.fair.model import balances, disk_states, likely_causes, per_process

    rs_sample.procs = [x for x in rs_sample.procs if x.pid in counted]  # the readers only
    rs = build_report(rs_sample)
    rates = per_process(rs.procs)
    bal = balances(rates, "app", 0.0).get("read")
    dstate = disk_states(before, after, [disk], seconds, {disk: settings})
    causes = likely_causes(rates, bal.balance, bal.pids, dstate, "read", "app") if bal and bal.poor else None
    readers = sorted((ReaderRate(pid, own, rates[pid].read if pid in rates else 0,
                                 rates[pid].dev_read if pid in rates else 0) for pid, own in counted.items()),
                     key=lambda x: (-x.read, x.pid))
    reads = [p for p in rs.procs if p.op == "read"]
    return SettingResult(
        read_ahead_kb=ra_kb, seconds=seconds, settings=settings,
        disk_read_bytes=(after[disk].sectors_read - before[disk].sectors_read) * 512,
        readsize=rs, readahead=ra, readers=readers, silent=[pid for pid in counted if pid not in rates],
        balance=bal.balance if bal else None, disk=dstate[0] if dstate else None, causes=causes,
        app_reads=sum(p.app_req.count for p in reads), app_bytes=sum(p.app_bytes for p in reads),
        dev_bios=sum(p.dev.count for p in reads), dev_bytes=sum(p.dev.total for p in reads),
        ra_bytes=sum(p.ra_bytes for p in reads),
    )


def _mbs(b: float, seconds: float) -> str:
    return f"{b / seconds / (1 << 20):6.1f} MiB/s"


def render(r: SettingResult, n: int) -> list[str]:
    from ioscope.base.fmt import fmt_bytes
    from ioscope.tools.readsize.view import request_lines

    sec = r.seconds
    s = r.settings
    out = [f"== read_ahead_kb={r.read_ahead_kb}: {n} readers, {READ_SIZE // 1024} KiB sequential buffered reads, "
           f"{sec:g}s (scheduler {s.get('scheduler')}, nr_requests {s.get('nr_requests')}, "
           f"max_sectors_kb {s.get('max_sectors_kb')})"]
    app_avg = r.app_bytes / r.app_reads if r.app_reads else 0.0
    dev_avg = r.dev_bytes / r.dev_bios if r.dev_bios else 0.0
    out.append("readsize (all readers):")
    out.append(f"  application: {r.app_reads} reads, avg {fmt_bytes(app_avg)}B, {fmt_bytes(r.app_bytes)}B returned")
    out.append(f"  device:      {r.dev_bios} bios, avg {fmt_bytes(dev_avg)}B, {fmt_bytes(r.dev_bytes)}B "
               f"({100.0 * r.ra_bytes / r.dev_bytes if r.dev_bytes else 0:.0f}% readahead); /proc/diskstats read "
               f"{fmt_bytes(r.disk_read_bytes)}B")
    out += ["  " + line for line in request_lines(r.readsize.requests)]
    if app_avg:
        out.append(f"  each {fmt_bytes(app_avg)}B read became device I/O of {fmt_bytes(dev_avg)}B on average "
                   f"({dev_avg / app_avg:.1f}x); amplification {r.dev_bytes / r.app_bytes if r.app_bytes else 0:.2f}")
    ra = r.readahead
    t, dec = ra.totals, ra.decisions
    wmax = max((f.max_window for f in ra.files), default=0)
    rmax = max((f.max_ra_pages for f in ra.files), default=0)
    out.append("readahead:")
    out.append(f"  decisions sync {dec['sync']}, async {dec['async']}; ra_pages {rmax} ({rmax * PAGE // 1024} KiB); "
               f"largest window {wmax} pages ({wmax * PAGE // 1024} KiB)")
    out.append(f"  pages read ahead {t['pages']}: used {t['used']}, wasted {t['wasted']}, still cached unused "
               f"{t['cached']}, untracked {t['untracked']}")
    out.append("fair (bytes returned to each reader; the reader's own count beside):")
    for i, pr in enumerate([x for x in r.readers if x.pid not in r.silent], 1):
        out.append(f"  reader {i:2d} pid {pr.pid:>7}: {_mbs(pr.read, sec)}  device {_mbs(pr.dev_read, sec)}  "
                   f"(counted itself: {_mbs(pr.counted, sec)})")
    if r.silent:
        out.append(f"  {len(r.silent)} readers read nothing: {r.silent}")
    b = r.balance
    if b:
        out.append(f"  total {_mbs(b.total, sec)}; min {_mbs(b.min, sec)} max {_mbs(b.max, sec)} "
                   f"mean {_mbs(b.mean, sec)}; cv {b.cv:.2f}; max/min {b.max_min:.2f}; Jain {b.jain:.3f}"
                   f"{'  POOR' if b.poor else ''}")
    if r.disk:
        out.append(f"  {r.disk.name} busy {r.disk.util:.0%} during the run")
    if r.causes:
        out.append("  likely causes (as ioscope fair reports them):")
        out += [f"  - {c}" for c in r.causes]
    return out


def to_json(r: SettingResult) -> dict[str, object]:
    from ioscope.tools.fair.view import balance_json, disk_json
    from ioscope.tools.readahead.view import file_json
    from ioscope.tools.readsize.view import proc_json, request_json

    return {
        "read_ahead_kb": r.read_ahead_kb, "seconds": r.seconds, "device": r.settings,
        "disk_read_bytes": r.disk_read_bytes,
        "readers": [{"pid": x.pid, "counted_bytes": x.counted, "read_bytes": x.read, "dev_read_bytes": x.dev_read}
                    for x in sorted(r.readers, key=lambda x: x.pid)],
        **r.readsize.losses.to_json(),
        "procs": [proc_json(p) for p in r.readsize.procs],
        "requests": [request_json(q) for q in r.readsize.requests],
        "readahead": {"totals": r.readahead.totals, "files": [file_json(f) for f in r.readahead.files],
                      **r.readahead.losses.to_json()},
        "balance": balance_json(r.balance) if r.balance else None,
        "disk": disk_json(r.disk) if r.disk else None, "causes": r.causes,
    }


def run(args: argparse.Namespace) -> int:
    from ioscope.base import system
    from ioscope.base.testbed import LoopFS

    system.require_bpf_privileges("demo")
    btf = system.btf_path(args.btf)
    n, file_mb = args.readers, args.file_mb
    out = common.console()
    size_mb = n * file_mb + 64 + n
    with LoopFS(size_mb=size_mb, scheduler=args.scheduler) as fs:
        if not args.json:
            out.print(f"ioscope demo readahead: ext4 on {fs.loop.path} ({size_mb} MiB, tmpfs-backed), "
                      f"{n} files of {file_mb} MiB", highlight=False)
        fs.loop.set_queue("max_sectors_kb", str(args.max_kb))
        files = [fs.make_file(f"file{i + 1}", file_mb << 20) for i in range(n)]
        results = []
        bps = int(args.limit_mbs * (1 << 20)) if args.limit_mbs > 0 else 0
        mem = args.memory_mb << 20 if args.memory_mb > 0 else 0
        limit = SharedLimit(fs.loop.device.majmin, bps, mem) if bps or mem else None
        if bps and not args.json:
            out.print(f"all readers share one blkio cgroup limited to {args.limit_mbs:g} MiB/s of reads on "
                      f"{fs.name}: the device is the bottleneck, as the study's HBA was", highlight=False)
        if mem and not args.json:
            out.print(f"all readers share one memory cgroup of {args.memory_mb} MiB (page cache included)",
                      highlight=False)
        try:
            for kb in (args.small_kb, args.large_kb):
                results.append(run_setting(fs, files, kb, args.seconds, btf, limit))
        finally:
            if limit:
                limit.close()
        for r in results:
            if args.json:
                print(json.dumps(to_json(r)), flush=True)
            else:
                for line in render(r, n):
                    out.print(line, highlight=False)
                out.print()
    if not args.json:
        out.print("summary:", highlight=False)
        for r in results:
            b = r.balance
            if b:
                out.print(f"  read_ahead_kb={r.read_ahead_kb:>6}: total {_mbs(b.total, r.seconds)}, "
                          f"per reader {_mbs(b.min, r.seconds)} .. {_mbs(b.max, r.seconds)}, Jain {b.jain:.3f}",
                          highlight=False)
        out.print(f"removed {fs.name}, its file system and backing file.", highlight=False)
    return 0


__all__ = ["SettingResult", "add_arguments", "build_result", "render", "run", "run_setting", "to_json"]
