"""ioscope fleet: two hosts' recordings of a known workload, exported to one Parquet layout, reported by
DuckDB and by a real Spark (pyspark, local[2], Java from Debian): identical tables, equal to the workload,
to /proc/diskstats and to report's own per-I/O q2c dumps (the same linear-interpolation percentiles).
Needs root, BPF, loop devices, pyspark and Java (fails in CI otherwise)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import assert_counted, ioscope_cmd, run_ioscope, unreported_completions
from ioscope.base.testbed import run_fio

READS = {"alpha": 1009, "beta": 1013}    # fio's 4 KiB random reads on disk A, per host: primes
WRITES = {"alpha": 211, "beta": 223}     # dd's 64 KiB direct writes on disk B


def _record(a: Any, b: Any, out: str, host: str) -> dict[str, int]:
    rec = subprocess.Popen(ioscope_cmd("record", "-d", a.name, "-d", b.name, "-o", out), stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        assert rec.stderr is not None
        first = rec.stderr.readline()
        assert first.startswith("Recording block I/O events"), first + rec.stderr.read()
        a0, b0 = a.diskstats(), b.diskstats()
        # a random map: no block read twice, so no read is queued at a sector another one in flight
        # holds (btt's rule, which report and the ios table follow, would count the first as replaced,
        # never completed: seen once, 1012 of 1013)
        job = run_fio(a.path, rw="randread", bs="4k", iodepth=4, number_ios=READS[host], size="64m",
                      extra=["--norandommap=0"])
        subprocess.run(["dd", "if=/dev/zero", f"of={b.path}", "bs=64k", f"count={WRITES[host]}", "oflag=direct"],
                       check=True, stderr=subprocess.DEVNULL)
        a1, b1 = a.diskstats(), b.diskstats()
    finally:
        os.killpg(rec.pid, signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert int(job["read"]["total_ios"]) == READS[host]
    return {"reads": a1.reads - a0.reads, "writes": b1.writes - b0.writes}


def _p(v: np.ndarray, q: float) -> float:
    return float(np.percentile(v, q * 100, method="linear"))


def test_fleet_duckdb_and_spark_agree_with_report(loopdev: Any, tmp_path: Path) -> None:
    if shutil.which("java") is None:
        if os.environ.get("CI"):
            pytest.fail("java is not installed (scripts/bootstrap.sh --test installs openjdk-17-jre-headless)")
        pytest.skip("java is not installed")
    a, b = loopdev(size_mb=64, scheduler="none"), loopdev(size_mb=64, scheduler="none")
    exp = tmp_path / "fleet"
    kernel: dict[str, dict[str, int]] = {}
    caps: dict[str, str] = {}
    for host in ("alpha", "beta"):
        caps[host] = str(tmp_path / f"{host}.ioscope")
        kernel[host] = _record(a, b, caps[host], host)
        run_ioscope("export", "--format", "parquet", "--host", host, "-o", str(exp), caps[host], check=True,
                    timeout=120)
    duck = run_ioscope("fleet", "-j", "-n", "3", str(exp), timeout=120)
    assert duck.returncode == 0, duck.stderr
    spark = run_ioscope("fleet", "-j", "-n", "3", "--engine", "spark", "--master", "local[2]", str(exp),
                        timeout=600)
    assert spark.returncode == 0, spark.stderr[-3000:]
    d, s = json.loads(duck.stdout), json.loads(spark.stdout)
    assert (d["engine"], s["engine"]) == ("duckdb", "spark")

    def rounded(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: [{c: round(v, 3) if isinstance(v, float) else v for c, v in row.items()} for row in doc[k]]
                for k in ("hosts", "per_disk_op", "top_processes")}
    assert rounded(d) == rounded(s)   # one query definition, two engines, the same tables

    rows = {(r["host"], r["disk"], r["op"]): r for r in d["per_disk_op"]}
    for host in ("alpha", "beta"):
        rd, wr = rows[(host, a.name, "read")], rows[(host, b.name, "write")]
        assert (READS[host], WRITES[host]) == (kernel[host]["reads"], kernel[host]["writes"])
        # fleet counts the I/Os that completed: the workload's, less the completions that ran no BPF
        # program, as many as each disk's completions check in the capture reports (exact when none)
        ma, mb = (unreported_completions(caps[host], dev.device.major, dev.device.minor) for dev in (a, b))
        assert_counted(rd["ios"], READS[host], ma)
        assert_counted(wr["ios"], WRITES[host], mb)
        assert (rd["bytes"], wr["bytes"]) == (rd["ios"] * 4096, wr["ios"] * 65536)
        assert {r["disk"] for r in d["per_disk_op"] if r["host"] == host} == {a.name, b.name}
        # report's exact per-I/O q2c (its --q2c-csv dump) gives the same percentiles
        dump = tmp_path / f"{host}-q2c.csv"
        run_ioscope("report", "--q2c-csv", str(dump), caps[host], check=True, timeout=120)
        with open(dump) as f:
            lat = [(r["device"], float(r["q2c_s"])) for r in csv.DictReader(f)]
        for dev, row in ((a, rd), (b, wr)):
            v = np.array([x for devname, x in lat if devname == f"{dev.device.major},{dev.device.minor}"])
            assert len(v) == row["ios"]
            for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
                # report's CSV prints seconds to 9 decimals (report/view.py): whole ns, 1 ns covers the float round trip
                assert row[f"q2c_{name}"] == pytest.approx(_p(v, q) * 1e9, abs=1.0), (host, dev.name, name)
        top = [p for p in d["top_processes"] if p["host"] == host]
        assert top[0]["comm"] == "dd" and top[0]["bytes"] % 65536 == 0, top[0]
        assert_counted(top[0]["bytes"] // 65536, WRITES[host], mb)
        assert [p["pos"] for p in top] == list(range(1, len(top) + 1)) and len(top) <= 3
    p99 = [h["q2c_p99"] for h in d["hosts"]]
    assert [h["host"] for h in d["hosts"]] and p99 == sorted(p99, reverse=True)
    text = run_ioscope("fleet", str(exp), timeout=120)
    assert text.returncode == 0 and "hosts, the slowest q2c p99 first" in text.stdout


def test_fleet_bad_input(live: None, tmp_path: Path) -> None:
    p = run_ioscope("fleet", str(tmp_path / "nothing"))
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "no such file" in p.stderr, p.stderr
    (tmp_path / "empty").mkdir()
    p = run_ioscope("fleet", str(tmp_path / "empty"))
    assert p.returncode == 1 and "not a parquet export" in p.stderr and "Traceback" not in p.stderr, p.stderr
