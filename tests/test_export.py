"""ioscope export: the real blkparse and btt read what it writes, without complaint."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import blk_scenarios as bs
from conftest import run_ioscope
from ioscope.capture import blktrace


@pytest.fixture
def mixed_capture(tmp_path: Path) -> Path:
    cap = tmp_path / "mixed.ioscope"
    bs.write_capture(str(cap), bs.mixed())
    return cap


def test_export_is_read_by_blkparse_and_btt(mixed_capture: Path, tmp_path: Path) -> None:
    out = tmp_path / "mixed.bin"
    p = run_ioscope("export", str(mixed_capture), "--format", "blktrace", "-o", str(out), check=True)
    assert "blktrace records" in p.stderr
    text = bs.run_blkparse(str(out))
    s = bs.mixed()
    ev = s.events()
    # one line per event, in the capture's order of time
    lines = [ln for ln in text.splitlines() if ln.startswith("  7,")]
    assert len(lines) == len(ev)
    # process names came through the notes; every action letter the scenario has is there
    assert "[fio]" in text and "[dd]" in text and "[kworker/0:1]" in text
    for letter in (" Q ", " G ", " I ", " M ", " F ", " D ", " C ", " R ", " X ", " A ", " P ", " U ", "UT "):
        assert letter in text, letter
    assert "<- (7,1) 500000" in text          # remap payload: source device and sector
    assert "400000 / 401024 [dd]" in text     # split payload: the new sector
    assert "[dd] 1" in text                   # unplug payload: request count
    avg = bs.run_btt(str(out), str(tmp_path))
    assert "Q2C" in avg and "D2C" in avg


def test_export_per_cpu_files_are_read_by_blkparse(mixed_capture: Path, tmp_path: Path) -> None:
    d = tmp_path / "pc"
    run_ioscope("export", str(mixed_capture), "--per-cpu", "-o", str(d), check=True)
    assert sorted(os.listdir(d)) == ["loop0.blktrace.0", "loop0.blktrace.1", "loop1.blktrace.0", "loop1.blktrace.1"]
    p = subprocess.run(["blkparse", "-D", str(d), "-i", "loop0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == ""
    n_loop0 = int((bs.mixed().events()["dev"] == bs.LOOP0).sum())
    assert f"Events (loop0): {n_loop0} entries" in p.stdout
    # per-CPU files hold only their CPU's events (blkparse checks this), numbered from 1
    for name in ("loop0.blktrace.0", "loop0.blktrace.1"):
        dec = list(blktrace.read_stream(str(d / name)))
        cpus = np.concatenate([x.events["cpu"][(x.events["flags"] & 1) == 0] for x in dec])
        assert len(set(cpus.tolist())) == 1
        seq = np.concatenate([x.seq[(x.events["flags"] & 1) == 0] for x in dec if x.seq is not None])
        assert seq.tolist() == list(range(1, len(seq) + 1))


def test_export_timestamp_note_and_time_base(mixed_capture: Path, tmp_path: Path) -> None:
    from ioscope.capture.store import open_capture
    out = tmp_path / "m.bin"
    run_ioscope("export", str(mixed_capture), "-o", str(out), check=True)
    dec = list(blktrace.read_stream(str(out)))
    stamps = [s for d in dec for s in d.timestamps]
    assert len(stamps) == 2   # one per device
    ev = np.concatenate([d.events for d in dec])
    data = ev[(ev["flags"] & 1) == 0]
    assert int(data["ts"][0]) == blktrace.EXPORT_BASE_OFFSET
    with open_capture(str(mixed_capture)) as cap:
        first = int(cap.read_all()["ts"][0])
        clock = cap.meta["start"]
    t_note, wall = stamps[0]
    # the note maps trace time to the capture's wall clock
    assert wall - t_note == clock["wall_ns"] + (first - blktrace.EXPORT_BASE_OFFSET - clock["mono_ns"])


def test_export_errors(tmp_path: Path) -> None:
    missing = run_ioscope("export", str(tmp_path / "nope.ioscope"), "-o", str(tmp_path / "x.bin"))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty.ioscope"
    empty.write_bytes(b"")
    p = run_ioscope("export", str(empty), "-o", str(tmp_path / "x.bin"))
    assert p.returncode == 1 and "byte offset 0" in p.stderr and "Traceback" not in p.stderr
    d = tmp_path / "dir"
    d.mkdir()
    p = run_ioscope("export", str(empty), "-o", str(d))
    assert p.returncode == 2 and "directory" in p.stderr
