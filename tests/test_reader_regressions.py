"""Customers' files that once crashed, hung or blew up a reader (issue 34), each kept with what the reader
must give now: the correct bounded result, or the one-line error.

The small inputs are in tests/data/fuzz/ (README.md there says how each was made); the rest are built
here. tests/test_sanitized.py runs this file again with the ASan+UBSan build of _tracecore.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import blk_scenarios as bs
from ioscope.base.errors import IoscopeError
from ioscope.capture import blktrace, importer
from ioscope.capture.events import EVENT, TA_COMPLETE, TA_ISSUE, TA_QUEUE, TC_COMPLETE, TC_ISSUE, TC_QUEUE, TC_READ
from ioscope.engines.pairing.bios import Bios

DATA = Path(__file__).resolve().parent / "data" / "fuzz"
# every CLI run here reads a file of under 1 KB: a run over 60 s is the hang the test is about
TIMEOUT = 60


def ioscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "ioscope.cli", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)


def one_line_error(p: subprocess.CompletedProcess[str], tool: str, *words: str) -> str:
    """The house's error: non-zero exit, one line on stderr, no traceback."""
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ioscope {tool}: error: "), p.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def report_json(path: Path | str) -> dict[str, Any]:
    p = ioscope("report", "--json", str(path))
    assert p.returncode == 0, p.stderr[-2000:]
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


# --------------------------------------------------------------------------- 1: a bio of less than a sector

def _ev(rows: list[tuple[int, int, int, int]]) -> np.ndarray:
    cat = {TA_QUEUE: TC_QUEUE, TA_ISSUE: TC_ISSUE, TA_COMPLETE: TC_COMPLETE}
    ev = np.zeros(len(rows), EVENT)
    for i, (ts, action, sector, nbytes) in enumerate(rows):
        ev[i] = (ts, sector, 0, nbytes, bs.LOOP0, 0, 5, 5, 0, 0, action, TC_READ | cat[action], 0)
    return ev


def test_subsector_bio_pairs_once() -> None:
    """A Q of 256 bytes, then a D and C of 4 KiB at its sector: the request's chain walk stopped nowhere
    (the bio's length in sectors is 0) and appended the same bio until memory ran out. It is one bio."""
    recs = Bios().feed(_ev([(1000, TA_QUEUE, 8, 256), (2000, TA_ISSUE, 8, 4096), (3000, TA_COMPLETE, 8, 4096)]))
    assert len(recs) == 1
    r = recs[0]
    assert (int(r["q"]), int(r["d"]), int(r["c"]), int(r["bytes"]), int(r["c_bytes"])) == (1000, 2000, 3000, 256, 4096)


def test_subsector_bio_file_through_report_and_agg(tmp_path: Path) -> None:
    f = DATA / "subsector-bio.blktrace.0"
    assert f.stat().st_size == 144
    doc = report_json(f)
    assert doc["events"] == 3
    assert (doc["phases"]["q2c"]["n"], doc["phases"]["q2c"]["max"]) == (1, 2e-06)
    btt = ioscope("report", "--btt", str(f))
    assert btt.returncode == 0 and "Q2C               0.000002000   0.000002000   0.000002000           1" in btt.stdout
    cap = tmp_path / "c.ioscope"
    assert ioscope("import", str(f), "-o", str(cap)).returncode == 0
    agg = ioscope("agg", "-r", str(cap), "-e", "sum(bytes) by op", "-j")
    assert agg.returncode == 0, agg.stderr
    rows = json.loads(agg.stdout)["aggs"][0]["rows"]
    assert [(r["keys"]["op"], r["sum"]) for r in rows] == [("read", 256)]


def test_request_end_past_2_64_stops_the_walk() -> None:
    """A D whose range passes sector 2^64 - 1: the walk ends at the last sector, it does not wrap."""
    top = 2**64 - 8
    recs = Bios().feed(_ev([(1000, TA_QUEUE, top, 4096), (2000, TA_ISSUE, top, 8192), (3000, TA_COMPLETE, top, 8192)]))
    assert [(int(r["sector"]), int(r["bytes"])) for r in recs] == [(top, 4096)]


# --------------------------------------------------------------------------- 2: pid 0xffffffff

