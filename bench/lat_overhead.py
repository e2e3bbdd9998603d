#!/usr/bin/env python3
"""Overhead of `ioscope lat` against its peers, measured side by side in one run.

fio 4 KiB random reads, queue depth 32, libaio, direct, on a tmpfs-backed loop
device. Rounds alternate: nothing attached, `ioscope lat -D -O`, and the
bpftrace one-liner that does the same job (issue->complete latency histogram
keyed by (dev, sector)). Prints IOPS per configuration (median over rounds),
ratios to the untraced baseline, and the time each tracer needs from start to
tracing. Run as root: python3 bench/lat_overhead.py [--rounds N] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from ioscope.testbed import LoopDevice, run_fio

BPFTRACE_ONE_LINER = (
    "tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = nsecs; }"
    " tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/"
    " { @usecs = hist((nsecs - @start[args->dev, args->sector]) / 1000);"
    " delete(@start[args->dev, args->sector]); }"
)


class Tracer:
    """A tracer started in the background; ready when its 'tracing' marker appears."""

    def __init__(self, name: str, cmd: list[str], marker: str, stream: str) -> None:
        self.name, self.cmd, self.marker, self.stream = name, cmd, marker, stream
        self.proc: subprocess.Popen[str] | None = None
        self.startup_s = 0.0
        self.tmp = tempfile.NamedTemporaryFile("w+", prefix="bench-", dir="/dev/shm")

    def __enter__(self) -> Tracer:
        t0 = time.monotonic()
        out = self.tmp if self.stream == "stdout" else subprocess.DEVNULL
        err = self.tmp if self.stream == "stderr" else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=err, text=True)
        while self.marker not in Path(self.tmp.name).read_text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {Path(self.tmp.name).read_text()[-500:]}")
            time.sleep(0.002)
        self.startup_s = time.monotonic() - t0
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.tmp.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/lat_overhead.py: run as root (it loads BPF programs and makes loop devices)", file=sys.stderr)
        return 1
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    results: dict[str, list[float]] = {"baseline": [], "ioscope lat -D -O": [], "bpftrace one-liner": []}
    startup: dict[str, list[float]] = {"ioscope lat -D -O": [], "bpftrace one-liner": []}
    with LoopDevice(size_mb=1024) as dev:
        configs: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
            ("baseline", nullcontext),
            ("ioscope lat -D -O", lambda: Tracer("ioscope", [*ioscope, "lat", "-D", "-O"], "Tracing", "stderr")),
            ("bpftrace one-liner", lambda: Tracer(
                "bpftrace", ["bpftrace", "-e", 'BEGIN { printf("ready\\n"); } ' + BPFTRACE_ONE_LINER],
                "ready", "stdout")),
        ]
        run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=1)  # warm-up
        for r in range(args.rounds):
            for name, make in configs:
                with make() as tracer:
                    job = run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=args.seconds)
                results[name].append(float(job["read"]["iops"]))
                if isinstance(tracer, Tracer):
                    startup[name].append(tracer.startup_s)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in results.items()),
                  file=sys.stderr)
    base = statistics.median(results["baseline"])
    # each round's traced run against the baseline run next to it: the baseline itself moves
    paired = {name: statistics.median(t / b for t, b in zip(v, results["baseline"])) for name, v in results.items()}
    summary = {
        name: {"iops_median": statistics.median(v), "ratio": statistics.median(v) / base,
               "paired_ratio_median": paired[name],
               "iops_all": [round(x) for x in v],
               "startup_s": statistics.median(startup[name]) if startup.get(name) else None}
        for name, v in results.items()
    }
    if args.json:
        print(json.dumps({"rounds": args.rounds, "seconds": args.seconds, "results": summary}, indent=2))
        return 0
    print(f"fio 4KiB randread QD32 libaio direct, tmpfs loop device, {args.rounds} rounds x {args.seconds:g}s, "
          "alternating")
    print(f"{'configuration':<22}{'IOPS (median)':>15}{'ratio':>8}{'paired':>8}{'start->tracing':>16}")
    for name, s in summary.items():
        st = f"{s['startup_s']:.3f}s" if s["startup_s"] is not None else "-"
        print(f"{name:<22}{s['iops_median']:>15,.0f}{s['ratio']:>8.3f}{s['paired_ratio_median']:>8.3f}{st:>16}")
    print("ratio: median IOPS / median baseline IOPS; paired: median over rounds of IOPS / that round's baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
