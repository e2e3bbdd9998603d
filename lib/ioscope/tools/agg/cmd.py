"""ioscope agg's command line: expressions -> AggCollector (or a capture) -> build_result -> a view."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from ioscope.base import live
from ioscope.base.collector import Tick
from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope agg -e 'count() by comm,disk'                 # I/Os per process and disk until Ctrl-C
  ioscope agg -e 'sum(bytes) by comm where op == write' 1 5
  ioscope agg -e 'quantize(q2c) by disk,op' -d loop0    # power-of-two latency distributions
  ioscope agg -e 'llquantize(d2c) by disk where bytes >= 64k' -j 1
  ioscope agg -e 'count() by comm' -e 'avg(q2d) by cgroup' --rows 10 5
  ioscope agg -e 'count() by comm,op' -r CAPTURE --every 1  # the same question over a capture
  ioscope agg -e 'count() by comm,kstack' -d loop0 --folded --flamegraph io.html  # stacks for flame graphs
  ioscope agg --bpftrace 'tracepoint:block:block_rq_issue { @[comm] = count(); }' 1  # your own bpftrace
"""

DESCRIPTION = """\
DTrace-style aggregations of block I/O, aggregated in the kernel (or over a capture with -r).
An expression is FUNC(VALUE) [by KEY[,KEY]...] [where COND]:
  FUNC   count() sum avg min max stddev quantize lquantize(VALUE,LOW,HIGH,STEP) llquantize
  VALUE  bytes q2c q2d d2c (ns) seek (sectors) inflight (requests on the disk at issue) throttle (ns held
         by blk-throttle before the queue event; fentry, not under lockdown)
  KEY    disk op flags comm pid tgid cgroup cpu size kstack ustack file
  COND   comparisons (== != < <= > >=) of keys and values with literals (10ms, 250us, 64k, 1M,
         "text", write), joined with and, or, not and parentheses; comm == "kworker*" is a glob.
See docs/agg.md."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("agg", help="DTrace-style aggregations of block I/O (count() by comm,disk ...)",
                       description=DESCRIPTION, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-e", "--expr", action="append", metavar="EXPR",
                   help="an aggregation, e.g. 'count() by comm,disk'; repeatable")
    common.add_disk_pid(p)
    common.add_cgroup(p)  # live only
    common.add_rows(p, letter=False)  # -r reads a capture here
    common.add_json(p)
    p.add_argument("--cumulative", action="store_true", help="do not clear the aggregations every interval")
    p.add_argument("-r", "--read", metavar="CAPTURE", help="aggregate a capture made by ioscope record")
    p.add_argument("--every", type=common.positive_float, metavar="SECONDS",
                   help="with -r: one result per SECONDS of the capture (default: one for the whole capture)")
    bt = p.add_mutually_exclusive_group()
    bt.add_argument("--bpftrace", metavar="PROGRAM",
                    help="instead of -e: run this bpftrace program and show its maps as agg shows its own")
    bt.add_argument("--bpftrace-file", metavar="FILE", help="the same, the program read from FILE")
    p.add_argument("--timing", choices=("auto", "stamps", "queue", "probes"), default="auto",
                   help="how records are made. auto (default): stamps when every expression reads only disk, op, "
                        "flags, size, bytes, q2c, q2d, d2c; else queue when none reads q2c, q2d, d2c or inflight; "
                        "else probes. stamps: one record per request from the kernel's own stamps at its completion, "
                        "one program per I/O; queue: one record per bio when it is queued, one program per I/O; "
                        "probes: one record per bio at its completion, each followed from its queue event (btt's "
                        "way)")
    p.add_argument("--folded", action="store_true",
                   help="print an expression keyed by kstack or ustack as folded stacks, the flame-graph tools' "
                        "input: one line per stack, its keys then its frames root first, separated by ';', then a "
                        "space and its count or sum (bcc's --folded)")
    p.add_argument("--flamegraph", metavar="FILE",
                   help="at the end, draw that expression's stacks (every interval's together) as a flame graph: "
                        "FILE.html (interactive), .svg or .png; created owner-readable only")
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="agg")


def parse_exprs(texts: Sequence[str]) -> list:  # type: ignore[type-arg]
    from ioscope.engines.aggregate.expr import parse_all
    return parse_all(list(texts))


def _print(result: object, as_json: bool) -> None:
    from ioscope.tools.agg.view import renderables, to_json
    common.print_result("agg", result, as_json, to_json, renderables)


def run(args: argparse.Namespace) -> int:
    from ioscope.base import devices, system
    from ioscope.base.errors import UsageError

    if args.bpftrace is not None or args.bpftrace_file is not None:
        if args.expr or args.read or args.disk or args.pid or args.cgroup or args.every is not None:
            raise UsageError("--bpftrace runs your program as it is: no -e, -r, -d, -p, -c or --every with it",
                             "filter inside the bpftrace program")
        if args.folded or args.flamegraph:
            raise UsageError("--folded and --flamegraph draw agg's own stacks, not a bpftrace program's maps",
                             "-e 'count() by comm,kstack' --folded")
        return run_bpftrace(args)
    if not args.expr:
        raise UsageError("give an aggregation with -e EXPR (or a bpftrace program with --bpftrace)",
                         "for example: ioscope agg -e 'count() by comm,disk' 1")
    exprs = parse_exprs(args.expr)  # a bad expression: one line, exit 2, nothing attached
    stacked = stack_expr(args, exprs)
    if args.read:
        if stacked is not None:
            raise UsageError("captures hold no stacks yet: --folded and --flamegraph draw live stacks only",
                             "run it live: ioscope agg -e 'count() by comm,kstack' --folded")
        if args.interval is not None or args.cumulative:
            raise UsageError("with -r the capture is read once: no interval, count (-n) or --cumulative",
                             "--every SECONDS gives one result per window of the capture's time")
        return run_capture(args, exprs)
    if args.every is not None:
        raise UsageError("--every goes with -r CAPTURE; live, give an interval: ioscope agg -e ... 1")
    from ioscope.base import units
    from ioscope.engines.aggregate.collector import (
        COMPLETION_FIELDS,
        REQUEST_FIELDS,
        AggCollector,
        AggOptions,
        programs,
        queue_level,
        request_level,
    )
    from ioscope.engines.aggregate.model import build_result
    from ioscope.kernel.stamps import TICK_S, io_unit, timing_summary

    if args.timing == "stamps" and (not request_level(exprs) or args.pid or args.cgroup):
        raise UsageError("--timing stamps: the kernel's stamps tell only " + ", ".join(REQUEST_FIELDS)
                         + " (no process, cgroup, CPU, stack, file, seek or in-flight count; no -p or -c)",
                         "leave --timing out, or use --timing probes")
    if args.timing == "queue" and not queue_level(exprs):
        raise UsageError("--timing queue: when a bio is queued its " + ", ".join(COMPLETION_FIELDS)
                         + " are not known yet", "leave --timing out, or use --timing probes")
    progs = programs(exprs)  # names in conditions (disks, cgroups) resolved before anything is attached
    system.require_bpf_privileges("agg")
    opts = AggOptions(exprs=exprs, disks=[devices.resolve_disk(d) for d in args.disk or []], pid=args.pid,
                      cgroup=args.cgroup, btf=system.btf_path(args.btf), programs=progs, timing=args.timing)
    collector = AggCollector(opts)
    waits = [e for e in exprs if e.on_waits]
    started_at = time.time()
    try:
        where = ", ".join(d.name for d in opts.disks) or "all disks"
        attach = collector.bpf.variant_summary()

        state = {"emitted": 0, "next_start": 0.0}

        flame = Flame(args, exprs, stacked)

        def emit(tick: Tick) -> None:
            state["emitted"] += 1
            state["next_start"] = time.time()
            sample = collector.sample(replace(tick, reset=tick.reset and not args.cumulative))
            result = build_result(exprs, sample, args.rows)
            if waits:  # expressions that read iowait count the threads' I/O waits
                io = io_unit(result.timing) if result.timing else units.BIOS
                result.unit = units.WAITS if len(waits) == len(exprs) else {
                    **(io if isinstance(io, dict) else {"I/O": io}), "iowait": units.WAITS}
            live.warn_lost("agg", result.losses)
            with live.signals_deferred():
                flame.add(result)
                if not args.folded:
                    _print(result, args.json)

        n = f"{len(exprs)} aggregation{'s' if len(exprs) > 1 else ''}"
        what = (f"{n} of I/O waits ({attach})" if len(waits) == len(exprs) else
                f"{n} of block I/O{' and I/O waits' if waits else ''} on {where} ({attach}; "
                f"timing {timing_summary(collector.timing)})")
        rc = common.run_intervals("agg", what, args.interval, args.count, emit, collector.unavailable,
                                      tick=collector.tick, tick_every=TICK_S)
        if args.interval is not None and (args.count is None or state["emitted"] < args.count):
            # stopped (Ctrl-C, SIGTERM) inside an interval: print what it measured, as DTrace does
            emit(Tick(state["next_start"] or started_at, reset=True, final=True))
        flame.write()
        return rc
    finally:
        collector.close()


def stack_expr(args: argparse.Namespace, exprs: list) -> int | None:  # type: ignore[type-arg]
    """The index of the expression --folded or --flamegraph draws (None without them), or a one-line error."""
    from ioscope.base.errors import UsageError
    from ioscope.engines.aggregate.expr import STACK_KEYS
    from ioscope.engines.aggregate.folded import check_foldable
    if args.folded:
        if args.json:
            raise UsageError("--folded and -j are two ways to print: choose one")
        if len(exprs) != 1:
            raise UsageError("--folded prints the stacks of one expression: give one -e",
                             "-e 'count() by comm,kstack' --folded")
    if args.flamegraph:
        from ioscope.base import outfile
        from ioscope.engines.pages.flame import picture_format
        picture_format(args.flamegraph)
        outfile.check_output(args.flamegraph, True)
    if not (args.folded or args.flamegraph):
        return None
    option = "--folded" if args.folded else "--flamegraph"
    with_stacks = [i for i, e in enumerate(exprs) if any(k in e.keys for k in STACK_KEYS)]
    if len(with_stacks) > 1:
        raise UsageError(f"{option} draws the stacks of one expression: {len(with_stacks)} have a stack key",
                         "give the others without --flamegraph, in another run")
    i = with_stacks[0] if with_stacks else 0
    check_foldable(exprs[i], option)
    return i


class Flame:
    """--folded's lines every interval, and the stacks of every interval kept for --flamegraph's picture
    (with --cumulative each interval's are already everything so far: the last one is kept)."""

    def __init__(self, args: argparse.Namespace, exprs: list, index: int | None) -> None:  # type: ignore[type-arg]
        self.args, self.index = args, index
        self.expr = exprs[index] if index is not None else None
        self.stacks: list = []  # type: ignore[type-arg]
        self.counts = ""

    def add(self, result: object) -> None:
        if self.index is None:
            return
        from ioscope.base import units
        from ioscope.engines.aggregate.folded import fold_table, merge_folded
        from ioscope.engines.aggregate.model import AggResult
        from ioscope.tools.agg.view import folded_lines, header_text, unit_of
        assert isinstance(result, AggResult)
        table = result.tables[self.index]
        stacks = fold_table(table)
        self.counts = units.says(unit_of(result))
        if self.args.folded:
            sys.stderr.write(f"ioscope agg: {header_text(result)}\n")
            if table.truncated:
                sys.stderr.write(f"ioscope agg: note: {table.truncated} smaller stacks left out by --rows\n")
            out = "".join(line + "\n" for line in folded_lines(stacks))
            sys.stdout.write(out)
            sys.stdout.flush()
        if self.args.flamegraph:
            self.stacks = stacks if self.args.cumulative else merge_folded([*self.stacks, *stacks])

    def write(self) -> None:
        if self.index is None or not self.args.flamegraph:
            return
        from ioscope.engines.pages.flame import fmt_amount, write_flamegraph
        e = self.expr
        assert e is not None
        size = write_flamegraph(self.args.flamegraph, self.stacks, e.text, e.func, e.unit, self.counts)
        total = sum(s.value for s in self.stacks)
        sys.stderr.write(f"ioscope agg: wrote {self.args.flamegraph} ({size / 1e6:.1f} MB): {len(self.stacks)} "
                         f"stacks, {fmt_amount(total, e.func, e.unit)} in all\n")


def run_bpftrace(args: argparse.Namespace) -> int:
    from ioscope.engines.aggregate.model import AggResult
    from ioscope.tools.agg import bpftrace
    from ioscope.tools.agg.view import renderables, to_json

    def emit(result: AggResult) -> None:
        with live.signals_deferred():
            common.print_result("agg", result, args.json, to_json, renderables, result.losses)

    return bpftrace.run(args, emit)


def run_capture(args: argparse.Namespace, exprs: list) -> int:  # type: ignore[type-arg]
    from ioscope.engines.aggregate.capture import results_from_capture

    def note(line: str) -> None:
        sys.stderr.write(f"ioscope agg: note: {line}\n")

    for result in results_from_capture(args.read, exprs, every=args.every, disks=args.disk, pid=args.pid,
                                       cgroup=args.cgroup, limit=args.rows, note=note):
        _print(result, args.json)
    return 0


__all__ = ["add_parser", "run"]
