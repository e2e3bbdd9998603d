#!/usr/bin/env python3
"""Overhead of ioscope readsize and readahead on the worst case: small buffered reads served from the page cache.

fio (psync, 4 KiB random reads, one job) reads a file on ext4 over a tmpfs-backed loop
device that is already in the page cache, so every read is a syscall that never
reaches the device: the cost of the syscall hooks (readsize) and of the
mm_filemap_get_pages hook (readahead) is all there is to see. Phases run side by
side in one run, interleaved (baseline, readsize, readahead, both, ...) so that
drift on a shared machine hits all of them alike; the median of the rounds is
reported as IOPS and as a ratio to the baseline, and as the CPU time fio spent per read
(far less disturbed by other jobs on a shared machine than IOPS). After the rounds, one
more run with both tools and kernel.bpf_stats_enabled switched on (restored after) has
the kernel time every program run: the average nanoseconds per run of each program.

    sudo .venv/bin/python bench/ra_overhead.py [--seconds 3] [--rounds 3] [--attach tp_btf|raw_tp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from ioscope.base.testbed import LoopFS, run_fio
from ioscope.engines.procio.collector import ReadsizeCollector, ReadsizeOptions
from ioscope.tools.readahead.collector import ReadaheadCollector, ReadaheadOptions

FILE_MB = 256
BPF_STATS = "/proc/sys/kernel/bpf_stats_enabled"


def prog_costs(tools: list[Any], acc: dict[str, list[tuple[int, int]]]) -> None:
    for t in tools:
        for prog in t.bpf.attached:
            info = t.bpf.obj.prog_info(prog)
            acc.setdefault(f"{t.bpf.name}:{prog}", []).append((int(info["run_cnt"]), int(info["run_time_ns"])))


def fio_run(path: str, seconds: float) -> tuple[float, float]:
    """(IOPS, CPU nanoseconds fio spent per read). The second is what tracing adds to each read; it is
    much less disturbed than IOPS by other jobs competing for the CPUs."""
    job = run_fio(path, rw="randread", bs="4k", iodepth=1, runtime=seconds, direct=False, ioengine="psync",
                  size=f"{FILE_MB}M", extra=["--invalidate=0"])
    ios = int(job["read"]["total_ios"]) or 1
    cpu_ns = (float(job["usr_cpu"]) + float(job["sys_cpu"])) / 100.0 * float(job["job_runtime"]) * 1e6
    return float(job["read"]["iops"]), cpu_ns / ios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="fio run per phase (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--attach", choices=("tp_btf", "raw_tp"), default=None,
                    help="force the program variant (default: the best the kernel offers)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("ra_overhead: run as root", file=sys.stderr)
        return 1
    if args.attach:
        os.environ["IOSCOPE_ATTACH"] = args.attach
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    costs: dict[str, list[tuple[int, int]]] = {}
    with LoopFS(size_mb=FILE_MB + 64) as fs:
        path = fs.make_file("bench", FILE_MB << 20)
        # warm the page cache: every read below is a cache hit
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
        disk = fs.loop.device

        def readsize() -> Any:
            return ReadsizeCollector(ReadsizeOptions())

        def readahead() -> Any:
            return ReadaheadCollector(ReadaheadOptions())

        phases: dict[str, list[Callable[[], Any]]] = {
            "baseline": [], "readsize": [readsize], "readahead": [readahead], "both": [readsize, readahead],
        }
        results: dict[str, list[float]] = {k: [] for k in phases}
        cpu: dict[str, list[float]] = {k: [] for k in phases}
        variant = ""
        for rnd in range(args.rounds):
            for name, makers in phases.items():
                tools = [m() for m in makers]
                try:
                    if tools:
                        variant = "+".join(sorted({t.bpf.variant_summary() for t in tools}))
                    iops, ns = fio_run(path, args.seconds)
                finally:
                    for t in tools:
                        t.close()
                results[name].append(iops)
                cpu[name].append(ns)
                print(f"round {rnd + 1} {name:<10} {iops:>12,.0f} IOPS {ns:8.0f} CPU ns/read", file=sys.stderr,
                      flush=True)
        # per-program cost, timed by the kernel (bpf_stats adds its own clock reads to every run)
        with open(BPF_STATS) as f:
            stats_before = f.read().strip()
        tools = [readsize(), readahead()]
        try:
            with open(BPF_STATS, "w") as f:
                f.write("1")
            fio_run(path, args.seconds)
            prog_costs(tools, costs)
        finally:
            with open(BPF_STATS, "w") as f:
                f.write(stats_before)
            for t in tools:
                t.close()
        base = statistics.median(results["baseline"])
        base_ns = statistics.median(cpu["baseline"])
        print(f"ra_overhead: fio psync 4 KiB random reads from the page cache (ext4 on {disk.name}), "
              f"{args.seconds:g}s x {args.rounds} rounds, attach {variant}, {os.cpu_count()} CPUs")
        print(f"{'phase':<10} {'median IOPS':>12} {'ratio':>6} {'CPU ns/read':>12} {'ratio':>6}   IOPS per round")
        for name, vals in results.items():
            med = statistics.median(vals)
            ns = statistics.median(cpu[name])
            print(f"{name:<10} {med:>12,.0f} {med / base:>6.3f} {ns:>12.0f} {base_ns / ns:>6.3f}   "
                  + " ".join(f"{v:,.0f}" for v in vals))
        print("ratio = traced / baseline IOPS; CPU ratio = baseline / traced CPU time per read (the throughput "
              "ratio of a CPU-bound reader)")
        print(f"{'program':<36} {'runs':>12} {'ns/run':>8}   (kernel.bpf_stats_enabled, one run with both)")
        for prog, samples in sorted(costs.items()):
            runs = sum(c for c, _ in samples)
            ns = sum(t for _, t in samples)
            if runs:
                print(f"{prog:<36} {runs:>12,} {ns / runs:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
