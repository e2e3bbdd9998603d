"""ioscope record: every block-layer event into a capture file (blktrace's job, with BPF).

The command: its options; the recording itself is the recording engine's session
(engines/recording/session.py: the recorder feeding a CaptureWriter, with a status line and a summary),
shared with ioscope collect; --ring runs the flight recorder (flight.py, flight_cmd.py). Nothing heavy is
imported for --help.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ioscope.base import outfile
from ioscope.base.errors import UsageError
from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope record -o trace.ioscope                 # every disk until Ctrl-C
  ioscope record -o trace.ioscope -d sda -w 60    # one disk for 60 seconds
  ioscope record -o trace.ioscope -d nvme0n1 -d nvme1n1 --max-size 2G
  ioscope record -o trace.ioscope -p 1234         # only I/O queued by process 1234
  ioscope record -o trace.ioscope -a issue -a complete   # only D and C events (cheaper, smaller)
  ioscope parse trace.ioscope | less              # then read it (blkparse format)
  ioscope record --ring 60s --trigger 'q2c > 500ms' -o /var/tmp/slow   # flight recorder: save the
                                                  # minute before (and 5 s after) any I/O over 500 ms
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("record", help="record every block-layer event to a capture file (like blktrace)",
                       description="Record every block-layer event (Q G I M F D C R P U X A, as blktrace) "
                                   "into a capture file for offline analysis with ioscope parse/report/export. "
                                   "Ctrl-C, SIGTERM or SIGHUP end it cleanly; a killed recorder leaves a readable "
                                   "file.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="capture file to write")
    common.add_disk_pid(p)
    p.add_argument("-a", "--act-mask", action="append", metavar="NAME",
                   help="record only events of this category, as blktrace -a (repeatable, or NAME,NAME): "
                        "queue, requeue, issue, complete (the others' programs are not attached: cheaper), "
                        "notify, or read, write, flush, sync, fs, pc, ahead, meta, discard, drv_data, fua "
                        "(kept by the events' category); default: every event")
    p.add_argument("-w", "--duration", type=common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS")
    p.add_argument("--max-size", type=common.size_type("--max-size"), metavar="SIZE",
                   help="stop when the file reaches SIZE (e.g. 500M, 2G)")
    p.add_argument("--buffer", type=common.size_type("--buffer"), metavar="SIZE",
                   help="kernel buffer memory, shared by one ring per CPU and context level (task, softirq, "
                        "hardirq), each rounded up to a power of two records; default 32M, and at least "
                        "8192 records per ring")
    outfile.add_force(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no status line, only the summary")
    fl = p.add_argument_group("flight recorder (docs/record.md): keep the last window in memory, save it when "
                                "something goes wrong; -o is then a PREFIX")
    fl.add_argument("--ring", type=_ring_type, metavar="DURATION|SIZE",
                    help="record continuously, keeping only the last DURATION (30s, 10m, 2h; at most 512M of "
                         "events) or SIZE (256M, 1G) of events, or both (10m,1G); each save writes "
                         "PREFIX-YYYYmmddTHHMMSSZ-N.ioscope")
    fl.add_argument("--trigger", action="append", metavar="COND",
                    help="save when an I/O matches COND, in agg's language, evaluated in the kernel: "
                         "'q2c > 500ms', 'd2c > 100ms where disk == \"sda\" and op == \"write\"' (repeatable); "
                         "SIGUSR1 always saves")
    fl.add_argument("--trigger-pressure", action="append", metavar="COND", type=_pressure_type,
                    help="save when the host's I/O pressure (PSI) passes COND, the kernel's own trigger: "
                         "'some > 40%%' (of a 2 s window), 'full > 10%% over 4s'; a cgroup's: 'some > 50%% "
                         "where cgroup == \"/system.slice/db.service\"' (repeatable)")
    fl.add_argument("--trigger-baseline", action="append", metavar="COND",
                    help="save when a disk's percentile of a time over its last seconds passes a factor of its "
                         "usual (the same percentile over --baseline): 'p99(q2c) > 3x usual' (repeatable)")
    fl.add_argument("--baseline", type=_duration("--baseline"), default=600.0, metavar="DURATION",
                    help="how far back the usual of --trigger-baseline looks (default 10m); nothing fires before "
                         "half of it was seen")
    fl.add_argument("--until-trigger", action="store_true",
                    help="stop once the first window is saved, and exit with status 3 (0 when -w or a stop signal "
                         "ended it first): for cron and systemd")
    fl.add_argument("--trigger-cmd", metavar="CMD",
                    help="run CMD (with sh) every --trigger-every seconds; save when it exits non-zero or hangs")
    fl.add_argument("--trigger-every", type=_duration("--trigger-every"), default=10.0, metavar="DURATION",
                    help="how often --trigger-cmd runs (default 10s)")
    fl.add_argument("--after", type=_duration("--after"), default=5.0, metavar="DURATION",
                    help="keep recording this long after a trigger before saving (default 5s)")
    fl.add_argument("--max-saves", type=common.positive_int, default=20, metavar="N",
                    help="save at most N windows in this run (default 20); later triggers are counted")
    fl.add_argument("--context", action="store_true",
                    help="save each window as an `ioscope collect` bundle: the capture and the host's context "
                         "(taken at the trigger and after the save)")
    fl.add_argument("--save-on-exit", action="store_true",
                    help="also save the window when stopped (Ctrl-C, SIGTERM, SIGHUP, -w)")
    p.set_defaults(func=run, tool="record")


def _ring_type(text: str) -> object:
    from ioscope.tools.record.flight import parse_ring
    return parse_ring(text)


def _pressure_type(text: str) -> object:
    from ioscope.base import psi
    try:
        return psi.parse_trigger(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _duration(what: str) -> Any:
    def conv(text: str) -> float:
        from ioscope.tools.record.flight import parse_duration
        return parse_duration(text, what)
    return conv


def run(args: argparse.Namespace) -> int:
    from ioscope.capture.masks import parse_mask
    from ioscope.engines.recording.session import RecordRequest, record

    mask = parse_mask(args.act_mask, None)  # blkparse's -a names (capture.masks.MASKS); none: every event
    if args.ring is not None:
        from ioscope.tools.record.flight_cmd import run_ring
        return run_ring(args, mask)
    for opt, given in (("--trigger", args.trigger), ("--trigger-cmd", args.trigger_cmd),
                       ("--trigger-pressure", args.trigger_pressure),
                       ("--trigger-baseline", args.trigger_baseline), ("--until-trigger", args.until_trigger),
                       ("--context", args.context), ("--save-on-exit", args.save_on_exit)):
        if given:
            raise UsageError(f"{opt} goes with --ring (the flight recorder)",
                             "e.g. ioscope record --ring 60s --trigger 'q2c > 500ms' -o /var/tmp/io")
    return record(RecordRequest(output=args.output, disks=args.disk or [], pid=args.pid, act_mask=mask,
                                duration=args.duration, max_size=args.max_size, buffer=args.buffer,
                                force=args.force, quiet=args.quiet, btf=getattr(args, "btf", None),
                                argv=sys.argv[1:]))