def test_pid_ffffffff_is_one_process() -> None:
    """btt.py's pid-indexed table grew to 2^32 entries (16 GiB) for this 144-byte file."""
    doc = report_json(DATA / "pid-ffffffff.blktrace.0")
    assert list(doc["processes"]) == ["pid4294967295"]
    assert doc["processes"]["pid4294967295"]["phases"]["q2c"]["n"] == 1


def test_pid_table_grows_with_distinct_pids_not_values() -> None:
    from ioscope.engines.pairing.btt import Btt
    b = Btt()
    pids = np.array([0xFFFFFFFF, 7, 0xFFFFFFFF, 2**31, 7], dtype=np.uint32)
    procs = b._procs(pids)
    assert len(b._pid_keys) == 3 and b._pid_keys.nbytes == 12
    assert procs[0] == procs[2] and procs[1] == procs[4] and len(set(procs.tolist())) == 3
    assert [b.proc_names[p] for p in procs.tolist()] == ["pid4294967295", "pid000000007", "pid4294967295",
                                                          "pid2147483648", "pid000000007"]


# --------------------------------------------------------------------------- 3: times of 2^63 ns or more

@pytest.mark.parametrize("name, t", [("time-2e63.blktrace.0", 2**63 + 1000),
                                     ("message-time-2e63.blktrace.0", 2**63 + 5)])
@pytest.mark.parametrize("tool", ["parse", "report", "import"])
def test_time_past_2_63_is_one_error(tmp_path: Path, name: str, t: int, tool: str) -> None:
    """An event's or a message note's time >= 2^63: OverflowError tracebacks (importer._stream, btt._iostat,
    blkparse._feed_events and message()). No kernel clock reaches 292 years: the file is corrupt there."""
    args = [str(DATA / name)] + (["-o", str(tmp_path / "c.ioscope")] if tool == "import" else [])
    one_line_error(ioscope(tool, *args), tool, f"time {t} ns (2^63 or more) at byte offset 0")


def test_time_past_2_63_later_in_a_file_names_its_offset() -> None:
    data = (DATA / "subsector-bio.blktrace.0").read_bytes()[:96] + (DATA / "time-2e63.blktrace.0").read_bytes()[96:]
    with pytest.raises(blktrace.BlktraceError,
                       match=r"time 9223372036854778808 ns \(2\^63 or more\) at byte offset 96"):
        blktrace.record_offsets(data, "f")


def test_capture_event_time_past_2_63_is_one_error(tmp_path: Path) -> None:
    """A capture is checksummed, but a capture written with such a time (by any writer) reads the same way."""
    s = bs.Scenario()
    s.io(2**63 + 10, 8, 4096)
    path = tmp_path / "c.ioscope"
    bs.write_capture(str(path), s)
    for tool in ("parse", "report"):
        one_line_error(ioscope(tool, str(path)), tool, "corrupt chunk (an event time of 2^63 ns or more)")


# --------------------------------------------------------------------------- 4: the file-set JSON

@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    cap = tmp_path_factory.mktemp("imp") / "p.ioscope"
    p = ioscope("import", str(Path(__file__).resolve().parent / "traces" / "partition.blktrace.0"), "-o", str(cap))
    assert p.returncode == 0, p.stderr
    return cap.read_bytes()


# one byte (or a few, the same length) changed in the end record's JSON, which no checksum covers; each gave
# a KeyError or IndexError traceback, or was taken as it was
MUTATIONS = [
    (b'"files": [', b'"filez": [', "set 0: files: not a list"),
    (b'"bytes": 1968', b'"bytex": 1968', "set 0: bytes: missing"),
    (b'"order": "<"', b'"order": "x"', "set 0: a file without its byte order"),
    (b'"cpu": 1,', b'"cpu": 9,', "note 3: CPU 1 is no file of set 0"),
    (b'"notes": [[0, 0', b'"notes": [[7, 0', "note 0: set: 7, not a whole number in [0, 0]"),
    (b'"events": 54, "seq"', b'"events": 55, "seq"', "54 values for 55 events"),
]


@pytest.mark.parametrize("old, new, what", MUTATIONS)
def test_file_set_json_damage_is_one_error(tmp_path: Path, imported: bytes, old: bytes, new: bytes, what: str) -> None:
    data = imported.replace(old, new, 1)
    assert data != imported and len(data) == len(imported)
    path = tmp_path / "m.ioscope"
    path.write_bytes(data)
    for tool, extra in (("parse", []), ("report", ["--json"]), ("export", ["-o", str(tmp_path / "x")])):
        one_line_error(ioscope(tool, *extra, str(path)), tool, "corrupt blktrace record of the import", what)


