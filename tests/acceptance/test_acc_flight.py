"""Acceptance: the flight recorder as an on-call engineer's script runs it (issue 20).

The script starts `ioscope record --ring` in the background on an idle disk, waits for its start line,
runs a workload, asks for a save with `kill -USR1` the way a monitoring hook would, waits for the
saved line, runs more I/O, and stops the recorder with `kill -INT` (a background job of a script starts
with SIGINT ignored: ioscope must still stop). Ground truth: /proc/diskstats read by the script around
each step and dd's own counts. The saved window holds exactly the I/O made before the save; the I/O made
after it is not saved (nothing is saved at a stop unless --save-on-exit); the recorder exits 0, says
one window was saved, and leaves no BPF program loaded.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from conftest import bpf_prog_ids, programs_left
from ioscope.capture.events import TA_COMPLETE, TA_QUEUE
from ioscope.capture.store import open_capture

BEFORE_SAVE = 41   # direct 4 KiB reads made before the SIGUSR1
AFTER_SAVE = 13    # ... and after the save


def _reads(diskstats: str, disk: str) -> int:
    for line in diskstats.splitlines():
        f = line.split()
        if len(f) > 3 and f[2] == disk:
            return int(f[3])
    raise AssertionError(f"{disk} not in /proc/diskstats")


def test_flight_recorder_in_a_script(loopdev: Callable[..., Any], tmp_path: Path) -> None:
    ld = loopdev(size_mb=64)
    d = tmp_path
    ioscope = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ioscope.cli"])
    wait_for = ("for i in $(seq 600); do grep -q {text} {file} && break; sleep 0.1; done; "
                "grep -q {text} {file} || {{ echo 'gave up waiting for {text}' >&2; kill -KILL $pid; exit 9; }}")
    script = "\n".join([
        "set -u",
        f"{ioscope} record --ring 60s -d {ld.name} -o {d}/case > {d}/out 2> {d}/err &",
        "pid=$!",
        f"echo $pid > {d}/pid",
        wait_for.format(text="'Flight recorder: keeping'", file=f"{d}/err"),
        f"until [ -e {d}/go ]; do sleep 0.05; done",   # the test has noted the programs the recorder holds
        f"cat /proc/diskstats > {d}/ds0",
        f"dd if={ld.path} of=/dev/null bs=4k count={BEFORE_SAVE} iflag=direct status=none",
        f"cat /proc/diskstats > {d}/ds1",
        "kill -USR1 $pid",
        wait_for.format(text="'ioscope record: saved'", file=f"{d}/out"),
        f"dd if={ld.path} of=/dev/null bs=4k count={AFTER_SAVE} skip=500 iflag=direct status=none",
        "kill -INT $pid",
        "wait $pid",
        f"echo $? > {d}/rc",
    ])
    shell = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ((d / "err").exists() and "Flight recorder: keeping" in (d / "err").read_text()):
            assert time.monotonic() < deadline and shell.poll() is None, (d / "err").read_text()
            time.sleep(0.05)
        pid = int((d / "pid").read_text())
        progs = bpf_prog_ids(pid)
        assert progs, "the recorder holds no BPF program"
        (d / "go").touch()
        _, sh_err = shell.communicate(timeout=120)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
    err = (d / "err").read_text()
    out = (d / "out").read_text()
    assert shell.returncode == 0, sh_err + err
    assert (d / "rc").read_text().strip() == "0", err
    assert "Traceback" not in err
    before = _reads((d / "ds1").read_text(), ld.name) - _reads((d / "ds0").read_text(), ld.name)
    assert before == BEFORE_SAVE
    saved = [ln for ln in out.splitlines() if ln.startswith("ioscope record: saved ")]
    assert len(saved) == 1, out
    m = re.match(r"ioscope record: saved (\S+): SIGUSR1; window .* \(([\d.]+) s\); ([\d,]+) events, .*; lost 0$",
                 saved[0])
    assert m, saved[0]
    with open_capture(m[1]) as cap:
        assert cap.end is not None
        ev = cap.read_all()
        assert cap.meta["flight"]["trigger"]["kind"] == "signal"
    mine = ev[ev["dev"] == ld.device.dev]
    assert int(np.count_nonzero(mine["action"] == TA_QUEUE)) == BEFORE_SAVE
    assert int(np.count_nonzero(mine["action"] == TA_COMPLETE)) == BEFORE_SAVE
    assert int(m[3].replace(",", "")) == len(ev)
    summary = err.strip().splitlines()[-1]
    assert re.match(r"Flight recorder ran [\d.]+s: [\d,]+ events seen, .* 1 window saved; lost 0; stopped: "
                    r"interrupted\.", summary), summary
    assert list(d.glob("case-*")) == [Path(m[1])]   # the I/O after the save was not saved at the stop
    assert programs_left(progs) == set(), "BPF programs left loaded"
