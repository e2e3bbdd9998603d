#!/usr/bin/env python3
"""Overhead of `ioscope agg` by question, against bpftrace asking the same, side by side in one run.

fio 4 KiB random reads, queue depth 32, libaio, direct, on a tmpfs-backed loop device, with each
scheduler asked for (default: none and mq-deadline). Each round runs every configuration in turn
(rotated, so that none always runs first): nothing attached; `count() by comm,disk` and bpftrace's
`@[comm, dev] = count()` at queue; `llquantize(q2c) by disk,op` (a request-level question: the
kernel's stamps, one program per I/O), the same with `--timing probes`, and bpftrace's
queue-to-complete hist() keyed by (dev, sector); `count() by comm,kstack`, `count() by comm,ustack`
and bpftrace's `@[comm, ustack] = count()` (bpftrace walks the user stack and keys by it in the
kernel too). Prints IOPS per configuration (median over rounds) and the median (range) over rounds
of each run's IOPS over its round's baseline; --profile adds each configuration's BPF CPU time per
I/O (lat_overhead.profile). Run as root:
    python3 bench/agg_overhead.py [--rounds N] [--seconds S] [--schedulers none,mq-deadline] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ioscope.base.testbed import LoopDevice, run_fio
from lat_overhead import Tracer, profile

READY = 'BEGIN { printf("ready\\n"); } '
# the same questions in bpftrace: by hand, at queue (comm is true there), keyed by (dev, sector)
BPFTRACE = {
    "bpftrace @[comm, dev] = count()": "tracepoint:block:block_bio_queue /args->dev == %(dev)d/ "
                                       "{ @[comm, args->dev] = count(); }",
    "bpftrace q2c hist() by (dev, sector)": "tracepoint:block:block_bio_queue /args->dev == %(dev)d/ "
                                            "{ @q[args->dev, args->sector] = nsecs; } "
                                            "tracepoint:block:block_rq_complete /@q[args->dev, args->sector]/ "
                                            "{ @h[args->rwbs] = hist(nsecs - @q[args->dev, args->sector]); "
                                            "delete(@q[args->dev, args->sector]); }",
    "bpftrace @[comm, ustack] = count()": "tracepoint:block:block_bio_queue /args->dev == %(dev)d/ "
                                          "{ @[comm, ustack] = count(); }",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    ap.add_argument("--schedulers", default="none,mq-deadline", help="comma-separated (default: none,mq-deadline)")
    ap.add_argument("--profile", action="store_true", help="also the BPF CPU time per I/O of each configuration")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/agg_overhead.py: run as root (it loads BPF programs and makes loop devices)", file=sys.stderr)
        return 1
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    out: dict[str, dict[str, Any]] = {}
    for sched in args.schedulers.split(","):
        with LoopDevice(size_mb=1024, scheduler=sched) as dev:
            def agg(expr: str, *extra: str) -> Callable[[], AbstractContextManager[Any]]:
                return lambda: Tracer("ioscope", [*ioscope, "agg", "-d", dev.name, *extra, "-e", expr], "Tracing",
                                      "stderr")

            def bpftrace(name: str) -> Callable[[], AbstractContextManager[Any]]:
                prog = READY + BPFTRACE[name] % {"dev": dev.device.dev}
                return lambda: Tracer("bpftrace", ["bpftrace", "-e", prog], "ready", "stdout")

            configs: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
                ("baseline", nullcontext),
                ("agg count() by comm,disk", agg("count() by comm,disk")),
                ("bpftrace @[comm, dev] = count()", bpftrace("bpftrace @[comm, dev] = count()")),
                ("agg llquantize(q2c) by disk,op", agg("llquantize(q2c) by disk,op")),
                ("  the same, --timing probes", agg("llquantize(q2c) by disk,op", "--timing", "probes")),
                ("bpftrace q2c hist() by (dev, sector)", bpftrace("bpftrace q2c hist() by (dev, sector)")),
                ("agg count() by comm,kstack", agg("count() by comm,kstack")),
                ("agg count() by comm,ustack", agg("count() by comm,ustack")),
                ("bpftrace @[comm, ustack] = count()", bpftrace("bpftrace @[comm, ustack] = count()")),
            ]
            results: dict[str, list[float]] = {name: [] for name, _ in configs}
            paired: dict[str, list[float]] = {name: [] for name, _ in configs}
            run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=1)  # warm-up
            for r in range(args.rounds):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                iops: dict[str, float] = {}
                for name, make in order:
                    with make():
                        job = run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=args.seconds)
                    iops[name] = float(job["read"]["iops"])
                for name, v in iops.items():
                    results[name].append(v)
                    paired[name].append(v / iops["baseline"])
                print(f"{sched} round {r + 1}/{args.rounds}: " + ", ".join(f"{k.strip()} {v:,.0f}"
                                                                           for k, v in iops.items()), file=sys.stderr)
            prof = {name: profile(dev, make, args.seconds) for name, make in configs if name != "baseline"} \
                if args.profile else {}
        out[sched] = {name: {"iops_median": statistics.median(v),
                             "paired_ratio_median": statistics.median(paired[name]),
                             "paired_min": min(paired[name]), "paired_max": max(paired[name]),
                             "iops_all": [round(x) for x in v], **prof.get(name, {})}
                      for name, v in results.items()}
    if args.json:
        print(json.dumps({"rounds": args.rounds, "seconds": args.seconds, "results": out}, indent=2))
        return 0
    print(f"fio 4KiB randread QD32 libaio direct, tmpfs loop device, {args.rounds} rounds x {args.seconds:g}s, "
          "rotated")
    for sched, summary in out.items():
        print(f"\nscheduler {sched}")
        print(f"{'configuration':<38}{'IOPS (median)':>15}{'ratio':>8}{'range':>14}{'progs':>6}{'BPF ns/IO':>10}")
        for name, s in summary.items():
            pr = f"{s['programs']:>6}{s['bpf_ns_per_io']:>10.0f}" if "programs" in s else f"{'-':>6}{'-':>10}"
            print(f"{name:<38}{s['iops_median']:>15,.0f}{s['paired_ratio_median']:>8.3f}"
                  f"{s['paired_min']:>7.3f}-{s['paired_max']:.3f}{pr}")
    print("ratio: median (range) over rounds of IOPS / that round's baseline IOPS; progs, BPF ns/IO (--profile): "
          "programs that ran and their CPU time per I/O")
    return 0


if __name__ == "__main__":
    sys.exit(main())