def _side(imported: bytes) -> dict[str, Any]:
    i = imported.index(b'"blktrace_files": ') + len(b'"blktrace_files": ')
    side, _end = json.JSONDecoder().raw_decode(imported.decode("latin-1"), i)
    assert isinstance(side, dict)
    return side


def _damaged(side: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(side))
    at = out
    for k in path[:-1]:
        at = at[k]
    at[path[-1]] = value
    return out


@pytest.mark.parametrize("path, value, what", [
    (["sets"], {}, "sets: not a list"),
    (["sets", 0, "name"], 3, "set 0: no name"),
    (["sets", 0, "files", 0, "cpu"], 10**12, "set 0: cpu: 1000000000000, not a whole number in [-1, 65535]"),
    (["sets", 0, "files", 0, "cpu"], True, "set 0: cpu: True"),
    (["sets", 0, "files", 1, "cpu"], 0, "set 0: files [0, 0] (one per CPU, or one dump)"),
    (["sets", 0, "files", 1, "cpu"], -1, "set 0: files [0, -1] (one per CPU, or one dump)"),
    (["events"], -1, "events: -1"),
    (["seq"], 5, "seq: not packed"),
    (["set"], "eJxjYKAfAAAAbAAB!", "Only base64 data is allowed"),
    (["notes", 0], [0, 0, 0], "note 0: not [set, cpu, position, printed at, record]"),
    (["notes", 0, 2], 10**9, "note 0: position: 1000000000"),
    (["notes", 0, 4], "0774", "note 0: 2 bytes, a record has at least 48"),
    (["raw"], [[54, "00" * 48]], "raw record 0: event: 54"),
])
def test_file_set_record_checked_once(imported: bytes, path: list[Any], value: Any, what: str) -> None:
    side = _side(imported)
    importer._from_side(side, "f")   # as written: valid
    with pytest.raises(IoscopeError, match="corrupt blktrace record of the import") as exc:
        importer._from_side(_damaged(side, path, value), "f")
    assert what in str(exc.value) and "\n" not in str(exc.value)


def test_file_set_printed_messages_checked(tmp_path: Path) -> None:
    """The messages' print order ("printed": the notes printed, each once, none after fewer block events than
    one before it) is checked like the rest; an import without it (made before it was kept) is valid."""
    import base64
    import zlib
    cap = tmp_path / "m.ioscope"
    p = ioscope("import", str(Path(__file__).resolve().parent / "traces" / "cfqidle"), "-o", str(cap))
    assert p.returncode == 0, p.stderr
    side = _side(cap.read_bytes())
    printed = np.frombuffer(zlib.decompress(base64.b64decode(side["printed"])), "<u4")
    assert importer._from_side(side, "f").printed is not None
    assert importer._from_side({k: v for k, v in side.items() if k != "printed"}, "f").printed is None

    def packed(a: Any) -> str:
        return base64.b64encode(zlib.compress(np.asarray(a, "<u4").tobytes())).decode()

    for value, what in ((5, "printed: not packed"), (packed(printed[:-1]), "values for"),
                        (packed(np.r_[printed[1:], printed[:1] + 1]), "printed: not the notes printed"),
                        (packed(printed[::-1]), "printed: a message before one printed after fewer block events")):
        with pytest.raises(IoscopeError, match="corrupt blktrace record of the import") as exc:
            importer._from_side(_damaged(side, ["printed"], value), "f")
        assert what in str(exc.value), (what, str(exc.value))


def test_file_set_note_time_and_length_checked(imported: bytes) -> None:
    side = _side(imported)
    rec = bytearray(bytes.fromhex(side["notes"][0][4]))
    late = bytes(rec[:8]) + (2**63).to_bytes(8, "little") + bytes(rec[16:])
    with pytest.raises(IoscopeError, match=r"note 0: time 9223372036854775808 ns \(2\^63 or more\)"):
        importer._from_side(_damaged(side, ["notes", 0, 4], late.hex()), "f")
    with pytest.raises(IoscopeError, match=r"note 0: \d+ bytes, its header says \d+"):
        importer._from_side(_damaged(side, ["notes", 0, 4], (bytes(rec) + b"\0").hex()), "f")


