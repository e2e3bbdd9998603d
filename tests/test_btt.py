"""`ioscope btt` against the real btt (Debian's blktrace 1.2.0), file for file and byte for byte, on every trace of
tests/traces/: each dump as it is, each per-CPU set (btt reads the `blkparse -d` dump of it; ioscope btt the files
themselves) and each set imported as an ioscope capture. Every file btt writes is compared, and the list of files:
the default text (stdout: messages, averages, activity ranges), -o NAME's NAME.avg (with and without -A), NAME.dat,
NAME.msg, NAME_qhist.dat and NAME_dhist.dat, the per-second MAJ,MIN_iops_fp.dat/_mbps_fp.dat and sys_* files, and
the -l/-q/-z latency files, and the -Q (NAME_MAJ,MIN_aqd.dat), -s (NAME_MAJ,MIN_q2q_[rwc].dat, _d2d_[rwc].dat), -m
(NAME_MAJ,MIN.dat, which btt's two seek streams write at once), -B (NAME_MAJ,MIN_[rwc].dat), -u (NAME_MAJ,MIN.dat,
the unplug histogram), -p (NAME: each I/O's track at its completion), -P (MAJ,MIN_pit.dat) and -L (1 ms periods:
MAJ,MIN_{q2d,q2c,d2c}_plat.dat) files and -I's NAME (iostat), on the whole trace and in a -t/-T window. A crafted
trace of two disks over 20 s (two_disks) has -I's intervals and their TOTAL lines; a crafted five-minute trace
(long_seeks) makes the -m file longer than a stdio buffer, where the two streams' blocks overwrite each other; a
crafted trace (unplugs) has unplugs in every bucket of -u, the corpus's only in the first, and a device without a
completion (an empty -P file, which btt keeps); -L 0 there writes no periodic file, as in btt. -D and -e (btt's
output filters: the devices and processes shown, in the order given) on every dump and per-CPU set, not again on the
sets' captures: they only select rows of the view the capture runs already compare, and the suite stays under a
minute."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from blk_scenarios import raw_record
from ioscope.capture.events import (
    TA_BACKMERGE,
    TA_COMPLETE,
    TA_GETRQ,
    TA_INSERT,
    TA_ISSUE,
    TA_PLUG,
    TA_QUEUE,
    TA_UNPLUG_IO,
    TA_UNPLUG_TIMER,
    TC_COMPLETE,
    TC_ISSUE,
    TC_QUEUE,
    TC_READ,
    TC_WRITE,
)
from test_blktrace_corpus import DUMPS, SETS, TRACES, reference_set

LAT = ("-l", "d2c", "-q", "q2c", "-z", "q2d")
EXTRA = ("-Q", "aqd", "-s", "sk", "-m", "sps", "-B", "bno", "-u", "up", "-p", "pio", "-P", "pit", "-L", "0.001",
         "-I", "io")


def ioscope_btt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ioscope.cli", "btt", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})


def real_btt(dump: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["btt", "-i", str(dump), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p


def outputs(d: Path) -> dict[str, bytes]:
    """Every file of a run."""
    return {f.name: f.read_bytes() for f in d.iterdir() if f.is_file()}


def same_run(btt_input: Path, ios_input: str, work: Path, label: str, *args: str) -> dict[str, bytes]:
    """ioscope btt and the real btt with args in two empty directories: the same files, byte for byte, and the
    same stdout. The files, for a caller's further checks."""
    ref, mine = work / f"ref-{label}", work / f"ios-{label}"
    want_out = real_btt(btt_input, ref, *args).stdout
    mine.mkdir()
    p = ioscope_btt("-i", ios_input, *args, cwd=mine)
    assert p.returncode == 0, p.stderr
    want, got = outputs(ref), outputs(mine)
    assert sorted(got) == sorted(want), (label, sorted(got), sorted(want))
    for name in want:
        assert got[name] == want[name], (label, name, got[name][:300], want[name][:300])
    assert p.stdout == want_out, (label, p.stdout[:500], want_out[:500])
    return got


