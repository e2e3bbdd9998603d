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
from ioscope.capture.events import EVENT
from ioscope.capture.store import CaptureWriter
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
    cut = "was cut short: it ends without its end record"
    if killed:
        assert cut in p.stderr, p.stderr
    if n == 0:
        assert "no block events" in p.stderr

    p = run_ioscope("report", str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert (cut in p.stderr) == killed and cut not in p.stdout, p.stderr
    assert ("holds no block events" in p.stdout) == (n == 0), p.stdout
    doc = _report_json(cap)
    capture = doc["capture"]
    assert isinstance(capture, dict)
    assert capture["truncated"] is killed and (cut in capture.get("truncation", "")) == killed
    assert ("holds no block events" in capture.get("note", "")) == (n == 0)

    blk = tmp_path / "case.blktrace"
    p = run_ioscope("export", "--format", "blktrace", "-o", str(blk), str(cap))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert (cut in p.stderr) == killed, p.stderr
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
    from ioscope.tools.snoop.snooper import LiveFeed

    pr = LiveFeed()
    ios = _ios(10_000_000)
    paired = [pr.feed(np.zeros(0, EVENT)), pr.feed(note(100, "fio", 1)), pr.feed(np.zeros(0, EVENT), 5),
              pr.feed(ios[: len(ios) // 2]), pr.feed(np.zeros(0, EVENT)), pr.feed(note(101, "dd", 2)),
              pr.feed(ios[len(ios) // 2:]), pr.feed(np.zeros(0, EVENT))]
    rows = np.concatenate(paired)
    assert len(rows) == NIOS
    from ioscope.engines.pairing.bios import NO_TIME
    assert (rows["q"] != NO_TIME).all() and (rows["d"] != NO_TIME).all()


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask022", "umask000"])
def test_output_files_are_private_and_never_overwritten_silently(tmp_path: Path, umask: int) -> None:
    """Captures, exports, imports and text outputs name processes and disks: 0600 whatever the umask;
    export and import refuse an existing file like record does, and -f makes the overwritten file private."""
    old = os.umask(umask)
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
        per_cpu = tmp_path / "percpu"
        run_ioscope("export", "--per-cpu", "-o", str(per_cpu), str(cap), check=True)
        cpu_files = sorted(per_cpu.iterdir())
        assert cpu_files and {_mode(f) for f in cpu_files} == {0o600}
        before = {f: f.read_bytes() for f in (blk, imp, cap, *cpu_files)}
        # the same one-line refusal from every tool that writes a file the user names; nothing touched
        for args, path in ((["record", "-d", "loop0", "-o", str(cap)], cap),
                           (["export", "-o", str(blk), str(cap)], blk), (["import", str(blk), "-o", str(imp)], imp),
                           (["export", "--per-cpu", "-o", str(per_cpu), str(cap)], cpu_files[0])):
            p = run_ioscope(*args)
            assert p.returncode == 1 and p.stdout == "", (args, p.stderr)
            assert p.stderr == (f"ioscope {args[0]}: error: {path} exists; choose another file or overwrite it "
                                "with -f\n"), p.stderr
        assert {f: f.read_bytes() for f in before} == before
        for f in (blk, *cpu_files):
            f.chmod(0o644)
        run_ioscope("export", "-f", "-o", str(blk), str(cap), check=True)
        run_ioscope("export", "-f", "--per-cpu", "-o", str(per_cpu), str(cap), check=True)
        assert {_mode(f) for f in (blk, *cpu_files)} == {0o600}
        assert blk.read_bytes() == before[blk]
        # parse -o and report's CSV files are overwritten as blkparse -o overwrites, and made private
        for f in (txt, csv):
            f.chmod(0o644)
        run_ioscope("parse", "-o", str(txt), str(cap), check=True)
        run_ioscope("report", "--q2c-csv", str(csv), str(cap), check=True)
        assert {_mode(txt), _mode(csv)} == {0o600}
    finally:
        os.umask(old)


def test_forced_output_to_a_pipe_or_device_keeps_its_mode(tmp_path: Path) -> None:
    """-f -o onto something that is not a regular file (a named pipe here; /dev/null on a user's host)
    writes to it and leaves its mode alone: an earlier version made /dev/null owner-only."""
    from ioscope.base.outfile import create_private

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o644)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fd = create_private(str(fifo), force=True)
        os.write(fd, b"x")
        os.close(fd)
        assert os.read(reader, 1) == b"x"
    finally:
        os.close(reader)
    assert _mode(fifo) == 0o644


def test_capture_writer_never_follows_or_clobbers(tmp_path: Path) -> None:
    """The writer itself refuses an existing file or a symlink planted at its path (O_EXCL), whatever
    its caller checked before; with force it truncates the file and makes it private."""
    from ioscope.base.errors import IoscopeError

    victim = tmp_path / "victim"
    victim.write_text("keep me")
    victim.chmod(0o644)
    link = tmp_path / "case.ioscope"
    link.symlink_to(victim)
    for path in (link, victim):
        with pytest.raises(IoscopeError) as ei:
            CaptureWriter(str(path), META)
        assert str(ei.value) == f"{path} exists; choose another file or overwrite it with -f"
    assert victim.read_text() == "keep me" and _mode(victim) == 0o644
    w = CaptureWriter(str(victim), META, force=True)
    w.close()
    assert _mode(victim) == 0o600 and victim.read_bytes()[:4] == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("layout", ["idle start", "idle gaps"])
def test_idle_start_export_is_what_parse_and_report_say(tmp_path: Path, layout: str) -> None:
    """The real blkparse and btt on the export of a capture that begins with idle chunks and
    process notes print what parse and report print: the trace's time zero is the first block
    event for all of them (export took it from the first note, seconds earlier: btt's % time
    plugged and active periods then counted the idle start)."""
    from test_report import assert_same_as_btt

    cap = tmp_path / "case.ioscope"
    assert _write(cap, LAYOUTS[layout]) > 0
    assert_same_as_btt(cap, tmp_path)
    blk = tmp_path / "x.bin"
    assert run_ioscope("parse", str(cap), check=True).stdout == bs.run_blkparse(str(blk))


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The real command line, in this process (hundreds of runs); any exception but a handled
    one propagates and fails the test."""
    from ioscope import cli

    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_reader_on_a_capture_cut_at_any_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorder killed in the middle of a write leaves a capture cut at any byte: parse, report
    (text, JSON) and export either read the complete chunks before the cut and say the capture was
    cut short, or refuse it in one line (a cut inside the header). Never a traceback."""
    from ioscope import cli

    monkeypatch.setattr(cli, "install_stop_signals", lambda: None)
    whole = tmp_path / "whole.ioscope"
    n = _write(whole, "empty,notes,ios,empty,ios,notes,ios")
    data = whole.read_bytes()
    cut = tmp_path / "cut.ioscope"
    read_prefix = refused = 0
    offsets = sorted({*range(0, 400, 29), *range(400, len(data), max(1, len(data) // 150)), len(data) - 1})
    for off in offsets:
        cut.write_bytes(data[:off])
        blk = tmp_path / f"cut{off}.blktrace"
        runs = [_cli(["parse", str(cut)], capsys), _cli(["report", str(cut)], capsys),
                _cli(["report", "--json", str(cut)], capsys), _cli(["export", "-o", str(blk), str(cut)], capsys)]
        if runs[0][0] != 0:
            refused += 1
            for rc, out, err in runs:
                assert rc == 1 and out == "" and len(err.splitlines()) == 1, (off, err)
                assert "byte offset" in err and str(cut) in err, (off, err)
            continue
        read_prefix += 1
        for rc, _out, err in runs:
            assert rc == 0 and "was cut short" in err and "byte offset" in err, (off, err)
            assert len([ln for ln in err.splitlines() if "cut short" in ln]) == 1, (off, err)
        q = len([ln for ln in runs[0][1].splitlines() if " Q " in ln])
        assert q <= n and q % NIOS == 0, (off, q)   # whole chunks only
        doc = json.loads(runs[2][1])
        assert doc["capture"]["truncated"] is True and "cut short" in doc["capture"]["truncation"]
        assert blk.exists()
    assert refused and read_prefix > 100, (refused, read_prefix)
