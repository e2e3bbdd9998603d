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
from typing import Any, Protocol

from ioscope import cli_common, devices, system
from ioscope.errors import UsageError
from ioscope.top.collector import TopCollector
from ioscope.top.model import (
    PROC_SORT_KEYS,
    HeatHistory,
    Sample,
    Snapshot,
    build_snapshot,
    filter_snapshot,
    sort_devices,
    sort_procs,
)
from ioscope.top.view import ViewState, batch_text, interactive

EXAMPLES = """\
examples:
  ioscope top                  # the live screen, refreshed every second (q quits, ? shows the keys)
  ioscope top 2                # refresh every 2 seconds
  ioscope top -b -n 5          # 5 plain-text snapshots, like top -b (automatic when piped)
  ioscope top -j -n 10         # one JSON object per interval: {"devices": [...], "procs": [...]}
  ioscope top -d loop0         # start filtered on one disk (d in the screen changes it)
  ioscope top -b -s p99_ms     # batch, processes sorted by their p99 latency
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("top", help="live view of busy disks, the processes doing I/O, and latency",
                       description="A top-like view: devices with iostat -x columns and p99 latency, "
                                   "processes with their I/O rates and latency (attributed to the process "
                                   "that queued the I/O), and a latency heat map of the selected disk.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-d", "--disk", metavar="DISK", help="show only this disk (name, /dev/name or major:minor)")
    p.add_argument("-p", "--pid", type=cli_common.pid_type, help="show only I/O queued by this process")
    p.add_argument("-b", "--batch", action="store_true",
                   help="plain-text snapshots, one per interval (the default when stdout is not a terminal)")
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per interval")
    p.add_argument("-n", "--iterations", type=cli_common.positive_int, metavar="COUNT",
                   help="stop after COUNT refreshes")
    p.add_argument("-s", "--sort", default="total", choices=("total", *PROC_SORT_KEYS),
                   help="process sort column (default total: rkB/s + wkB/s)")
    p.add_argument("-l", "--limit", type=cli_common.positive_int, metavar="N",
                   help="batch: print at most N processes per snapshot")
    cli_common.add_interval_count(p)
    p.set_defaults(func=run, tool="top")


class Source(Protocol):
    """An optional collector feeding a panel: called once per refresh with the interval's length, returns
    JSON-able data (snapshot.extras[name]); close() detaches whatever it attached."""

    def __call__(self, interval_s: float) -> Any: ...

    def close(self) -> None: ...


# Optional panels, tried in this order: (name, module, factory). The module is imported when it is part of
# this build (an import error inside a module that exists is not hidden); it registers its panel drawing
# with view.register_panel(name, fn), and factory(btf) returns a Source. This is where the per-process
# balance (Jain index) and readahead panels plug in, e.g. ("balance", "ioscope.ra.fair", "top_source").
OPTIONAL_SOURCES: tuple[tuple[str, str, str], ...] = ()


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

    def __init__(self, collector: TopCollector, sources: dict[str, Callable[[float], Any]] | None = None) -> None:
        self.c = collector
        self.sources = dict(sources or {})
        self.host = platform.node()
        self.kernel = platform.release()
        self.prev: Sample = collector.sample()

    def __call__(self) -> Snapshot:
        cur = self.c.sample()
        snap = build_snapshot(self.prev, cur, host=self.host, kernel=self.kernel, disks=self.c.whole_disks(),
                              name_of=self.c.names.name, comm_of=self.c.comm, attach=self.c.bpf.variant_summary())
        self.prev = cur
        for name, fn in self.sources.items():
            snap.extras[name] = fn(snap.interval)
        return snap


def run(args: argparse.Namespace) -> int:
    interval: float = args.interval or 1.0
    count: int | None = args.iterations or args.count
    disk = devices.resolve_disk(args.disk).name if args.disk else None
    batch = args.batch or args.json or not sys.stdout.isatty()
    if not batch and not sys.stdin.isatty():
        raise UsageError("the interactive screen needs a terminal on stdin", "use --batch or -j")
    system.require_bpf_privileges("top")
    btf = system.btf_path(args.btf)
    collector = TopCollector(btf=btf)
    sources: dict[str, Source] = {}
    try:
        for what in collector.unavailable:
            print(f"ioscope top: {what}; carrying on without it", file=sys.stderr)
        sources = optional_sources(btf)
        sampler = Sampler(collector, dict(sources))
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


def _batch(sample: Callable[[], Snapshot], args: argparse.Namespace, interval: float, count: int | None,
           disk: str | None) -> int:
    done = 0
    start = time.time()
    try:
        while count is None or done < count:
            cli_common.sleep_until(start + interval * (done + 1))
            snap = filter_snapshot(sample(), disk, args.pid)
            reverse = args.sort not in ("pid", "comm", "disk")
            if args.json:
                snap.procs = sort_procs(snap.procs, args.sort, reverse)[: args.limit]
                snap.devices = sort_devices(snap.devices, "util")
                print(json.dumps(snap.to_json()), flush=True)
            else:
                print(batch_text(snap, args.sort, reverse=reverse, limit=args.limit), flush=True)
            done += 1
    except KeyboardInterrupt:
        pass
    return 0
