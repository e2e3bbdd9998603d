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
import time
from pathlib import Path

import pytest

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
        script = (f"{sys.executable} -m ioscope.cli record --ring 30s --after 1s -d {fs.name} "
                  f"--trigger-pressure 'some > {pct}%' -o {d}/svc -q > {d}/out 2> {d}/err &\n"
                  f"echo $! > {d}/pid\nwait $!\necho $? > {d}/rc\n")
        shell = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while "Flight recorder: keeping" not in ((d / "err").read_text() if (d / "err").exists() else ""):
                assert time.monotonic() < deadline and shell.poll() is None, (d / "err").read_text()
                time.sleep(0.05)
            work = subprocess.run(cg.shell("svc", f"{sys.executable} -c '{WORKLOAD}' fsync {fs.path('wal.log')} {n}"),
                                  input="", capture_output=True, text=True, timeout=120)
            assert work.returncode == 0 and work.stdout.strip() == "done", work.stderr
            while "ioscope record: saved " not in (d / "out").read_text():
                assert time.monotonic() < deadline + 60, (d / "out").read_text()
                time.sleep(0.1)
            subprocess.run(["sh", "-c", f"kill -INT $(cat {d}/pid)"], check=True)
            assert shell.wait(timeout=60) == 0
        finally:
            if shell.poll() is None:
                shell.kill()
        err, out = (d / "err").read_text(), (d / "out").read_text()
        assert (d / "rc").read_text().strip() == "0", err
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
