"""Flushes and the flush sequence, live: ext4 on a loop disk with a volatile write cache (buffered writes +
sync, fsync, O_DSYNC direct writes). lat, top and snoop, attached at the same time, count each I/O once, as
/proc/diskstats counts it: reads, writes and flushes per field (lat: d2c per request, q2c per bio =
requests + merges; top: its per-disk request histogram; snoop: one line per request)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ioscope_cmd, unreported_bound
from ioscope.base.devices import DiskStats
from ioscope.base.testbed import LoopFS
from livelat import lat_running

BUF_ROUNDS, BUF_BLOCKS = 3, 5   # dd bs=4k count=5; sync, three times
FSYNCS = 7                      # 4 KiB appended and fsync()ed
DSYNC_WRITES = 13               # dd oflag=direct,dsync bs=4k


def _quiet(fs: LoopFS, settle: float = 2.0, timeout: float = 30) -> DiskStats:
    """Wait until the disk did no I/O for settle seconds; its counters then."""
    end = time.monotonic() + timeout
    last = fs.loop.diskstats()
    while time.monotonic() < end:
        time.sleep(settle)
        cur = fs.loop.diskstats()
        if cur == last and cur.in_flight == 0:
            return cur
        last = cur
    raise AssertionError(f"{fs.name} did not go quiet")


def _workload(fs: LoopFS) -> None:
    for r in range(BUF_ROUNDS):
        subprocess.run(f"dd if=/dev/zero of={fs.path(f'buf{r}')} bs=4k count={BUF_BLOCKS} status=none; sync",
                       shell=True, check=True)
    fd = os.open(fs.path("fsynced"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(FSYNCS):
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
    finally:
        os.close(fd)
    subprocess.run(["dd", "if=/dev/zero", f"of={fs.path('dsync')}", "bs=4k", f"count={DSYNC_WRITES}",
                    "oflag=direct,dsync", "status=none"], check=True)
    subprocess.run(["sync"], check=True)  # nothing left for a later journal commit


def _op(rwbs: str) -> str:
    if "D" in rwbs:
        return "discard"
    if "R" in rwbs:
        return "read"
    if "W" in rwbs:
        return "write"
    return "flush" if "F" in rwbs else "other"


def _ready(p: subprocess.Popen[str]) -> None:
    assert p.stderr is not None
    first = p.stderr.readline()
    assert first.startswith("Tracing"), first + (p.stderr.read() if p.poll() is not None else "")


@pytest.mark.parametrize(("attach", "timing"), [("tp_btf", "auto"), ("raw_tp", "auto"), ("tp_btf", "probes")])
def test_lat_top_snoop_count_flushes_as_diskstats(live: None, tmp_path: Path, attach: str, timing: str) -> None:
    env = dict(os.environ)
    if attach == "raw_tp":
        env["IOSCOPE_ATTACH"] = "raw_tp"
    with LoopFS(size_mb=64) as fs:
        assert Path(f"/sys/block/{fs.name}/queue/write_cache").read_text().strip() == "write back"
        assert Path(f"/sys/block/{fs.name}/queue/fua").read_text().strip() == "0"
        # without ext4lazyinit's block-bitmap prefetch, which reads a few blocks seconds after the mount
        subprocess.run(["umount", fs.mnt], check=True)
        subprocess.run(["mount", "-o", "noatime,no_prefetch_block_bitmaps", fs.loop.path, fs.mnt], check=True)
        before = _quiet(fs)
        snoop_out = open(tmp_path / "snoop.jsonl", "w")
        snoop = subprocess.Popen(ioscope_cmd("snoop", "-j", "-d", fs.name), stdout=snoop_out,
                                 stderr=subprocess.PIPE, text=True, env=env)
        top = subprocess.Popen(ioscope_cmd("top", "-j", "-d", fs.name, "1"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        tops: list[dict[str, Any]] = []
        try:
            _ready(snoop)
            assert top.stdout is not None
            tops.append(json.loads(top.stdout.readline()))  # top is attached
            with lat_running("-d", fs.name, "-O", "-j", "--timing", timing,
                             env=env if attach == "raw_tp" else None) as run:
                _workload(fs)
                after = _quiet(fs)
            # two more refreshes: the second one was sampled after the last completion
            tops += [json.loads(top.stdout.readline()) for _ in range(2)]
        finally:
            for p in (top, snoop):
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
                p.communicate(timeout=30)
            snoop_out.close()
    assert run.returncode == 0, run.stderr
    assert snoop.returncode == 0 and top.returncode == 0
    reads, writes = after.reads - before.reads, after.writes - before.writes
    flushes, discards = after.flushes - before.flushes, after.discards - before.discards
    kernel = reads + writes + flushes + discards
    # each sync, fsync and O_DSYNC write sent at least one cache flush: the flush sequence ran
    assert flushes >= BUF_ROUNDS + FSYNCS + DSYNC_WRITES and writes >= flushes
    assert all(t["attach"] == attach for t in tops) and run.doc["attach"] == attach
    missing = run.doc["completions_unreported"]
    assert missing <= unreported_bound(kernel)
    assert run.doc["kernel_completed"] == {fs.name: kernel}
    assert run.doc["lost_detail"]["completed_without_start"] == 0

    # lat: one d2c per request the kernel counts, under the kernel's field; flush requests have no Q
    assert run.count("d2c") + missing == kernel
    assert run.count("q2c", op="flush") == run.count("q2d", op="flush") == 0
    # top: one per-disk latency per request, flushes included; r/s and w/s are diskstats' own
    top_lat = sum(dv["lat_ios"] for t in tops for dv in t["devices"] if dv["disk"] == fs.name)
    assert top_lat + missing == kernel
    for field, n in (("r_s", reads), ("w_s", writes)):
        got = sum(dv[field] * t["interval_s"] for t in tops for dv in t["devices"] if dv["disk"] == fs.name)
        # each interval's count is whole, and r_s (3 decimals) times interval_s (6) is far nearer to it than
        # half an I/O
        assert abs(got - n) <= 0.5 * len(tops), (field, got, n)
    # snoop: one line per request
    lines = [json.loads(ln) for ln in (tmp_path / "snoop.jsonl").read_text().splitlines() if ln.startswith("{")]
    snooped = {op: sum(1 for ln in lines if _op(ln["op"]) == op) for op in ("read", "write", "flush", "discard")}
    assert sum(snooped.values()) + missing == len(lines) + missing == kernel
    if missing == 0:
        want = {"read": reads, "write": writes, "flush": flushes, "discard": discards}
        assert {op: run.count("d2c", op=op) for op in want} == want
        assert snooped == want
        if timing == "auto":  # the kernel's stamps: q2c and q2d per request, as d2c
            assert run.doc["timing"] == {fs.name: "kernel stamps"}
            assert run.count("q2c", op="write") == run.count("q2d", op="write") == writes
            assert run.count("q2c", op="read") == reads
            return
        # the probes: q2c and q2d of every bio, the merged ones too
        assert run.doc["timing"] == {fs.name: "probes"}
        assert run.count("q2c", op="write") == run.count("q2d", op="write") == writes + after.writes_merged \
            - before.writes_merged
        assert run.count("q2c", op="read") == reads + after.reads_merged - before.reads_merged
