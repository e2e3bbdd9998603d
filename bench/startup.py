#!/usr/bin/env python3
"""Start-up of every tracing tool: launch -> its first BPF program attached, and -> its "ready" line.

Each tool is started the way a user starts it (a tmpfs loop device is the disk where a tool needs one);
the bench polls /proc/PID/fdinfo every millisecond for the first BPF link (tracing has begun: a program
is attached to its tracepoint) and reads the tool's own ready line (lat, agg, snoop: "Tracing ...";
record: its "Recording" line; exporter: "serving"), then stops it with SIGINT. Five runs each, the
median and the range. Goal (issue 14): tracing within 0.3 s of launch. Run as root:
    python3 bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from ioscope.base.testbed import LoopDevice


def first_link(pid: int) -> bool:
    base = f"/proc/{pid}/fdinfo"
    try:
        fds = os.listdir(base)
    except OSError:
        return False
    for fd in fds:
        try:
            with open(f"{base}/{fd}") as f:
                if "link_type:" in f.read():
                    return True
        except OSError:
            continue
    return False


def measure(cmd: list[str], marker: str, stream: str) -> tuple[float, float]:
    """(seconds to the first BPF link, seconds to the marker line) of one launch."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = p.stdout if stream == "stdout" else p.stderr
    assert out is not None
    t_link = t_mark = 0.0
    buf = ""
    try:
        while not (t_link and t_mark):
            if p.poll() is not None:
                raise RuntimeError(f"{cmd[3:]} exited: {buf[-400:]}{p.communicate()[1][-400:]}")
            if not t_link and first_link(p.pid):
                t_link = time.monotonic() - t0
            if not t_mark:
                r, _, _ = select.select([out], [], [], 0.001)
                if r:
                    buf += os.read(out.fileno(), 4096).decode(errors="replace")
                    if marker in buf:
                        t_mark = time.monotonic() - t0
            if time.monotonic() - t0 > 20:
                raise RuntimeError(f"{cmd[3:]}: no link or no {marker!r} within 20 s")
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
    return t_link, t_mark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/startup.py: run as root (BPF and loop devices)", file=sys.stderr)
        return 1
    io = [sys.executable, "-m", "ioscope.cli"]
    with LoopDevice(size_mb=64) as dev, tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        tools = {
            "lat": ([*io, "lat"], "Tracing", "stderr"),
            "lat -P": ([*io, "lat", "-P"], "Tracing", "stderr"),
            "agg": ([*io, "agg", "-e", "count() by comm,disk"], "Tracing", "stderr"),
            "snoop": ([*io, "snoop", "-d", dev.name], "Tracing", "stderr"),
            "record": ([*io, "record", "-d", dev.name, "-f", "-o", f"{tmp}/c"], "Recording", "stderr"),
            "top": ([*io, "top", "-b", "1"], "ioscope top", "stdout"),
            "exporter": ([*io, "exporter", "--listen", f"127.0.0.1:{free_port()}"], "serving", "stdout"),
        }
        print(f"{'tool':<10}{'first BPF link (median, range)':>34}{'ready line (median)':>22}")
        for name, (cmd, marker, stream) in tools.items():
            links, marks = [], []
            for _ in range(args.runs):
                a, b = measure(cmd, marker, stream)
                links.append(a)
                marks.append(b)
            ok = "" if statistics.median(links) <= 0.3 else "  > 0.3 s"
            print(f"{name:<10}{statistics.median(links):>16.3f} s ({min(links):.3f}-{max(links):.3f}){'':>4}"
                  f"{statistics.median(marks):>14.3f} s{ok}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