def test_packed_arrays_do_not_inflate_past_their_count() -> None:
    """A zlib stream of the file inflates only as far as the events' count says (a 1 KB bomb is not 1 GB)."""
    import base64
    import zlib
    bomb = base64.b64encode(zlib.compress(bytes(1 << 24), 9)).decode()
    assert len(bomb) < 40_000
    with pytest.raises(ValueError, match="more than 3 values for 3 events"):
        importer._unpack(bomb, "<u4", 3)
    assert importer._unpack(importer._pack(np.arange(3, dtype="<u4")), "<u4", 3).tolist() == [0, 1, 2]


def test_cpu_in_a_file_name_bounds_the_missing_list(tmp_path: Path) -> None:
    """NAME.blktrace.99999999999 beside NAME.blktrace.0: the missing CPUs below it were listed one by one."""
    (tmp_path / "t.blktrace.0").write_bytes((DATA / "subsector-bio.blktrace.0").read_bytes())
    (tmp_path / "t.blktrace.99999999999").write_bytes(b"")
    one_line_error(ioscope("parse", str(tmp_path / "t.blktrace.0")), "parse",
                   "CPU 99999999999 in a per-CPU file's name is past 65535")


# --------------------------------------------------------------------------- 5: sectors of 2^63 or more

def test_seek_distances_past_2_63() -> None:
    """st_dist cast sectors to int64: signed overflow and -INT64_MIN (UBSan). Distances are unsigned now:
    the Qs at 8, 2^63+8, 16, 2^63+1008, 2^64-16 and 0 (8 sectors each) are 8, 2^63-8 twice, 2^63+984,
    2^63-1032 and 2^64-16 sectors apart."""
    doc = report_json(DATA / "sector-2e63.blktrace.0")
    for k in ("seek_q2q", "seek_d2d"):
        s = doc["summary"][k]
        assert (s["n"], s["modes"], s["mode_count"]) == (6, [2**63 - 8], 2), s
        want = (8 + 2 * (2**63 - 8) + 2**63 + 984 + 2**63 - 1032 + 2**64 - 16) / 6
        assert s["mean"] == pytest.approx(want, rel=1e-12)   # a mean of doubles: rounding only


def test_bio_seek_past_2_63_saturates() -> None:
    """bios.c's seek of a Q: a distance of 2^63 or more saturates (a negative seek reads as none)."""
    recs = Bios().feed(_ev([(1000, TA_QUEUE, 0, 4096), (1100, TA_QUEUE, 2**64 - 16, 4096),
                            (2000, TA_ISSUE, 0, 4096), (2100, TA_ISSUE, 2**64 - 16, 4096),
                            (3000, TA_COMPLETE, 0, 4096), (3100, TA_COMPLETE, 2**64 - 16, 4096)]))
    assert [int(r["seek"]) for r in recs] == [-1, 2**63 - 1]


def test_gather_refuses_offsets_outside_the_buffer() -> None:
    from ioscope.capture import _tracecore
    buf = (DATA / "subsector-bio.blktrace.0").read_bytes()
    for off in (-1, -48, 97, 2**62):
        with pytest.raises(ValueError, match="record offset past the end of the buffer"):
            _tracecore.gather_blktrace(buf, np.array([0, off], dtype=np.int64), False)
    assert len(_tracecore.gather_blktrace(buf, np.array([0, 96], dtype=np.int64), False)) == 128


# --------------------------------------------------------------------------- found by the fuzz campaigns

def _cpu_dev_dump(path: Path, n: int = 150) -> None:
    """n Qs, each of its own device, all on CPU 65535: 7.2 KB."""
    path.write_bytes(b"".join(bs.raw_record("<", i + 1, 1000 + i, 8 * i, 4096, TA_QUEUE | ((TC_READ | TC_QUEUE) << 16),
                                            5, (8 << 20) | i, 65535) for i in range(n)))


