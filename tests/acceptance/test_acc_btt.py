"""Acceptance: a support engineer's btt script, run on ioscope btt as a user types it.

The script calls btt by its letters on a customer's per-CPU files (XFS on LVM: `dm-0.blktrace.*` and
`sda.blktrace.*` from tests/traces/, dumped with `blkparse -d` for the real btt) and plots the latency files
with gnuplot. The engineer types `ioscope btt -i trace.dump -o out -l d2c -q q2c -z q2d` in an empty directory;
ground truth is the real btt (Debian's blktrace 1.2.0) on the same dump in another: every file ioscope btt
writes is there, byte for byte, and reads the way gnuplot's `plot 'FILE' using 1:2` reads it (two numbers a
line, times not going backwards for D2C, which btt stamps at each completion).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import ROOT, ioscope_cmd

TRACES = ROOT / "tests" / "traces"


def test_btt_script_on_ioscope_btt(tmp_path: Path) -> None:
    for f in TRACES.glob("*.blktrace.*"):
        if f.name.startswith(("dm-0.", "sda.")):
            shutil.copyfile(f, tmp_path / f.name)
    subprocess.run(["blkparse", "-q", "-O", "-i", "dm-0", "-i", "sda", "-d", "trace.dump"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)
    args = ["-i", str(tmp_path / "trace.dump"), "-o", "out", "-l", "d2c", "-q", "q2c", "-z", "q2d"]
    ref, mine = tmp_path / "btt", tmp_path / "ioscope"
    ref.mkdir()
    mine.mkdir()
    p = subprocess.run(["btt", *args], cwd=ref, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    p = subprocess.run(ioscope_cmd("btt", *args), cwd=mine, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "" and p.stdout == "", (p.stdout, p.stderr)
    written = sorted(f.name for f in mine.iterdir())
    assert written == sorted(f.name for f in ref.iterdir())
    assert written == ["253,0_iops_fp.dat", "253,0_mbps_fp.dat", "8,0_iops_fp.dat", "8,0_mbps_fp.dat",
                       "d2c_8,0_d2c.dat",
                       "out.avg", "out.dat", "out.msg", "out_dhist.dat", "out_qhist.dat", "q2c_253,0_q2c.dat",
                       "q2c_8,0_q2c.dat", "q2d_8,0_q2d.dat", "sys_iops_fp.dat", "sys_mbps_fp.dat"]
    for name in written:
        assert (mine / name).read_bytes() == (ref / name).read_bytes(), name
    # gnuplot's `using 1:2`: two numbers a line
    rows = [[float(x) for x in ln.split()] for ln in (mine / "d2c_8,0_d2c.dat").read_text().splitlines()]
    assert rows and all(len(r) == 2 and r[1] > 0 for r in rows)
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    avg = (mine / "out.avg").read_text()
    assert avg.startswith("==================== All Devices ====================") and "Q2Cdm" in avg
