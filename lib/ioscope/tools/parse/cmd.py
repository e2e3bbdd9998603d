"""ioscope parse's command line: its options and help. The implementation (ioscope.tools.parse.blkparse, with
numpy) is imported when the command runs, not for --help."""

from __future__ import annotations

import argparse

from ioscope.capture.masks import MASKS

EXAMPLES = """\
examples:
  ioscope parse trace.ioscope                      # every event, then the totals
  ioscope parse -a complete -q trace.ioscope       # completions only, no totals
  ioscope parse -w 1.5:3 trace.ioscope             # events between 1.5 s and 3 s
  ioscope parse -f '%T.%t %d %S %n\\n' trace.ioscope
  ioscope parse -F 'C,%p %C completed %n blocks at %S\\n' trace.ioscope
  ioscope parse -G trace.ioscope                   # each Q with its cgroup's id: 7,0 ... 4242 36b5,0  Q  WS
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("parse", help="blkparse-compatible text of a capture",
                       description="Print a capture's block events the way blkparse does: one line per event "
                                   "(device, cpu, sequence, time, pid, action, RWBS, sector + blocks, process), "
                                   "then per-CPU and per-device totals.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("capture", metavar="CAPTURE", help="an ioscope capture, or blktrace binaries")
    p.add_argument("-a", "--act-mask", action="append", metavar="NAME",
                   help=f"only events of this category (repeatable): {', '.join(MASKS)}")
    p.add_argument("-A", "--set-mask", metavar="HEX", help="category mask as a hexadecimal number")
    p.add_argument("-f", "--format", metavar="FMT", help="output format for every action (blkparse -f)")
    p.add_argument("-F", "--format-spec", action="append", metavar="ACT,FMT",
                   help="output format for one action letter (blkparse -F), repeatable")
    p.add_argument("-w", "--stopwatch", metavar="[START:]END", help="only events between START and END seconds")
    p.add_argument("-q", "--quiet", action="store_true", help="leave out the totals")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument("--names", choices=("blkparse", "ioscope"), default="blkparse",
                   help="process names: blkparse's (default: a pid's first process note, for good; (null) "
                        "without one) or ioscope's (each event under the name its pid had then)")
    p.add_argument("-G", "--cgroups", action="store_true",
                   help="print the id of the cgroup a Q's bio was charged to before its action, as the kernel's "
                        "blk tracer does with blk_cgroup (LOW32,HIGH32 in hex: 4c5,0), on the Qs of a capture "
                        "that carry one (-f/-F: %%g, as blkparse 1.3); the paths are in ioscope sql's cgroup column")
    p.set_defaults(func=run, tool="parse")


def run(args: argparse.Namespace) -> int:
    from ioscope.tools.parse.blkparse import run as run_parse

    return run_parse(args)