def compare(btt_input: Path, ios_input: str, work: Path, ios_cwd: Path, filters: bool = True) -> None:
    """Every file and the stdout of ioscope btt, against the real btt's, for one trace."""
    for label, args in (("avg", ("-o", "out")), ("avgA", ("-o", "out", "-A")), ("lat", ("-o", "out", *LAT)),
                        ("delta", ("-o", "out", "-d", "0.001")),        # ranges cut at 1 ms gaps
                        ("window", ("-o", "out", "-t", "0.002", "-T", "0.01", *LAT, *EXTRA)),
                        ("extra", ("-o", "out", *EXTRA)),
                        ("end", ("-o", "out", "-T", "0.004"))):         # -t left at btt's 0.0
        got = same_run(btt_input, ios_input, work, label, *args)
        assert {"out.avg", "out.dat", "out.msg", "out_qhist.dat", "out_dhist.dat", "sys_iops_fp.dat",
                "sys_mbps_fp.dat"} <= set(got), sorted(got)
        if label == "extra":
            assert any(n.startswith("aqd_") for n in got) and any(n.startswith("sk_") for n in got), sorted(got)
            assert any(n.startswith("up_") for n in got), sorted(got)
            assert b"-----\n" in got.get("pio", b""), sorted(got)
            assert any(n.endswith("_pit.dat") and got[n] for n in got), sorted(got)
    if not filters:
        return
    # -D and -e: the devices btt set up in reverse order, one twice, and names of which some are no process
    devs = sorted(n[:-len("_iops_fp.dat")] for n in outputs(work / "ref-avg") if n.endswith("_iops_fp.dat")
                  and not n.startswith("sys"))
    same_run(btt_input, ios_input, work, "select", "-o", "out", "-A", "-D", ";".join([*devs[::-1], devs[0]]),
             "-e", "dd,no-such-process,fio,kworker")
    same_run(btt_input, ios_input, work, "noproc", "-A", "-e", "")   # no Per Process section
    # without -o: btt prints its messages, its averages, then its activity ranges
    got = same_run(btt_input, ios_input, work, "stdout")
    assert "out.avg" not in got and "sys_iops_fp.dat" in got


def latency_files(d: Path) -> list[str]:
    return sorted(f.name for f in d.iterdir() if f.name.endswith(("_d2c.dat", "_q2c.dat", "_q2d.dat")))


@pytest.mark.parametrize("dump", DUMPS)
def test_dump_files_equal_btt(dump: str, tmp_path: Path) -> None:
    compare(TRACES / dump, str(TRACES / dump), tmp_path, tmp_path)
    assert latency_files(tmp_path / "ios-lat"), "no latency file compared"
    got = outputs(tmp_path / "ios-extra")   # -L 0.001: several periods
    assert any(n.endswith("_d2c_plat.dat") and got[n].count(b"\n") > 1 for n in got), sorted(got)


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
    compare(ref / "ref.dump", str(cap), tmp_path / "capture", src, filters=False)


