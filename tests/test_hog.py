"""scripts/hog.sh, the load the suite must pass under (docs/hacking.md, "Under load"): its hogs run while the
command runs and are gone after it on every path, with the command's own status."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import ROOT

HOG = str(ROOT / "scripts" / "hog.sh")


def hogs_left(tmp: Path) -> list[str]:
    """Files the disk hog left in tmp, and busy loops or fio jobs that name it still running."""
    left = [str(p) for p in tmp.glob("ioscope-hog.*")]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(tmp) in cmd and "fio" in cmd:
                left.append(cmd)
    return left


def children(pid: int) -> list[str]:
    """The command lines of pid's children."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                out.append(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                pass
    return out


def test_the_command_runs_beside_the_hogs_and_its_status_comes_back(tmp_path: Path) -> None:
    p = subprocess.Popen([HOG, "-r", "2m", "-d", str(tmp_path), "--", "sh", "-c", "sleep 3; exit 7"],
                         stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    line = p.stderr.readline()
    assert "1 busy loop(s) and a disk hog (fio, 2m/s reads and 2m/s writes" in line, line
    time.sleep(1)
    kids = children(p.pid)
    assert sum("while :" in k for k in kids) == 1 and any(k.startswith("fio ") for k in kids), kids
    assert len(list(tmp_path.glob("ioscope-hog.*"))) == 1
    assert p.wait(timeout=60) == 7
    assert hogs_left(tmp_path) == []


def test_a_stop_signal_is_passed_on_and_everything_is_cleaned(tmp_path: Path) -> None:
    p = subprocess.Popen([HOG, "-r", "1m", "-d", str(tmp_path), "--", "sleep", "120"], stderr=subprocess.PIPE,
                         text=True)
    assert p.stderr is not None
    p.stderr.readline()   # the hogs are started
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM   # sleep's own status: it was stopped by SIGTERM
    assert time.monotonic() - t0 < 10
    assert hogs_left(tmp_path) == []


def test_bad_arguments_get_one_line_and_status_2(tmp_path: Path) -> None:
    for args, says in ((["-c", "x", "--", "true"], "-c wants a number"), ([], "no command given"),
                       (["-d", str(tmp_path / "no"), "--", "true"], "is not a directory")):
        p = subprocess.run([HOG, *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.splitlines()) == 1, (args, p.stderr)
