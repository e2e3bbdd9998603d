"""A service whose fdatasync writes are slow, as a user finds it: `ioscope fileslower -d DISK -m 5 > out &`
from a script, a service (O_DIRECT 8 KiB pwrite64 + fdatasync, timing its own calls) in a cgroup limited to
100 write IOPS, the tool stopped with kill -INT. It exits 0; each line is a call of the service on its file
that took 5 ms or more, as long as the service measured it, and says it was blocked in I/O waits for most
of it (the limit's hold), the parts adding up to its latency."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

from acc_util import ScriptJob

from conftest import PY
from fileslower_util import WORKLOAD
from ioscope.base.testbed import LoopFS
from iowait_util import limited

N = 53
LINE = re.compile(r"^\d\d:\d\d:\d\d (\S+)\s+(\d+) (\S+)\s+(\d+)\s+([\d.]+) (\S+)$")
PARTS = re.compile(r"^\s+= I/O wait ([\d.]+)(?: \(\d+ waits\))? \+ other blocked ([\d.]+)"
                   r"(?: \+ waiting for a CPU ([\d.]+))? \+ on CPU ([\d.]+) ms; (.*)$")


def test_slow_fdatasync_service_found_with_fileslower() -> None:
    with LoopFS(256) as fs, tempfile.TemporaryDirectory(prefix="ioscope-acc-") as tmp:
        d = Path(tmp)
        wal = fs.make_file("wal.log", N * 8192)
        with limited(fs.loop.device.majmin, "w", 100) as cg:
            job = ScriptJob(d, f"fileslower -d {fs.name} -m 5")
            try:
                job.wait_for("err", "Tracing")
                svc = subprocess.run(cg.shell("svc", f"{PY} -c '{WORKLOAD}' {wal} {N}"),
                                     capture_output=True, text=True, timeout=120)
                assert svc.returncode == 0, svc.stderr
                time.sleep(0.5)
                rc = job.stop(timeout=30)
            finally:
                job.kill()
            out, err = job.out(), job.err()
            assert rc == "0", err
    timings = [t for t in json.loads(svc.stdout.strip().splitlines()[-1]) if t[2] - t[1] >= 5_000_000]
    # those surely 5 ms in the kernel too: the service's time less the time it waited for a CPU around the
    # call (a preemption next to the call is in its time, not the call's) and 0.5 ms for its clock reads
    sure = [t for t in timings if t[2] - t[1] - t[4] >= 5_500_000]
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "COMM", "PID", "CALL", "BYTES", "LAT(ms)", "FILE"]
    rows = []
    for head, parts in zip(lines[1::2], lines[2::2]):
        m, p = LINE.match(head), PARTS.match(parts)
        assert m and p, (head, parts)
        if m.group(6) == wal:
            rows.append((m, p))
    # the service's slow calls: those it timed at 5 ms or more (a call it timed just over 5 ms may be
    # just under in the kernel: its clock reads are inside the service's)
    assert len(sure) <= len(rows) <= len(timings), (len(rows), len(sure), len(timings), out)
    assert len(rows) >= 5, out  # the limit held some writes
    for m, p in rows:
        lat = float(m.group(5))
        iowait, other, runq, oncpu = (float(p.group(i) or 0) for i in (1, 2, 3, 4))
        assert lat >= 5.0 and m.group(3) in ("pwrite64", "fdatasync")
        assert abs(iowait + other + runq + oncpu - lat) <= 0.25, (m.group(0), p.group(0))  # each rounded to 0.1
    held = [float(p.group(1)) for m, p in rows if m.group(3) == "pwrite64"]
    assert sum(held) / 1e3 >= 0.5 * N / 100 * 0.5, held  # blocked in I/O waits by the limit's hold
    assert re.search(r"fileslower: \d+ calls shown", err), err
