#!/usr/bin/env python3
"""Cost of the throttle's submit notes (bpf/throttle.bpf.h), the programs lat and top attach once a cgroup
I/O limit is in force on a traced disk where fentry is refused: measured side by side in one run.

fio 4 KiB direct random writes on a tmpfs-backed loop device, from a cgroup with a write IOPS limit too
high to hold anything (v1 blkio.throttle.write_iops_device, or v2 io.max wiops), so that every bio is
noted and its note taken out again at its queue event: the steady cost, with no wait to measure. Two
engines: libaio queue depth 32 (the allocation note) and psync (a bio on the submitter's stack: the
syscall note). In each round, in an order rotated from round to round: nothing attached; `ioscope lat
-d DISK` with no limit (the throttle's programs not attached); the same with the limit in force (the
held programs and the notes attached). Prints IOPS per configuration (median over rounds) and the
ratios to the untraced baseline; then one run with kernel.bpf_stats_enabled=1 (restored after) gives the
CPU time per I/O of each of lat's programs (run_time_ns from bpftool): the figure the IOPS noise of a
2-CPU machine does not blur. Run as root:
    python3 bench/throttle_notes.py [--rounds N] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopDevice, TestCgroups
from lat_overhead import Tracer, held_progs

NO_HOLD_IOPS = 10_000_000  # a limit in force that holds nothing at these rates
ENGINES = {"libaio": ["--ioengine=libaio", "--iodepth=32"], "psync": ["--ioengine=psync", "--iodepth=1"]}


def fio_in(cg: TestCgroups, disk: Any, engine: str, seconds: float) -> dict[str, Any]:
    cmd = ("fio --name=notes --filename={} --rw=randwrite --bs=4k --direct=1 {} --runtime={} --time_based "
           "--size=256M --randrepeat=0 --norandommap --output-format=json").format(
               disk.path, " ".join(ENGINES[engine]), seconds)
    out = subprocess.run(cg.shell("svc", cmd), capture_output=True, text=True, check=True).stdout
    job: dict[str, Any] = json.loads(out[out.index("{"):])["jobs"][0]
    return job


@contextmanager
def limit(cg: TestCgroups, disk: Any, on: bool) -> Iterator[None]:
    f = cg.root / "svc" / ("io.max" if cg.v2 else "blkio.throttle.write_iops_device")
    off = "wiops=max" if cg.v2 else "0"
    f.write_text(f"{disk.device.majmin} {(f'wiops={NO_HOLD_IOPS}' if cg.v2 else str(NO_HOLD_IOPS)) if on else off}\n")
    try:
        yield
    finally:
        f.write_text(f"{disk.device.majmin} {off}\n")


def lat(disk: Any) -> Tracer:
    return Tracer("lat", [sys.executable, "-m", "ioscope.cli", "lat", "-d", disk.name], "Tracing", "stderr")


def prog_times(pid: int) -> dict[str, tuple[int, int]]:
    """name -> (run_time_ns, run_cnt) of the BPF programs process pid holds."""
    return {str(p.get("name")): (int(p.get("run_time_ns", 0)), int(p.get("run_cnt", 0))) for p in held_progs(pid)}


def run(cg: TestCgroups, disk: Any, config: str, engine: str, seconds: float) -> float:
    if config == "none":
        return float(fio_in(cg, disk, engine, seconds)["write"]["iops"])
    with limit(cg, disk, config == "lat, limit in force"), lat(disk):
        if config == "lat, limit in force":
            import time

            time.sleep(2.5)  # lat reads the limits every 2 s and attaches the throttle's programs on the first
        return float(fio_in(cg, disk, engine, seconds)["write"]["iops"])


def profile(cg: TestCgroups, disk: Any, engine: str, seconds: float) -> tuple[int, dict[str, tuple[int, int]]]:
    import time

    knob = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = knob.read_text().strip()
    knob.write_text("1")
    try:
        with limit(cg, disk, True), lat(disk) as t:
            time.sleep(2.5)
            assert t.proc is not None
            before = prog_times(t.proc.pid)
            ios = int(fio_in(cg, disk, engine, seconds)["write"]["total_ios"])
            after = prog_times(t.proc.pid)
    finally:
        knob.write_text(old)
    return ios, {k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1]) for k in after}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    a = ap.parse_args()
    io = io_cgroup_root()
    if io is None:
        sys.exit("throttle_notes.py: no hierarchy with the io controller")
    configs = ["none", "lat, no limit", "lat, limit in force"]
    cg = TestCgroups(io[0], "ioscope-bench-notes", ["svc"])
    try:
        with LoopDevice(size_mb=512) as disk:
            for engine in ENGINES:
                got: dict[str, list[float]] = {c: [] for c in configs}
                for r in range(a.rounds):
                    for c in configs[r % 3:] + configs[:r % 3]:
                        got[c].append(run(cg, disk, c, engine, a.seconds))
                base = statistics.median(got["none"])
                print(f"fio 4 KiB direct random writes, {engine}, {a.rounds} rounds of {a.seconds:g} s (median IOPS):")
                for c in configs:
                    m = statistics.median(got[c])
                    print(f"  {c:22} {m:10.0f} IOPS  {m / base:6.3f} x untraced")
                ios, times = profile(cg, disk, engine, a.seconds)
                print(f"  BPF CPU time per I/O with the limit in force ({ios} I/Os, bpf_stats_enabled):")
                total = 0.0
                for name, (ns, cnt) in sorted(times.items(), key=lambda kv: -kv[1][0]):
                    if cnt:
                        total += ns / ios
                        print(f"    {name:16} {ns / ios:8.1f} ns/I/O  {cnt / ios:6.2f} runs/I/O  "
                              f"{ns / cnt:7.1f} ns/run")
                print(f"    {'all':16} {total:8.1f} ns/I/O")
    finally:
        cg.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
