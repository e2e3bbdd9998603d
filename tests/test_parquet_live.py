"""The per-I/O table of a real recording: export --format parquet read back with DuckDB and pyarrow, and ioscope sql,
against the workload's counts, /proc/diskstats (what the recorder read inside the recording) and report (root, BPF).

Two recordings of a known workload on two loop disks: `dd` reads 4 KiB blocks directly from the first disk, fio
writes 16 KiB blocks directly to the second (prime counts; direct I/O of whole blocks: no merge, no split, one
request per bio). Each is exported under a host name of its own (--host), so the export holds two "hosts".
"""

from __future__ import annotations

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

RUNS = ((1009, 211), (503, 101))   # (dd reads on disk A, fio writes on disk B) per recording: primes


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ioscope-test-pq-", dir="/dev/shm"))
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=True)


def _record(cap: Path, a: Any, b: Any, nreads: int, nwrites: int) -> None:
    from ioscope.base.testbed import run_fio
    rec = subprocess.Popen(ioscope_cmd("record", "-o", str(cap), "-d", a.name, "-d", b.name, "-q"),
                           stderr=subprocess.PIPE, text=True)
    assert rec.stderr is not None
    line = rec.stderr.readline()
    assert line.startswith("Recording block I/O events"), line + rec.stderr.read()
    try:
        subprocess.run(["dd", f"if={a.path}", "of=/dev/null", "bs=4k", f"count={nreads}", "iflag=direct",
                        "status=none"], check=True)
        job = run_fio(b.path, rw="randwrite", bs="16k", number_ios=nwrites, size="48M", iodepth=4,
                      extra=["--norandommap=0"])
    finally:
        rec.send_signal(signal.SIGINT)
        _out, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert job["write"]["total_ios"] == nwrites


def _kernel_completions(cap: Path, dev: Any) -> int:
    from ioscope.capture.store import open_capture
    with open_capture(str(cap)) as c:
        assert c.end is not None
        return int(c.end["completions_check"][f"{dev.major},{dev.minor}"]["kernel"])


def test_parquet_export_and_sql(loopdev: Callable[..., Any], shm_dir: Path) -> None:
    import duckdb
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    a = loopdev(size_mb=64, scheduler="mq-deadline")
    b = loopdev(size_mb=64, scheduler="none")
    caps = [shm_dir / f"rec{i}.ioscope" for i in range(len(RUNS))]
    for cap, (nr, nw) in zip(caps, RUNS):
        _record(cap, a, b, nr, nw)
    out = shm_dir / "pq"
    for i, cap in enumerate(caps):
        r = run_ioscope("export", "--format", "parquet", "--host", f"host{i}", "-o", str(out), str(cap), check=True)
        assert "Traceback" not in r.stderr
    # appendable, never overwritten: the same capture again is refused
    again = run_ioscope("export", "--format", "parquet", "-o", str(out), str(caps[0]))
    assert again.returncode != 0 and "exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1

    ios_glob = f"{out}/ios/*/*.parquet"
    con = duckdb.connect()
    for i, (cap, (nr, nw)) in enumerate(zip(caps, RUNS)):
        host = f"host{i}"

        def q(sql: str, h: str = host) -> list[tuple[Any, ...]]:
            return con.execute(sql.replace("IOS", f"read_parquet('{ios_glob}', hive_partitioning=true)")
                               + "", [h]).fetchall()

        # the workload: dd's reads on A, fio's writes on B, one row each (direct whole blocks: no merge)
        [(dd_n,)] = q("select count(*) from IOS where host = ? and comm = 'dd' and disk = '" + a.name
                      + "' and op = 'read' and bytes = 4096")
        [(fio_n,)] = q("select count(*) from IOS where host = ? and comm = 'fio' and disk = '" + b.name
                       + "' and op = 'write' and bytes = 16384")
        assert (dd_n, fio_n) == (nr, nw)
        # /proc/diskstats over the recording: every completed I/O of each disk is a row (no merges)
        for dev in (a, b):
            [(done, merged)] = q("select count(c_ns), count(*) filter (where merged) from IOS where host = ? "
                                 f"and major = {dev.device.major} and minor = {dev.device.minor}")
            missing = unreported_completions(str(cap), dev.device.major, dev.device.minor)
            assert merged == 0
            assert done == _kernel_completions(cap, dev.device) - missing, dev.name
        # p99 of q2c: DuckDB's quantile_cont over the rows == the exact p99 of report's per-I/O dump
        csv_path = shm_dir / f"q2c{i}.csv"
        doc = json.loads(run_ioscope("report", "--json", "--q2c-csv", str(csv_path), str(cap), check=True).stdout)
        with open(csv_path) as f:
            ref = np.array([round(float(row["q2c_s"]) * 1e9) for row in csv.DictReader(f)], dtype=np.int64)
        assert len(ref) == doc["phases"]["q2c"]["n"]
        [(n_q2c, p99)] = q("select count(q2c), quantile_cont(q2c, 0.99) from IOS where host = ?")
        assert n_q2c == len(ref)
        assert p99 == pytest.approx(float(np.percentile(ref, 99)), abs=1e-6)
        # pyarrow, with no ioscope code: the same rows and the same p99
        t = ds.dataset(out / "ios", format="parquet", partitioning="hive").to_table(
            filter=ds.field("host") == host)
        assert t.num_rows == q("select count(*) from IOS where host = ?")[0][0]
        pa_p99 = pc.quantile(t["q2c"], q=0.99, interpolation="linear")[0].as_py()
        assert pa_p99 == pytest.approx(float(np.percentile(ref, 99)), abs=1e-6)

    # ioscope sql over the export (two hosts) and over the captures themselves: per host / capture
    rows = json.loads("[" + ",".join(run_ioscope(
        "sql", "-j", "select host, count(q2c) n, count(d2c) nd from ios group by host order by host",
        str(out), check=True).stdout.split("\n")[:-1]) + "]")
    for i, cap in enumerate(caps):
        doc = json.loads(run_ioscope("report", "--json", str(cap), check=True).stdout)
        assert rows[i] == {"host": f"host{i}", "n": doc["phases"]["q2c"]["n"], "nd": doc["phases"]["d2c"]["n"]}
    got = run_ioscope("sql", "--csv", "select capture_id, count(q2c) n from ios group by all order by n desc",
                      *map(str, caps), check=True).stdout.splitlines()
    assert got[0] == "capture_id,n" and len(got) == 3
    for line, cap in zip(got[1:], caps):
        doc = json.loads(run_ioscope("report", "--json", str(cap), check=True).stdout)
        assert int(line.split(",")[1]) == doc["phases"]["q2c"]["n"]
