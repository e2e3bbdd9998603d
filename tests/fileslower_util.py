"""Helpers of fileslower's live tests (host, acceptance and kernel matrix): a workload that times its own
calls, and fileslower run beside it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

from conftest import ioscope_cmd, json_lines

# python -c WORKLOAD PATH N: N O_DIRECT 8 KiB pwrite64 calls into an existing file, each followed by
# fdatasync, every call timed with time.monotonic_ns() around it (CLOCK_MONOTONIC, the BPF programs'
# clock); prints the timings as one JSON list [[call, t0, t1, returned, run_delay], ...] and exits.
# run_delay: the ns the thread waited for a CPU (/proc/thread-self/schedstat, read before t0 and after t1)
# around the call: a preemption between a clock read and the call's entry or exit (4.1 ms once in CI, two
# emulated guests beside it) is in the workload's time and not in the call's.
WORKLOAD = r"""
import json, mmap, os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
buf = mmap.mmap(-1, 8192)
buf.write(b"y" * 8192)
sched = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
def run_delay():
    return int(os.pread(sched, 128, 0).split()[1])
fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
out = []
for i in range(n):
    d0 = run_delay(); t0 = time.monotonic_ns(); r = os.pwrite(fd, buf, i * 8192); t1 = time.monotonic_ns()
    out.append(["pwrite64", t0, t1, r, run_delay() - d0])
    d0 = run_delay(); t0 = time.monotonic_ns(); os.fdatasync(fd); t1 = time.monotonic_ns()
    out.append(["fdatasync", t0, t1, 0, run_delay() - d0])
os.close(fd)
print(json.dumps(out), flush=True)
"""


def run_beside(cmd: list[str], args: list[str], env: dict[str, str] | None = None,
               start_timeout: float = 240.0) -> tuple[list[dict[str, Any]], list[list[Any]], str, int]:
    """ioscope fileslower ARGS -j in the background until it says it is tracing, then cmd (a WORKLOAD), then
    SIGINT: (fileslower's JSON lines, the workload's timings, fileslower's stderr, its exit code)."""
    tool = subprocess.Popen(ioscope_cmd("fileslower", *args, "-j"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})
    try:
        assert tool.stderr is not None
        deadline = time.monotonic() + start_timeout
        line = tool.stderr.readline()
        assert line.startswith("Tracing"), line + (tool.stderr.read() if tool.poll() is not None else "")
        assert time.monotonic() < deadline
        work = subprocess.run(cmd, capture_output=True, text=True, timeout=start_timeout)
        assert work.returncode == 0, work.stderr
        timings = json.loads(work.stdout.strip().splitlines()[-1])
        time.sleep(0.5)  # the last calls' records polled (every 0.1 s)
        tool.send_signal(signal.SIGINT)
        out, err = tool.communicate(timeout=start_timeout)
        return json_lines(out), timings, line + err, tool.returncode
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()


def calls_of(lines: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """fileslower's records of calls on path, in the order they returned."""
    return [r for r in lines if "call" in r and r["file"] == path]
