#!/usr/bin/env python3
"""The exporter's memory and scrape time on a churning host, side by side with node_exporter (the
exporter every such host already runs) in one run.

A tmpfs-backed loop device; fio 4 KiB random reads at --iops; N short-lived processes (default 10,000)
one after another, each a new pid, under 200 names (copies of dd called p000 ... p199) spread over 20
cgroups (the hierarchy the io controller is on), each doing 8 direct 4 KiB reads. The exporter runs as
contrib's unit runs it (--per-process 50 --per-cgroup 20: ~1,000 series with the per-cgroup
histograms) with --series-window 10 (places change hands often); node_exporter (Debian's
prometheus-node-exporter, default collectors) beside it. Both are scraped every second, as
Prometheus would; every --every seconds: VmRSS (/proc/PID/status) of each, and of each the series,
bytes, and median and 99th percentile scrape time since the last line. Run as root, under the
live-test lock:
    flock /tmp/ioscope-live.lock python3 bench/exporter_memory.py [--seconds 300] [--procs 10000]
The 20-minute soak (the issue's run): --seconds 1200 --procs 40000.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopDevice, TestCgroups, fio_terse_read_iops

NAMES = 200
GROUPS = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Scraped:
    """A server scraped every second: each scrape's time (s), series and bytes."""

    def __init__(self, name: str, port: int) -> None:
        self.name, self.port = name, port
        self.times: list[float] = []
        self.series = self.size = 0
        self.failures = 0

    def scrape(self) -> None:
        t = time.perf_counter()
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read()
        except OSError:
            self.failures += 1
            return
        self.times.append(time.perf_counter() - t)
        self.series = sum(1 for ln in text.splitlines() if ln and not ln.startswith(b"#"))
        self.size = len(text)

    def take(self) -> list[float]:
        out, self.times = self.times, []
        return out


def wait_port(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing serves on port {port}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--procs", type=int, default=10000, help="short-lived processes over the run (default 10000)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between two lines (default 30)")
    ap.add_argument("--iops", type=int, default=20000, help="fio's rate (default 20000)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/exporter_memory.py: run as root (BPF, loop devices, cgroups)", file=sys.stderr)
        return 1
    node_exe = shutil.which("prometheus-node-exporter")
    io = io_cgroup_root()
    assert io is not None, "no cgroup hierarchy with the io controller"
    tmp = Path(tempfile.mkdtemp(prefix="ioscope-bench-"))
    procs: list[subprocess.Popen[Any]] = []
    stop = threading.Event()
    spawned = [0]
    cg = TestCgroups(io[0], "ioscope-bench", [f"g{g:02d}" for g in range(GROUPS)])
    try:
        dd = shutil.which("dd") or "/bin/dd"
        for i in range(NAMES):
            shutil.copy(dd, tmp / f"p{i:03d}")
        with LoopDevice(size_mb=1024) as dev:
            eport, nport = free_port(), free_port()
            exporter = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "exporter", "-d", dev.name,
                                         "--listen", f"127.0.0.1:{eport}", "--per-process", "50", "--per-cgroup",
                                         "20", "--series-window", "10"], stdout=subprocess.DEVNULL)
            procs.append(exporter)
            servers = [Scraped("ioscope exporter", eport)]
            if node_exe:
                node = subprocess.Popen([node_exe, f"--web.listen-address=127.0.0.1:{nport}"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(node)
                servers.append(Scraped("node_exporter", nport))
            for s in servers:
                wait_port(s.port)
            pids = {servers[0].name: exporter.pid, **({servers[1].name: procs[1].pid} if node_exe else {})}
            fio = subprocess.Popen(["fio", "--name=mem", f"--filename={dev.path}", "--rw=randread", "--bs=4k",
                                    "--iodepth=8", "--ioengine=libaio", "--direct=1", f"--rate_iops={args.iops}",
                                    "--time_based", f"--runtime={args.seconds + 10}", "--output-format=terse"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(fio)
            gap = args.seconds / args.procs

            def churn() -> None:  # new pids, 200 names, 20 cgroups
                rng = random.Random(1)
                i = 0
                nxt = time.monotonic()
                while not stop.is_set() and i < args.procs:
                    subprocess.run(cg.shell(f"g{i % GROUPS:02d}", f"{tmp}/p{rng.randrange(NAMES):03d} "
                                            f"if={dev.path} of=/dev/null bs=4k count=8 iflag=direct "
                                            f"skip={rng.randrange(200000)} status=none"), check=False)
                    i += 1
                    spawned[0] = i
                    nxt += gap
                    time.sleep(max(0.0, nxt - time.monotonic()))

            def scraper() -> None:
                while not stop.wait(1.0):
                    for s in servers:
                        s.scrape()

            threads = [threading.Thread(target=f) for f in (churn, scraper)]
            for th in threads:
                th.start()
            t0 = time.monotonic()
            first: dict[str, float] = {}
            peak: dict[str, float] = {}
            all_times: dict[str, list[float]] = {s.name: [] for s in servers}
            print(f"{'t (s)':>6} {'processes':>9}  " + "  ".join(
                f"{s.name + ' MiB':>22} {'series':>7} {'KiB':>6} {'p50 ms':>7} {'p99 ms':>7}" for s in servers))
            while True:
                time.sleep(args.every)
                elapsed = time.monotonic() - t0
                cols = []
                for s in servers:
                    m = rss_mib(pids[s.name])
                    first.setdefault(s.name, m)
                    peak[s.name] = max(peak.get(s.name, 0.0), m)
                    ts = sorted(s.take())
                    all_times[s.name] += ts
                    p50 = statistics.median(ts) * 1000 if ts else float("nan")
                    p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1000 if ts else float("nan")
                    cols.append(f"{m:>22.1f} {s.series:>7} {s.size / 1024:>6.0f} {p50:>7.1f} {p99:>7.1f}")
                print(f"{elapsed:>6.0f} {spawned[0]:>9}  " + "  ".join(cols), flush=True)
                if elapsed >= args.seconds:
                    break
            stop.set()
            for th in threads:
                th.join()
            fio.wait(timeout=60)
            iops = fio_terse_read_iops(fio.stdout.read() if fio.stdout else "")
        print(f"\n{args.seconds:g} s, fio {iops:,.0f} IOPS, {spawned[0]:,} short-lived processes ({NAMES} names, "
              f"{GROUPS} cgroups), scraped every second; exporter --per-process 50 --per-cgroup 20 --series-window 10")
        print(f"{'':<18}{'RSS first':>10}{'last':>8}{'max':>8}{'scrapes':>9}{'failed':>7}{'p50 ms':>8}{'p99 ms':>8}"
              f"{'series':>8}")
        for s in servers:
            ts = sorted(all_times[s.name])
            p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1000
            print(f"{s.name:<18}{first[s.name]:>10.1f}{rss_mib(pids[s.name]):>8.1f}{peak[s.name]:>8.1f}{len(ts):>9}"
                  f"{s.failures:>7}{statistics.median(ts) * 1000:>8.1f}{p99:>8.1f}{s.series:>8}")
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        cg.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
