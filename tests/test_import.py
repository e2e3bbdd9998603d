"""ioscope import: blktrace files from elsewhere become captures that parse and report read like blkparse and btt."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blk_scenarios as bs
from conftest import ioscope_cmd, run_ioscope
from ioscope.capture import blktrace
from ioscope.capture.events import TA_QUEUE
from ioscope.capture.store import open_capture


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
    # the requeued request (Q G I D R I D C, 300 ns + 5.7 us after its Q) is timed from its first issue, as the
    # kernel's objects time it: its D2C is 5,700 ns longer than btt's, and btt counts a G2I (5,000 ns) at the
    # second I and an I2D (900 ns) at the second D, which ioscope leaves to the request (not its bio)
    requeue = {"D2C": (0, -5_700), "G2I": (1, 5_000), "I2D": (1, 900)}
    for label in ("Q2C", "D2C", "I2D", "Q2G", "G2I", "Q2M", "M2D", "Q2Q"):
        _mn, av, _mx, n = rows[label]
        ph = doc["phases"][label.lower()]
        dn, dtotal = requeue.get(label, (0, 0))
        assert ph["n"] + dn == n, label
        if label in requeue:   # btt prints its averages to the ns: the total is known to n/2 ns
            assert ph["avg"] * ph["n"] * 1e9 + dtotal == pytest.approx(av * n * 1e9, abs=n / 2 + 1), label
        else:
            assert f"{ph['avg']:.9f}" == f"{av:.9f}", label
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


def blkparse_files(d: Path, names: list[str], *opts: str) -> str:
    """Real blkparse reading blktrace's per-CPU files (-i NAME ... in directory d), all it prints (its
    'Input file NAME.blktrace.N added' lines too: parse prints them for the files an import was made of)."""
    import subprocess
    args = [a for n in names for a in ("-i", n)]
    p = subprocess.run(["blkparse", *opts, *args], capture_output=True, text=True, timeout=60, cwd=d)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p.stdout


LVM_CASES = [(o, split) for split in (False, True) for o in ("<", ">")]


LVM_IDS = [f"{'big' if o == '>' else 'little'}-{'dm+sda+sdb' if s else 'sda'}" for o, s in LVM_CASES]


@pytest.mark.parametrize(("order", "split"), LVM_CASES, ids=LVM_IDS)
def test_import_lvm_on_partition_parse_export_report(tmp_path: Path, order: str, split: bool) -> None:
    """XFS on LVM on a partition (dm 253,0 -> 8,2 -> 8,0), as blktrace writes it: parse of the import prints
    what blkparse prints from the files, line for line and summary for summary; export gives the files
    back byte for byte; report equals btt on blkparse's dump of the files."""
    raw = bs.lvm_on_partition(order, split_dm=split)
    d = tmp_path / "in"
    d.mkdir()
    originals = raw.write(str(d))
    names = list(raw.files)
    cap = tmp_path / "imp.ioscope"
    run_ioscope("import", *[str(d / n) for n in names], "-o", str(cap), check=True)
    theirs = blkparse_files(d, names)
    # the case is the one meant: remaps printed on the device they went to, messages, per-set summaries
    remaps = [ln for ln in theirs.splitlines() if "<- (253,0)" in ln]
    assert len(remaps) == 60 and all(ln.startswith("  8,2 ") for ln in remaps)   # 15 recorded on 8,0
    assert " m   N cfq2231WS insert_request\n" in theirs and "CPU0 (sda):\n" in theirs
    assert ("CPU1 (dm-0):\n" in theirs) == split and ("Events (sdb): " in theirs) == split
    assert run_ioscope("parse", str(cap), check=True).stdout == theirs
    # the files given to parse directly read the same way (one set: blkparse -i sda)
    direct = subprocess.run(ioscope_cmd("parse", "sda.blktrace.1"), capture_output=True, text=True, cwd=d, timeout=60)
    assert direct.stdout == blkparse_files(d, ["sda"])
    for opts in (("-q",), ("-a", "complete"), ("-a", "notify"), ("-w", "0.004:0.009"),
                 ("-f", "%D|%c|%s|%T.%t|%z|%p|%a|%d|%S|%n|%N|%e|%C|%M|%m\\n"),   # %D: a remap's own device
                 ("-F", "A,%D %a %S\\n", "-F", "Q,%-12C %p\\n")):
        assert run_ioscope("parse", *opts, str(cap), check=True).stdout == blkparse_files(d, names, *opts), opts
    # export --per-cpu gives back every file, byte for byte (the remaps whose record is on 8,0 but
    # whose payload says 8,2, every note, every sequence number)
    out = tmp_path / "out"
    run_ioscope("export", "--per-cpu", str(cap), "-o", str(out), check=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(p).name for p in originals)
    for p in originals:
        assert (out / Path(p).name).read_bytes() == Path(p).read_bytes(), p
    # report == btt reading blkparse's dump of the original files
    dump = tmp_path / "dump.bin"
    args = [a for n in names for a in ("-i", n)]
    subprocess.run(["blkparse", "-q", "-O", "-D", str(d), *args, "-d", str(dump)], check=True, capture_output=True,
                   timeout=60)
    assert run_ioscope("report", "--btt", str(cap), check=True).stdout == bs.run_btt(str(dump), str(tmp_path))


