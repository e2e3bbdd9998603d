"""ioscope top: which disk is busy, who does the I/O, how slow it is; refreshed every interval."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ioscope.base import live
from ioscope.base.collector import Tick
from ioscope.base.errors import UsageError
from ioscope.tools import common
from ioscope.tools.top import PROC_SORT_KEYS

if TYPE_CHECKING:  # the collector, model and views (numpy, the BPF loader) are imported when top runs
    from ioscope.tools.top.collector import TopCollector
    from ioscope.tools.top.model import Sample, Snapshot

EXAMPLES = """\
examples:
  ioscope top                  # the live screen, refreshed every second (q quits, ? shows the keys)
  ioscope top 2                # refresh every 2 seconds
  ioscope top -b -n 5          # 5 plain-text snapshots, one a second, like top -b -n 5 (batch when piped)
  ioscope top -j 2 10          # one JSON object every 2 s, 10 of them: {"devices": [...], "procs": [...]}
  ioscope top -d loop0         # only this disk (filtered in the kernel; -d is repeatable)
  ioscope top -b -s p99_ms -r 10   # batch, the 10 processes with the highest p99 latency
  ioscope top -G               # and the cgroups: I/O charged to each (containers, services), its latency
  ioscope top -c /kubepods.slice -G   # only the pods' I/O, per cgroup and per process
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("top", help="live view of busy disks, the processes doing I/O, and latency",
                       description="A top-like view: devices with iostat -x columns and p99 latency, "
                                   "processes with their I/O rates and latency (attributed to the process "
                                   "that queued the I/O), and a latency heat map of the selected disk.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-d", "--disk", action="append", metavar="DISK",
                   help="trace only this disk (name, /dev/name or major:minor; filtered in the kernel); repeatable")
    p.add_argument("-p", "--pid", type=common.pid_type, help="show only I/O queued by this process")
    common.add_cgroup(p)
    p.add_argument("-G", "--cgroups", action="store_true",
                   help="the cgroup view: a table of the cgroups the I/O was charged to, beside the processes, "
                        "and each process row's cgroup (a kworker that queued a cgroup's throttled or "
                        "written-back I/O is counted in that cgroup)")
    p.add_argument("-b", "--batch", action="store_true",
                   help="plain-text snapshots, one per interval (the default when stdout is not a terminal)")
    common.add_json(p)
    common.add_rows(p, "processes per snapshot (batch and JSON)")
    common.add_deprecated_flag(p, "-l", "--limit", dest="rows", instead="-r/--rows", takes_value=True,
                                   type=common.positive_int)
    # procps top's long name for -n (help shows -n, --count)
    p.add_argument("--iterations", dest="count_n", type=common.positive_int, help=argparse.SUPPRESS)
    p.add_argument("-s", "--sort", default="total", choices=("total", *PROC_SORT_KEYS),
                   help="process sort column (default total: rkB/s + wkB/s)")
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="top", rows_note_when_cut=True)


class Source(Protocol):
    """An optional collector feeding a panel: called once per refresh with the interval's length, returns
    JSON-able data (snapshot.extras[name]); close() detaches whatever it attached."""

    def __call__(self, interval_s: float) -> Any: ...

    def close(self) -> None: ...


# Optional panels, tried in this order: (name, module, factory). The module is imported when it is part of
# this build (an import error inside a module that exists is not hidden); it registers its panel drawing
# with view.register_panel(name, fn), and factory(btf) returns a Source. This is where the per-process
# balance (Jain index) and readahead panels plug in, e.g. ("balance", "ioscope.tools.fair", "top_source").
OPTIONAL_SOURCES: tuple[tuple[str, str, str], ...] = (("nic", "ioscope.tools.top.nic_panel", "top_source"),)


def optional_sources(btf: str | None, table: Sequence[tuple[str, str, str]] = OPTIONAL_SOURCES) -> dict[str, Source]:
    out: dict[str, Source] = {}
    try:
        for name, module, factory in table:
            try:
                present = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                present = False
            if present:
                out[name] = getattr(importlib.import_module(module), factory)(btf)
    except BaseException:
        for src in out.values():
            src.close()
        raise
    return out


