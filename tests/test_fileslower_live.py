"""ioscope fileslower on a real kernel: O_DIRECT 8 KiB writes, each followed by fdatasync, on ext4 on a loop
device, in a cgroup whose writes blk-throttle limits, against the workload's own timing of each call."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from fileslower_util import WORKLOAD, calls_of, run_beside
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopFS, TestCgroups
from iowait_util import limited

N = 53        # pwrite64 + fdatasync pairs: a prime
IOPS = 100    # the cgroup's write IOPS on the disk
SLACK_NS = 1_000_000  # the most the workload's timing (Python around the call) may exceed the tool's


def io_root() -> Path:
    io = io_cgroup_root()
    assert io is not None
    return io[0]


def check_calls(got: list[dict[str, Any]], timings: list[list[Any]], held: bool) -> None:
    """Every call of the workload, once, in order, each as long as the workload timed it (never longer, at
    most SLACK_NS shorter: the tool's clock reads are inside the workload's), its parts adding up to it. Its
    bios: each pwrite64 one 8 KiB write bio, done before it returned, unless blk-throttle held it (held:
    its kworker queues it later, outside the calling thread: not counted, docs/fileslower.md); each
    fdatasync no data bio."""
    assert [r["call"] for r in got] == [t[0] for t in timings]
    assert len(got) == 2 * N
    for r, (call, t0, t1, ret) in zip(got, timings):
        lat_ns = round(r["lat_ms"] * 1e6)
        assert 0 <= (t1 - t0) - lat_ns <= SLACK_NS, (r, t1 - t0)
        assert r["bytes"] == ret and r["error"] == 0
        assert r["comm"].startswith("python"), r
        parts = r["oncpu_ms"] + r["iowait_ms"] + r["runq_ms"] + r["other_blocked_ms"]
        assert abs(parts - r["lat_ms"]) < 1e-5, r  # (each rounded to the ns in JSON)
        assert 0 <= r["iowait_ms"] <= r["lat_ms"]
        if call == "pwrite64":
            assert r["iowaits"] >= 1, r  # an O_DIRECT write waits for its bio
            if held and r["write_bios"] == 0:
                assert r["write_bytes"] == 0 and r["bios_done"] == 0, r
                continue
            assert (r["write_bios"], r["write_bytes"], r["read_bios"], r["bios_done"]) == (1, 8192, 0, 1), r
            assert 0 < r["device_ms"] <= r["lat_ms"], r
        else:
            assert (r["write_bytes"], r["read_bytes"]) == (0, 0), r


@pytest.mark.parametrize("attach", [None, "raw_tp"])
def test_fsync_writes(live: None, attach: str | None) -> None:
    """The calls of the workload in a cgroup (-c) without a limit: their times, bios and bytes exactly."""
    with LoopFS(256) as fs:
        path = fs.make_file("wal.log", N * 8192)
        cg = TestCgroups(io_root(), "ioscope-fileslower", ["svc"])
        try:
            cmd = cg.shell("svc", f"{sys.executable} -c '{WORKLOAD}' {path} {N}")
            lines, timings, err, rc = run_beside(cmd, ["-m", "0", "-c", f"{cg.top}/svc", "-d", fs.name],
                                                 env={"IOSCOPE_ATTACH": attach} if attach else None)
        finally:
            cg.remove()
    assert rc == 0, err
    check_calls(calls_of(lines, path), timings, held=False)
    assert "lost" not in err, err


def test_fsync_writes_in_a_throttled_cgroup(live: None) -> None:
    """The same in a cgroup limited to IOPS writes a second: the writes blocked in I/O waits as long as the
    limit holds them at least, each within its call."""
    with LoopFS(256) as fs:
        path = fs.make_file("wal.log", N * 8192)
        with limited(fs.loop.device.majmin, "w", IOPS) as cg:
            cmd = cg.shell("svc", f"{sys.executable} -c '{WORKLOAD}' {path} {N}")
            lines, timings, err, rc = run_beside(cmd, ["-m", "0", "-c", f"{cg.top}/svc", "-d", fs.name])
    assert rc == 0, err
    got = calls_of(lines, path)
    check_calls(got, timings, held=True)
    writes = [r for r in got if r["call"] == "pwrite64"]
    # blk-throttle let at most IOPS writes a second through: N writes took (N - burst) / IOPS at least, held
    # in I/O waits (the first few may pass at once: half of it at least)
    held_s = sum(r["iowait_ms"] for r in writes) / 1e3
    assert held_s >= 0.5 * N / IOPS, held_s
    assert "lost" not in err, err
