"""ioscope snoop's command line: its options, and the loop collector (snooper.py: the recorder and the pairing
of its events) -> view (view.py: text or JSON lines). numpy and the recorder are imported when it runs,
not for --help."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from ioscope.base import live
from ioscope.tools import common

if TYPE_CHECKING:
    from ioscope.tools.snoop.snooper import Snooper

EXAMPLES = """\
examples:
  ioscope snoop                 # every completed I/O on every disk
  ioscope snoop -d sda -d sdb   # two disks
  ioscope snoop -p 1234         # I/O queued by process 1234
  ioscope snoop -j | jq .       # JSON lines
  ioscope snoop -G              # with the cgroup each I/O is charged to (containers, services named)
  ioscope snoop -c /system.slice/mysql.service   # only that service's I/O (and its children's)
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("snoop", help="one line per completed block I/O (like biosnoop)",
                       description="One line per completed block I/O: time, process that queued it, disk, "
                                   "operation (RWBS), sector, size, queue time (queued to issued) and service "
                                   "time (issued to completed).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_disk_pid(p)
    common.add_cgroup(p)
    p.add_argument("-G", "--cgroups", action="store_true",
                   help="a CGROUP column: the cgroup each I/O is charged to (a kworker's writeback or a throttled "
                        "bio: its service's), containers and pods named")
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per I/O")
    p.add_argument("-w", "--duration", type=common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS")
    p.set_defaults(func=run, tool="snoop")


def run(args: argparse.Namespace) -> int:
    from ioscope.base import devices, system
    from ioscope.base.cgroups import cgroup_filter
    from ioscope.engines.recording.recorder import RecorderOptions
    from ioscope.tools.snoop.snooper import SNOOP_HOOKS, Snooper

    system.require_bpf_privileges("snoop")
    btf = system.btf_path(getattr(args, "btf", None))
    disks = list(dict.fromkeys(devices.resolve_disk(d) for d in args.disk or []))
    top = cgroup_filter(args.cgroup).path if args.cgroup else None   # an unknown cgroup: one line, exit 2
    snooper = Snooper(RecorderOptions(disks=disks, pid=args.pid, btf=btf, hooks=SNOOP_HOOKS, buffer_bytes=8 << 20),
                      cgroup_filter=top)
    try:
        return _loop(snooper, args)
    finally:
        snooper.close()


class ThrottleNotes:
    """What snoop says on stderr of blk-throttle, read every CHECK_EVERY_S: each limit once, when it comes
    into force on a traced disk (the bios it holds wait before their queue event, in no line's QUE(ms));
    then, once one is in force, the bios it held (engines/context/throttle.py HeldWatch: lat's throttle
    programs alone), with who submitted them and how long they waited, when some were held and at the end."""

    def __init__(self, sn: Snooper) -> None:
        from ioscope.base import devices
        from ioscope.engines.context.throttle import HeldWatch

        self.disks = sn.rec.opts.disks
        self.top = sn.cgroup_filter
        self.seen: set[str] = set()
        self.next = 0.0
        self.watch = HeldWatch(lambda: self.disks or devices.list_disks(), [d.dev for d in self.disks])
        self.said_failed = False
        self.watch.tick()   # a limit in force at the start: its held bios are watched before "Tracing" is said

    def check(self) -> None:
        from ioscope.base import devices
        from ioscope.engines.context import iolimits
        from ioscope.engines.context.throttle import CHECK_EVERY_S
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + CHECK_EVERY_S
        got = iolimits.in_force(self.disks or devices.list_disks())
        new = [x for x in got if repr(sorted(x.items())) not in self.seen] if isinstance(got, list) else []
        if new:
            self.seen |= {repr(sorted(x.items())) for x in new}
            print(f"ioscope snoop: note: {iolimits.describe(new)}; their wait is in no line's QUE(ms)",
                  file=sys.stderr, flush=True)
        self.watch.tick()
        self.say_held()

    def say_held(self) -> None:
        from ioscope.base.cgroups import within
        from ioscope.base.fmt import fmt_ns
        from ioscope.engines.context.throttle import summary

        if self.watch.failed and not self.said_failed:
            self.said_failed = True
            print(f"ioscope snoop: note: the bios blk-throttle holds cannot be counted here: {self.watch.failed}",
                  file=sys.stderr, flush=True)
        held = [h for h in self.watch.read() if self.top is None or within(h.cgroup, self.top)]
        for line in summary(held, self.watch.no_wait, fmt_ns):
            print(f"ioscope snoop: note: {line}, nor in any line's QUE(ms)", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.watch.close()


def _loop(sn: Snooper, args: argparse.Namespace) -> int:
    from ioscope.base import units
    from ioscope.engines.recording.recorder import POLL_MS, completions_warnings
    from ioscope.tools.snoop.view import CGROUP_HEADER, HEADER, UNIT, emit

    throttle: ThrottleNotes | None = None
    try:
        throttle = ThrottleNotes(sn)
        live.warn_unavailable("snoop", sn.rec.unavailable)
        where = ", ".join(d.name for d in sn.rec.opts.disks) or "all disks"
        if sn.cgroup_filter is not None:
            where += f", cgroup {sn.cgroup_filter} and below"
        print(f"Tracing block I/O on {where} ({sn.rec.bpf.variant_summary()}); {units.says(UNIT)}; Ctrl-C to end.",
              file=sys.stderr, flush=True)
        if not args.json:
            print(CGROUP_HEADER if args.cgroups else HEADER, flush=True)
        deadline = time.monotonic() + args.duration if args.duration else None
        try:
            while deadline is None or time.monotonic() < deadline:
                throttle.check()
                time.sleep(POLL_MS / 1000)   # Ctrl-C lands here, before the rings are read
                with live.signals_deferred():   # ... or after what was read is printed: never in between
                    emit(sn.poll(0), args.json, args.cgroups)
        except KeyboardInterrupt:
            pass
        emit(sn.finish(), args.json, args.cgroups)
        throttle.say_held()
    finally:
        if throttle is not None:
            throttle.close()
    losses = sn.rec.losses()
    if losses.lost:
        print(f"ioscope snoop: lost {losses.lost} events ({losses.describe()})", file=sys.stderr)
    for line in completions_warnings("snoop", sn.rec.completions_check(sn.completed, sn.completed_attached)):
        print(line, file=sys.stderr)
    return 0


