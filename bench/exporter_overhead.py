#!/usr/bin/env python3
"""Overhead of `ioscope exporter`, side by side with an untraced baseline in one run.

fio 4 KiB random reads, queue depth 32, libaio, direct, on a tmpfs-backed loop device. Rounds
alternate: nothing attached, then the exporter (--per-process 10) scraped every second as Prometheus
would. Prints median IOPS per configuration and the ratio. Run as root, under the live-test lock:
flock /tmp/ioscope-live.lock python3 bench/exporter_overhead.py [--rounds N] [--seconds S]
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from ioscope.testbed import LoopDevice, run_fio


def iops(dev: str, seconds: float) -> float:
    job = run_fio(dev, rw="randread", bs="4k", iodepth=32, runtime=seconds)
    return float(job["read"]["iops"])


def with_exporter(dev: str, name: str, seconds: float) -> tuple[float, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "exporter", "-d", name, "--per-process", "10",
                          "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and "serving" in p.stdout.readline()
    stop = threading.Event()
    scrapes = [0]

    def scraper() -> None:
        while not stop.wait(1.0):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
            scrapes[0] += 1

    t = threading.Thread(target=scraper)
    t.start()
    try:
        return iops(dev, seconds), scrapes[0]
    finally:
        stop.set()
        t.join()
        p.send_signal(signal.SIGTERM)
        if p.wait(timeout=10) != 0:
            raise SystemExit("the exporter did not exit 0")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    base: list[float] = []
    exp: list[float] = []
    with LoopDevice(256) as dev:
        run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=1)  # warm-up
        for _ in range(args.rounds):
            base.append(iops(dev.path, args.seconds))
            v, n = with_exporter(dev.path, dev.name, args.seconds)
            exp.append(v)
            print(f"round: baseline {base[-1]:.0f} IOPS, exporter {v:.0f} IOPS ({n} scrapes)", flush=True)
    b, e = statistics.median(base), statistics.median(exp)
    print(f"median IOPS: baseline {b:.0f}, exporter {e:.0f}, ratio {e / b:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
