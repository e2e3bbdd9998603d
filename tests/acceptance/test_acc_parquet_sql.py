"""Acceptance: a support engineer's SQL session, as a user types it.

On one loop disk: `ioscope record -d DISK -o case.ioscope` (stopped with Ctrl-C), a known workload
(`dd` reading 4 KiB blocks directly: 1009 reads; fio writing 16 KiB blocks directly: 211 writes), then
`ioscope export --format parquet -o DIR case.ioscope`, `ioscope sql QUERY DIR` (the rich table, as
printed), `ioscope sql --csv` and `-j` on the capture itself, and the installed executable ioscope-sql.
Every command exits 0 with no traceback; the numbers printed are the workload's and report's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ioscope_cmd, run_ioscope, unreported_completions

NREADS, NWRITES = 1009, 211


@pytest.fixture
def work() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ioscope-acc-sql-", dir="/dev/shm"))
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=True)


def _ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return p.stdout


def test_record_export_parquet_sql(loopdev: Callable[..., Any], work: Path) -> None:
    from ioscope.base.testbed import run_fio
    disk = loopdev(size_mb=64, scheduler="mq-deadline")
    cap = work / "case.ioscope"
    rec = subprocess.Popen(ioscope_cmd("record", "-d", disk.name, "-o", str(cap)), stderr=subprocess.PIPE, text=True)
    assert rec.stderr is not None
    assert rec.stderr.readline().startswith("Recording block I/O events")
    try:
        subprocess.run(["dd", f"if={disk.path}", "of=/dev/null", "bs=4k", f"count={NREADS}", "iflag=direct",
                        "status=none"], check=True)
        run_fio(disk.path, rw="randwrite", bs="16k", number_ios=NWRITES, size="32M", iodepth=4,
                extra=["--norandommap=0", "--offset=16M"])
    finally:
        rec.send_signal(signal.SIGINT)   # Ctrl-C
        _o, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    out = work / "pq"
    _ok(run_ioscope("export", "--format", "parquet", "-o", str(out), str(cap)))
    doc = json.loads(_ok(run_ioscope("report", "--json", str(cap))))

    # the example query, on the export, as the table it prints
    text = _ok(run_ioscope("sql", "select comm, op, count(*) n, quantile_cont(q2c, 0.99)/1e6 p99_ms from ios "
                           "where disk = '" + disk.name + "' group by comm, op order by n desc", str(out)))
    lines = text.splitlines()
    assert lines[0].split() == ["comm", "op", "n", "p99_ms"], text
    rows = {(ln.split()[0], ln.split()[1]): int(ln.split()[2]) for ln in lines[1:]}
    assert rows[("dd", "read")] == NREADS and rows[("fio", "write")] == NWRITES, text
    # --csv on the capture itself: report's Q2C N per disk
    csv_out = _ok(run_ioscope("sql", "--csv", "select disk, count(q2c) n from ios group by disk", str(cap)))
    key = f"{disk.device.major},{disk.device.minor}"
    assert csv_out.splitlines() == ["disk,n", f"{disk.name},{doc['devices'][key]['phases']['q2c']['n']}"]
    # -j, through the executable ioscope-sql: the raw events' completions are the requests the I/Os made
    exe = [str(Path(sys.executable).parent / "ioscope-sql")]   # the installed executable
    p = subprocess.run([*exe, "-j", "select (select count(*) from events where action = 'C' and bytes > 0) c, "
                        "(select count(c_ns) - count(*) filter (where merged and c_ns is not null) from ios) r",
                        str(cap)], capture_output=True, text=True, timeout=120)
    got = json.loads(_ok(p))
    # less the completions that ran no BPF program, as many as the capture's completions check reports
    missing = unreported_completions(str(cap), disk.device.major, disk.device.minor)
    assert got["c"] == got["r"] and got["c"] + missing >= NREADS + NWRITES, (got, missing)
