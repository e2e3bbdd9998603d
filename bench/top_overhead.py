#!/usr/bin/env python3
"""Overhead of `ioscope top --batch`, side by side in one run.

1. fio 4 KiB random reads, QD32, direct, libaio on a tmpfs-backed loop device, alternating runs with
   nothing attached and with `ioscope top --batch` (1 s refresh) running: the IOPS ratio (goal >= 0.95).
2. ioscope top's own CPU time per refresh, from /proc/PID/stat between its first and last snapshot, in the
   same runs, and again with hundreds of processes doing I/O at once (fio --numjobs, one process each): the
   procs seen per refresh, the longest interval (does it fall behind?) and CPU per refresh.

Run as root from the repository: .venv/bin/python bench/top_overhead.py [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lib"))

from ioscope.base.testbed import LoopDevice, run_fio  # noqa: E402

QUIET_IOPS = 270_000  # this workload on the quiet 2-CPU test VM (measured there, docs/top.md's overhead)


def cpu_seconds(pid: int) -> float:
    """CPU time of all threads of a process so far (schedstat: nanoseconds, unlike /proc/PID/stat's ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass
    return total / 1e9


def enable_bpf_stats() -> int:
    """Turn on the kernel's per-program run-time accounting for as long as the returned fd is open
    (bpf(BPF_ENABLE_STATS) is reference counted: unlike writing kernel.bpf_stats_enabled, it cannot race
    with another tool doing the same, and closing the fd restores the previous state)."""
    import ctypes
    import struct as _struct

    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(_struct.pack("=I", 0), 8)  # enable_stats.type = BPF_STATS_RUN_TIME
    nr_bpf = {"x86_64": 321, "aarch64": 280}[platform.machine()]
    fd = int(libc.syscall(nr_bpf, 32, attr, 8))  # BPF_ENABLE_STATS
    if fd < 0:
        raise OSError(ctypes.get_errno(), "bpf(BPF_ENABLE_STATS) failed")
    return fd


def prog_ids(pid: int) -> set[int]:
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def kernel_cost(path: str, seconds: float, *extra: str) -> dict[str, Any]:
    """ns per I/O spent in top's BPF programs, from the kernel's own per-program run time (bpf_stats, on
    for this run only): insensitive to what else the machine is doing. extra: top's options (-G: the
    cgroup view, each process's I/O keyed by its cgroup too)."""
    top = Top("--batch", *extra, "1")
    top.wait_first("ioscope top - ")
    ids = prog_ids(top.p.pid)
    stats_fd = enable_bpf_stats()
    try:
        job = run_fio(path, rw="randread", bs="4k", iodepth=32, runtime=seconds, ioengine="libaio", direct=True)
        progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                                          check=True).stdout)
    finally:
        os.close(stats_fd)
        top.stop()
    per = {p["name"]: p["run_time_ns"] / p["run_cnt"] for p in progs if p["id"] in ids and p.get("run_cnt")}
    # a 4 KiB read is one bio queued and one request completed: one run of each of those programs (the
    # programs also run for other disks' I/O on a shared machine, so totals / fio's I/Os would overstate)
    ns_per_io = sum(v for k, v in per.items() if k.endswith(("bio_queue", "rq_complete")))
    return {"ns_per_call": per, "bpf_ns_per_io": ns_per_io, "fio_iops": float(job["read"]["iops"])}


class Top:
    """ioscope top in the background; counts refreshes and its CPU time between the first and the last one."""

    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "ioscope.cli", "top", *args]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT / "lib")))
        self.lines: list[str] = []

    def wait_first(self, marker: str) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append(line)
            if line.startswith(marker):
                self.cpu0 = cpu_seconds(self.p.pid)
                self.t0 = time.monotonic()
                return
        raise SystemExit(f"ioscope top ended early: {self.p.stderr.read() if self.p.stderr else ''}")

    def read_until(self, marker: str, n: int) -> list[str]:
        """Read until n more lines start with marker; CPU time taken at the last one."""
        assert self.p.stdout is not None
        got = 0
        out = []
        for line in self.p.stdout:
            out.append(line)
            if line.startswith(marker):
                got += 1
                if got == n:
                    break
        self.cpu1 = cpu_seconds(self.p.pid)
        self.refreshes = got
        return out

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.communicate()

    @property
    def cpu_per_refresh_ms(self) -> float:
        return (self.cpu1 - self.cpu0) / max(1, self.refreshes) * 1000


def fio_iops(path: str, seconds: float) -> float:
    job = run_fio(path, rw="randread", bs="4k", iodepth=32, runtime=seconds, ioengine="libaio", direct=True)
    return float(job["read"]["iops"])