class Sampler:
    """Turns collector samples into snapshots (keeps the previous sample).

    sources: optional extra collectors, name -> fn(interval_s) returning JSON-able data for the interval,
    stored in snapshot.extras[name] and drawn by the panel registered under the same name in view.PANELS
    (the extension point for the balance and readahead panels)."""

    def __init__(self, collector: TopCollector, sources: dict[str, Callable[[float], Any]] | None = None,
                 cgroup_view: bool = False) -> None:
        self.c = collector
        self.cgroup_view = cgroup_view
        self.sources = dict(sources or {})
        self.host = platform.node()
        self.kernel = platform.release()
        self.prev: Sample = collector.sample(Tick(time.time()))
        from ioscope.base import devices
        # stacked devices (dm, md, btrfs) as sysfs has them at the start: the stacks panel
        self.stacks = devices.stack_meta()

    def __call__(self, final: bool = False) -> Snapshot:
        """The snapshot of the interval since the last call; final: the run's last (TopCollector.sample)."""
        from ioscope.tools.top.model import build_snapshot

        cur = self.c.sample(Tick(self.prev.wall, reset=True, final=final))
        snap = build_snapshot(self.prev, cur, host=self.host, kernel=self.kernel, disks=self.c.whole_disks(),
                              name_of=self.c.names.name, comm_of=self.c.comm, attach=self.c.bpf.variant_summary(),
                              show_idle=bool(self.c.filter),
                              cgroup_of=self.c.cgroup_names.name if self.c.per_cgroup else None,
                              cgroup_view=self.cgroup_view, throttle_no_wait=self.c.throttle.no_wait,
                              cgroup_name=self.c.cgroup_names.name)
        self.prev = cur
        if snap.cgroups is not None:   # their pressure read at the next sample too
            self.c.psi_watch = {r.cgroup for r in snap.cgroups}
        if self.stacks:
            from ioscope.tools.top.model import stack_rows
            snap.extras["stacks"] = stack_rows(snap.devices, self.stacks)
        for name, fn in self.sources.items():
            snap.extras[name] = fn(snap.interval)
        return snap


def run(args: argparse.Namespace) -> int:
    from ioscope.base import devices, system
    from ioscope.tools.top.collector import TopCollector
    from ioscope.tools.top.model import HeatHistory
    from ioscope.tools.top.view import ViewState, interactive

    interval: float = args.interval or 1.0
    count: int | None = args.count
    disks = [devices.resolve_disk(d) for d in args.disk or []]
    disk = disks[0].name if len(disks) == 1 else None
    batch = args.batch or args.json or not sys.stdout.isatty()
    if not batch and not sys.stdin.isatty():
        raise UsageError("the interactive screen needs a terminal on stdin", "use --batch or -j")
    system.require_bpf_privileges("top")
    btf = system.btf_path(args.btf)
    collector = TopCollector(btf=btf, disks=[d.dev for d in disks], per_cgroup=args.cgroups, cgroup=args.cgroup)
    sources: dict[str, Source] = {}
    try:
        live.warn_unavailable("top", collector.unavailable)
        sources = optional_sources(btf)
        sampler = Sampler(collector, dict(sources), cgroup_view=args.cgroups)
        if collector.cgroup is not None and not args.json:
            print(f"ioscope top: processes and cgroups: only I/O charged to {collector.cgroup.label()}; the devices' "
                  "rows are the whole disks' (/proc/diskstats)", file=sys.stderr)
        if batch:
            return _batch(sampler, args, interval, count, disk)
        st = ViewState(sort=args.sort, interval=interval, disk=disk, pid=args.pid, heat_disk=disk)
        try:
            return interactive(sampler, st, HeatHistory(), count)
        except KeyboardInterrupt:
            return 0
    finally:
        for src in sources.values():
            src.close()
        collector.close()


def _batch(sample: Callable[[bool], Snapshot], args: argparse.Namespace, interval: float, count: int | None,
           disk: str | None) -> int:
    from ioscope.tools.top.model import filter_snapshot, sort_devices, sort_procs
    from ioscope.tools.top.view import batch_text, snapshot_json

    done = 0
    start = time.time()
    try:
        while count is None or done < count:
            live.sleep_until(start + interval * (done + 1))
            snap = filter_snapshot(sample(count is not None and done == count - 1), disk, args.pid)
            reverse = args.sort not in ("pid", "comm", "disk", "cgroup")
            common.rows_note_if_cut(args, len(snap.procs))   # -n N the procps way: a note only if N rows would cut
            if args.json:
                snap.procs = sort_procs(snap.procs, args.sort, reverse)[: args.rows]
                if snap.cgroups is not None:
                    snap.cgroups = snap.cgroups[: args.rows]
                snap.devices = sort_devices(snap.devices, "util")
                print(json.dumps(snapshot_json(snap)), flush=True)
            else:
                print(batch_text(snap, args.sort, reverse=reverse, limit=args.rows), flush=True)
            done += 1
    except KeyboardInterrupt:
        pass
    return 0
