#!/usr/bin/env python3
"""Cost of fileslower's syscall hooks on their worst cases, side by side in one run (rounds alternate):

- `pread 4k cached`: a C loop of 4 KiB pread64 calls of a file in the page cache: every call is followed
  (the enter program's fd lookup and the thread's map entry, the exit program's histogram), the cheapest
  real call;
- `read /dev/zero`: dd's read and write of character devices: the calls are followed by number, and end
  at the fd lookup (not a regular file nor a block device);
- `getppid`: `perf bench syscall basic`, a call fileslower does not follow: what every other system call of
  the host pays, the kernel's syscall tracing slow path and, since fileslower hooks raw_syscalls:sys_enter
  and sys_exit, both of its programs, which end at the syscall number's table.

docs/fileslower.md (Overhead) has the numbers of the classic per-call tracepoints and of the raw ones.

Each against nothing attached (`none`), `ioscope fileslower` at its default threshold (10 ms: no cached
call is slow, no event sent) and `ioscope fileslower --hist` (no lines at all). It prints ns per call and
the ratio to none's (1.00 is free).

Run as root from the repository: .venv/bin/python bench/fileslower_overhead.py [--calls 2000000] [--rounds 3]
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREAD_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDONLY); long n = atol(argv[2]); static char buf[4096]; struct timespec a, b;
    if (fd < 0) { perror(argv[1]); return 1; }
    for (long i = 0; i < 10000; i++) pread(fd, buf, 4096, (i & 255) * 4096);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) if (pread(fd, buf, 4096, (i & 255) * 4096) != 4096) return 1;
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
"""


def workloads(tmp: Path, calls: int) -> dict[str, object]:
    src, exe, data = tmp / "pread.c", tmp / "pread", tmp / "data"
    src.write_text(PREAD_C)
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    data.write_bytes(os.urandom(1 << 20))

    def pread() -> float:
        return float(subprocess.run([str(exe), str(data), str(calls)], capture_output=True, text=True,
                                    check=True).stdout)

    def zero() -> float:
        n = calls // 2
        t = time.perf_counter_ns()
        subprocess.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=4k", f"count={n}"], check=True,
                       capture_output=True)
        return (time.perf_counter_ns() - t) / (2 * n)  # a read and a write a block

    def getppid() -> float:
        out = subprocess.run(["perf", "bench", "syscall", "basic", "-l", str(calls)], capture_output=True,
                             text=True, check=True).stdout
        m = re.search(r"([\d.]+) usecs/op", out)
        assert m, out
        return float(m.group(1)) * 1000

    return {"pread 4k cached": pread, "read /dev/zero": zero, "getppid": getppid}


def run_with(args: list[str] | None, work: dict[str, object]) -> dict[str, float]:
    if args is None:
        return {k: f() for k, f in work.items()}  # type: ignore[operator]
    tool = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "fileslower", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert tool.stderr is not None
        line = tool.stderr.readline()
        assert line.startswith("Tracing"), line + tool.stderr.read()
        return {k: f() for k, f in work.items()}  # type: ignore[operator]
    finally:
        tool.send_signal(signal.SIGINT)
        tool.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    modes: dict[str, list[str] | None] = {"none": None, "fileslower": [], "fileslower --hist": ["--hist"]}
    with tempfile.TemporaryDirectory(dir=str(ROOT), prefix=".bench-") as d:
        work = workloads(Path(d), a.calls)
        runs: dict[str, dict[str, list[float]]] = {m: {w: [] for w in work} for m in modes}
        for _ in range(a.rounds):
            for m, args in modes.items():
                for w, v in run_with(args, work).items():
                    runs[m][w].append(v)
            time.sleep(0.5)
    for w in work:
        base = statistics.median(runs["none"][w])
        for m in modes:
            v = runs[m][w]
            med = statistics.median(v)
            print(f"{w:<16} {m:<18} {med:8.1f} ns/call  ratio {med / base:5.2f}  (+{med - base:.0f} ns)  "
                  f"rounds {[round(x) for x in v]}")


if __name__ == "__main__":
    main()
