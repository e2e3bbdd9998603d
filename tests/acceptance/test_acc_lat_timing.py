"""Acceptance: `ioscope lat` on two disks, one of which keeps no I/O statistics.

As a support engineer would type it on a host where one disk had `iostats` switched off: `ioscope lat -D
1 3` (text, one report a second), fio on both disks. The first line says which disk is timed how (the
kernel's request stamps, one program per I/O, or the probes where the kernel keeps no stamps); every
report's per-disk q2c counts, summed over the three reports, equal what fio did on that disk; it exits
0 by itself after the third report and leaves no BPF program behind.
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

from conftest import assert_counted, bpf_prog_ids, ioscope_cmd, programs_left, text_losses, unreported_bound
from ioscope.base.testbed import run_fio

_TITLE_RE = re.compile(r"^q2c: .*\[disk (\S+)\]$")
_N_RE = re.compile(r"^n=(\d+) ")


def _q2c_counts(text: str) -> dict[str, int]:
    """Per disk, the n= of every q2c histogram printed (summed over the reports)."""
    out: dict[str, int] = {}
    disk = None
    for line in text.splitlines():
        m = _TITLE_RE.match(line)
        if m:
            disk = m.group(1)
            continue
        n = _N_RE.match(line)
        if n and disk:
            out[disk] = out.get(disk, 0) + int(n.group(1))
        disk = None
    return out


def test_lat_says_how_each_disk_is_timed_and_counts_both(loopdev: Any) -> None:
    a, b = loopdev(size_mb=64), loopdev(size_mb=64)
    b.set_queue("iostats", "0")
    p = subprocess.Popen(ioscope_cmd("lat", "-d", a.name, "-d", b.name, "-D", "1", "3"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    first = p.stderr.readline()
    assert first.startswith("Tracing block I/O latency"), first
    assert f"timing kernel stamps: {a.name}; probes: {b.name})" in first, first
    ids = bpf_prog_ids(p.pid)
    run_fio(a.path, rw="randread", bs="4k", iodepth=4, number_ios=3001, size="64m")
    run_fio(b.path, rw="randread", bs="4k", iodepth=4, number_ios=2999, size="64m")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert out.count(f"timing: kernel stamps: {a.name}; probes: {b.name}") == 3, out[-2000:]
    # nothing lost but completions that ran no BPF program (docs/lat.md), which lat finds on both disks:
    # by the kernel's count on the stamped one (a), by the slots on the one it follows with the probes (b).
    # The text gives the total: each disk may be short by no more, and both together by no more
    lost, unseen = text_losses(out)
    assert lost == unseen <= unreported_bound(3001 + 2999), out[-3000:]
    counts = _q2c_counts(out)
    assert_counted(counts[a.name], 3001, unseen)
    assert_counted(counts[b.name], 2999, unseen)
    assert counts[a.name] + counts[b.name] + unseen == 3001 + 2999, (counts, unseen)
    time.sleep(0.1)
    assert not programs_left(ids)
