#!/usr/bin/env python3
"""Resident memory of lat, top and record over a long run at full rate: does it stay flat?

fio 4 KiB random reads, QD32, libaio, direct, unthrottled, on a 1 GiB tmpfs-backed loop device for
--seconds (default 600), with three tools tracing that disk at once, the way a user runs them:
`ioscope lat -D -O 10` (a report every 10 s), `ioscope top -b 1` (a snapshot every second) and
`ioscope record -d DISK -f -o /dev/null` (every event through the recorder's consumer and writer;
/dev/null so that ten minutes at full rate need no disk space). VmRSS (/proc/PID/status) of each is
sampled every --every seconds (default 30); the table gives the first sample (after warm-up), the
last, the largest, and the change from first to last. All three share the CPUs with fio, so the
rate is below an unshared run's; what matters here is the memory. Run as root:
    flock /tmp/ioscope-live.lock python3 bench/rss_flat.py [--seconds 600] [--every 30]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from ioscope.base.testbed import LoopDevice, fio_terse_read_iops


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds before the first sample (default 10)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/rss_flat.py: run as root (BPF and loop devices)", file=sys.stderr)
        return 1
    io = [sys.executable, "-m", "ioscope.cli"]
    with LoopDevice(size_mb=1024) as dev:
        tools = {
            "lat -D -O 10": [*io, "lat", "-d", dev.name, "-D", "-O", "10"],
            "top -b 1": [*io, "top", "-b", "-d", dev.name, "1"],
            "record": [*io, "record", "-d", dev.name, "-f", "-o", "/dev/null"],
        }
        procs = {n: subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for n, c in tools.items()}
        fio = subprocess.Popen(["fio", "--name=rss", f"--filename={dev.path}", "--rw=randread", "--bs=4k",
                                "--iodepth=32", "--ioengine=libaio", "--direct=1", "--time_based",
                                f"--runtime={args.seconds + args.warmup}", "--output-format=terse"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples: dict[str, list[int]] = {n: [] for n in tools}
        t0 = time.monotonic()
        try:
            time.sleep(args.warmup)
            while True:
                for n, p in procs.items():
                    if p.poll() is not None:
                        raise SystemExit(f"{n} exited early: {p.stderr.read() if p.stderr else ''}")
                    samples[n].append(rss_kib(p.pid))
                elapsed = time.monotonic() - t0 - args.warmup
                print(f"{elapsed:6.0f}s  " + "  ".join(f"{n} {v[-1] / 1024:.1f} MiB" for n, v in samples.items()),
                      file=sys.stderr, flush=True)
                if elapsed >= args.seconds:
                    break
                time.sleep(min(args.every, args.seconds - elapsed))
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            errs = {n: p.communicate(timeout=120)[1] for n, p in procs.items()}
            fio.wait(timeout=120)
    iops = fio_terse_read_iops(fio.stdout.read() if fio.stdout else "")
    print(f"{args.seconds:g} s at full rate (fio {iops:,.0f} IOPS beside the three tools), VmRSS sampled every "
          f"{args.every:g} s after {args.warmup:g} s of warm-up:")
    print(f"{'tool':<14}{'first MiB':>10}{'last MiB':>10}{'max MiB':>10}{'change':>10}{'samples':>9}")
    for n, v in samples.items():
        print(f"{n:<14}{v[0] / 1024:>10.1f}{v[-1] / 1024:>10.1f}{max(v) / 1024:>10.1f}"
              f"{(v[-1] - v[0]) / 1024:>+10.1f}{len(v):>9}")
    rec = [ln for ln in errs["record"].splitlines() if ln.startswith("Recorded")]
    if rec:
        print(f"record: {rec[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
