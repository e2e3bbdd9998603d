#!/usr/bin/env python3
"""The cost of deciding a flight-recorder trigger for the I/Os still in flight, on its worst case.

The worst case is a disk that always has I/O in flight: the slot table (4 MB) is then read once a second
for as long as the recorder runs, besides /proc/diskstats every 100 ms. Two workloads, traced by
`ioscope record --ring 20s -d DISK --trigger 'q2c > 2s' -w SECONDS`:
- fast: fio 4 KiB random reads, QD16, libaio, direct, on a 1 GiB tmpfs-backed loop device (scheduler
  none): the most events for the recorder, but the disk is seen idle now and then at a 100 ms reading;
- always busy: the same fio at QD8 on the slow disk of the tests (tests/slowdisk.py, 20 IOPS: each request
  waits ~400 ms in the lower device's throttle, so the upper disk never has nothing in flight).
The recorder says in its summary how much CPU the watching took and how often it read the table; the
bench takes the recorder's own CPU time (user + system, os.wait4's rusage) and prints the watching's
share of it and its milliseconds of CPU a second, per round and the median. Run as root:
    flock /tmp/ioscope-live.lock python3 bench/flight_inflight.py [--rounds 3] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ioscope.base.testbed import LoopDevice, fio_terse_read_iops

COST = re.compile(r"[Ww]atching the I/Os in flight took ([\d.]+) s of CPU \((\d+) reads? of the slot table\)")


def one_round(name: str, path: str, depth: int, seconds: float, out: str,
              popen: Callable[..., subprocess.Popen[str]] = subprocess.Popen) -> dict[str, float]:
    fio = popen(["fio", "--name=busy", f"--filename={path}", "--rw=randread", "--bs=4k",
                            f"--iodepth={depth}", "--ioengine=libaio", "--direct=1", "--time_based",
                            f"--runtime={seconds + 10:g}", "--output-format=terse"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
    rec = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "record", "--ring", "20s", "-d", name, "-q",
                            "--trigger", "q2c > 2s", "-w", f"{seconds:g}", "-o", f"{out}/busy"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert rec.stderr is not None
    err = rec.stderr.read()
    _, status, usage = os.wait4(rec.pid, 0)
    rec.returncode = os.waitstatus_to_exitcode(status)
    fio.terminate()
    iops = fio_terse_read_iops(fio.communicate()[0])
    m = COST.search(err)
    if rec.returncode != 0 or m is None:
        raise SystemExit(f"the recorder exited {rec.returncode}:\n{err}")
    total = usage.ru_utime + usage.ru_stime
    return {"total_s": total, "watch_s": float(m[1]), "reads": int(m[2]), "share": float(m[1]) / total,
            "iops": iops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/flight_inflight.py: run as root (BPF and loop devices)", file=sys.stderr)
        return 1
    out = tempfile.mkdtemp(prefix="ioscope-inflight-", dir="/dev/shm")
    from slowdisk import SlowDisk
    rows: dict[str, list[dict[str, float]]] = {"fast": [], "always busy": []}
    try:
        with LoopDevice(size_mb=1024, scheduler="none") as dev, SlowDisk(iops=20) as sd:
            for i in range(args.rounds):
                for what, name, path, depth, popen in (("fast", dev.name, dev.path, 16, subprocess.Popen),
                                                       ("always busy", sd.upper, sd.upper_path, 8, sd.popen)):
                    r = one_round(name, path, depth, args.seconds, out, popen)
                    rows[what].append(r)
                    print(f"round {i + 1}, {what}: recorder {r['total_s']:.2f} s of CPU in {args.seconds:g} s; "
                          f"watching the I/Os in flight {r['watch_s']:.3f} s ({r['share']:.2%}), {r['reads']} table "
                          f"reads; fio {r['iops']:,.0f} IOPS", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    for what, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"median, {what}: watching took {med['share']:.2%} of the recorder's CPU "
              f"({med['watch_s'] / args.seconds * 1e3:.1f} ms a second, {med['reads'] / args.seconds:.2f} table "
              f"reads a second) at {med['iops']:,.0f} IOPS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