def overhead(path: str, seconds: float, rounds: int) -> dict[str, Any]:
    base: list[float] = []
    traced: list[float] = []
    cpu: list[float] = []
    fio_iops(path, 1)  # warm up
    for _ in range(rounds):
        base.append(fio_iops(path, seconds))
        top = Top("--batch", "1")
        top.wait_first("ioscope top - ")
        traced.append(fio_iops(path, seconds))
        top.read_until("ioscope top - ", 1)  # the refresh after fio ended
        top.stop()
        cpu.append(top.cpu_per_refresh_ms)
    b, t = statistics.mean(base), statistics.mean(traced)
    return {"baseline_iops": base, "top_iops": traced, "ratio": t / b, "top_cpu_ms_per_refresh": cpu}


def many_procs(path: str, nprocs: int, seconds: float) -> dict[str, Any]:
    """nprocs fio processes (not threads: one tgid each), 4 KiB random reads at 100 IOPS each."""
    fio = subprocess.Popen(["fio", "--name=many", f"--filename={path}", "--rw=randread", "--bs=4k", "--direct=1",
                            "--ioengine=psync", f"--numjobs={nprocs}", "--rate_iops=100", "--time_based",
                            f"--runtime={seconds + 6}", "--output-format=json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # all jobs forked and running
        top = Top("-j", "1")
        top.wait_first("{")
        n = int(seconds)
        docs = [json.loads(x) for x in top.read_until("{", n) if x.startswith("{")]
        top.stop()
    finally:
        fio.communicate(timeout=120)
    return {
        "fio_processes": nprocs,
        "refreshes": len(docs),
        "procs_per_refresh": [len(d["procs"]) for d in docs],
        "longest_interval_s": max(d["interval_s"] for d in docs),
        "lost": sum(d["lost"] for d in docs),
        "top_cpu_ms_per_refresh": top.cpu_per_refresh_ms,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each fio run (default 5)")
    ap.add_argument("--rounds", type=int, default=2, help="baseline/top pairs (default 2)")
    ap.add_argument("--procs", type=int, default=300, help="processes in the many-process run (default 300)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("top_overhead: run as root (loop devices and BPF)")
    with LoopDevice(size_mb=512, scheduler="none") as dev:
        res = {"overhead": overhead(dev.path, a.seconds, a.rounds),
               "kernel": kernel_cost(dev.path, a.seconds),
               "kernel_cgroups": kernel_cost(dev.path, a.seconds, "-G"),
               "many_procs": many_procs(dev.path, a.procs, max(5.0, a.seconds))}
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    o, m, k = res["overhead"], res["many_procs"], res["kernel"]
    print(f"fio 4 KiB randread QD32 on a tmpfs loop device, {a.seconds:g} s runs, {a.rounds} rounds (alternating)")
    print(f"  nothing attached      {statistics.mean(o['baseline_iops']):>10,.0f} IOPS  "
          f"{' '.join(f'{x:,.0f}' for x in o['baseline_iops'])}")
    print(f"  ioscope top --batch   {statistics.mean(o['top_iops']):>10,.0f} IOPS  "
          f"{' '.join(f'{x:,.0f}' for x in o['top_iops'])}")
    print(f"  ratio                 {o['ratio']:.3f}  (goal >= 0.95)")
    print(f"  top CPU per refresh   {statistics.mean(o['top_cpu_ms_per_refresh']):.1f} ms")
    calls = ", ".join(f"{n} {v:.0f} ns" for n, v in sorted(k["ns_per_call"].items()))
    print(f"  in-kernel cost        {k['bpf_ns_per_io']:.0f} ns per 4 KiB read (bio_queue + rq_complete; per run: "
          f"{calls}; measured with bpf_stats on, which adds its own clock reads)")
    kg = res["kernel_cgroups"]
    print(f"  ... with -G           {kg['bpf_ns_per_io']:.0f} ns per 4 KiB read (the cgroup view: each process's I/O "
          f"keyed by its cgroup too; measured right after, same workload)")
    ncpu = os.cpu_count() or 1
    for iops in (statistics.mean(o["baseline_iops"]), QUIET_IOPS):
        share = k["bpf_ns_per_io"] * iops / (ncpu * 1e9)
        print(f"  => at {iops:>9,.0f} IOPS on {ncpu} CPUs that is {share:.1%} of the machine: "
              f"expected ratio about {1 - share:.3f}")
    print(f"{m['fio_processes']} fio processes doing 4 KiB reads at 100 IOPS each, ioscope top -j 1:")
    print(f"  procs per refresh     {m['procs_per_refresh']}")
    print(f"  longest interval      {m['longest_interval_s']:.3f} s   lost {m['lost']}")
    print(f"  top CPU per refresh   {m['top_cpu_ms_per_refresh']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
