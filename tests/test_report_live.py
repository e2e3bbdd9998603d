"""The whole workflow on a real recording: record -> export -> real btt/blkparse vs report/parse (root, BPF)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import blk_scenarios as bs
from conftest import ioscope_cmd, run_ioscope, unreported_completions
from test_report import SAME_SECTIONS

NREADS = 1009   # direct 4 KiB random reads on the first disk: a prime
NWRITES = 211   # direct 16 KiB random writes on the second disk


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ioscope-test-off-", dir="/dev/shm"))
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


def test_recording_round_trip(loopdev: Callable[..., Any], shm_dir: Path) -> None:
    from ioscope.base.testbed import run_fio
    a = loopdev(size_mb=64, scheduler="mq-deadline")
    b = loopdev(size_mb=64, scheduler="bfq")
    cap = shm_dir / "rec.ioscope"
    rec = subprocess.Popen(ioscope_cmd("record", "-o", str(cap), "-d", a.name, "-d", b.name, "-q"),
                           stderr=subprocess.PIPE, text=True)
    assert rec.stderr is not None
    line = rec.stderr.readline()
    assert line.startswith("Recording block I/O events"), line + rec.stderr.read()
    try:
        # fio's random map on: no block is touched twice, so no Q meets another in flight at its sector
        job_a = run_fio(a.path, rw="randread", bs="4k", number_ios=NREADS, size="48M", iodepth=8,
                        extra=["--norandommap=0"])
        job_b = run_fio(b.path, rw="randwrite", bs="16k", number_ios=NWRITES, size="48M", iodepth=4,
                        extra=["--norandommap=0"])
        # buffered sequential writes: the page cache hands the disk bios the scheduler merges
        subprocess.run(["dd", f"of={a.path}", "if=/dev/zero", "bs=4k", "count=512", "seek=4096",
                        "status=none"], check=True)
        subprocess.run(["sync"], check=True)
    finally:
        rec.send_signal(signal.SIGINT)
        _out, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert job_a["read"]["total_ios"] == NREADS and job_b["write"]["total_ios"] == NWRITES
    out = shm_dir / "rec.bin"
    run_ioscope("export", str(cap), "-o", str(out), check=True)

    # report == btt, section by section, and its counts are the workload's
    avg = bs.run_btt(str(out), str(shm_dir), "-A")
    doc = json.loads(run_ioscope("report", "--json", str(cap), check=True).stdout)
    rows = bs.btt_table(avg, "All Devices")
    for label in ("Q2C", "D2C", "I2D", "Q2Q", "Q2G", "G2I"):
        _mn, av, _mx, n = rows[label]
        ph = doc["phases"][label.lower()]
        assert (ph["n"], f"{ph['avg']:.9f}") == (n, f"{av:.9f}"), label
    text = run_ioscope("report", str(cap), check=True).stdout
    for title in SAME_SECTIONS:
        assert bs.section(text, title) == bs.section(avg, title), title
    assert text.startswith(avg)   # btt -A's whole output, byte for byte
    ka, kb = f"{a.device.major},{a.device.minor}", f"{b.device.major},{b.device.minor}"
    dev_a, dev_b = doc["devices"][ka], doc["devices"][kb]
    # fio's direct I/O: one Q and one C each; the second disk saw nothing else. Exact, unless the
    # capture reports completions the kernel did not pass to BPF (conftest).
    miss_a = unreported_completions(str(cap), a.device.major, a.device.minor)
    miss_b = unreported_completions(str(cap), b.device.major, b.device.minor)
    # on the second disk each write is one bio and one request, at a block no other I/O touches (random
    # map): a request whose completion ran no BPF program leaves its one bio in flight at the end
    edges = ("duplicate_q", "overlapping_q", "ignored_at_start", "in_flight_at_end")
    assert [dev_b[k] for k in edges] == [0, 0, 0, miss_b], ({k: dev_b[k] for k in edges}, miss_b)
    assert dev_b["phases"]["q2c"]["n"] == NWRITES - miss_b and dev_b["phases"]["d2c"]["n"] == NWRITES - miss_b
    assert dev_a["phases"]["q2c"]["n"] >= NREADS - miss_a
    assert dev_a["phases"]["q2m"]["n"] > 0, "the buffered writes were not merged"
    assert doc["processes"]["fio"]["phases"]["q2c"]["n"] >= NREADS + NWRITES - miss_a - miss_b
    # parse == blkparse, every line
    assert run_ioscope("parse", str(cap), check=True).stdout == bs.run_blkparse(str(out))
    # blktrace's own layout: one file per disk and CPU, named after the disks (process notes are no disk's)
    pc = shm_dir / "pc"
    run_ioscope("export", str(cap), "--per-cpu", "-o", str(pc), check=True)
    names = sorted(p.name for p in pc.iterdir())
    assert names and all(n.split(".blktrace.")[0] in (a.name, b.name) for n in names), names
    for p in pc.iterdir():
        p.unlink()
    pc.rmdir()
    os.unlink(shm_dir / "btt.avg")