def test_blkparse_counters_grow_with_cpus_seen_not_their_number(tmp_path: Path) -> None:
    """parse kept its per-CPU counters as [device][cpu] up to the largest CPU number: 2.12 GiB for this
    7.2 KB dump (a MemoryError traceback under a memory limit), and a summary loop over 65,536 CPUs per
    device. The counters' columns are the CPUs seen."""
    from ioscope.tools.parse.blkparse import Parser
    path = tmp_path / "cpus.dump"
    _cpu_dev_dump(path)
    p = Parser(open(os.devnull, "w"), {})
    for d in blktrace.read_stream(str(path)):
        p.feed(d.events, d.seq)
    assert p.cpustats.shape[1] == 4 and p.cpustats.nbytes < 1 << 20   # 4: the table's first size
    assert p.col_cpu == [65535]
    out = ioscope("parse", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("CPU65535 (8,") == 150 and "Events (8,149): 1 entries" in out.stdout


def _exporter_answer(name: str) -> tuple[Any, Any]:
    """The request kept in tests/data/fuzz/NAME, as h11 parses it, and the exporter's answer to it."""
    import h11

    from ioscope.tools.exporter import server
    conn = h11.Connection(h11.SERVER)
    conn.receive_data((DATA / name).read_bytes())
    req = conn.next_event()
    assert isinstance(req, h11.Request)
    srv = server.Server([], server.App(lambda: [], "test"), "test")
    try:
        r, _head = srv.loop.run_until_complete(srv.answer(req, None))  # type: ignore[arg-type]
    finally:
        srv.collections.close()
        srv.auth_pool.shutdown(wait=False)
        srv.loop.close()
    return req, r


def test_exporter_accept_version_not_a_number_is_answered() -> None:
    """Found by the http fuzz target: an Accept header's openmetrics version that is no number raised TypeError
    out of Server.answer (prometheus_client's choose_encoder) and the connection closed unanswered; the
    server now negotiates from known words only (server.negotiate)."""

    req, r = _exporter_answer("http-accept-version.bin")
    assert b"version=1\xd2" in dict(req.headers)[b"accept"]
    assert r.status in (200, 406)


def test_stream_ids_table_grows_with_files_not_cpu_numbers() -> None:
    """An import's file-set record of 2,000 sets, each a file of CPU 65535 (about 120 KB of JSON): the
    streams' table was sets x 65,537 int64 (1 GiB), per chunk read. It is a table of the files."""
    import tracemalloc
    sets = [{"name": f"s{i}", "files": [{"cpu": 65535, "order": "<", "bytes": 48}]} for i in range(2000)]
    n = 4000
    fs = importer.FileSets(sets, np.zeros(n, np.uint32), (np.arange(n) % 2000).astype(np.uint16), [], {})
    cpu = np.where(np.arange(n) % 3 == 0, 7, 65535).astype(np.uint16)
    tracemalloc.start()
    try:
        ids = fs.stream_ids(0, cpu)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak   # the tables of 2,000 files and 4,000 events: a few hundred KB
    assert ids.tolist() == [-1 if k % 3 == 0 else k % 2000 for k in range(n)]


def test_exporter_content_type_is_a_valid_header() -> None:
    """Found by the http fuzz target: the Accept header's version was echoed into the answer's Content-Type,
    control and non-ASCII bytes with it, which h11 refuses to send."""
    _req, r = _exporter_answer("http-accept-echoed.bin")
    assert r.status == 200
    for _k, v in r.headers:
        assert v.isascii() and v.isprintable(), v


def test_exporter_accept_headers_choose_among_known_formats_only() -> None:
    """Each distinct Content-Type was an encoding cached apart: a client sending a new version per scrape grew
    the exporter's caches without bound. What an Accept header chooses is one of a few known formats."""
    from prometheus_client.exposition import choose_encoder

    from ioscope.tools.exporter.server import negotiate
    got = {choose_encoder(negotiate(f"application/openmetrics-text; version={i}.{i}.{i}; escaping=x{i}"))[1]
           for i in range(1000)}
    assert got == {"application/openmetrics-text; version=1.0.0; charset=utf-8"}, got
    # what Prometheus itself sends is kept: openmetrics first, its escaping, text 1.0.0 and 0.0.4
    om = "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8"
    assert negotiate("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                     "text/plain;version=0.0.4;q=0.3") == om
    text = "text/plain; version=1.0.0; escaping=underscores"
    assert negotiate("text/plain;version=1.0.0;escaping=underscores") == text
    assert negotiate("text/plain;version=0.0.4") == negotiate("") == ""
