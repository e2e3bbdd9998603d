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

With --workload direct, the worst case of SWAPIN's check instead (bpf/iowait.bpf.h reads the kernel stack
of every thread that blocks in an I/O wait, and compares it with the swap-in functions): dd reading 4 KiB
with O_DIRECT from a loop disk, one read at a time (a wait on every read, no swap-in: the whole stack is
walked and nothing matches), with swap in use (a process's pages on a swap loop disk: without, no stack is
read), rounds alternating between nothing attached, top, top with IOSCOPE_SWAPIN=off (no stack read), the
exporter (its swap-in series: agg's object reads the same stack) and the exporter with IOSCOPE_SWAPIN=off;
time per read, and the switch program's run time.

Run as root from the repository: .venv/bin/python bench/iowait_overhead.py [--loops 300000] [--rounds 5]
                                 .venv/bin/python bench/iowait_overhead.py --workload direct [--loops 50000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
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


def add_runs(progs: dict[str, list[float]], mode: str, before: dict[str, tuple[int, int]],
             after: dict[str, tuple[int, int]], ops: int | None = None) -> None:
    """Each program's ns a run between two readings (and its runs an operation, given ops), into progs."""
    for name, (ns, cnt) in after.items():
        d_ns, d_cnt = ns - before.get(name, (0, 0))[0], cnt - before.get(name, (0, 0))[1]
        if d_cnt:
            progs.setdefault(f"{mode}: {name}", []).append(d_ns / d_cnt)
            if ops:
                progs.setdefault(f"{mode}: {name} runs/op", []).append(d_cnt / ops)


def direct_us(disk: str, loops: int) -> float:
    """dd's time per O_DIRECT 4 KiB read from disk (µs)."""
    t0 = time.perf_counter()
    subprocess.run(["dd", f"if={disk}", "of=/dev/null", "bs=4k", f"count={loops}", "iflag=direct"], check=True,
                   capture_output=True)
    return (time.perf_counter() - t0) / loops * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-stats", action="store_true",
                    help="leave the kernel's per-program run-time accounting off (it adds to top's runs)")
    ap.add_argument("--workload", choices=("pipe", "direct"), default="pipe",
                    help="pipe: a context-switch storm (the scheduler programs); direct: an I/O wait on every read "
                         "(SWAPIN's stack read)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("iowait_overhead: run as root")
    if args.workload == "direct":
        return direct_main(args)
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
                        add_runs(progs, mode, before, top_programs(top.pid), args.loops)
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


@contextlib.contextmanager
def swap_in_use() -> Iterator[None]:
    """Swap on a loop disk with 48 MiB of a process's memory on it (SWAPPER in a cgroup limited to 16 MiB),
    held until the end: the host state where SWAPIN reads a stack at every I/O wait."""
    from ioscope.base.cgroups import memory_cgroup_root
    from ioscope.base.testbed import SWAPPER, LoopSwap, TestCgroups
    from ioscope.kernel.iowait import swap_used_kb
    mem = memory_cgroup_root()
    assert mem is not None, "no memory controller mounted"
    with LoopSwap(128):
        cg = TestCgroups(mem, "ioscope-bench-swap", ["hold"], controllers="memory")
        p = None
        try:
            (cg.root / "hold" / ("memory.max" if cg.v2 else "memory.limit_in_bytes")).write_text(f"{16 << 20}\n")
            p = subprocess.Popen(cg.shell("hold", f"{shlex.quote(sys.executable)} -c '{SWAPPER}' 64 private"),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert p.stdout is not None and p.stdout.readline().strip() == "filled"
            assert swap_used_kb() > 0
            yield
        finally:
            if p is not None:
                p.kill()
                p.wait()
            cg.remove()


def direct_main(args: argparse.Namespace) -> int:
    from ioscope.base.testbed import LoopDevice
    loops = min(args.loops, 60_000)   # 4 KiB each: within the 256 MiB disk
    port = 19863
    top_argv = ["top", "-b", "1"]
    exporter_argv = ["exporter", "--listen", f"127.0.0.1:{port}", "--per-process", "10", "--per-cgroup", "10"]
    off = {"IOSCOPE_SWAPIN": "off"}
    modes: dict[str, tuple[list[str], dict[str, str]] | None] = {
        "none": None, "top": (top_argv, {}), "top IOSCOPE_SWAPIN=off": (top_argv, off),
        "exporter": (exporter_argv, {}), "exporter IOSCOPE_SWAPIN=off": (exporter_argv, off)}
    res: dict[str, list[float]] = {m: [] for m in modes}
    progs: dict[str, list[float]] = {}
    stats_fd = enable_bpf_stats()
    try:
        with LoopDevice(256) as dev, swap_in_use():
            subprocess.run(["dd", "if=/dev/urandom", f"of={dev.path}", "bs=1M", "count=256", "oflag=direct"],
                           check=True, capture_output=True)
            for _ in range(args.rounds):
                for mode, how in modes.items():
                    top = None
                    if how is not None:
                        argv, env = how
                        top = subprocess.Popen([sys.executable, "-m", "ioscope.cli", *argv],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                               env={**os.environ, **env})
                        time.sleep(3)
                        assert top.poll() is None, top.stderr.read() if top.stderr else ""
                        before = top_programs(top.pid)
                    try:
                        res[mode].append(direct_us(dev.path, loops))
                    finally:
                        if top is not None:
                            add_runs(progs, mode, before, top_programs(top.pid))
                            top.terminate()
                            top.wait(timeout=30)
    finally:
        os.close(stats_fd)
    base = statistics.median(res["none"])
    print(f"dd O_DIRECT 4 KiB reads x {loops} from a loop disk, swap in use, {args.rounds} rounds alternating, medians "
          f"({os.cpu_count()} CPUs, kernel {os.uname().release})")
    for mode, v in res.items():
        print(f"  {mode:24s} {statistics.median(v):7.3f} us/read  ratio {statistics.median(v) / base:5.3f}  "
              f"(runs: {', '.join(f'{x:.3f}' for x in v)})")
    for name, v in sorted(progs.items()):
        print(f"  {name:48s} {statistics.median(v):8.2f} ns a run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
