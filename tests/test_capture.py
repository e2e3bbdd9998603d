"""The capture file format: round trips, ordering, robustness against damaged files (no root needed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ioscope.base.errors import IoscopeError
from ioscope.capture.events import EV_NOTE_PROCESS, EVENT, TA_COMPLETE, TA_QUEUE, TC_NOTIFY
from ioscope.capture.store import CaptureWriter, notes_to_comms, open_capture


def events(n: int, seed: int = 1, t0: int = 10**9, step: int = 50_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ev = np.zeros(n, EVENT)
    ev["ts"] = t0 + np.cumsum(rng.integers(1, step, n)).astype(np.uint64)
    ev["sector"] = rng.integers(0, 1 << 30, n)
    ev["bytes"] = 4096
    ev["dev"] = (7 << 20) | 3
    ev["pid"] = rng.integers(100, 110, n)
    ev["tgid"] = ev["pid"]
    ev["cpu"] = rng.integers(0, 2, n)
    ev["action"] = rng.choice([TA_QUEUE, TA_COMPLETE], n)
    return ev


def note(pid: int, comm: str, ts: int) -> np.ndarray:
    n = np.zeros(1, EVENT)
    raw = np.frombuffer(comm.encode().ljust(16, b"\0")[:16], dtype="<u8")
    n["sector"], n["aux"] = raw[0], raw[1]
    n["pid"] = n["tgid"] = pid
    n["ts"] = ts
    n["category"] = TC_NOTIFY
    n["flags"] = EV_NOTE_PROCESS
    return n


def write(path: str, ev: np.ndarray, batch: int = 5000, **kw: object) -> None:
    with CaptureWriter(path, {"devices": {"7,3": {"name": "loop3"}}}, **kw) as w:  # type: ignore[arg-type]
        for i in range(0, len(ev), batch):
            w.write(ev[i:i + batch])
        w.set_lost({"total": 0})


@pytest.fixture
def good(tmp_path: Path) -> tuple[str, np.ndarray]:
    ev = events(30011)
    path = str(tmp_path / "good.ioscope")
    write(path, ev, chunk_bytes=256 << 10)
    return path, ev


def test_round_trip(good: tuple[str, np.ndarray]) -> None:
    path, ev = good
    with open_capture(path) as cap:
        assert not cap.truncated and cap.truncation is None
        assert cap.nchunks > 4  # really chunked
        assert cap.nevents == len(ev)
        back = cap.read_all()
        assert back.dtype == EVENT and (back == ev).all()
        m = cap.meta
        assert m["format"] == "ioscope-capture" and m["format_version"] == 1
        assert m["devices"]["7,3"]["name"] == "loop3"
        assert m["lost"] == {"total": 0} and m["end"]["mono_ns"] >= m["start"]["mono_ns"]
        assert {"host", "kernel", "ncpus", "clock", "tool_version"} <= set(m)


def test_sorted_across_chunks_within_reorder_window(tmp_path: Path) -> None:
    ev = events(20011, step=1000)
    # swap neighbours in many places: out of order by at most a few microseconds
    rng = np.random.default_rng(3)
    idx = np.arange(len(ev))
    for i in rng.choice(np.arange(0, len(ev) - 1, 2), 3000, replace=False):
        idx[i], idx[i + 1] = idx[i + 1], idx[i]
    path = str(tmp_path / "s.ioscope")
    write(path, ev[idx], batch=777, chunk_bytes=64 << 10)
    with open_capture(path) as cap:
        back = cap.read_all()
        assert cap.meta["late_events"] == 0
    assert (np.diff(back["ts"].astype(np.int64)) >= 0).all()
    assert (np.sort(back, order=["ts", "sector"]) == np.sort(ev, order=["ts", "sector"])).all()


def test_late_events_are_kept_and_counted(tmp_path: Path) -> None:
    ev = events(1000, step=10**7)  # 10 ms apart on average: 10 s in all
    path = str(tmp_path / "late.ioscope")
    with CaptureWriter(path, {}, reorder_window_ns=20_000_000, chunk_bytes=4096) as w:
        w.write(ev[100:])
        w.flush()
        w.write(ev[:100])  # arrive far too late
    with open_capture(path) as cap:
        assert cap.meta["late_events"] == 100
        assert len(cap.read_all()) == 1000


def test_comms_from_notes_and_add_comms(tmp_path: Path) -> None:
    ev = np.concatenate([note(101, "fio", 5), events(100), note(102, "kworker/1:1H", 10**12),
                         note(101, "fio-renamed", 10**12 + 1)])
    assert notes_to_comms(ev) == {101: "fio-renamed", 102: "kworker/1:1H"}
    path = str(tmp_path / "c.ioscope")
    with CaptureWriter(path, {}) as w:
        w.write(ev)
        w.add_comms({7: "init-ish"})
    with open_capture(path) as cap:
        assert cap.comms == {101: "fio-renamed", 102: "kworker/1:1H", 7: "init-ish"}
        assert int(np.count_nonzero(cap.read_all()["action"] == 0)) == 3  # notes stay in the stream


def test_readable_without_ioscope(good: tuple[str, np.ndarray]) -> None:
    import json

    import pyarrow as pa
    import pyarrow.ipc as ipc
    path, ev = good
    with pa.memory_map(path) as src:
        reader = ipc.open_stream(src)
        meta = json.loads(reader.schema.metadata[b"ioscope.capture"])
        table = reader.read_all()
    assert meta["format"] == "ioscope-capture"
    assert table.num_rows == len(ev)
    assert table.column("sector").to_numpy().tolist() == ev["sector"].tolist()
    df = table.to_pandas() if _have("pandas") else None
    if df is not None:
        assert int((df["action"] == TA_QUEUE).sum()) == int((ev["action"] == TA_QUEUE).sum())


def _have(mod: str) -> bool:
    try:
        __import__(mod)
    except ImportError:
        return False
    return True


def test_truncated_anywhere_gives_prefix_or_one_line_error(good: tuple[str, np.ndarray], tmp_path: Path) -> None:
    path, ev = good
    data = Path(path).read_bytes()
    cut_path = str(tmp_path / "cut.ioscope")
    seen_prefix = 0
    for cut in sorted({*range(0, 600, 37), *range(600, len(data), len(data) // 97), len(data) - 1}):
        Path(cut_path).write_bytes(data[:cut])
        try:
            cap = open_capture(cut_path)
        except IoscopeError as exc:
            msg = str(exc)
            assert cut_path in msg and "byte offset" in msg and "\n" not in msg
            continue
        with cap:
            back = cap.read_all()
            assert (back == ev[: len(back)]).all()  # a prefix, never garbage
            if cut < len(data) - 8:
                assert cap.truncated and cap.truncation and "byte offset" in cap.truncation
            seen_prefix += 1
    assert seen_prefix > 50


@pytest.mark.parametrize("case", ["empty", "magic", "garbage", "not-ioscope-arrow", "flip-header", "flip-data"])
def test_damaged_files(case: str, good: tuple[str, np.ndarray], tmp_path: Path) -> None:
    path, _ = good
    data = bytearray(Path(path).read_bytes())
    bad = tmp_path / f"{case}.ioscope"
    if case == "empty":
        data = bytearray()
    elif case == "magic":
        data[0:4] = b"BLKT"
    elif case == "garbage":
        data = bytearray(os.urandom(5000))
    elif case == "not-ioscope-arrow":
        import pyarrow as pa
        import pyarrow.ipc as ipc
        sink = pa.BufferOutputStream()
        t = pa.table({"x": [1, 2, 3]})
        with ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        data = bytearray(sink.getvalue().to_pybytes())
    elif case == "flip-header":
        i = data.index(b"loop3")
        data[i] ^= 0x20
    elif case == "flip-data":
        data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    with pytest.raises(IoscopeError) as ei:
        with open_capture(str(bad)) as cap:
            cap.read_all()
    msg = str(ei.value)
    assert str(bad) in msg and "byte offset" in msg and "\n" not in msg


def test_compressed_chunks_are_refused_in_one_line(good: tuple[str, np.ndarray], tmp_path: Path) -> None:
    """ioscope's reader decodes Arrow itself and never writes compressed chunks: such a stream is refused."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    path, _ev = good
    with pa.memory_map(path) as src:
        reader = ipc.open_stream(src)
        table = reader.read_all()
        schema = reader.schema
    bad = tmp_path / "zstd.ioscope"
    with pa.OSFile(str(bad), "wb") as f, ipc.new_stream(f, schema,
                                                        options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    with pytest.raises(IoscopeError) as ei:
        with open_capture(str(bad)) as cap:
            cap.read_all()
    msg = str(ei.value)
    assert "compressed" in msg and "byte offset" in msg and "\n" not in msg


def test_checker_cli_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "zero.ioscope"
    bad.write_bytes(b"")
    p = subprocess.run([sys.executable, "-m", "ioscope.capture.store", str(bad), str(tmp_path / "missing")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines)
    assert "byte offset 0" in lines[0] and "Traceback" not in p.stderr


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_reader(small_capture: bytes, tmp_path: Path, data: st.DataObject) -> None:
    """Any damage: either a readable capture or IoscopeError; never another exception or a hang."""
    buf = bytearray(small_capture)
    for _ in range(data.draw(st.integers(1, 8))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert", "zero"]))
        if not buf:
            break
        pos = data.draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "cut":
            del buf[pos:]
        elif kind == "insert":
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            n = data.draw(st.integers(1, 64))
            buf[pos:pos + n] = bytes(len(buf[pos:pos + n]))
    f = tmp_path / "fuzz.ioscope"
    f.write_bytes(bytes(buf))
    try:
        with open_capture(str(f)) as cap:
            for chunk in cap.iter_chunks():
                assert chunk.dtype == EVENT
            _ = cap.comms, cap.meta
    except IoscopeError as exc:
        # where it broke: a byte offset (a zstd magic put at the start makes it a bundle: "zstd frame 1 at byte 0")
        assert re.search(r"byte (offset )?\d", str(exc)) or "cannot open" in str(exc), str(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=2048))
def test_fuzz_reader_random_bytes(tmp_path: Path, raw: bytes) -> None:
    f = tmp_path / "rand.ioscope"
    f.write_bytes(raw)
    with pytest.raises(IoscopeError):
        with open_capture(str(f)) as cap:
            cap.read_all()


@pytest.fixture(scope="module")
def small_capture(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("cap") / "small.ioscope"
    ev = np.concatenate([note(101, "fio", 10**9), events(3001)])
    write(str(path), ev, batch=1000, chunk_bytes=32 << 10)
    return path.read_bytes()


def test_reading_does_not_load_pyarrow(good: tuple[str, np.ndarray]) -> None:
    """pyarrow's libraries cost ~57 MiB resident: the CLI and the capture reader must not import them
    (report's peak memory against btt depends on it, docs/report.md Performance); the writer does."""
    path, ev = good
    code = ("import sys\n"
            "from ioscope import cli\n"
            "cli.build_parser()\n"
            "from ioscope.capture.offline import open_source\n"
            f"with open_source({path!r}) as src:\n"
            "    n = sum(len(c) for c in src.chunks())\n"
            "print(n, 'pyarrow' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert p.stdout.split() == [str(len(ev)), "False"]


FULL_WRITER = r"""
import json, resource, signal, sys
import numpy as np
from ioscope.capture.store import CaptureFull, CaptureWriter
from ioscope.capture.events import EVENT
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
n = int(sys.argv[3])
ev = np.zeros(n, EVENT)
ev["ts"] = np.arange(1, n + 1, dtype=np.uint64) * 1000
ev["sector"] = np.arange(n)
ev["action"] = 8
w = CaptureWriter(sys.argv[1], {}, chunk_bytes=64 << 10, reorder_window_ns=0)
for i in range(0, n, 4999):
    w.write(ev[i:i + 4999])
try:
    w.close()
    print(json.dumps({"error": None}))
except CaptureFull as exc:
    print(json.dumps({"error": str(exc), "written": w.events_written, "unwritten": w.unwritten}))
"""


@pytest.mark.parametrize("limit", [150_000, 400_000])
def test_writer_past_the_file_size_limit_keeps_complete_chunks(tmp_path: Path, limit: int) -> None:
    """A write that does not fit (here EFBIG, RLIMIT_FSIZE: no root needed) is taken back whole: the file
    holds the first events in complete chunks, the rest is counted, and the one line says which."""
    n = 50_021
    path = tmp_path / "limited.ioscope"
    p = subprocess.run([sys.executable, "-c", FULL_WRITER, str(path), str(limit), str(n)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["error"] and "File too large" in doc["error"], doc
    written, unwritten = doc["written"], doc["unwritten"]
    assert written + unwritten == n and 0 < written < n
    assert os.path.getsize(path) <= limit
    with open_capture(path) as cap:
        back = cap.read_all()
        assert cap.nevents == written == len(back)
        assert (back["sector"] == np.arange(written)).all()   # exactly the first events, in order
        if "ends cleanly" in doc["error"]:
            assert not cap.truncated and cap.end is not None
            assert cap.end["file_system_full"]["unwritten_events"] == unwritten
        else:
            assert "no end record (it did not fit)" in doc["error"] and cap.truncated