def test_import_merge_ties_as_blkparse(tmp_path: Path) -> None:
    """Records of one nanosecond in several files: blkparse goes on printing the file it is in while the
    next record is no later than the other files' next, and puts a file back before others of the same
    time; parse of the import prints them in that order."""
    r = bs.RawTrace(comms={10: "a", 11: "b", 12: "c"})
    t = 5_000_000_000
    for k in range(12):
        tt = t + 1_000 * (k // 3)   # three records per time, spread over files in turn
        for cpu, name, dev in ((k % 2, "sda", bs.SDA), ((k + 1) % 2, "sdb", bs.SDB)):
            r.ev(name, dev, cpu, tt, TA_QUEUE, 8 * k, 4096, dev=dev, pid=10 + k % 3, cat=1 | (1 << 4))
    d = tmp_path / "in"
    d.mkdir()
    r.write(str(d))
    cap = tmp_path / "t.ioscope"
    run_ioscope("import", str(d / "sda"), str(d / "sdb"), "-o", str(cap), check=True)
    theirs = blkparse_files(d, ["sda", "sdb"])
    assert run_ioscope("parse", str(cap), check=True).stdout == theirs


def test_import_export_keeps_records_event_cannot_hold(tmp_path: Path) -> None:
    """Records an EVENT cannot hold come back byte for byte: a SCSI pass-through issue with its 20-byte
    command, a queue event with a cgroup id, a notify record of an unknown kind, a message with a
    cgroup id, a note whose sequence field is not zero."""
    r = bs.RawTrace(order=">", comms={7: "sg_inq"})
    dev = bs.SDA
    t = 10_000_000
    r.ev("sda", dev, 0, t, TA_QUEUE | (1 << 8), 64, 4096, dev=dev, pid=7, cat=1 | (1 << 4), pdu=b"\0\0\0\0\0\0\1\x2a")
    r.ev("sda", dev, 0, t + 10, 7, 0, 36, dev=dev, pid=7, cat=(1 << 9) | (1 << 6), pdu=bytes(range(20)))
    r.note("sda", 0, t + 20, 7, 7, dev, b"\xde\xad\xbe\xef")
    r.note("sda", 0, t + 30, (1 << 8) | 2, 7, dev, b"\0\0\0\0\0\0\0\5cgroup says hi")
    r.files["sda"][0].extend(bs.raw_record(">", 99, t + 40, 0, 0, (1 << 10) << 16 | 2, 7, dev, 0, 0, b"late\0"))
    r.ev("sda", dev, 0, t + 50, TA_QUEUE, 72, 4096, dev=dev, pid=7, cat=1 | (1 << 4))
    d = tmp_path / "in"
    d.mkdir()
    files = r.write(str(d))
    cap = tmp_path / "k.ioscope"
    run_ioscope("import", str(d / "sda"), "-o", str(cap), check=True)
    run_ioscope("parse", str(cap), check=True)
    out = tmp_path / "out"
    run_ioscope("export", "--per-cpu", str(cap), "-o", str(out), check=True)
    assert [(out / Path(f).name).read_bytes() for f in files] == [Path(f).read_bytes() for f in files]


_LVM = bs.lvm_on_partition("<", n=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3_000), st.integers(0, 255)), max_size=6), st.integers(1, 3_000))
def test_damaged_per_cpu_files_import_parse_export(tmp_path: Path, flips: list[tuple[int, int]], cut: int) -> None:
    """Import, parse and export of per-CPU files with flipped bytes and a cut: a result or one
    IoscopeError naming the file, never another exception."""
    import io
    import tempfile

    from ioscope.base.errors import IoscopeError
    from ioscope.capture.importer import import_blktrace, read_file_sets
    from ioscope.tools.export.blktrace import export_blktrace
    from ioscope.tools.parse.blkparse import Parser, feed_file_sets
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    _LVM.write(str(d))
    f = d / "sda.blktrace.0"
    data = bytearray(f.read_bytes()[:cut])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    f.write_bytes(bytes(data))
    try:
        whole = read_file_sets(str(d / "sda"))
        if whole is not None:   # (None: flipped CPU fields made the file a stream of several CPUs)
            p = Parser(io.StringIO(), dict(whole.comms))
            feed_file_sets(p, whole.chunks(), whole.comms, whole.fs)
            p.summary()
        import_blktrace([str(d / "sda")], str(d / "i.ioscope"))
        export_blktrace(str(d / "i.ioscope"), str(d / "out"), per_cpu=True)
        assert (d / "out" / "sda.blktrace.0").read_bytes() == bytes(data)
    except IoscopeError as exc:
        assert "sda.blktrace.0" in str(exc) and "\n" not in str(exc)


