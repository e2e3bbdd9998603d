#!/usr/bin/env python3
"""Overhead of `ioscope record` vs. no tracing vs. the kernel's ftrace blk tracer.

fio 4 KiB random reads, QD32, direct, libaio on a tmpfs-backed loop device;
in every round the set-ups run back to back (order rotated per round):
  base    nothing attached
  record  ioscope record -o /dev/shm/<file> -d <loop>
  blk     the kernel's blk tracer on the loop device, trace_pipe copied to a file on /dev/shm
and, with --modes, the recorder taken apart (its programs attached to every tracepoint,
stopping early; see targ_stop_at in bpf/record.bpf.c):
  attach   programs return at once: the cost of running a BPF program per event at all
  clock    programs read the clock and return
  fields   programs read every field of the event and return, before the ring
  discard  complete programs; the consumer empties the rings and throws the events away
and record-a:NAME[+NAME...], ioscope record -a NAME [-a NAME...] (blktrace's action mask), e.g.
  --modes base,record,record-a:complete,record-a:issue+complete,record-a:queue,record-a:write
and ring:DURATION|SIZE[:NAME+NAME...][:trigger], the flight recorder (record --ring, with that action
mask, and with a --trigger condition evaluated in the kernel that never matches: its cost), e.g.
  --modes base,record,ring:30s,ring:256M,ring:30s:complete,ring:30s::trigger
Prints IOPS per run, ratios to the baseline of the same round, and records lost.

    sudo .venv/bin/python bench/record_overhead.py [--rounds 3] [--runtime 5] [--profile]

--profile also measures the BPF programs' own cost (run_time_ns / run_cnt from
bpf_prog_info, with kernel.bpf_stats_enabled=1 during that run; restored after).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ioscope.base.testbed import LoopDevice, run_fio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from blk_tracer import BlkTracer


def fio_iops(path: str, runtime: float) -> float:
    job = run_fio(path, rw="randread", bs="4k", iodepth=32, runtime=runtime, size="900M")
    return float(job["read"]["iops"])


def run_base(ld: LoopDevice, runtime: float, tmp: str) -> tuple[float, str]:
    return fio_iops(ld.path, runtime), ""


def traced(ld: LoopDevice, runtime: float, args: list[str], ready: str) -> tuple[float, str]:
    """fio's IOPS while `ioscope ARGS` runs (started, then stopped with SIGTERM); its stderr."""
    p = subprocess.Popen([sys.executable, "-m", "ioscope.cli", *args], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, text=True)
    assert p.stderr is not None
    first = p.stderr.readline()
    if not first.startswith(ready):
        raise SystemExit(f"ioscope {' '.join(args)} failed: {first}{p.stderr.read()}")
    try:
        iops = fio_iops(ld.path, runtime)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate()
    return iops, err


def run_record(ld: LoopDevice, runtime: float, tmp: str, masks: tuple[str, ...] = ()) -> tuple[float, str]:
    out = f"{tmp}/bench.ioscope"
    iops, err = traced(ld, runtime, ["record", "-o", out, "-f", "-d", ld.name, "-q",
                                     *(a for m in masks for a in ("-a", m))], "Recording")
    size = os.path.getsize(out)
    os.unlink(out)
    m = re.search(r"Recorded ([\d,]+) events.*lost (\d+)", err)
    if not m:
        raise SystemExit(f"unexpected record output: {err}")
    return iops, f"{int(m.group(1).replace(',', '')):,} events, {size >> 20} MiB, lost {m.group(2)}"


def run_blk(ld: LoopDevice, runtime: float, tmp: str) -> tuple[float, str]:
    out = f"{tmp}/bench.blktrace.txt"
    with BlkTracer(ld.name, output=out) as bt:
        iops = fio_iops(ld.path, runtime)
        bt.stop()
        lost = bt.overruns()
    with open(out, "rb") as f:
        lines = sum(1 for _ in f)
    os.unlink(out)
    return iops, f"{lines:,} lines, kernel overruns {lost}"


def run_partial(stop_at: int) -> Any:
    """The recorder's programs attached, stopping at stage stop_at (0: whole), rings emptied and discarded."""
    def run(ld: LoopDevice, runtime: float, tmp: str) -> tuple[float, str]:
        from ioscope.engines.recording.recorder import POLL_MS, Recorder, RecorderOptions
        rec = Recorder(RecorderOptions(disks=[ld.device], stop_at=stop_at))
        stop = threading.Event()
        taken = [0]

        def consume() -> None:
            while not stop.is_set():
                taken[0] += len(rec.poll(POLL_MS))
        t = threading.Thread(target=consume)
        t.start()
        try:
            iops = fio_iops(ld.path, runtime)
        finally:
            stop.set()
            t.join()
            lost = rec.losses().lost
            rec.close()
        return iops, f"{taken[0]:,} events taken and discarded, lost {lost}"
    return run


def run_masked(spec: str) -> Any:
    """record-a:NAME[+NAME...]: ioscope record -a NAME -a NAME (blktrace's action mask)."""
    masks = tuple(spec.split(":", 1)[1].split("+"))

    def run(ld: LoopDevice, runtime: float, tmp: str) -> tuple[float, str]:
        return run_record(ld, runtime, tmp, masks)
    return run


