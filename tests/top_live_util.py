"""Helpers of ioscope top's live tests: a rate-limited fio in the background, BPF programs of a process."""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from typing import Any

from conftest import EMULATION_FACTOR, bpf_prog_ids, loaded_prog_ids  # noqa: F401  (re-exported for the top tests)


def start_fio(path: str, runtime: float, read_iops: int, write_iops: int) -> subprocess.Popen[str]:
    """fio --thread (its I/O is queued by the fio process itself: the pid Popen returns), 4 KiB random
    reads and writes at fixed rates, direct I/O, JSON report on stdout."""
    # (fio reads a rate of 0 as no limit: a job without writes is a pure reader)
    mix = ["--rw=randrw", f"--rate_iops={read_iops},{write_iops}", "--rwmixread=67"] if write_iops else [
        "--rw=randread", f"--rate_iops={read_iops}"]
    cmd = ["fio", "--name=toptest", f"--filename={path}", *mix, "--bs=4k", "--iodepth=4",
           "--ioengine=libaio", "--direct=1", "--thread", "--time_based", f"--runtime={runtime}",
           "--randrepeat=0", "--norandommap", "--output-format=json"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def fio_report(p: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"fio failed: {err}"
    doc: dict[str, Any] = json.loads(out[out.index("{"):])
    job: dict[str, Any] = doc["jobs"][0]
    return job


def stop_fio(p: subprocess.Popen[str]) -> None:
    """End a background fio early (it exits non-zero when interrupted; that is expected here)."""
    if p.poll() is None:
        p.send_signal(2)  # SIGINT: fio stops its jobs and exits
    try:
        p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()


def top_past(top: subprocess.Popen[str], t: float, timeout: float = 120 * EMULATION_FACTOR) -> str:
    """top -j's lines up to its first report whose interval ended after wall time t (its "time" is the read
    that closed the interval); returns the lines read, which communicate() will not give again."""
    assert top.stdout is not None
    lines: list[str] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = top.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("{") and datetime.datetime.fromisoformat(json.loads(line)["time"]).timestamp() > t:
            return "".join(lines)
    raise AssertionError(f"top printed no report past the workload in {timeout:.0f} s: {''.join(lines)[-500:]}")
