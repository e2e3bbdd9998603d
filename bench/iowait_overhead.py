#!/usr/bin/env python3
"""Cost of measuring I/O waits (bpf/iowait.bpf.h: a program on every sched_switch and sched_wakeup), on
its worst case: a context-switch storm, side by side in one run.

The workload is `perf bench sched pipe` (two processes passing a token through pipes: two switches and
two wakeups an operation, nothing else). Rounds alternate, in one run:
- none: nothing attached, delay accounting off (the default since 5.14);
- top: `ioscope top --batch 1` running (every program of top: the block ones, which this workload does
  not fire, and the two scheduler ones, which it fires on every operation);
- delayacct: kernel.task_delayacct=1, what iotop needs for its IO> column (the kernel's own accounting,
  on every dequeue and wakeup);
- exporter: `ioscope exporter --per-process 10 --per-cgroup 10` (agg's object: its I/O wait series add
  the same scheduler programs, whose records go to agg's expressions);
- exporter --no-io-wait: the same without the wait series (no scheduler program).
It prints each one's time per operation against none's (a ratio: lower is better, 1.00 is free), and
the kernel's own run time of each tool's scheduler programs (bpf_stats: ns a run, runs an operation).

Run as root from the repository: .venv/bin/python bench/iowait_overhead.py [--loops 300000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from top_overhead import enable_bpf_stats, prog_ids  # noqa: E402

DELAYACCT = Path("/proc/sys/kernel/task_delayacct")


def pipe_us(loops: int) -> float:
    """perf bench sched pipe's time per operation (µs)."""
    out = subprocess.run(["perf", "bench", "sched", "pipe", "-l", str(loops)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"([\d.]+) usecs/op", out)
    assert m, out
    return float(m.group(1))


def top_programs(pid: int) -> dict[str, tuple[int, int]]:
    """(run_time_ns, run_cnt) of the scheduler programs a top process holds, by name."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    ids = prog_ids(pid)
    return {p["name"]: (int(p.get("run_time_ns", 0)), int(p.get("run_cnt", 0))) for p in json.loads(out)
            if p["id"] in ids and "sched" in p["name"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-stats", action="store_true",
                    help="leave the kernel's per-program run-time accounting off (it adds to top's runs)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("iowait_overhead: run as root")
    was = DELAYACCT.read_text() if DELAYACCT.exists() else None
    res: dict[str, list[float]] = {"none": [], "top": [], "delayacct": [], "exporter": [], "exporter --no-io-wait": []}
    port = 19863
    tools = {"top": ["top", "-b", "1"],
             "exporter": ["exporter", "--listen", f"127.0.0.1:{port}", "--per-process", "10", "--per-cgroup", "10"]}
    tools["exporter --no-io-wait"] = [*tools["exporter"], "--no-io-wait"]
    progs: dict[str, list[float]] = {}
    stats_fd = -1 if args.no_stats else enable_bpf_stats()
    try:
        for _ in range(args.rounds):
            for mode in res:
                top = None
                if mode in tools:
                    top = subprocess.Popen([sys.executable, "-m", "ioscope.cli", *tools[mode]],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    time.sleep(3)  # loaded and attached
                    assert top.poll() is None, top.stderr.read() if top.stderr else ""
                    before = top_programs(top.pid)
                if mode == "delayacct":
                    if was is None:
                        continue  # 5.10-5.13: always on (no sysctl); nothing to compare with
                    DELAYACCT.write_text("1\n")
                try:
                    res[mode].append(pipe_us(args.loops))
                finally:
                    if mode == "delayacct" and was is not None:
                        DELAYACCT.write_text(was)
                    if top is not None:
                        after = top_programs(top.pid)
                        for name, (ns, cnt) in after.items():
                            d_ns, d_cnt = ns - before.get(name, (0, 0))[0], cnt - before.get(name, (0, 0))[1]
                            if d_cnt:
                                progs.setdefault(f"{mode}: {name}", []).append(d_ns / d_cnt)
                                progs.setdefault(f"{mode}: {name} runs/op", []).append(d_cnt / args.loops)
                        top.terminate()
                        top.wait(timeout=30)
    finally:
        if stats_fd >= 0:
            os.close(stats_fd)
        if was is not None:
            DELAYACCT.write_text(was)
    base = statistics.median(res["none"])
    print(f"perf bench sched pipe -l {args.loops}, {args.rounds} rounds alternating, medians "
          f"({os.cpu_count()} CPUs, kernel {os.uname().release})")
    for mode, v in res.items():
        if v:
            print(f"  {mode:22s} {statistics.median(v):7.3f} us/op  ratio {statistics.median(v) / base:5.3f}  "
                  f"(runs: {', '.join(f'{x:.3f}' for x in v)})")
    for name, v in sorted(progs.items()):
        unit = "" if name.endswith("runs/op") else " ns a run"
        print(f"  {name:40s} {statistics.median(v):8.2f}{unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
