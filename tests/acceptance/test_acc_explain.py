"""A support engineer asks why the slowest reads were slow, as one types it: `ioscope record -d DISK -o
case.ioscope &` from a script while a service in a cgroup reads a disk that has become slow (tests/
slowdisk.py: its requests held ~0.5 s each under it) beside a healthy reader of the same disk, the
recorder stopped with kill -INT, then `ioscope report --explain 3 case.ioscope`. The recorder exits 0;
the first three are the service's reads, the device named first for each, "slower than usual" against
the healthy reads' median, and the healthy reader is not blamed."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from acc_util import ScriptJob

from slowdisk import SlowDisk

HEALTHY, SLOW = 97, 3   # 4 KiB direct reads by dd outside and inside the slow disk's cgroup


def test_why_were_the_slowest_reads_slow() -> None:
    with SlowDisk(iops=2) as sd, tempfile.TemporaryDirectory(prefix="ioscope-acc-") as tmp:
        d = Path(tmp)
        assert sd.cgroup is not None
        upper, cgroup = sd.upper, sd.cgroup.name
        job = ScriptJob(d, f"record -d {sd.upper} -o {d}/case.ioscope")
        try:
            job.wait_for("err", "Recording")
            subprocess.run(["dd", f"if={sd.upper_path}", "of=/dev/null", "bs=4k", f"count={HEALTHY}",
                            "iflag=direct", "status=none"], check=True)
            sd.run(["dd", f"if={sd.upper_path}", "of=/dev/null", "bs=4k", f"count={SLOW}", "skip=2000",
                    "iflag=direct", "status=none"], check=True)
            assert job.stop() == "0", job.err()
        finally:
            job.kill()
        rep = subprocess.run([sys.executable, "-m", "ioscope.cli", "report", "--explain", "3", f"{d}/case.ioscope"],
                             capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0 and rep.stderr == "", rep.stderr
    lines = rep.stdout.splitlines()
    assert lines[0].startswith(f"==================== The slowest 3 of {HEALTHY + SLOW} I/Os, explained"), lines[0]
    heads = [k for k, ln in enumerate(lines) if re.match(r"^\d\. ", ln)]
    assert len(heads) == 3
    sectors = []
    for k in heads:
        m = re.match(r"^\d\. Q2C ([\d.]+)(ms|s)  (\S+) read 4\.00KiB \(RS?\) at sector (\d+)  dd pid \d+  cgroup "
                     r"(\S+)  queued ", lines[k])
        assert m, lines[k]
        q2c_s = float(m[1]) / (1e3 if m[2] == "ms" else 1)
        assert q2c_s >= 0.4 and m[3] == upper and m[5].endswith(cgroup), lines[k]
        sectors.append(int(m[4]))
        # its first reason: the device, slower than usual for the disk's 4 KiB reads (the healthy ones)
        first = lines[k + 2]
        m2 = re.match(r"^\s+([\d.]+)(ms|s)  the device was slower than usual: D2C ([\d,]+)x its median "
                      rf"[\d.]+(ns|us|ms) for the disk's {HEALTHY + SLOW} 2K-4K reads; ", first)
        assert m2, first
        assert int(m2[3].replace(",", "")) >= 20
    assert sorted(sectors) == [(2000 + k) * 8 for k in range(SLOW)]
