"""Acceptance: `ioscope fair` on a disk that fio drives with libaio (issue 24, finding 6).

As a user types it: `ioscope fair -d loopN` (text), two fio jobs with ioengine=libaio (O_DIRECT, QD8, one
4 KiB random reads and writes, one 16 KiB random reads) on files of one ext4 loop disk, a third process
reading a tmpfs file the whole time, then Ctrl-C. Before, fair showed READ/s and WRITE/s 0 for fio (it
counted read/write syscalls only) and judged the balance over whatever else read. Now: the first line says
what is counted (syscalls and aio/io_uring requests), the final report's CUM_READ of each fio process is
the bytes fio reports having read, the disk's group names the two fio processes (and no other process that
read or wrote: ext4's lazyinit thread may be named, with its bios only), its read balance is over exactly
those two with Jain's index as computed from fio's own bytes, the tmpfs reader is in no balance, and no BPF
program is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from conftest import bpf_prog_ids, ioscope_cmd, programs_left
from ioscope.base.fmt import fmt_bytes

MB = 1 << 20
LOOP_READ = ("import sys,time\n"
             "while True:\n"
             "    open(sys.argv[1], 'rb').read()\n"
             "    time.sleep(0.01)\n")


def _fio(path: str, rw: str, bs: str, ios: int) -> subprocess.Popen[str]:
    return subprocess.Popen(["fio", "--name=acc", f"--filename={path}", "--ioengine=libaio", "--direct=1",
                             f"--rw={rw}", f"--bs={bs}", "--iodepth=8", f"--number_ios={ios}", "--size=24m",
                             "--thread", "--randrepeat=0", "--norandommap", "--output-format=json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_fair_counts_libaio_and_balances_only_its_processes(live: None) -> None:
    from ioscope.base.testbed import LoopFS

    with LoopFS(size_mb=96) as fs:
        files = [fs.make_file(f"f{i}", 24 * MB) for i in range(2)]
        shm = f"/dev/shm/ioscope-acc-fair-{os.getpid()}"
        with open(shm, "wb") as f:
            f.write(os.urandom(128 * 1024))
        by = subprocess.Popen([sys.executable, "-c", LOOP_READ, shm])
        try:
            p = subprocess.Popen(ioscope_cmd("fair", "-d", fs.name), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            assert p.stderr is not None
            first = p.stderr.readline()
            assert first.startswith(f"Tracing per-process throughput on {fs.name}"), first
            assert "read and write bytes: read/write syscalls and aio/io_uring requests" in first, first
            ids = bpf_prog_ids(p.pid)
            a, b = _fio(files[0], "randrw", "4k", 3000), _fio(files[1], "randread", "16k", 1000)
            jobs: dict[int, dict[str, Any]] = {}
            for f_ in (a, b):
                out_, err_ = f_.communicate(timeout=120)
                assert f_.returncode == 0, err_
                jobs[f_.pid] = json.loads(out_[out_.index("{"):])["jobs"][0]
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=30)
        finally:
            by.kill()
            by.wait()
            os.unlink(shm)
    assert p.returncode == 0, err
    assert not programs_left(ids)
    lines = out.splitlines()
    rows = {int(ln.split()[0]): ln.split() for ln in lines if ln.split() and ln.split()[0].isdigit()}
    for pid, job in jobs.items():
        assert rows[pid][1] == "fio"
        assert rows[pid][6] == fmt_bytes(job["read"]["io_bytes"]), (rows[pid], job["read"]["io_bytes"])
    assert by.pid not in rows   # -d: the tmpfs reader's I/O is not on the disk
    lo, hi = sorted(jobs)
    group = [ln for ln in lines if ln.startswith(f"on {fs.name}: ")]
    assert len(group) == 1, group
    named = {int(w.split()[0]): w for w in group[0].split(": ", 2)[2].split(", ")}
    assert {named[pid] for pid in jobs} == {f"{pid} (fio)" for pid in jobs}, group
    # any other process named did I/O on the disk with no read or write of its own: a kernel thread of the
    # filesystem (ext4lazyinit reads block bitmaps up to 5 s after the mount), bios only
    assert all(rows[pid][2] == rows[pid][4] == rows[pid][6] == "0" for pid in set(named) - set(jobs)), group
    xs = [jobs[pid]["read"]["io_bytes"] for pid in (lo, hi)]
    jain = sum(xs) ** 2 / (2 * sum(x * x for x in xs))
    bal = [ln for ln in lines if "interval read balance over" in ln]
    assert len(bal) == 1 and "over 2 processes" in bal[0] and f"Jain {jain:.3f}" in bal[0], bal
    wbal = [ln for ln in lines if "interval write balance" in ln or "interval write:" in ln]
    assert wbal == ["  interval write: one active process, no balance to compute"], wbal
