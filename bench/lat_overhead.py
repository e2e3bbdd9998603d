#!/usr/bin/env python3
"""Overhead of `ioscope lat` against its peers, measured side by side in one run.

fio 4 KiB random reads, queue depth 32, libaio, direct, on a tmpfs-backed loop
device, with each scheduler asked for (default: none and mq-deadline). In every
round, in an order rotated from round to round: nothing attached;
`ioscope lat -D -O` (timed from the kernel's request stamps: one program per
I/O); the same with `--timing probes` (queue, issue and completion programs);
`ioscope lat -P` (per process: the probes); `ioscope lat -D -O -G` (per cgroup,
from the stamps); and the bpftrace one-liner that does lat's job
(issue->complete latency histogram keyed by (dev, sector)).
Prints IOPS per configuration (median over rounds), ratios to the untraced
baseline (also paired with each round's own baseline), and the time each tracer
needs from start to tracing. With --profile, one more run of each tracer with
kernel.bpf_stats_enabled=1 (restored after) gives the CPU time its BPF programs
take per I/O (run_time_ns of its programs, from bpftool, over fio's I/Os): a
number the IOPS noise of a 2-CPU machine does not blur. Run as root:
    python3 bench/lat_overhead.py [--rounds N] [--seconds S] [--schedulers none,mq-deadline] [--profile]
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

from ioscope.base.testbed import LoopDevice, run_fio

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


def held_progs(pid: int) -> list[dict[str, Any]]:
    """bpftool's records (name, run_time_ns, run_cnt, ...) of the BPF programs process pid holds (their ids
    from /proc/PID/fdinfo)."""
    ids = set()
    base = Path(f"/proc/{pid}/fdinfo")
    for fd in os.listdir(base):
        try:
            ids |= {int(ln.split()[1]) for ln in (base / fd).read_text().splitlines() if ln.startswith("prog_id:")}
        except OSError:
            continue
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                                      check=True).stdout)
    return [p for p in progs if int(p["id"]) in ids]


def bpf_ns(pid: int) -> tuple[int, int, int]:
    """(programs, run_time_ns, run_cnt) summed over the BPF programs process pid holds (bpftool's counters)."""
    mine = [p for p in held_progs(pid) if int(p.get("run_cnt", 0))]
    return len(mine), sum(int(p.get("run_time_ns", 0)) for p in mine), sum(int(p.get("run_cnt", 0)) for p in mine)


def profile(dev: Any, make: Callable[[], AbstractContextManager[Any]], seconds: float) -> dict[str, float]:
    """One run with kernel.bpf_stats_enabled=1: the tracer's BPF CPU time per I/O."""
    knob = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = knob.read_text().strip()
    knob.write_text("1")
    try:
        with make() as tracer:
            job = run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=seconds)
            n, ns, cnt = bpf_ns(tracer.proc.pid)
    finally:
        knob.write_text(old)
    ios = int(job["read"]["total_ios"])
    return {"programs": n, "bpf_ns_per_io": ns / ios, "runs_per_io": cnt / ios}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    ap.add_argument("--schedulers", default="none,mq-deadline", help="comma-separated (default: none,mq-deadline)")
    ap.add_argument("--profile", action="store_true", help="also the BPF CPU time per I/O of each tracer")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/lat_overhead.py: run as root (it loads BPF programs and makes loop devices)", file=sys.stderr)
        return 1
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    tracers = {
        "ioscope lat -D -O": [*ioscope, "lat", "-D", "-O"],
        "lat -D -O --timing probes": [*ioscope, "lat", "-D", "-O", "--timing", "probes"],
        "ioscope lat -P": [*ioscope, "lat", "-P"],
        # per cgroup: the cgroup of each request's bios read at its completion (four dependent loads)
        "ioscope lat -D -O -G": [*ioscope, "lat", "-D", "-O", "-G"],
    }
    out: dict[str, Any] = {}
    for sched in args.schedulers.split(","):
        results: dict[str, list[float]] = {"baseline": [], **{k: [] for k in tracers}, "bpftrace one-liner": []}
        startup: dict[str, list[float]] = {k: [] for k in results if k != "baseline"}
        with LoopDevice(size_mb=1024, scheduler=sched) as dev:
            configs: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [("baseline", nullcontext)]
            configs += [(name, lambda cmd=cmd: Tracer("ioscope", cmd, "Tracing", "stderr"))
                        for name, cmd in tracers.items()]
            configs.append(("bpftrace one-liner", lambda: Tracer(
                "bpftrace", ["bpftrace", "-e", 'BEGIN { printf("ready\\n"); } ' + BPFTRACE_ONE_LINER],
                "ready", "stdout")))
            run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=1)  # warm-up
            for r in range(args.rounds):
                shift = r % len(configs)
                for name, make in configs[shift:] + configs[:shift]:
                    with make() as tracer:
                        job = run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=args.seconds)
                    results[name].append(float(job["read"]["iops"]))
                    if isinstance(tracer, Tracer):
                        startup[name].append(tracer.startup_s)
                print(f"{sched} round {r + 1}/{args.rounds}: "
                      + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in results.items()), file=sys.stderr)
            prof = {name: profile(dev, make, args.seconds) for name, make in configs if name != "baseline"} \
                if args.profile else {}
        base = statistics.median(results["baseline"])
        # each round's traced run against that round's baseline: the baseline itself moves
        paired = {name: statistics.median(t / b for t, b in zip(v, results["baseline"]))
                  for name, v in results.items()}
        out[sched] = {
            name: {"iops_median": statistics.median(v), "ratio": statistics.median(v) / base,
                   "paired_ratio_median": paired[name],
                   "paired_min": min(t / b for t, b in zip(v, results["baseline"])),
                   "paired_max": max(t / b for t, b in zip(v, results["baseline"])),
                   "iops_all": [round(x) for x in v],
                   "startup_s": statistics.median(startup[name]) if startup.get(name) else None,
                   **prof.get(name, {})}
            for name, v in results.items()
        }
    if args.json:
        print(json.dumps({"rounds": args.rounds, "seconds": args.seconds, "results": out}, indent=2))
        return 0
    print(f"fio 4KiB randread QD32 libaio direct, tmpfs loop device, {args.rounds} rounds x {args.seconds:g}s, "
          "order rotated per round")
    for sched, summary in out.items():
        print(f"\nscheduler {sched}")
        print(f"{'configuration':<28}{'IOPS (median)':>15}{'ratio':>8}{'paired':>8}{'paired range':>15}"
              f"{'start->tracing':>16}{'progs':>6}{'runs/IO':>8}{'BPF ns/IO':>10}")
        for name, s in summary.items():
            st = f"{s['startup_s']:.3f}s" if s["startup_s"] is not None else "-"
            rng = f"{s['paired_min']:.3f}-{s['paired_max']:.3f}"
            pr = (f"{s['programs']:>6}{s['runs_per_io']:>8.2f}{s['bpf_ns_per_io']:>10.0f}" if "programs" in s
                  else f"{'-':>6}{'-':>8}{'-':>10}")
            print(f"{name:<28}{s['iops_median']:>15,.0f}{s['ratio']:>8.3f}{s['paired_ratio_median']:>8.3f}"
                  f"{rng:>15}{st:>16}{pr}")
    print("ratio: median IOPS / median baseline IOPS; paired: median (range) over rounds of IOPS / that round's "
          "baseline")
    if args.profile:
        print("progs: BPF programs of the tracer that ran; runs/IO: program runs per I/O; BPF ns/IO: their CPU "
              "time per I/O (bpf_stats_enabled run; the trampoline's own cost is not in it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
