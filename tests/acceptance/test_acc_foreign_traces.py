"""Acceptance: a support engineer reads a customer's blktrace files, as a user types it.

The customer's host sent what blktrace left: `dm-0.blktrace.*` and `sda.blktrace.*` (XFS on LVM, CPUs 0
and 1), a set whose CPU 2 file was not copied (`missing.blktrace.{0,1,3}`), and a `blkparse -d` dump
saved under a per-CPU name (`misnamed.blktrace.0`), all from tests/traces/. The engineer runs
`ioscope report`, `ioscope parse` (and `--names ioscope`), `ioscope import`, `agg -r` and `export` on
them. Ground truth is the real blkparse and btt (Debian's blktrace) on the same files: report's btt
sections equal `btt -A` byte for byte, parse equals blkparse line for line, the export gives blkparse and
btt what the original gives; the missing file and the misnamed dump are said in one note each, and the
import keeps the trace's own clock (agg -r's interval is the trace's, not the importing host's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, ioscope_cmd

TRACES = ROOT / "tests" / "traces"
CUT = "==================== Latency percentiles (ioscope)"


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Path]:
    for f in TRACES.iterdir():
        if ".blktrace." in f.name:
            shutil.copyfile(f, tmp_path / f.name)
    yield tmp_path


def _tool(cwd: Path, *args: str) -> str:
    p = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "", (args, p.stderr)
    return p.stdout


def _btt(cwd: Path, dump: Path) -> str:
    _tool(cwd, "btt", "-A", "-i", str(dump), "-o", "ref")
    return (cwd / "ref.avg").read_text()


def _ok(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """ioscope ARGS as typed in the directory holding the files (it names them as given, as blkparse does)."""
    p = subprocess.run(ioscope_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, (args, p.stderr)
    return p


def test_customer_dm_over_sda(case: Path) -> None:
    """Two file sets (dm-0 over sda): report and parse as btt and blkparse read them, import and export back."""
    sets = ["-i", "dm-0", "-i", "sda"]
    bp = _tool(case, "blkparse", *sets)
    _tool(case, "blkparse", "-q", "-O", *sets, "-d", "ref.dump")
    btt_a = _btt(case, case / "ref.dump")
    cap = case / "case.ioscope"
    imp = _ok("import", "dm-0", "sda", "-o", str(cap), cwd=case)
    assert "from 4 file(s)" in imp.stderr, imp.stderr
    report = _ok("report", str(cap)).stdout
    assert report[:report.index(CUT)] == btt_a
    assert "Where btt differs" in report   # the dm remaps, on their target in ioscope's own view
    assert _ok("parse", str(cap)).stdout == bp
    _ok("export", str(cap), "-o", str(case / "back.bin"))
    assert _btt(case, case / "back.bin") == btt_a


def test_missing_cpu_file_and_misnamed_dump(case: Path) -> None:
    """A set without CPU 2's file is read whole and the gap named; a dump under a per-CPU name is read as
    a dump; neither takes a time from this host."""
    p = _ok("parse", "missing", cwd=case)
    notes = [ln for ln in p.stderr.splitlines() if "missing.blktrace.2 is missing" in ln]
    assert len(notes) == 1, p.stderr
    (case / "missing.blktrace.2").touch()   # blkparse reads every CPU up to the last only with the gap filled
    assert p.stdout == _tool(case, "blkparse", "-i", "missing")

    dump = case / "misnamed.blktrace.0"
    p = _ok("parse", str(dump))
    assert "a blkparse -d dump" in p.stderr, p.stderr
    with dump.open("rb") as f:
        ref = subprocess.run(["blkparse", "-i", "-"], stdin=f, capture_output=True, text=True, timeout=120)
    assert p.stdout == ref.stdout

    cap = case / "misnamed.ioscope"
    _ok("import", str(dump), "-o", str(cap))
    # blkparse's event lines: "  8,0    1        1     0.000000000  1234  Q  WS 2048 + 512 [dd]"
    times = [float(f[3]) for f in (ln.split() for ln in ref.stdout.splitlines())
             if len(f) > 5 and f[0].count(",") == 1 and f[0].replace(",", "").isdigit()]
    assert times
    agg = json.loads(_ok("agg", "-r", str(cap), "-j", "-e", "count()").stdout.splitlines()[-1])
    # the trace's own span (blkparse counts from the first event): not this host's clock
    assert agg["interval_s"] == pytest.approx(max(times) - min(times), abs=2e-6), agg
    assert agg["aggs"][0]["rows"][0]["count"] > 0


def test_parse_names(case: Path) -> None:
    """`parse` names a pid as blkparse does (its first note, for good); `--names ioscope` by the name the
    process had at each I/O (the renamed trace: pid reused as `reused` on CPU 1)."""
    bp = _tool(case, "blkparse", "-i", "renamed")
    default = _ok("parse", "renamed", cwd=case).stdout
    assert default == bp and "[reused]" not in bp
    own = _ok("parse", "--names", "ioscope", "renamed", cwd=case).stdout
    assert "[reused]" in own and "[dd]" in own
