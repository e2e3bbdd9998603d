#!/usr/bin/env python3
"""Cost of fileslower's syscall hooks on their worst case: a tight loop of 4 KiB pread64 calls of a file in
the page cache (every call runs the enter program's fd lookup, a map update, and the exit program's
histogram), side by side in one run. Rounds alternate:
- none: nothing attached;
- fileslower: `ioscope fileslower` at its default threshold (10 ms: no cached read is slow, no event sent);
- fileslower -m 0: every call sent through the ring buffer (the tool prints them to /dev/null).
It prints each one's ns per call and its ratio to none's (1.00 is free).

Run as root from the repository: .venv/bin/python bench/fileslower_overhead.py [--calls 300000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); n = int(sys.argv[2]); pread = os.pread
for i in range(1000): pread(fd, 4096, 0)
t0 = time.perf_counter_ns()
for i in range(n): pread(fd, 4096, (i & 255) * 4096)
print((time.perf_counter_ns() - t0) / n)
"""


def loop_ns(path: str, calls: int) -> float:
    return float(subprocess.run([sys.executable, "-c", LOOP, path, str(calls)], capture_output=True, text=True,
                                check=True).stdout)


def with_tool(args: list[str], path: str, calls: int) -> float:
    tool = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "fileslower", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert tool.stderr is not None
        line = tool.stderr.readline()
        assert line.startswith("Tracing"), line + tool.stderr.read()
        return loop_ns(path, calls)
    finally:
        tool.send_signal(signal.SIGINT)
        tool.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.NamedTemporaryFile(dir=str(ROOT), prefix=".bench-") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        runs: dict[str, list[float]] = {"none": [], "fileslower": [], "fileslower -m 0": []}
        for _ in range(a.rounds):
            runs["none"].append(loop_ns(f.name, a.calls))
            runs["fileslower"].append(with_tool([], f.name, a.calls))
            runs["fileslower -m 0"].append(with_tool(["-m", "0"], f.name, a.calls))
            time.sleep(0.5)
    base = statistics.median(runs["none"])
    for name, v in runs.items():
        m = statistics.median(v)
        print(f"{name:<18} {m:8.0f} ns/call  ratio {m / base:5.2f}  (+{m - base:.0f} ns)  "
              f"rounds {[round(x) for x in v]}")


if __name__ == "__main__":
    main()
