#!/usr/bin/env python3
"""How often a completion the kernel made reaches no ioscope program, per disk, through the exporter.

The exporter reports, per disk, the requests the kernel completed (/proc/diskstats) that its programs
did not count: ioscope_disk_completions_unseen_total{device} (docs/exporter.md, 'Losses'). This bench
measures that rate honestly, per kind of disk: fio 4 KiB random I/O (direct, QD 16, --ios per run,
--runs runs) with the exporter attached to the one disk, and per run the kernel's completions (the
/proc/diskstats delta) and the exporter's unseen delta (scraped before and after, the disk idle):

  loop-none       a tmpfs loop device, no scheduler: timed from the kernel's request stamps
  loop-deadline   the same with mq-deadline
  loop-probes     the same, --timing probes (each bio followed from its queue event)
  vda (file)      the root disk (virtio-blk), through a 512 MiB file on its file system, if there is one

Run as root, under the live-test lock:
    flock /tmp/ioscope-live.lock python3 bench/exporter_unseen.py [--runs 5] [--ios 200000]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from prometheus_client.parser import text_string_to_metric_families

from ioscope.base import devices
from ioscope.base.testbed import LoopDevice, run_fio


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unseen(port: int, disk: str) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?name[]=ioscope_disk_completions_unseen_total",
                                  timeout=10).read().decode()
    return int(sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.labels.get("device") == disk))


def measure(disk: str, path: str, timing: str, runs: int, ios: int) -> tuple[int, int, list[int]]:
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "exporter", "-d", disk, "--timing", timing,
                          "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and "serving" in p.stdout.readline()
    total_k = total_u = 0
    per: list[int] = []
    try:
        for r in range(runs):
            time.sleep(0.5)
            u0, k0 = unseen(port, disk), devices.completed_requests(devices.read_diskstats()[disk])
            run_fio(path, rw="randrw", bs="4k", iodepth=16, number_ios=ios, size="512m")
            time.sleep(0.5)  # idle: the check is exact then
            k1 = devices.completed_requests(devices.read_diskstats()[disk])
            u1 = unseen(port, disk)
            total_k += k1 - k0
            total_u += u1 - u0
            per.append(u1 - u0)
            print(f"  {disk} {timing} run {r + 1}: {k1 - k0:,} completions, {u1 - u0} unseen", file=sys.stderr,
                  flush=True)
    finally:
        p.terminate()
        p.wait(timeout=20)
    return total_k, total_u, per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ios", type=int, default=200000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/exporter_unseen.py: run as root", file=sys.stderr)
        return 1
    rows = []
    for name, sched, timing in (("loop-none", "none", "auto"), ("loop-deadline", "mq-deadline", "auto"),
                                ("loop-probes", "none", "probes")):
        with LoopDevice(size_mb=1024, scheduler=sched) as dev:
            dev.set_queue("nomerges", "2")
            rows.append((name, *measure(dev.name, dev.path, timing, args.runs, args.ios)))
    if Path("/sys/block/vda").exists():  # a file on the root file system: the disk may not be opened (lockdown)
        f = Path(f"/var/tmp/ioscope-unseen-{os.getpid()}.fio")
        try:
            rows.append(("vda (file)", *measure("vda", str(f), "auto", args.runs, args.ios // 4)))
        finally:
            f.unlink(missing_ok=True)
    print(f"\nfio 4 KiB random direct I/O, QD16, {args.runs} runs; kernel completions (/proc/diskstats) and the "
          "exporter's ioscope_disk_completions_unseen_total, the disk idle at each end")
    print(f"{'disk':<15}{'completions':>13}{'unseen':>8}{'1 in':>10}  per run")
    for name, k, u, per in rows:
        one_in = f"{k / u:,.0f}" if u else "-"
        print(f"{name:<15}{k:>13,}{u:>8}{one_in:>10}  {' '.join(map(str, per))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
