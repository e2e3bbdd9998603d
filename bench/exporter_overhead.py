#!/usr/bin/env python3
"""Overhead of `ioscope exporter`, side by side with an untraced baseline in one run.

fio 4 KiB random reads, queue depth 32, libaio, direct, on a 1 GiB tmpfs-backed loop device, with
each scheduler asked for (default: none and mq-deadline). In every round, in an order rotated from
round to round: nothing attached; the exporter with its default metrics (latency histograms from
the kernel's request stamps: one BPF program per I/O); with `--per-process 50 --per-cgroup 20
--no-cgroup-latency` (agg's queue program: who queued each I/O); and as contrib's unit runs it,
`--per-process 50 --per-cgroup 20` (with the per-cgroup q2c and d2c histograms agg follows each bio
from its queue event), each scraped every second as Prometheus would. Prints median IOPS, the
median (range) over rounds of each run's IOPS over its round's baseline, and with --profile each
configuration's BPF CPU time per I/O (lat_overhead.profile). Run as root, under the live-test lock:
    flock /tmp/ioscope-live.lock python3 bench/exporter_overhead.py [--rounds N] [--seconds S] [--profile]

Memory and scrape time on a churning host: bench/exporter_memory.py.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ioscope.base.testbed import LoopDevice, run_fio
from lat_overhead import Tracer, profile


@contextmanager
def exporter(disk: str, *extra: str) -> Iterator[Tracer]:
    """The exporter on a free port, scraped every second while the block runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "ioscope.cli", "exporter", "-d", disk, *extra, "--listen", f"127.0.0.1:{port}"]
    stop = threading.Event()

    def scraper() -> None:
        while not stop.wait(1.0):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()

    with Tracer("exporter", cmd, "serving", "stdout") as t:
        th = threading.Thread(target=scraper)
        th.start()
        try:
            yield t
        finally:
            stop.set()
            th.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--schedulers", default="none,mq-deadline", help="comma-separated (default: none,mq-deadline)")
    ap.add_argument("--profile", action="store_true", help="also the BPF CPU time per I/O of each configuration")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/exporter_overhead.py: run as root (BPF and loop devices)", file=sys.stderr)
        return 1
    for sched in args.schedulers.split(","):
        with LoopDevice(size_mb=1024, scheduler=sched) as dev:
            configs: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
                ("baseline", nullcontext),
                ("exporter", lambda: exporter(dev.name)),
                ("+ counters per process/cgroup", lambda: exporter(dev.name, "--per-process", "50", "--per-cgroup",
                                                                   "20", "--no-cgroup-latency")),
                ("+ cgroup latency (the unit)", lambda: exporter(dev.name, "--per-process", "50", "--per-cgroup",
                                                                 "20")),
            ]
            iops: dict[str, list[float]] = {n: [] for n, _ in configs}
            paired: dict[str, list[float]] = {n: [] for n, _ in configs}
            run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=1)  # warm-up
            for r in range(args.rounds):
                got: dict[str, float] = {}
                for name, make in configs[r % len(configs):] + configs[:r % len(configs)]:
                    with make():
                        got[name] = float(run_fio(dev.path, rw="randread", bs="4k", iodepth=32,
                                                  runtime=args.seconds)["read"]["iops"])
                for name, v in got.items():
                    iops[name].append(v)
                    paired[name].append(v / got["baseline"])
                print(f"{sched} round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v:,.0f}" for k, v in got.items()),
                      file=sys.stderr, flush=True)
            prof = {n: profile(dev, make, args.seconds) for n, make in configs if n != "baseline"} \
                if args.profile else {}
        print(f"\nscheduler {sched}: fio 4KiB randread QD32 libaio direct, tmpfs loop device, {args.rounds} rounds "
              f"x {args.seconds:g}s, rotated, scraped every second")
        print(f"{'configuration':<28}{'IOPS (median)':>15}{'ratio':>8}{'range':>14}{'progs':>6}{'BPF ns/IO':>10}")
        for name in iops:
            p = prof.get(name)
            pr = f"{p['programs']:>6}{p['bpf_ns_per_io']:>10.0f}" if p else f"{'-':>6}{'-':>10}"
            print(f"{name:<28}{statistics.median(iops[name]):>15,.0f}{statistics.median(paired[name]):>8.3f}"
                  f"{min(paired[name]):>7.3f}-{max(paired[name]):.3f}{pr}", flush=True)
    print("ratio: median (range) over rounds of IOPS / that round's baseline; progs, BPF ns/IO (--profile): "
          "programs that ran and their CPU time per I/O")
    return 0


if __name__ == "__main__":
    sys.exit(main())
