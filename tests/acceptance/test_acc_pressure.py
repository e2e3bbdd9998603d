"""Acceptance: a flight recorder that saves when the host's I/O pressure passes a share, as an on-call
engineer's script runs it: `ioscope record --ring 30s --trigger-pressure 'some > P%' -o PREFIX -q &` in the
background on an idle disk, a service then stalls on I/O (O_DIRECT 8 KiB writes with fdatasync, its cgroup
limited to 100 write IOPS: blocked nearly all the time, about 1/NCPU of the machine's capacity in the
kernel's PSI, base/psi.py; P = 40/NCPU), the recorder stopped with `kill -INT` (a background job of a
script starts with SIGINT ignored). It saves while the service runs, the window holds the service's writes
and the limit in force, and it exits 0 saying how often the kernel's trigger fired."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from acc_util import ScriptJob

from conftest import PY
from ioscope.base import psi
from ioscope.base.testbed import LoopFS
from iowait_util import WORKLOAD, limited


def test_a_stalled_service_is_saved_by_the_pressure_trigger() -> None:
    if psi.host_io() is None:
        pytest.skip("no /proc/pressure/io: the kernel has no PSI (CONFIG_PSI, psi=1)")
    pct = round(40 / (os.cpu_count() or 1), 1)
    n = 400   # 4 s at 100 IOPS
    with LoopFS(256) as fs, tempfile.TemporaryDirectory(prefix="ioscope-acc-") as tmp, \
            limited(fs.loop.device.majmin, "w", 100) as cg:
        d = Path(tmp)
        job = ScriptJob(d, f"record --ring 30s --after 1s -d {fs.name} --trigger-pressure 'some > {pct}%' "
                           f"-o {d}/svc -q")
        try:
            job.wait_for("err", "Flight recorder: keeping")
            work = subprocess.run(cg.shell("svc", f"{PY} -c '{WORKLOAD}' fsync {fs.path('wal.log')} {n}"),
                                  input="", capture_output=True, text=True, timeout=120)
            assert work.returncode == 0 and work.stdout.strip() == "done", work.stderr
            job.wait_for("out", "ioscope record: saved ", timeout=120)
            assert job.stop() == "0", job.err()
        finally:
            job.kill()
        err, out = job.err(), job.out()
        saved = [ln for ln in out.splitlines() if ln.startswith("ioscope record: saved ")]
        assert saved and all(f": I/O pressure some > {pct:g}% over 2s (avg10 " in ln for ln in saved), out
        path = re.match(r"ioscope record: saved (\S+): ", saved[0])
        assert path is not None
        assert re.search(r"[Tt]he I/O pressure trigger fired [1-9]\d* times?\.", err), err
        # the window: the service's writes (agg -r, by process), and the limit it ran under (report's note)
        agg = subprocess.run([sys.executable, "-m", "ioscope.cli", "agg", "-r", path[1], "-j", "-e",
                              "count() by comm,op"], capture_output=True, text=True, timeout=120)
        assert agg.returncode == 0, agg.stderr
        rows = {(r["keys"]["comm"], r["keys"]["op"]): r["count"] for ln in agg.stdout.splitlines() if ln.strip()
                for a in json.loads(ln)["aggs"] for r in a["rows"]}
        assert rows.get(("python", "write"), 0) >= 10, rows
        rep = subprocess.run([sys.executable, "-m", "ioscope.cli", "report", "--explain", "1", path[1]],
                             capture_output=True, text=True, timeout=120)
        assert rep.returncode == 0 and f"cgroup {cg.top}/svc (" in rep.stderr and "write_iops=100" in rep.stderr, (
            rep.stderr)