def test_import_file_not_in_time_order(tmp_path: Path) -> None:
    """A per-CPU file whose times go back (a clock stepped back, a damaged time): the capture holds the
    events in time order, as every capture does, and keeps blkparse's order beside them; parse prints
    blkparse's order and export gives the file back."""
    r = bs.RawTrace(comms={10: "a"})
    cat = 1 | (1 << 4)
    for cpu, times in ((0, (1_000, 3_000, 2_000, 4_000, 3_500)), (1, (1_500, 2_500, 2_600))):
        for k, t in enumerate(times):
            r.ev("sda", bs.SDA, cpu, 7_000_000 + t, TA_QUEUE, 100 * cpu + 8 * k, 4096, dev=bs.SDA, pid=10, cat=cat)
    d = tmp_path / "in"
    d.mkdir()
    files = r.write(str(d))
    cap = tmp_path / "t.ioscope"
    run_ioscope("import", str(d / "sda"), "-o", str(cap), check=True)
    with open_capture(str(cap)) as c:
        ev = c.read_all()
        assert c.end is not None and "rank" in c.end["blktrace_files"]
    data = ev[(ev["flags"] & 1) == 0]
    assert (np.diff(data["ts"].astype(np.int64)) >= 0).all()
    theirs = blkparse_files(d, ["sda"])
    times = [ln.split()[3] for ln in theirs.splitlines()[:8]]
    assert times != sorted(times) and [ln.split()[5] for ln in theirs.splitlines()[:8]] == ["Q"] * 8
    assert run_ioscope("parse", str(cap), check=True).stdout == theirs
    out = tmp_path / "out"
    run_ioscope("export", "--per-cpu", str(cap), "-o", str(out), check=True)
    assert [(out / Path(f).name).read_bytes() for f in files] == [Path(f).read_bytes() for f in files]


TRACES = Path(__file__).resolve().parent / "traces"