def long_seeks(seconds: int = 300, seed: int = 7) -> bytes:
    """A blkparse -d dump of one disk (8,0): an I/O every 0.15 to 0.5 s at a random sector, reads and writes, some
    with a back merge (a Q without its own D): btt's -m lines of the Q2Q and D2D streams differ, and each stream
    writes more than a 4 KiB stdio buffer."""
    rnd = random.Random(seed)
    recs = []
    t = 1000
    while t < seconds * 1_000_000_000:
        sec = rnd.randrange(0, 1 << 24) * 8
        cat = TC_READ if rnd.random() < 0.4 else TC_WRITE
        n = 4096 * rnd.choice((1, 2, 8))
        recs += [(t, sec, n, TA_QUEUE, cat | TC_QUEUE), (t + 1000, sec, n, TA_GETRQ, cat),
                 (t + 1500, sec, n, TA_INSERT, cat)]
        if rnd.random() < 0.3:
            recs += [(t + 1800, sec + n // 512, 4096, TA_QUEUE, cat | TC_QUEUE),
                     (t + 1900, sec + n // 512, 4096, TA_BACKMERGE, cat)]
            n += 4096
        recs += [(t + 3000, sec, n, TA_ISSUE, cat | TC_ISSUE), (t + 90_000, sec, n, TA_COMPLETE, cat | TC_COMPLETE)]
        t += rnd.randrange(150_000_000, 500_000_000)
    recs.sort()
    return b"".join(raw_record("<", i + 1, ts, s, n, a | (c << 16), 100, 8 << 20, 0)
                    for i, (ts, s, n, a, c) in enumerate(recs))


def test_seeks_per_second_past_a_buffer_equal_btt(tmp_path: Path) -> None:
    """btt's -m file is written by two stdio streams at once (the device's Q2Q and D2D seeks): past a buffer's
    size their blocks overwrite each other; ioscope btt leaves the file as btt does."""
    dump = tmp_path / "long.dump"
    dump.write_bytes(long_seeks())
    got = same_run(dump, str(dump), tmp_path, "long", "-o", "out", *EXTRA)
    assert len(got["sps_8,0.dat"]) > os.stat(tmp_path).st_blksize, len(got["sps_8,0.dat"])   # past a stdio buffer
    assert {"sk_8,0_q2q_r.dat", "sk_8,0_d2d_w.dat", "bno_8,0_c.dat", "aqd_8,0_aqd.dat"} <= set(got)


def unplugs(seed: int = 3) -> bytes:
    """A blkparse -d dump of two disks whose unplugs (U) carry counts from 0 to 130 (every bucket of btt's -u
    histogram, its last of 100 or more included), some timer unplugs (UT, not counted), unplugs before a device is
    set up (not counted) and while it culls (counted: btt has its d_info)."""
    import struct

    rnd = random.Random(seed)
    sda, sdb = 8 << 20, (8 << 20) | 16
    recs: list[tuple[int, int, int, int, int, int, bytes]] = [
        (500, sdb, 0, 0, TA_UNPLUG_IO, TC_QUEUE, struct.pack(">Q", 12)),           # sdb not set up: not counted
        (600, sdb, 64, 4096, TA_ISSUE, TC_WRITE | TC_ISSUE, b""),                  # sdb set up, culling
        (700, sdb, 0, 0, TA_UNPLUG_IO, TC_QUEUE, struct.pack(">Q", 57))]           # counted
    t = 1000
    for i in range(400):
        sec, n = rnd.randrange(0, 1 << 20) * 8, 4096
        action = TA_UNPLUG_TIMER if i % 7 == 0 else TA_UNPLUG_IO
        recs += [(t, sda, sec, n, TA_QUEUE, TC_WRITE | TC_QUEUE, b""), (t + 100, sda, 0, 0, TA_PLUG, TC_QUEUE, b""),
                 (t + 200, sda, sec, n, TA_GETRQ, TC_WRITE, b""), (t + 300, sda, sec, n, TA_INSERT, TC_WRITE, b""),
                 (t + 400, sda, 0, 0, action, TC_QUEUE, struct.pack(">Q", rnd.randrange(0, 131))),
                 (t + 500, sda, sec, n, TA_ISSUE, TC_WRITE | TC_ISSUE, b""),
                 (t + 90_000, sda, sec, n, TA_COMPLETE, TC_WRITE | TC_COMPLETE, b"")]
        t += rnd.randrange(100_000, 2_000_000)
    recs.sort(key=lambda r: r[0])
    return b"".join(raw_record("<", i + 1, ts, s, n, a | (c << 16), 100, dev, 0, pdu=pdu)
                    for i, (ts, dev, s, n, a, c, pdu) in enumerate(recs))


def test_unplug_histogram_equal_btt(tmp_path: Path) -> None:
    """btt's -u on unplugs of every bucket: the same files as btt, whole and in a -t/-T window; -P's file of a
    device set up without a completion (8,16), which btt leaves empty."""
    dump = tmp_path / "unplugs.dump"
    dump.write_bytes(unplugs())
    got = same_run(dump, str(dump), tmp_path, "up", "-o", "out", "-u", "up", "-P", "pit")
    rows = [line.split() for line in got["up_8,0.dat"].decode().splitlines()]
    assert len(rows) == 21 and all(int(n) > 0 for _i, n in rows), rows   # every bucket has unplugs
    assert got["up_8,16.dat"].decode().splitlines()[11] == "11 1"
    assert got["8,16_pit.dat"] == b"" and got["8,0_pit.dat"]   # btt keeps a device's -P file, even empty
    same_run(dump, str(dump), tmp_path, "upwin", "-o", "out", "-u", "up", "-t", "0.05", "-T", "0.2")
    got = same_run(dump, str(dump), tmp_path, "nolat", "-L", "0")   # btt's -L 0 (or less): no periodic files
    assert not any(n.endswith("_plat.dat") for n in got), sorted(got)


def two_disks(seconds: int = 20, seed: int = 5) -> bytes:
    """A blkparse -d dump of two disks (8,0 and 8,16) over some seconds: reads and writes, some back merges, a few
    requests in flight at once, quiet stretches (idle time), a C of an I/O issued before the trace: btt's -I
    intervals with a TOTAL line."""
    rnd = random.Random(seed)
    recs = [(500, 8 << 20, 1 << 20, 4096, TA_QUEUE, TC_WRITE | TC_QUEUE),
            (700, (8 << 20) | 16, 999, 4096, TA_COMPLETE, TC_READ | TC_COMPLETE)]   # 8,16 culls: not counted
    for dev in (8 << 20, (8 << 20) | 16):
        t = rnd.randrange(1000, 50_000)
        while t < seconds * 1_000_000_000:
            sec = rnd.randrange(0, 64) * 8   # few distinct seeks: see docs/btt.md on more than 16 modes
            cat = TC_READ if rnd.random() < 0.5 else TC_WRITE
            n = 4096 * rnd.choice((1, 2, 8, 32))
            recs += [(t, dev, sec, n, TA_QUEUE, cat | TC_QUEUE), (t + 1000, dev, sec, n, TA_GETRQ, cat),
                     (t + 1500, dev, sec, n, TA_INSERT, cat)]
            if rnd.random() < 0.3:
                recs += [(t + 1800, dev, sec + n // 512, 4096, TA_QUEUE, cat | TC_QUEUE),
                         (t + 1900, dev, sec + n // 512, 4096, TA_BACKMERGE, cat)]
                n += 4096
            done = t + rnd.randrange(3000, 40_000_000)
            recs += [(t + 2500, dev, sec, n, TA_ISSUE, cat | TC_ISSUE),
                     (done, dev, sec, n, TA_COMPLETE, cat | TC_COMPLETE)]
            quiet = rnd.random() >= 0.95
            t += rnd.randrange(500_000_000, 2_500_000_000) if quiet else rnd.randrange(1_000_000, 30_000_000)
    recs.sort(key=lambda r: r[0])
    return b"".join(raw_record("<", i + 1, ts, s, n, a | (c << 16), 100, dev, 0)
                    for i, (ts, dev, s, n, a, c) in enumerate(recs))


def test_iostat_intervals_equal_btt(tmp_path: Path) -> None:
    """btt's -I on two disks over 20 s: a line per device and a TOTAL line per interval of -S seconds (1 and 3,
    and in a -t/-T window), then the whole trace's; the corpus's traces are shorter than an interval."""
    dump = tmp_path / "two.dump"
    dump.write_bytes(two_disks())
    got = same_run(dump, str(dump), tmp_path, "io1", "-o", "out", "-I", "io")
    lines = got["io"].decode().splitlines()
    assert sum(line.startswith("TOTAL ") for line in lines) > 10, lines[:8]   # intervals with a TOTAL line
    same_run(dump, str(dump), tmp_path, "io3", "-I", "io", "-S", "3")
    same_run(dump, str(dump), tmp_path, "iowin", "-I", "io", "-S", "1", "-t", "2", "-T", "15")


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
    (["-i", "TRACE", "-T", "1s"], "-T", 2),
    (["-i", "TRACE", "-d", "nan"], "-d", 2),
    (["-i", "TRACE", "-u"], "-u", 2),
    (["-i", "TRACE", "-p"], "-p", 2),
    (["-i", "TRACE", "-P"], "-P", 2),
    (["-i", "TRACE", "-L", "1ms"], "-L", 2),    # btt's atof() would read 1
    (["-i", "TRACE", "-M", "maps"], "-M", 2),   # not supported yet
    (["-i", "TRACE", "-I", "io", "-S", "0"], "-S", 2),     # btt divides by zero
    (["-i", "TRACE", "-I", "io", "-S", "1.5"], "-S", 2),   # btt's sscanf("%u") would read 1
    (["-i", "TRACE", "-I", "io", "-D", "7,2"], "-D", 2),   # not supported yet
    (["-i", "TRACE", "-m", "sps"], "-m", 2),     # btt: "-m option requires -s options"
    (["-i", "TRACE", "-s"], "-s", 2),
    (["-i", "TRACE", "-D", "7"], "-D", 2),
    (["-i", "TRACE", "-D", "9,9"], "9,9", 2),    # a device btt never set up: btt crashes
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
