#!/usr/bin/env python3
"""Overhead of `ioscope agg` by question, against bpftrace asking the same, side by side in one run.

fio 4 KiB random reads, queue depth 32, libaio, direct, on a tmpfs-backed loop device (scheduler
none). Each round runs every configuration in turn (rotated, so that none always runs first):
nothing attached; `count() by comm,disk` and bpftrace's `@[comm, dev] = count()` at queue;
`llquantize(q2c) by disk,op` and bpftrace's queue-to-complete hist() keyed by (dev, sector);
`count() by comm,kstack`, `count() by comm,ustack` and bpftrace's `@[comm, ustack] = count()`
(bpftrace walks the user stack and keys by it in the kernel too). Prints IOPS per configuration
(median over rounds) and the median over rounds of each run's IOPS over its round's baseline.
Run as root: python3 bench/agg_overhead.py [--rounds N] [--seconds S] [--json]
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

from ioscope.testbed import LoopDevice, run_fio
from lat_overhead import Tracer

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
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/agg_overhead.py: run as root (it loads BPF programs and makes loop devices)", file=sys.stderr)
        return 1
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    with LoopDevice(size_mb=1024, scheduler="none") as dev:
        def agg(expr: str) -> Callable[[], AbstractContextManager[Any]]:
            return lambda: Tracer("ioscope", [*ioscope, "agg", "-d", dev.name, "-e", expr], "Tracing", "stderr")

        def bpftrace(name: str) -> Callable[[], AbstractContextManager[Any]]:
            prog = READY + BPFTRACE[name] % {"dev": dev.device.dev}
            return lambda: Tracer("bpftrace", ["bpftrace", "-e", prog], "ready", "stdout")

        configs: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
            ("baseline", nullcontext),
            ("agg count() by comm,disk", agg("count() by comm,disk")),
            ("bpftrace @[comm, dev] = count()", bpftrace("bpftrace @[comm, dev] = count()")),
            ("agg llquantize(q2c) by disk,op", agg("llquantize(q2c) by disk,op")),
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
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v:,.0f}" for k, v in iops.items()),
                  file=sys.stderr)
    summary = {name: {"iops_median": statistics.median(v), "paired_ratio_median": statistics.median(paired[name]),
                      "iops_all": [round(x) for x in v]} for name, v in results.items()}
    if args.json:
        print(json.dumps({"rounds": args.rounds, "seconds": args.seconds, "results": summary}, indent=2))
        return 0
    print(f"fio 4KiB randread QD32 libaio direct, tmpfs loop device, {args.rounds} rounds x {args.seconds:g}s, "
          "rotated")
    print(f"{'configuration':<38}{'IOPS (median)':>15}{'ratio':>8}")
    for name, s in summary.items():
        print(f"{name:<38}{s['iops_median']:>15,.0f}{s['paired_ratio_median']:>8.3f}")
    print("ratio: median over rounds of IOPS / that round's baseline IOPS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
