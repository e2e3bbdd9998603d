"""ioscope import: blktrace files from elsewhere become captures that parse and report read like blkparse and btt."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blk_scenarios as bs
from conftest import run_ioscope
from ioscope.trace import blktrace
from ioscope.trace.capture import open_capture


def per_cpu_set(d: Path, order: str = "<") -> None:
    """blktrace's own layout for the mixed scenario: kernel-style times (not zero based), one file per CPU."""
    s = bs.mixed()
    ev = s.events()
    for dev, name in ((bs.LOOP0, "loop0"), (bs.LOOP1, "loop1")):
        for cpu in (0, 1):
            sel = ev[(ev["dev"] == dev) & (ev["cpu"] == cpu)]
            with open(d / f"{name}.blktrace.{cpu}", "wb") as f:
                w = blktrace.BlktraceWriter(f, 0, 1_700_000_000_000_000_000, dict(s.comms), order=order)
                w.write(sel)


@pytest.mark.parametrize("order", ["<", ">"])
def test_import_per_cpu_files(tmp_path: Path, order: str) -> None:
    per_cpu_set(tmp_path, order)
    cap = tmp_path / "imp.ioscope"
    p = run_ioscope("import", str(tmp_path / "loop0.blktrace.0"), str(tmp_path / "loop1"), "-o", str(cap),
                    check=True)
    assert f"{len(bs.mixed().events())} events from 4 file(s), 2 device(s)" in p.stderr
    with open_capture(str(cap)) as c:
        assert c.meta["source"] == "blktrace" and c.meta["host"] is None
        assert c.meta["devices"]["7,0"]["name"] == "loop0" and c.meta["devices"]["7,1"]["name"] == "loop1"
        assert c.meta["byte_orders"] == ["big" if order == ">" else "little"]
        assert c.comms[100] == "fio" and c.comms[102] == "kworker/0:1"
        ev = c.read_all()
    data = ev[(ev["flags"] & 1) == 0]
    assert len(data) == len(bs.mixed().events()) and (np.diff(data["ts"].astype(np.int64)) >= 0).all()
    # parse of the imported capture == blkparse reading blktrace's per-CPU files itself
    import subprocess
    theirs_dev0 = subprocess.run(["blkparse", "-D", str(tmp_path), "-i", "loop0", "-f", "%D %2c %8s %5T.%9t %a %S\\n",
                                  "-q"], capture_output=True, text=True, timeout=60).stdout.splitlines()
    ours = run_ioscope("parse", "-f", "%D %2c %8s %5T.%9t %a %S\\n", "-q", str(cap), check=True).stdout.splitlines()
    theirs_dev0 = [ln for ln in theirs_dev0 if ln.startswith("  7,0")]
    assert [ln for ln in ours if ln.startswith("  7,0")] == theirs_dev0


def test_import_dump_and_report_equal_btt(tmp_path: Path) -> None:
    cap0 = tmp_path / "orig.ioscope"
    bs.write_capture(str(cap0), bs.mixed())
    dump = tmp_path / "orig.bin"
    run_ioscope("export", str(cap0), "-o", str(dump), check=True)
    cap = tmp_path / "imp.ioscope"
    run_ioscope("import", str(dump), "-o", str(cap), check=True)
    assert run_ioscope("parse", str(cap), check=True).stdout == bs.run_blkparse(str(dump))
    doc = json.loads(run_ioscope("report", "--json", str(cap), check=True).stdout)
    rows = bs.btt_table(bs.run_btt(str(dump), str(tmp_path)), "All Devices")
    for label in ("Q2C", "D2C", "I2D", "Q2G", "G2I", "Q2M", "M2D", "Q2Q"):
        _mn, av, _mx, n = rows[label]
        ph = doc["phases"][label.lower()]
        assert (ph["n"], f"{ph['avg']:.9f}") == (n, f"{av:.9f}"), label
    # the timestamp note became the capture's clock mapping
    with open_capture(str(cap)) as c:
        assert c.meta["clock"]["wall_ns"] - c.meta["clock"]["mono_ns"] > 1_600_000_000 * 10**9


def test_import_errors_leave_nothing(tmp_path: Path) -> None:
    per_cpu_set(tmp_path)
    f = tmp_path / "loop0.blktrace.1"
    data = f.read_bytes()
    f.write_bytes(data[:-3])
    out = tmp_path / "o.ioscope"
    p = run_ioscope("import", str(tmp_path / "loop0"), "-o", str(out))
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert str(f) in p.stderr and "byte offset" in p.stderr
    assert not out.exists() and not (tmp_path / "o.ioscope.part").exists()
    p = run_ioscope("import", str(tmp_path / "missing.bin"), "-o", str(out))
    assert p.returncode == 1 and "no such file" in p.stderr
    empty = tmp_path / "e.bin"
    empty.write_bytes(b"")
    # blktrace leaves an empty file for a CPU that saw nothing: an empty capture, and a note saying so
    p = run_ioscope("import", str(empty), "-o", str(out))
    assert p.returncode == 0 and "holds no block events" in p.stderr and "Traceback" not in p.stderr
    assert out.exists()
    out.unlink()
