#!/usr/bin/env python3
"""Overhead of `ioscope exporter`, side by side with an untraced baseline in one run.

fio 4 KiB random reads, queue depth 32, libaio, direct, on a 1 GiB tmpfs-backed loop device, with
each scheduler asked for (default: none and mq-deadline). In every round, in an order rotated from
round to round: nothing attached; the exporter with its default metrics (latency histograms from
the kernel's request stamps: one BPF program per I/O) and with `--per-process 10` (its queue
program knows who queued each I/O), each scraped every second as Prometheus would. Prints median
IOPS, the median (range) over rounds of each run's IOPS over its round's baseline, and with
--profile each configuration's BPF CPU time per I/O (lat_overhead.profile). Run as root, under the
live-test lock:
    flock /tmp/ioscope-live.lock python3 bench/exporter_overhead.py [--rounds N] [--seconds S] [--profile]

--rss SECONDS instead: does the exporter's memory stay flat while its series come and go? fio at full
rate on the same kind of device for SECONDS, short-lived dd processes one after another, --gap apart
(default 0.1 s; each a new pid doing 8 direct reads), the exporter with --per-process 50 --per-cgroup 20 and a short
--series-idle (--idle, default 30 s, so that places are freed and taken many times), scraped every
second; VmRSS (/proc/PID/status) sampled every --every seconds: the first sample (after --warmup), the
last, the largest, and the number of process series and the scrape's size:
    flock /tmp/ioscope-live.lock python3 bench/exporter_overhead.py --rss 600 [--every 30] [--idle 30]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
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


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def rss(seconds: float, every: float, warmup: float, idle: float, gap: float) -> None:
    """The exporter's VmRSS over a long run whose process series keep coming and going."""
    with LoopDevice(size_mb=1024) as dev, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        cmd = [sys.executable, "-m", "ioscope.cli", "exporter", "-d", dev.name, "--per-process", "50",
               "--per-cgroup", "20", "--series-idle", f"{idle:g}", "--listen", f"127.0.0.1:{port}"]
        stop = threading.Event()
        seen: list[tuple[int, int]] = []  # (process series, scrape bytes) per scrape
        spawned = [0]

        def scraper() -> None:
            while not stop.wait(1.0):
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
                named = sum(1 for ln in text.splitlines() if ln.startswith(b"ioscope_process_bytes_total{"))
                seen.append((named - 1, len(text)))  # less other

        def churn() -> None:  # new processes, gap seconds apart: pids the exporter has never seen
            rng = random.Random(1)
            while not stop.wait(gap):
                subprocess.run(["dd", f"if={dev.path}", "of=/dev/null", "bs=4k", "count=8", "iflag=direct",
                                f"skip={rng.randrange(200000)}"], capture_output=True, check=False)
                spawned[0] += 1

        fio = subprocess.Popen(["fio", "--name=rss", f"--filename={dev.path}", "--rw=randread", "--bs=4k",
                                "--iodepth=32", "--ioengine=libaio", "--direct=1", "--time_based",
                                f"--runtime={seconds + warmup + 5}", "--output-format=terse"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples: list[int] = []
        with Tracer("exporter", cmd, "serving", "stdout") as t:
            assert t.proc is not None
            threads = [threading.Thread(target=f) for f in (scraper, churn)]
            for th in threads:
                th.start()
            t0 = time.monotonic()
            try:
                time.sleep(warmup)
                while True:
                    samples.append(rss_kib(t.proc.pid))
                    elapsed = time.monotonic() - t0 - warmup
                    last = seen[-1] if seen else (0, 0)
                    print(f"{elapsed:6.0f}s  exporter {samples[-1] / 1024:.1f} MiB, {last[0]} process series, "
                          f"scrape {last[1]:,} bytes, {spawned[0]} processes so far", file=sys.stderr, flush=True)
                    if elapsed >= seconds:
                        break
                    time.sleep(min(every, seconds - elapsed))
            finally:
                stop.set()
                for th in threads:
                    th.join()
        fio.wait(timeout=120)
    terse = (fio.stdout.read() if fio.stdout else "").split(";")
    iops = float(terse[7]) if len(terse) > 7 else 0.0
    named = [n for n, _ in seen]
    print(f"{seconds:g} s, fio {iops:,.0f} IOPS, {spawned[0]} short-lived processes (each a new pid, {gap:g} s apart), "
          f"exporter --per-process 50 --per-cgroup 20 --series-idle {idle:g}, scraped every second "
          f"({len(seen)} scrapes); VmRSS every {every:g} s after {warmup:g} s:")
    print(f"{'first MiB':>10}{'last MiB':>10}{'max MiB':>10}{'change':>10}{'samples':>9}"
          f"{'series min-max':>16}{'scrape KiB max':>16}")
    print(f"{samples[0] / 1024:>10.1f}{samples[-1] / 1024:>10.1f}{max(samples) / 1024:>10.1f}"
          f"{(samples[-1] - samples[0]) / 1024:>+10.1f}{len(samples):>9}{min(named):>9}-{max(named):<6}"
          f"{max(b for _, b in seen) / 1024:>16.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--schedulers", default="none,mq-deadline", help="comma-separated (default: none,mq-deadline)")
    ap.add_argument("--profile", action="store_true", help="also the BPF CPU time per I/O of each configuration")
    ap.add_argument("--rss", type=float, metavar="SECONDS", help="measure memory over SECONDS instead (see above)")
    ap.add_argument("--every", type=float, default=30.0, help="--rss: seconds between samples (default 30)")
    ap.add_argument("--warmup", type=float, default=10.0, help="--rss: seconds before the first sample (default 10)")
    ap.add_argument("--idle", type=float, default=30.0, help="--rss: the exporter's --series-idle (default 30)")
    ap.add_argument("--gap", type=float, default=0.1,
                    help="--rss: seconds between two short-lived processes (default 0.1)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/exporter_overhead.py: run as root (BPF and loop devices)", file=sys.stderr)
        return 1
    if args.rss:
        rss(args.rss, args.every, args.warmup, args.idle, args.gap)
        return 0
    for sched in args.schedulers.split(","):
        with LoopDevice(size_mb=1024, scheduler=sched) as dev:
            configs: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
                ("baseline", nullcontext),
                ("exporter", lambda: exporter(dev.name)),
                ("exporter --per-process 10", lambda: exporter(dev.name, "--per-process", "10")),
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
