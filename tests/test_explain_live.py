"""Live: report --explain on a recording of a real disk with a cause injected: reads of a disk made slow
under them (tests/slowdisk.py: a loop device over a throttled loop device) among fast reads of the same
size. The explanation names the device first, with the slow reads' own D2C against the disk's usual, and
the numbers agree with /proc/diskstats."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from conftest import ioscope_cmd
from ioscope.base import devices
from slowdisk import SlowDisk

FAST, SLOW = 61, 2   # 4 KiB direct reads: outside the throttled cgroup (fast), inside it (~0.5 s each)
SKIP = 1000          # the slow reads' first 4 KiB block


def dd_reads(path: str, n: int, skip: int = 0, runner: object = subprocess.run) -> None:
    run = runner if callable(runner) else subprocess.run
    run(["dd", f"if={path}", "of=/dev/null", "bs=4k", f"count={n}", f"skip={skip}", "iflag=direct", "status=none"],
        check=True)


def test_a_slow_device_is_named_first_with_its_usual(live: None, tmp_path: Path) -> None:
    cap = tmp_path / "slow.ioscope"
    with SlowDisk(iops=2) as sd:
        rec = subprocess.Popen(ioscope_cmd("record", "-o", str(cap), "-d", sd.upper), stderr=subprocess.PIPE,
                               text=True)
        assert rec.stderr is not None
        line = rec.stderr.readline()
        assert line.startswith("Recording block I/O events"), line + rec.stderr.read()
        before = devices.read_diskstats()[sd.upper]
        dd_reads(sd.upper_path, FAST)
        dd_reads(sd.upper_path, SLOW, skip=SKIP, runner=sd.run)
        after = devices.read_diskstats()[sd.upper]
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
    reads, ticks_ms = after.reads - before.reads, after.read_ms - before.read_ms
    assert reads == FAST + SLOW

    p = subprocess.run(ioscope_cmd("report", "--explain", "3", "-j", str(cap)), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["ios"] == reads
    slow, third = doc["outliers"][:2], doc["outliers"][2]
    # the two slow reads first: at the sectors they read, by dd, each held ~0.5 s at the device
    assert sorted(o["sector"] for o in slow) == [SKIP * 8, (SKIP + 1) * 8], slow
    assert all(o["comm"] == "dd" and o["op"] == "read" and o["bytes"] == 4096 and not o["in_flight"] for o in slow)
    d2c = [o["phases_s"]["d2c"] for o in slow]
    assert min(d2c) >= 0.4, d2c
    # diskstats' read ticks (ms, whole requests) hold them and the fast ones' few ms
    assert sum(d2c) * 1e3 <= ticks_ms + 2 and sum(d2c) * 1e3 >= ticks_ms - 0.1 * ticks_ms - 5, (d2c, ticks_ms)
    for o in slow:
        first = o["reasons"][0]
        assert first["kind"] == "device_slow", o["reasons"]
        # against the usual of every 4 KiB read of the disk (the 61 fast ones and these 2): a few ms at most
        assert first["like_n"] == reads and first["usual_s"] < 0.02 and first["ratio"] >= 20, first
        assert abs(first["cost_s"] - (o["phases_s"]["d2c"] - first["usual_s"])) < 1e-6
        assert first["at_device"] == 0   # dd reads one at a time
    # the third slowest is a fast read: nothing made it slow enough to say the device was unusual for it
    assert third["q2c_s"] < min(d2c) / 10

    t = subprocess.run(ioscope_cmd("report", "--explain", "2", str(cap)), capture_output=True, text=True, timeout=120)
    assert t.returncode == 0, t.stderr
    lines = t.stdout.splitlines()
    assert lines[0].startswith(f"==================== The slowest 2 of {reads} I/Os, explained")
    items = [k for k, ln in enumerate(lines) if ln[:3] in ("1. ", "2. ")]
    assert len(items) == 2
    for k in items:
        assert f"{sd.upper} read 4.00KiB (R" in lines[k] and " dd pid " in lines[k], lines[k]
        assert "the device was slower than usual: D2C" in lines[k + 2], lines[k:k + 4]
