"""The corpus of real-format traces (tests/traces/) against the real blkparse and btt, line for line.

Every trace is read the ways a user reads it: directly (parse, report), imported (import, then parse and
report on the capture) and exported back (import, export, then the real blkparse and btt on the export).
Each way must give what the real tools give on the original, byte for byte: report's btt sections are
`btt -A`'s (`report --btt` is `btt`'s), parse is blkparse's. The references are the real tools' output on
what they read: a dump as it is; per-CPU files through `blkparse -d` for btt (it reads only dumps), and
with the gap of a missing CPU file filled by an empty file (ioscope reads every file there is; blkparse
stops at the first missing one).

    python tests/test_blktrace_corpus.py     # the table of lines differing, per trace and check
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import blk_scenarios as bs

TRACES = Path(__file__).resolve().parent / "traces"
# per-CPU sets: name -> the other sets blkparse is given with it (-i NAME -i OTHER)
SETS = {"splits": [], "nostamp": [], "unnamed": [], "renamed": [], "bigend": [], "missing": [], "partition": [],
        "parttraced": [], "dm-0": ["sda"], "messages": [], "batched": [], "cfqidle": []}
DUMPS = ["splits.dump", "nostamp.dump", "bigend.dump", "partition.dump", "parttraced.dump", "dm.dump",
         "messages.dump", "cfqidle.dump", "misnamed.blktrace.0"]
CUT = "==================== Latency percentiles (ioscope)"


def ndiff(a: str, b: str) -> int:
    """Lines differing between two texts (as diff counts them: lines only in one, or changed)."""
    import difflib
    return sum(1 for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
               if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


def btt_text(dump: Path, work: Path, *extra: str) -> str:
    return bs.run_btt(str(dump), str(work), *extra)


def blkparse_files(names: list[str], cwd: Path, *extra: str) -> str:
    p = subprocess.run(["blkparse", *extra, *[a for n in names for a in ("-i", n)]], cwd=cwd, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p.stdout


def ioscope(*args: str, cwd: Path | None = None) -> str:
    p = subprocess.run([sys.executable, "-m", "ioscope.cli", *args], capture_output=True, text=True, timeout=120,
                       cwd=cwd, env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


def btt_part(report: str) -> str:
    cut = report.find(CUT)
    assert cut > 0, report[:2000]
    return report[:cut]


def reference_set(name: str, work: Path) -> tuple[Path, list[str]]:
    """A copy of the set (and the sets read with it) where blkparse reads every file: a missing CPU's file
    made empty, as blktrace leaves it for a CPU that saw nothing. Returns the directory and the names."""
    names = [name, *SETS[name]]
    ref = work / "ref"
    ref.mkdir()
    for n in names:
        cpus = sorted(int(f.name.rsplit(".", 1)[1]) for f in TRACES.glob(f"{n}.blktrace.*"))
        for c in range(cpus[-1] + 1):
            src = TRACES / f"{n}.blktrace.{c}"
            (ref / src.name).write_bytes(src.read_bytes() if src.exists() else b"")
    return ref, names


def compare_set(name: str, work: Path) -> dict[str, int]:
    """Lines differing from the real tools, per check, for a per-CPU set."""
    ref, names = reference_set(name, work)
    subprocess.run(["blkparse", "-q", "-O", *[a for n in names for a in ("-i", n)], "-d", "ref.dump"], cwd=ref,
                   check=True, capture_output=True)
    bp = blkparse_files(names, ref)
    bttA = btt_text(ref / "ref.dump", work, "-A")
    btt0 = btt_text(ref / "ref.dump", work)
    out: dict[str, int] = {}
    src = work / "src"
    src.mkdir()
    for n in names:
        for f in TRACES.glob(f"{n}.blktrace.*"):
            shutil.copyfile(f, src / f.name)
    if not SETS[name]:   # one set: parse and report read it directly
        out["parse"] = ndiff(bp, ioscope("parse", name, cwd=src))
        out["report"] = ndiff(bttA, btt_part(ioscope("report", name, cwd=src)))
        out["report --btt"] = ndiff(btt0, ioscope("report", "--btt", name, cwd=src))
    cap = work / "x.ioscope"
    ioscope("import", *names, "-o", str(cap), cwd=src)
    out["import: parse"] = ndiff(bp, ioscope("parse", str(cap)))
    out["import: report"] = ndiff(bttA, btt_part(ioscope("report", str(cap))))
    exp = work / "exp"
    ioscope("export", str(cap), "--per-cpu", "-o", str(exp))
    for n in names:   # the gap, as in the reference
        for c in range(max(int(f.name.rsplit(".", 1)[1]) for f in exp.glob(f"{n}.blktrace.*"))):
            (exp / f"{n}.blktrace.{c}").touch()
    out["export: blkparse"] = ndiff(bp, blkparse_files(names, exp))
    ioscope("export", str(cap), "-o", str(work / "x.bin"))
    out["export: btt"] = ndiff(bttA, btt_text(work / "x.bin", work, "-A"))
    return out


def compare_dump(dump: str, work: Path) -> dict[str, int]:
    """Lines differing from the real tools, per check, for a dump (a stream)."""
    path = TRACES / dump
    bp = bs.run_blkparse(str(path))
    bttA = btt_text(path, work, "-A")
    btt0 = btt_text(path, work)
    out = {"parse": ndiff(bp, ioscope("parse", str(path))),
           "report": ndiff(bttA, btt_part(ioscope("report", str(path)))),
           "report --btt": ndiff(btt0, ioscope("report", "--btt", str(path)))}
    cap = work / "x.ioscope"
    ioscope("import", str(path), "-o", str(cap))
    out["import: parse"] = ndiff(bp, ioscope("parse", str(cap)))
    out["import: report"] = ndiff(bttA, btt_part(ioscope("report", str(cap))))
    ioscope("export", str(cap), "-o", str(work / "x.bin"))
    out["export: blkparse"] = ndiff(bp, bs.run_blkparse(str(work / "x.bin")))
    out["export: btt"] = ndiff(bttA, btt_text(work / "x.bin", work, "-A"))
    return out


@pytest.mark.parametrize("name", sorted(SETS))
def test_per_cpu_set_equals_blkparse_and_btt(name: str, tmp_path: Path) -> None:
    diffs = compare_set(name, tmp_path)
    assert diffs and not any(diffs.values()), diffs


@pytest.mark.parametrize("dump", DUMPS)
def test_dump_equals_blkparse_and_btt(dump: str, tmp_path: Path) -> None:
    diffs = compare_dump(dump, tmp_path)
    assert diffs and not any(diffs.values()), diffs


def test_corpus_is_what_make_corpus_builds(tmp_path: Path) -> None:
    """The committed trace files are what make_corpus.py builds from the recorded lines (src/)."""
    subprocess.run([sys.executable, str(TRACES / "make_corpus.py"), "build", "--out", str(tmp_path)], check=True)
    built = sorted(f.name for f in tmp_path.iterdir() if f.is_file())
    kept = sorted(f.name for f in TRACES.iterdir() if f.is_file() and (".blktrace." in f.name or f.suffix == ".dump"))
    assert built == kept
    for name in built:
        assert (tmp_path / name).read_bytes() == (TRACES / name).read_bytes(), name


def main() -> int:
    import tempfile
    rows: list[tuple[str, dict[str, int]]] = []
    for name in sorted(SETS):
        with tempfile.TemporaryDirectory() as d:
            rows.append((name + " (per-CPU)", compare_set(name, Path(d))))
    for dump in DUMPS:
        with tempfile.TemporaryDirectory() as d:
            rows.append((dump, compare_dump(dump, Path(d))))
    checks = ["parse", "report", "report --btt", "import: parse", "import: report", "export: blkparse",
              "export: btt"]
    print(f"{'trace':<24s}" + "".join(f"{c:>18s}" for c in checks))
    for name, diffs in rows:
        print(f"{name:<24s}" + "".join(f"{diffs[c] if c in diffs else '-':>18}" for c in checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
