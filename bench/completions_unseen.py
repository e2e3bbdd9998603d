#!/usr/bin/env python3
"""How many block completions run no BPF program, and whose fault it is (issue 19, item 4).

A few completions in tens of thousands reach the kernel's own counters (/proc/diskstats, the blk
tracer, perf) and not ioscope's completion program, which lat reports as completion_unseen. This
bench tells the two possible causes apart on the running kernel, from the kernel's side:

  - the program was not run for them: its run_cnt (kernel.bpf_stats_enabled=1) is smaller than
    the number of completions the kernel made on the disk;
  - it was run and failed inside (a map operation refused, a stamp read 0): run_cnt equals the
    completions, and the failure shows in lat's own counters (map_update_EBUSY, not_stamped, ...).

fio 4 KiB random reads at a fixed rate on a tmpfs-backed loop disk without a scheduler (the
kernel's request stamps: one program per I/O), `ioscope lat -j -d DISK` attached; per run it
prints the kernel's completions, the completion program's runs, what lat counted and reported
lost, recursion_misses and failed map operations. Run as root, on each kernel of the matrix:
    python3 bench/completions_unseen.py [--runs N] [--ios N] [--iops N]
    scripts/kernels.py exec 6.1 -- .venv/bin/python bench/completions_unseen.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import bpf_prog_ids  # noqa: E402
from ioscope.base.testbed import LoopDevice, run_fio  # noqa: E402


def prog_runs(ids: set[int]) -> dict[str, int]:
    """run_cnt of each of these BPF programs, by name (bpftool; needs kernel.bpf_stats_enabled)."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["name"]: int(p.get("run_cnt", 0)) for p in json.loads(out) if int(p["id"]) in ids}


def one_run(disk: LoopDevice, ios: int, iops: int) -> dict[str, Any]:
    lat = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "lat", "-j", "-d", disk.name],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert lat.stderr is not None
    first = lat.stderr.readline()
    assert first.startswith("Tracing"), first + lat.stderr.read()
    ids = bpf_prog_ids(lat.pid)
    before_runs = prog_runs(ids)
    before = disk.diskstats()
    run_fio(disk.path, rw="randread", bs="4k", number_ios=ios, size="64m", extra=[f"--rate_iops={iops}"])
    time.sleep(0.5)
    after = disk.diskstats()
    after_runs = prog_runs(ids)
    lat.send_signal(signal.SIGINT)
    out, _ = lat.communicate(timeout=300)
    docs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    runs = {k: after_runs.get(k, 0) - before_runs.get(k, 0) for k in after_runs}
    complete = sum(v for k, v in runs.items() if k.endswith("rq_complete"))
    detail: dict[str, int] = {}
    for d in docs:
        for k, v in d.get("lost_detail", {}).items():
            detail[k] = detail.get(k, 0) + int(v)
    d2c = sum(h["count"] for d in docs for h in d["hists"] if h["phase"] == "d2c")
    return {"kernel_completed": after.reads - before.reads, "program_runs": complete, "lat_d2c": d2c,
            "completion_unseen": detail.get("completion_unseen", 0),
            "recursion_misses": detail.get("recursion_misses", 0),
            "map_errors": {k: v for k, v in detail.items() if k.startswith("map_") and v},
            "not_stamped": detail.get("not_stamped", 0), "timing": docs[-1].get("timing") if docs else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ios", type=int, default=50000)
    ap.add_argument("--iops", type=int, default=5000)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = stats.read_text().strip()
    stats.write_text("1")
    rows = []
    try:
        with LoopDevice(size_mb=64) as disk:
            for i in range(a.runs):
                r = one_run(disk, a.ios, a.iops)
                rows.append(r)
                print(json.dumps({"run": i + 1, **r}), flush=True)
    finally:
        stats.write_text(old)
    k = sum(r["kernel_completed"] for r in rows)
    runs = sum(r["program_runs"] for r in rows)
    got = sum(r["lat_d2c"] for r in rows)
    unseen = sum(r["completion_unseen"] for r in rows)
    print(f"{os.uname().release}: kernel completed {k}; completion program ran {runs} times "
          f"({k - runs} not run); lat counted {got}, reported {unseen} completion_unseen"
          + (f" (1 in {k // unseen:,})" if unseen else "") + f"; recursion_misses "
          f"{sum(r['recursion_misses'] for r in rows)}; failed map operations "
          f"{sum(sum(r['map_errors'].values()) for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