def run_ring(spec: str) -> Any:
    """ring:DURATION|SIZE[:NAME+NAME...][:trigger]: ioscope record --ring (the flight recorder)."""
    parts = spec.split(":")
    ring = parts[1]
    masks = tuple(a for a in (parts[2].split("+") if len(parts) > 2 else []) if a)
    trigger = len(parts) > 3 and parts[3] == "trigger"

    def run(ld: LoopDevice, runtime: float, tmp: str) -> tuple[float, str]:
        iops, err = traced(ld, runtime, ["record", "--ring", ring, "-o", f"{tmp}/flight", "-d", ld.name, "-q",
                                         *(a for m in masks for a in ("-a", m)),
                                         *(["--trigger", "q2c > 10s"] if trigger else [])], "Flight recorder")
        m = re.search(r"([\d,]+) events seen, the ring held the last ([\d.]+) s \(([^)]*)\).*lost (\d+)", err)
        if not m:
            raise SystemExit(f"unexpected record --ring output: {err}")
        return iops, f"{m.group(1)} events seen, ring {m.group(2)} s ({m.group(3)}), lost {m.group(4)}"
    return run


MODES = {"base": run_base, "record": run_record, "blk": run_blk, "attach": run_partial(1),
         "clock": run_partial(2), "fields": run_partial(3), "discard": run_partial(0)}


def profile(ld: LoopDevice, runtime: float) -> None:
    """The recorder's BPF programs: ns per run, measured by the kernel."""
    from ioscope.capture.store import CaptureWriter
    from ioscope.engines.recording.recorder import Recorder, RecorderOptions, capture_meta
    from ioscope.engines.recording.session import RecordSession
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = stats.read_text().strip()
    stats.write_text("1")
    rec = Recorder(RecorderOptions(disks=[ld.device]))
    try:
        with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="ioscope-prof-") as tf:
            session = RecordSession(rec, CaptureWriter(tf.name, capture_meta(rec), force=True))
            session.start()
            t0 = time.process_time()
            job = run_fio(ld.path, rw="randread", bs="4k", iodepth=32, runtime=runtime, size="900M")
            iops, ios = float(job["read"]["iops"]), int(job["read"]["total_ios"])
            session.stop("bench")
            session.thread.join()
            cpu = time.process_time() - t0
        print(f"profile: {iops:,.0f} IOPS while recording; recorder process CPU {cpu:.2f}s in {runtime:g}s")
        total = 0.0
        for prog in rec.bpf.attached:
            info = rec.bpf.obj.prog_info(prog)
            n, ns = int(info.get("run_cnt", 0)), int(info.get("run_time_ns", 0))
            if n:
                total += ns  # runs for other disks' I/O (filtered out early) are included
                print(f"  {prog:22s} {n:>10,} runs {ns / n:7.0f} ns/run")
        print(f"  all programs: {total / 1e9:.2f} CPU-s in {runtime:g}s "
              f"({total / 1e9 / runtime / (os.cpu_count() or 1) * 100:.1f}% of the machine)")
        print(f"  fio completed {ios:,} I/Os")
        print(f"  CPU added per I/O: BPF programs {total / ios / 1e3:.2f} us + recorder process "
              f"{cpu * 1e6 / ios:.2f} us (a quiet 2-CPU machine spends ~7.2 us per I/O at 277k IOPS)")
    finally:
        rec.close()
        stats.write_text(old)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=float, default=5.0)
    ap.add_argument("--modes", default="base,record,blk")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--scheduler", default="mq-deadline", help="I/O scheduler of the loop device")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m.startswith("record-a:"):
            MODES[m] = run_masked(m)
        elif m.startswith("ring:"):
            MODES[m] = run_ring(m)
        elif m not in MODES:
            raise SystemExit(f"unknown mode {m}: choose from {', '.join(MODES)} or record-a:NAME[+NAME...]")
    results: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes if m != "base"}
    tmp = tempfile.mkdtemp(prefix="ioscope-bench-", dir="/dev/shm")
    print(f"fio randread 4k QD32 direct libaio, {args.runtime:g}s per run, {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    try:
        with LoopDevice(size_mb=1024, scheduler=args.scheduler) as ld:
            sched = Path(f"/sys/block/{ld.name}/queue/scheduler").read_text().strip()
            print(f"device {ld.name} on tmpfs, scheduler {sched}")
            run_fio(ld.path, rw="randread", bs="4k", iodepth=32, runtime=1, size="900M")  # warm-up
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[: r % len(modes)]
                got: dict[str, float] = {}
                for m in order:
                    iops, note = MODES[m](ld, args.runtime, tmp)
                    got[m] = iops
                    results[m].append(iops)
                    print(f"round {r + 1} {m:7s} {iops:>10,.0f} IOPS  {note}", flush=True)
                if "base" in got:
                    for m in ratios:
                        ratios[m].append(got[m] / got["base"])
            print()
            for m in modes:
                line = f"{m:7s} median {statistics.median(results[m]):>10,.0f} IOPS"
                if m in ratios:
                    line += f"  ratio to base: median {statistics.median(ratios[m]):.2f} " \
                            f"(rounds: {', '.join(f'{x:.2f}' for x in ratios[m])})"
                print(line)
            if args.profile:
                print()
                profile(ld, args.runtime)
    finally:
        for f in Path(tmp).iterdir():
            f.unlink()
        os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
