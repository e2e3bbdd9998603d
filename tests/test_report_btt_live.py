"""Whole-host recording (every disk) of fio's buffered psync random I/O on ext4 plus a buffered write and
sync: report's own pairing against the kernel's counts, its account of btt's pairing against the real
btt's per-I/O output, and its btt sections against the real btt -A (root, BPF, loop devices)."""

from __future__ import annotations

import collections
import csv
import json
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ioscope_cmd, run_ioscope, unreported_completions

NIOS = 3001   # fio's 4 KiB random reads and writes: a prime


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ioscope-test-bttlive-", dir="/dev/shm"))
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=False)


def diskstats(name: str) -> tuple[int, int]:
    """(reads completed, writes completed) of a disk, from /proc/diskstats."""
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == name:
            return int(f[3]), int(f[7])
    raise AssertionError(f"{name} not in /proc/diskstats")


def btt_per_io(workdir: Path, kind: str) -> dict[str, collections.Counter[tuple[str, str]]]:
    """btt's -q/-l files: per device, the multiset of (time, latency) lines it printed."""
    out: dict[str, collections.Counter[tuple[str, str]]] = {}
    for p in workdir.glob(f"{kind}_*_{kind}.dat"):
        dev = p.name[len(kind) + 1:-len(kind) - 5]
        out[dev] = collections.Counter(tuple(ln.split()) for ln in p.read_text().splitlines() if ln.strip())
    return out


def test_whole_host_report_vs_btt(loopdev: Callable[..., Any], shm_dir: Path) -> None:
    from ioscope.base.testbed import run_fio
    a = loopdev(size_mb=256, scheduler="mq-deadline")
    # no I/O of the file system's own outside the workload: inode tables and journal initialised now,
    # no block bitmap prefetch after mounting
    subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", a.path], check=True)
    mnt = shm_dir / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-o", "noatime,no_prefetch_block_bitmaps", a.path, str(mnt)], check=True)
    cap = shm_dir / "host.ioscope"
    try:
        rec = subprocess.Popen(ioscope_cmd("record", "-o", str(cap), "-q"), stderr=subprocess.PIPE, text=True)
        assert rec.stderr is not None
        line = rec.stderr.readline()
        assert line.startswith("Recording block I/O events"), line + rec.stderr.read()
        before = diskstats(a.name)   # the recorder is attached: everything from here is in the capture
        try:
            job = run_fio(str(mnt / "f"), rw="randrw", bs="4k", size="64M", number_ios=NIOS, ioengine="psync",
                          direct=False)
            subprocess.run(["dd", f"of={mnt / 'dd'}", "if=/dev/zero", "bs=1M", "count=8", "status=none"],
                           check=True)
            subprocess.run(["sync"], check=True)
        finally:
            rec.send_signal(signal.SIGINT)
            _out, err = rec.communicate(timeout=120)
        after = diskstats(a.name)
        assert rec.returncode == 0, err
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    assert job["read"]["total_ios"] + job["write"]["total_ios"] == NIOS

    doc = json.loads(run_ioscope("report", "--json", str(cap), "--q2c-csv", str(shm_dir / "q2c.csv"),
                                 "--d2c-csv", str(shm_dir / "d2c.csv"), check=True, timeout=300).stdout)
    key = f"{a.device.major},{a.device.minor}"
    dev = doc["devices"][key]
    # ground truth for report's own pairing: every request the kernel completed on the disk is one D
    # report pairs (/proc/diskstats counts reads and writes completed, flushes apart)
    missing = unreported_completions(str(cap), a.device.major, a.device.minor)
    # the kernel also counts each empty PREFLUSH write (sync's cache flush) as a write; it has no data
    # and no D of its own
    from ioscope.capture.events import TA_QUEUE, TC_WRITE
    from ioscope.capture.store import open_capture
    with open_capture(cap) as c:
        ev = c.read_all()
    empty = int(((ev["action"] == TA_QUEUE) & (ev["dev"] == a.device.dev) & (ev["bytes"] == 0)
                 & ((ev["category"] & TC_WRITE) != 0)).sum())
    assert dev["merge"]["d"] + missing + empty == (after[0] - before[0]) + (after[1] - before[1])
    # nothing in flight at the end, unless a completion ran no BPF program: then its request's bios
    # (one or several merged) stay in flight
    assert missing or dev["in_flight_at_end"] == 0, (dev["in_flight_at_end"], missing)
    # fio laid its file out with writes larger than the disk takes: split bios, the case btt gets wrong
    assert dev["split_bios"] > 0

    # the real btt on the export: its Q2C and D2C counts per disk are the ones report says btt prints,
    # and the I/Os report completes that btt does not complete with the same C are, line for line in
    # btt's per-I/O files, the number report gives
    out = shm_dir / "host.bin"
    run_ioscope("export", str(cap), "-o", str(out), check=True, timeout=300)
    p = subprocess.run(["btt", "-i", str(out), "-o", "btt", "-q", "q2c", "-l", "d2c"], cwd=shm_dir,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    q2c, d2c = btt_per_io(shm_dir, "q2c"), btt_per_io(shm_dir, "d2c")
    for k, d in doc["devices"].items():
        assert d["btt"]["q2c_n"] == sum(q2c.get(k, {}).values()), k
        assert d["btt"]["d2c_n"] == sum(d2c.get(k, {}).values()), k
    with open(shm_dir / "q2c.csv") as f:
        ours = collections.Counter((f"{float(r['time_s']):.6f}", f"{float(r['q2c_s']):.6f}")
                                   for r in csv.DictReader(f) if r["device"] == key)
    not_in_btt = sum((ours - q2c.get(key, collections.Counter())).values())
    assert not_in_btt == dev["btt"]["ios_paired_differently"]["total"]
    assert dev["btt"]["ios_paired_differently"]["total"] > 0
    text = run_ioscope("report", str(cap), check=True, timeout=300).stdout
    assert "Where btt differs (ioscope)" in text
    # report's btt sections are the real btt -A's on the export, byte for byte, split bios and all
    p = subprocess.run(["btt", "-A", "-i", str(out), "-o", "bttA"], cwd=shm_dir, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert text.startswith((shm_dir / "bttA.avg").read_text())