def test_import_keeps_the_files_clock_and_time_base(tmp_path: Path) -> None:
    """Nothing in an import comes from the importing host: per-CPU files keep the kernel's absolute times and
    their timestamp note's clock; a dump without a note has no clock; intervals are the trace's own."""
    from ioscope.capture.store import open_capture
    raw = {}
    for name in ("splits", "nostamp.dump"):
        cap = tmp_path / f"{name}.ioscope"
        run_ioscope("import", str(TRACES / name), "-o", str(cap), check=True)
        with open_capture(str(cap)) as c:
            meta, ev = dict(c.meta), c.read_all()
        blk = ev[(ev["flags"] & 1) == 0]
        raw[name] = (meta, int(blk["ts"].min()), int(blk["ts"].max()))
    meta, first, last = raw["splits"]
    # the timestamp note the files hold (make_corpus.py: the recording's own clock pair) and their kernel times
    head = json.loads((TRACES / "src" / "splits.blk.txt").read_text().splitlines()[0].lstrip("# "))
    assert meta["clock"] == meta["start"] == {"mono_ns": head["mono_ns"], "wall_ns": head["wall_ns"],
                                             "uncertainty_ns": 0}
    assert first > 10**12 and meta["end"]["mono_ns"] == last   # absolute kernel times, kept
    assert meta["end"]["wall_ns"] == head["wall_ns"] + last - head["mono_ns"]
    assert meta["byte_order"] == "little" and meta["host"] is None and meta["time_base"] == "blktrace"
    meta, first, last = raw["nostamp.dump"]
    assert meta["clock"] is None and meta["start"] is None and meta["end"]["wall_ns"] is None
    assert first < 10**9 and meta["end"]["mono_ns"] == last      # a dump counts from its first record
    for name, (_meta, first, last) in raw.items():
        # every reader takes the interval from the trace: agg -r, report
        agg = json.loads(run_ioscope("agg", "-r", str(tmp_path / f"{name}.ioscope"), "-j", "-e", "count()",
                                     check=True).stdout.splitlines()[-1])
        assert agg["interval_s"] == pytest.approx((last - first) / 1e9, abs=2e-6), name
        doc = json.loads(run_ioscope("report", "--json", str(tmp_path / f"{name}.ioscope"), check=True).stdout)
        assert doc["duration"] == pytest.approx((last - first) / 1e9), name


def test_misnamed_and_incomplete_inputs(tmp_path: Path) -> None:
    """A dump under a per-CPU name is read as the stream it is; a set missing a CPU file is read whole, and
    each is said on stderr, by import, parse and report alike."""
    for tool in (("import",), ("parse", "-q"), ("report", "--btt")):
        out = ("-o", str(tmp_path / f"{tool[0]}.ioscope")) if tool[0] == "import" else ()
        p = run_ioscope(*tool, str(TRACES / "missing"), *out, check=True)
        assert f"{TRACES / 'missing'}.blktrace.2 is missing" in p.stderr or "missing.blktrace.2 is missing" in p.stderr
        assert "read the 3 other files" in p.stderr, p.stderr
        out = ("-o", str(tmp_path / f"{tool[0]}2.ioscope")) if tool[0] == "import" else ()
        p = run_ioscope(*tool, str(TRACES / "misnamed.blktrace.0"), *out, check=True)
        assert "holds records of other CPUs than 0" in p.stderr and "read as a stream" in p.stderr, p.stderr
    # every record of every file was read (the reference: the set with CPU 2's file made empty)
    from ioscope.capture.store import open_capture
    with open_capture(str(tmp_path / "import.ioscope")) as c:
        ev = c.read_all()
    assert sorted(set(ev["cpu"][(ev["flags"] & 1) == 0].tolist())) == [0, 3]
    with open_capture(str(tmp_path / "import2.ioscope")) as c:
        ev = c.read_all()
    assert sorted(set(ev["cpu"][(ev["flags"] & 1) == 0].tolist())) == [0, 1]


def test_messages_of_several_cpus_come_in_blkparse_order() -> None:
    """Messages written on CPUs with no block event, in groups with no block event between them (cfqidle:
    CFQ's idle timer and kblockd's worker), come where blkparse prints them: in its merge of the per-CPU
    files by time, a later group of a lower-numbered CPU after an earlier one (not in file order, as the
    count of block events before each left them). An import made before that order was kept (no
    "printed") gives them by time at one place, the same here: these files' times only go forward."""
    from ioscope.capture import importer
    sets = importer.read_sets(importer.expand_inputs([str(TRACES / "cfqidle")]))
    theirs = [(int(ln.split()[1]), ln.split(" m   N ", 1)[1]) for ln in blkparse_files(TRACES, ["cfqidle"]).splitlines()
              if " m   N " in ln]
    assert len({c for c, _t in theirs}) == 4 and len(theirs) > 100
    fs = importer._from_side(sets.side, "")

    def ours(fs: importer.FileSets, order: list[tuple[int, int]]) -> list[tuple[int, str]]:
        return [(fs.notes[k][1], fs.note_text(k)) for _mp, k in order]

    assert ours(fs, fs.messages()) == theirs
    by_file = sorted((mp, k) for mp, k in fs.messages())   # the order of before: block events before, then file
    assert ours(fs, by_file) != theirs
    legacy = importer._from_side({k: v for k, v in sets.side.items() if k != "printed"}, "")
    assert legacy.printed is None and ours(legacy, legacy.messages()) == theirs
