#!/usr/bin/env python3
"""ioscope btt vs btt on the same blktrace file: time, peak memory, and the files compared byte for byte.

For each size (--sizes, in events), in one run:
1. A synthetic capture made as bench/report_speed.py makes its (write_capture: I/Os at a steady rate, about
   27 in flight, 4-64 KiB reads and writes from four processes, a tenth back-merged, plugs around bursts),
   exported to a blktrace binary (ioscope export): the one input both tools read.
2. `btt -i EXPORT -o x -l d2c -q q2c -z q2d` and `ioscope btt` with the same arguments, each in its own empty
   directory, alternately --repeat times; wall time and peak RSS (GNU time) of each, the fastest run kept.
3. Every file the two wrote compared byte for byte (the same list of files, the same bytes), then the ratios
   (ioscope / btt: below 1 means ioscope btt is faster or smaller) and a table of every size at the end.

usage: bench/btt_speed.py [--sizes N,N,...] [--repeat N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_speed import run_child, write_capture

ARGS = ["-o", "x", "-l", "d2c", "-q", "q2c", "-z", "q2d"]


def fresh(d: Path) -> Path:
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def same_files(a: Path, b: Path) -> list[str]:
    """The differences between two runs' files (empty: the same names and bytes)."""
    na, nb = sorted(f.name for f in a.iterdir()), sorted(f.name for f in b.iterdir())
    if na != nb:
        return [f"files differ: btt {na} ioscope {nb}"]
    return [n for n in na if (a / n).read_bytes() != (b / n).read_bytes()]


def measure(n_events: int, work: Path, repeat: int) -> tuple[int, int, tuple[float, int], tuple[float, int]]:
    cap = str(work / f"s{n_events}.ioscope")
    n = write_capture(cap, n_events)
    bin_ = cap + ".blktrace"
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    _w, _rss, _o, rc = run_child([*ioscope, "export", cap, "--format", "blktrace", "-o", bin_, "-f"], False)
    assert rc == 0, "export failed"
    size = os.path.getsize(bin_)
    print(f"== {n:,} events, {size / 1e6:.1f} MB blktrace", flush=True)
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeat):
        for tool, cmd in (("btt", ["btt", "-i", bin_, *ARGS]), ("ioscope", [*ioscope, "btt", "-i", bin_, *ARGS])):
            d = fresh(work / tool)
            w, rss, _o, rc = run_child(cmd, False, cwd=str(d))
            assert rc == 0, f"{tool} failed"
            old = best.get(tool, (w, rss))
            best[tool] = (min(old[0], w), min(old[1], rss))   # the fastest run, the smallest peak
    diff = same_files(work / "btt", work / "ioscope")
    nfiles = len(list((work / "btt").iterdir()))
    print(f"files: {nfiles} written by each, " + ("all identical" if not diff else f"DIFFERENT: {diff}"))
    (w_bt, rss_bt), (w_io, rss_io) = best["btt"], best["ioscope"]
    print(f"btt:         {w_bt:8.2f} s {rss_bt / 1024:8.0f} MiB")
    print(f"ioscope btt: {w_io:8.2f} s {rss_io / 1024:8.0f} MiB")
    print(f"ratios (ioscope/btt): time {w_io / w_bt:.2f}, memory {rss_io / rss_bt:.2f}", flush=True)
    if diff:
        raise SystemExit("ioscope btt's files differ from btt's")
    os.unlink(cap)
    os.unlink(bin_)
    return n, size, best["btt"], best["ioscope"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000,5000000", help="events per synthetic capture")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tool; the fastest is kept")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    a = ap.parse_args()
    if not os.path.exists("/usr/bin/time"):
        sys.exit("GNU time (/usr/bin/time) is needed to measure peak memory: apt install time")
    if shutil.which("btt") is None:
        sys.exit("btt (Debian's blktrace package) is needed")
    work = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="btt-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for s in a.sizes.split(","):
            rows.append(measure(int(s), work, a.repeat))
    finally:
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'events':>12} {'MB':>7} | {'btt s':>7} {'MiB':>6} | {'ioscope s':>9} {'MiB':>6} | "
          f"{'time x':>6} {'mem x':>6}")
    for n, size, (w_bt, r_bt), (w_io, r_io) in rows:
        print(f"{n:12,} {size / 1e6:7.1f} | {w_bt:7.2f} {r_bt / 1024:6.0f} | {w_io:9.2f} {r_io / 1024:6.0f} | "
              f"{w_io / w_bt:6.2f} {r_io / r_bt:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
