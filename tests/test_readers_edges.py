"""Every reader on the captures real use produces: idle starts, idle gaps, nothing at all, cut short.

A recording started before the workload (the normal case for a support engineer) begins with
chunks that hold no block event: empty chunks written to carry loss counts, chunks of process
notes only. An idle disk gives a capture with no block event at all. A recorder killed with
SIGKILL leaves a file without its end record. parse, report (text and JSON), export, import of
the export and snoop's pairing must work on each, exit 0 and say what is special.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import blk_scenarios as bs
from conftest import run_ioscope
from ioscope.trace.capture import CaptureWriter
from ioscope.trace.events import EVENT
from test_capture import note

META = {"devices": {"7,0": {"name": "loop0", "major": 7, "minor": 0}}}
NIOS = 13   # plain I/Os in the scenario


def _ios(t0: int) -> np.ndarray:
    s = bs.Scenario()
    for i in range(NIOS):
        s.io(t0 + i * 200_000, 4096 + 64 * i, 4096, pid=100 + i % 2, cpu=i % 2, write=i % 3 == 0)
    return s.events()


def _empty_chunk(w: CaptureWriter, lost: int = 0) -> None:
    """What the recorder writes while the disk is idle: a chunk carrying loss counts, no events."""
    w.set_lost({"total": lost})
    w.flush(final=True)


def _write(path: Path, layout: str, close: bool = True) -> int:
    """A capture with the given layout; returns the number of block I/Os in it."""
    w = CaptureWriter(str(path), META, flush_interval=0.0)
    t0 = 5_000_000_000
    n = 0
    for part in layout.split(","):
        if part == "empty":
            _empty_chunk(w)
        elif part == "notes":
            w.write(np.concatenate([note(100, "fio", t0), note(101, "dd", t0 + 1)]))
            w.flush(final=True)
        elif part == "ios":
            w.write(_ios(t0))
            w.flush(final=True)
            n += NIOS
        t0 += 1_000_000_000
    if close:
        w.close(end={"stop_reason": "test"})
    else:
        pass  # a killed recorder: the chunks are on disk, the end record is not
    return n


LAYOUTS = {
    "idle start": "empty,empty,notes,ios",
    "idle gaps": "notes,ios,empty,notes,empty,ios,empty",
    "nothing at all": "empty,notes,empty",
    "no chunk at all": "",
}


def _report_json(path: Path) -> dict[str, object]:
    p = run_ioscope("report", "--json", str(path), check=True)
    assert "Traceback" not in p.stderr
    doc: dict[str, object] = json.loads(p.stdout)
    return doc


@pytest.mark.parametrize("killed", [False, True], ids=["clean", "killed"])
@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_every_reader_on_idle_empty_and_killed_captures(tmp_path: Path, layout: str, killed: bool) -> None:
    cap = tmp_path / "case.ioscope"
    n = _write(cap, LAYOUTS[layout], close=not killed)

    p = run_ioscope("parse", str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    q_lines = [ln for ln in p.stdout.splitlines() if " Q " in ln]
    assert len(q_lines) == n
    if killed:
        assert "was cut short: it ends without its end record" in p.stderr, p.stderr
    if n == 0:
        assert "no block events" in p.stderr

    p = run_ioscope("report", str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    doc = _report_json(cap)
    assert json.dumps(doc).count("Traceback") == 0

    blk = tmp_path / "case.blktrace"
    p = run_ioscope("export", "--format", "blktrace", "-o", str(blk), str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    if shutil.which("blkparse"):
        bp = subprocess.run(["blkparse", "-i", "-"], stdin=open(blk, "rb"), capture_output=True, text=True)
        assert bp.returncode == 0, bp.stderr
        assert len([ln for ln in bp.stdout.splitlines() if " Q " in ln]) == n
    imp = tmp_path / "imported.ioscope"
    p = run_ioscope("import", str(blk), "-o", str(imp))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    p = run_ioscope("report", str(imp))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr


def test_snoop_pairing_survives_empty_and_note_only_batches() -> None:
    from ioscope.trace.snoop import Pairer

    pr = Pairer()
    ios = _ios(10_000_000)
    paired = [pr.feed(np.zeros(0, EVENT)), pr.feed(note(100, "fio", 1)), pr.feed(np.zeros(0, EVENT), 5),
              pr.feed(ios[: len(ios) // 2]), pr.feed(np.zeros(0, EVENT)), pr.feed(note(101, "dd", 2)),
              pr.feed(ios[len(ios) // 2:]), pr.feed(np.zeros(0, EVENT))]
    rows = np.concatenate(paired)
    assert len(rows) == NIOS
    assert (rows["q_ts"] > 0).all() and (rows["d_ts"] > 0).all()


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_output_files_are_private_and_never_overwritten_silently(tmp_path: Path) -> None:
    """Captures, exports, imports and text outputs name processes and disks: 0600 whatever the umask;
    export and import refuse an existing file like record does, and -f makes the overwritten file private."""
    old = os.umask(0o022)
    try:
        cap = tmp_path / "case.ioscope"
        _write(cap, LAYOUTS["idle start"])
        assert _mode(cap) == 0o600
        blk, imp, txt, csv = (tmp_path / n for n in ("case.blktrace", "imp.ioscope", "parse.txt", "q2c.csv"))
        run_ioscope("export", "-o", str(blk), str(cap), check=True)
        run_ioscope("import", str(blk), "-o", str(imp), check=True)
        run_ioscope("parse", "-o", str(txt), str(cap), check=True)
        run_ioscope("report", "--q2c-csv", str(csv), str(cap), check=True)
        for f in (blk, imp, txt, csv):
            assert _mode(f) == 0o600, f
        for args in (["export", "-o", str(blk), str(cap)], ["import", str(blk), "-o", str(imp)]):
            p = run_ioscope(*args)
            assert p.returncode == 1 and "Traceback" not in p.stderr
            assert p.stderr.strip().endswith("exists; choose another file or overwrite it with -f"), p.stderr
        blk.chmod(0o644)
        run_ioscope("export", "-f", "-o", str(blk), str(cap), check=True)
        assert _mode(blk) == 0o600
        per_cpu = tmp_path / "percpu"
        run_ioscope("export", "--per-cpu", "-o", str(per_cpu), str(cap), check=True)
        assert [_mode(f) for f in per_cpu.iterdir()] and {_mode(f) for f in per_cpu.iterdir()} == {0o600}
    finally:
        os.umask(old)
