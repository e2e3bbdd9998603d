"""`ioscope btt` against the real btt (Debian's blktrace 1.2.0), file for file and byte for byte, on every trace of
tests/traces/: each dump as it is, each per-CPU set (btt reads the `blkparse -d` dump of it; ioscope btt the files
themselves) and each set imported as an ioscope capture. The outputs compared are what ioscope btt writes: the
default text (stdout), -o NAME's NAME.avg (with and without -A) and the -l/-q/-z latency files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_blktrace_corpus import DUMPS, SETS, TRACES, reference_set

LAT = ("-l", "d2c", "-q", "q2c", "-z", "q2d")
BTT_ONLY = ("_iops_fp.dat", "_mbps_fp.dat", ".dat", ".msg")   # btt's files ioscope btt does not write yet


def ioscope_btt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ioscope.cli", "btt", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})


def real_btt(dump: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["btt", "-i", str(dump), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p


def outputs(d: Path) -> dict[str, bytes]:
    """The files of a run, but those btt writes that ioscope btt does not write yet (docs/btt.md)."""
    return {f.name: f.read_bytes() for f in d.iterdir()
            if f.is_file() and not f.name.endswith(BTT_ONLY[:2]) and f.name not in ("out.dat", "out.msg")
            and not f.name.startswith("out_")}


def compare(btt_input: Path, ios_input: str, work: Path, ios_cwd: Path) -> None:
    """Every output ioscope btt writes, against the real btt's, for one trace."""
    for label, args in (("avg", ("-o", "out")), ("avgA", ("-o", "out", "-A")), ("lat", ("-o", "out", *LAT))):
        ref, mine = work / f"ref-{label}", work / f"ios-{label}"
        real_btt(btt_input, ref, *args)
        mine.mkdir()
        p = ioscope_btt("-i", ios_input, *args, cwd=mine)
        assert p.returncode == 0, p.stderr
        want, got = outputs(ref), outputs(mine)
        assert sorted(got) == sorted(want), (label, sorted(got), sorted(want))
        for name in want:
            assert got[name] == want[name], (label, name)
    # without -o: btt prints its messages (NAME.msg with -o), its averages, then its activity ranges (NAME.dat
    # with -o); ioscope btt writes the averages only, yet: they must be all of btt's stdout between the two
    stdout = real_btt(btt_input, work / "ref-stdout").stdout
    (work / "ios-stdout").mkdir()
    p = ioscope_btt("-i", ios_input, cwd=work / "ios-stdout")
    assert p.returncode == 0, p.stderr
    assert p.stdout == (work / "ref-avg" / "out.avg").read_text()
    at = stdout.find(p.stdout)
    assert at >= 0, stdout[:2000]
    assert all(ln.startswith("(") for ln in stdout[:at].splitlines()), stdout[:at][:500]   # btt's message lines
    assert stdout[at + len(p.stdout):].startswith("# Total System\n"), stdout[at + len(p.stdout):][:200]


def latency_files(d: Path) -> list[str]:
    return sorted(f.name for f in d.iterdir() if f.name.endswith(("_d2c.dat", "_q2c.dat", "_q2d.dat")))


@pytest.mark.parametrize("dump", DUMPS)
def test_dump_files_equal_btt(dump: str, tmp_path: Path) -> None:
    compare(TRACES / dump, str(TRACES / dump), tmp_path, tmp_path)
    assert latency_files(tmp_path / "ios-lat"), "no latency file compared"


@pytest.mark.parametrize("name", sorted(SETS))
def test_per_cpu_set_and_its_capture_equal_btt(name: str, tmp_path: Path) -> None:
    ref, names = reference_set(name, tmp_path)
    subprocess.run(["blkparse", "-q", "-O", *[a for n in names for a in ("-i", n)], "-d", "ref.dump"], cwd=ref,
                   check=True, capture_output=True)
    src = tmp_path / "src"
    src.mkdir()
    for n in names:
        for f in TRACES.glob(f"{n}.blktrace.*"):
            shutil.copyfile(f, src / f.name)
    if not SETS[name]:   # one set: read directly
        compare(ref / "ref.dump", str(src / name), tmp_path / "direct", src)
    cap = tmp_path / "x.ioscope"
    p = subprocess.run([sys.executable, "-m", "ioscope.cli", "import", *names, "-o", str(cap)], cwd=src,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    compare(ref / "ref.dump", str(cap), tmp_path / "capture", src)


def test_latency_rows_follow_btts_pairing_not_reports(tmp_path: Path) -> None:
    """On a trace with split bios btt never completes, btt's D2C file has fewer rows than report's CSV (ioscope's
    corrected pairing): ioscope btt writes btt's."""
    trace = TRACES / "splits.dump"
    p = ioscope_btt("-i", str(trace), "-l", "d2c", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = (tmp_path / "d2c_7,2_d2c.dat").read_text().splitlines()
    subprocess.run([sys.executable, "-m", "ioscope.cli", "report", "--d2c-csv", str(tmp_path / "r.csv"), str(trace)],
                   check=True, capture_output=True, timeout=120)
    csv_rows = (tmp_path / "r.csv").read_text().splitlines()[1:]
    assert rows and len(rows) != len(csv_rows)


@pytest.mark.parametrize(("args", "needle", "code"), [
    (["-i", "/nonexistent/trace.dump"], "/nonexistent/trace.dump", 1),
    (["-i", "CORRUPT"], "CORRUPT", 1),
    (["-i", "TRACE", "-t", "abc"], "-t", 2),
    (["-i", "TRACE", "-Q", "aqd"], "-Q", 2),
    (["-i", "TRACE", "--no-such-option"], "--no-such-option", 2),
    ([], "-i", 2),
])
def test_bad_input_is_one_line(args: list[str], needle: str, code: int, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.dump"
    corrupt.write_bytes(b"\x00garbage, not a blktrace record" * 10)
    args = [str(corrupt) if a == "CORRUPT" else str(TRACES / "splits.dump") if a == "TRACE" else a for a in args]
    needle = str(corrupt) if needle == "CORRUPT" else needle
    p = ioscope_btt(*args, cwd=tmp_path)
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 or (code == 2 and lines[0].startswith("usage:")), p.stderr
    assert needle in p.stderr, p.stderr
