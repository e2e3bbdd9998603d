"""Acceptance: a recording killed with SIGKILL (the OOM killer, a watchdog, `kill -9` by a user in a
hurry), at an idle moment and in the middle of a busy workload. Every reader must work on what is
left, say that the capture was cut short, and nothing that reached the file may be lost.

What reaches the file is bounded by the recorder's flush policy (docs/capture-format.md): a chunk is
written at least once a second, holding every event older than the writer's reorder window. So an
I/O completed more than FLUSH_BOUND_S before the kill is in the file; an I/O completed after the
kill is not.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import ioscope_cmd, run_ioscope, unreported_bound
from ioscope.trace.capture import DEFAULT_FLUSH_INTERVAL, DEFAULT_REORDER_WINDOW_NS

# the recorder polls every 20 ms; a flush writes what is older than the reorder window
FLUSH_BOUND_S = DEFAULT_FLUSH_INTERVAL + DEFAULT_REORDER_WINDOW_NS / 1e9 + 0.3
BURST_IOS = 211          # direct 4 KiB reads before the idle kill


def _completed(ld: Any) -> int:
    s = ld.diskstats()
    return int(s.reads + s.writes + s.flushes + s.discards)


@pytest.fixture
def disk(loopdev: Any) -> Any:
    return loopdev(size_mb=128, scheduler="mq-deadline")


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ioscope-acc-kill-", dir="/dev/shm") as d:
        yield Path(d)


def _start(disk: Any, cap: Path) -> subprocess.Popen[str]:
    rec = subprocess.Popen(ioscope_cmd("record", "-d", disk.name, "-o", str(cap)), stderr=subprocess.PIPE,
                           text=True)
    assert rec.stderr is not None
    line = rec.stderr.readline()
    assert line.startswith("Recording block I/O events"), line + rec.stderr.read()
    return rec


def _kill(rec: subprocess.Popen[str]) -> None:
    rec.send_signal(signal.SIGKILL)
    rec.wait(timeout=10)
    assert rec.returncode == -signal.SIGKILL


def _c_events(cap: Path, dev: int) -> int:
    from ioscope.trace.capture import open_capture
    from ioscope.trace.events import TA_COMPLETE

    with open_capture(cap) as c:
        assert c.truncated and c.end is None
        ev = c.read_all()
    return int(np.count_nonzero((ev["action"] == TA_COMPLETE) & (ev["dev"] == dev)))


def _every_reader(cap: Path, workdir: Path, n_c: int) -> None:
    """parse, report (text, JSON), export, the real blkparse and btt on the export, import and report."""
    cut = "was cut short: it ends without its end record"
    p = run_ioscope("parse", str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr and cut in p.stderr, p.stderr
    c_lines = [ln for ln in p.stdout.splitlines() if len(ln.split()) > 5 and ln.split()[5] == "C"]
    assert len(c_lines) == n_c
    p = run_ioscope("report", str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert cut in p.stdout
    p = run_ioscope("report", "--json", str(cap))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert cut in doc["capture"]["truncation"]
    blk = workdir / "case.blktrace"
    p = run_ioscope("export", "-o", str(blk), str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    with open(blk, "rb") as f:
        bp = subprocess.run(["blkparse", "-i", "-"], stdin=f, capture_output=True, text=True, timeout=120)
    assert bp.returncode == 0, bp.stderr
    # blkparse prints a Total section only when more than one CPU saw events
    total = bp.stdout.split("\nTotal (", 1)[1] if "\nTotal (" in bp.stdout else bp.stdout.split("\nCPU", 1)[1]
    m = re.search(r"Reads Completed:\s+([\d,]+)", total)
    assert m and int(m.group(1).replace(",", "")) == n_c, total[:600]   # the workloads only read
    if n_c:
        bt = subprocess.run(["btt", "-i", str(blk), "-o", str(workdir / "btt")], capture_output=True, text=True,
                            timeout=120, cwd=workdir)
        assert bt.returncode == 0, bt.stderr
    imp = workdir / "imported.ioscope"
    p = run_ioscope("import", str(blk), "-o", str(imp))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    p = run_ioscope("report", str(imp))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr


def test_killed_while_idle(disk: Any, workdir: Path) -> None:
    """A burst, then idle: everything the disk did is in the file, though the recorder never stopped."""
    cap = workdir / "case.ioscope"
    before = _completed(disk)
    rec = _start(disk, cap)
    try:
        time.sleep(1.5)   # idle first: the first chunks hold no block event
        subprocess.run(["dd", f"if={disk.path}", "of=/dev/null", "bs=4k", f"count={BURST_IOS}", "iflag=direct",
                        "status=none"], check=True)
        time.sleep(FLUSH_BOUND_S + 1.0)
        kernel = _completed(disk) - before
    finally:
        _kill(rec)
    n_c = _c_events(cap, disk.device.dev)
    assert kernel >= BURST_IOS
    assert kernel - unreported_bound(kernel) <= n_c <= kernel, (n_c, kernel)
    _every_reader(cap, workdir, n_c)


def test_killed_while_busy(disk: Any, workdir: Path) -> None:
    """Killed in the middle of fio: what completed more than a flush interval earlier is in the file,
    nothing completed after the kill is, and every reader works on the rest."""
    from ioscope.testbed import run_fio

    cap = workdir / "case.ioscope"
    before = _completed(disk)
    rec = _start(disk, cap)
    fio = threading.Thread(target=run_fio, args=(disk.path,), kwargs={"runtime": 4, "iodepth": 8})
    try:
        fio.start()
        time.sleep(2.0)
        settled = _completed(disk) - before     # completed now: in the file once FLUSH_BOUND_S has passed
        time.sleep(FLUSH_BOUND_S)
        _kill(rec)
        at_kill = _completed(disk) - before
    finally:
        if rec.poll() is None:
            rec.kill()
        fio.join()
    n_c = _c_events(cap, disk.device.dev)
    assert settled > 1000, settled
    assert settled - unreported_bound(settled) <= n_c <= at_kill, (settled, n_c, at_kill)
    _every_reader(cap, workdir, n_c)

