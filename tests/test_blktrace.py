"""The blktrace version 7 codec: round trips, both byte orders, per-CPU merging, corrupt input."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

import blk_scenarios as bs
from conftest import run_ioscope
from ioscope.capture import blktrace
from ioscope.capture.events import EV_NOTE_PROCESS, EVENT


def write(path: Path, order: str = "<", scenario: bs.Scenario | None = None) -> tuple[np.ndarray, bs.Scenario]:
    s = scenario or bs.mixed()
    ev = s.events()
    with open(path, "wb") as f:
        w = blktrace.BlktraceWriter(f, int(ev["ts"][0]) - 1, 1_700_000_000_123_456_789, dict(s.comms), order=order)
        w.write(ev)
    return ev, s


def data_events(ev: np.ndarray) -> np.ndarray:
    return ev[(ev["flags"] & EV_NOTE_PROCESS) == 0]


@pytest.mark.parametrize("order", ["<", ">"])
def test_round_trip(tmp_path: Path, order: str) -> None:
    path = tmp_path / "t.bin"
    ev, s = write(path, order)
    dec = list(blktrace.read_stream(str(path)))
    got = data_events(np.concatenate([d.events for d in dec]))
    assert len(got) == len(ev)
    base = int(ev["ts"][0]) - 1
    assert (got["ts"].astype(np.int64) == ev["ts"].astype(np.int64) - base).all()
    for f in ("sector", "bytes", "dev", "pid", "cpu", "error", "action", "category", "aux", "aux_dev"):
        assert (got[f] == ev[f]).all(), f
    comms = {k: v for d in dec for k, v in d.comms.items()}
    assert {p: comms[p] for p in s.comms if p in comms} == s.comms
    stamps = [t for d in dec for t in d.timestamps]
    assert stamps and stamps[0][1] - stamps[0][0] == 1_700_000_000_123_456_789
    seq = np.concatenate([d.seq[(d.events["flags"] & EV_NOTE_PROCESS) == 0] for d in dec if d.seq is not None])
    for dev in (bs.LOOP0, bs.LOOP1):
        for cpu in (0, 1):
            m = (got["dev"] == dev) & (got["cpu"] == cpu)
            assert seq[m].tolist() == list(range(1, int(m.sum()) + 1))


def test_both_byte_orders_decode_the_same(tmp_path: Path) -> None:
    write(tmp_path / "le.bin", "<")
    write(tmp_path / "be.bin", ">")
    le = np.concatenate([d.events for d in blktrace.read_stream(str(tmp_path / "le.bin"))])
    be = np.concatenate([d.events for d in blktrace.read_stream(str(tmp_path / "be.bin"))])
    assert le.tobytes() == be.tobytes()
    assert (tmp_path / "le.bin").read_bytes() != (tmp_path / "be.bin").read_bytes()


def test_small_blocks_decode_the_same(tmp_path: Path) -> None:
    """Reading in blocks that cut records and payloads anywhere gives the same events."""
    path = tmp_path / "t.bin"
    write(path)
    whole = np.concatenate([d.events for d in blktrace.read_stream(str(path))])
    for block in (48, 50, 61, 100, 997):
        parts = [d.events for d in blktrace.read_stream(str(path), block=block)]
        assert np.concatenate(parts).tobytes() == whole.tobytes(), block


def test_per_cpu_files_merge_by_time(tmp_path: Path) -> None:
    ev = bs.mixed().events()
    base = int(ev["ts"][0]) - 1
    for cpu in (0, 1):
        with open(tmp_path / f"loop0.blktrace.{cpu}", "wb") as f:
            blktrace.BlktraceWriter(f, base, None, {}).write(ev[(ev["cpu"] == cpu) & (ev["dev"] == bs.LOOP0)])
    files = blktrace.per_cpu_files(str(tmp_path / "loop0.blktrace.1"))
    assert [Path(f).name for f in files] == ["loop0.blktrace.0", "loop0.blktrace.1"]
    got = data_events(np.concatenate([d.events for d in blktrace.read_merged(files, block=480)]))
    want = ev[ev["dev"] == bs.LOOP0]
    assert (np.diff(got["ts"].astype(np.int64)) >= 0).all()
    assert sorted(got["sector"].tolist()) == sorted(want["sector"].tolist()) and len(got) == len(want)


def test_cgroup_payloads(tmp_path: Path) -> None:
    """Records flagged with a cgroup id carry it first in the payload; the rest is read after it."""
    s = bs.Scenario()
    from ioscope.capture.events import TA_UNPLUG_IO
    s.add(100, TA_UNPLUG_IO, 0, 0, aux=7)
    ev = s.events()
    raw = bytearray(blktrace.encode(ev))
    hdr = np.frombuffer(bytes(raw[:48]), dtype=blktrace.BIT).copy()
    hdr["action"] |= blktrace.TA_CGROUP
    hdr["pdu_len"] = 16
    data = hdr.tobytes() + (1234).to_bytes(8, "little") + bytes(raw[48:56])
    offs, end, order = blktrace.record_offsets(data)
    d = blktrace.decode(data, offs, order)
    assert end == len(data) and int(d.events["aux"][0]) == 7 and int(d.events["action"][0]) == TA_UNPLUG_IO


def errors_for(data: bytes, tmp_path: Path) -> str:
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    with pytest.raises(blktrace.BlktraceError) as ei:
        for _ in blktrace.read_stream(str(path)):
            pass
    msg = str(ei.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_corrupt_files_name_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "good.bin"
    write(path)
    good = path.read_bytes()
    offs, _end, _o = blktrace.record_offsets(good)
    # cut inside a header
    k = int(offs[4])
    assert f"byte offset {k}: a record needs 48 bytes, 20 left" in errors_for(good[:k + 20], tmp_path)
    # cut inside a payload: the first record with one (a process note, 16 bytes)
    with_pay = next(int(o) for o in offs if int.from_bytes(good[o + 46:o + 48], "little"))
    msg = errors_for(good[:with_pay + 48 + 5], tmp_path)
    assert f"byte offset {with_pay}" in msg and "payload" in msg
    # wrong magic in the middle
    bad = bytearray(good)
    k = int(offs[10])
    bad[k:k + 4] = b"\xde\xad\xbe\xef"
    assert f"bad magic 0xefbeadde at byte offset {k}" in errors_for(bytes(bad), tmp_path)
    # wrong version
    bad = bytearray(good)
    bad[int(offs[3])] = 0x06
    assert f"version 6 at byte offset {int(offs[3])}" in errors_for(bytes(bad), tmp_path)
    from ioscope.capture.blktrace import read_stream
    empty = tmp_path / "empty.blktrace.0"
    empty.write_bytes(b"")
    assert list(read_stream(str(empty))) == []   # an idle CPU's file: valid, and empty
    assert "not a blktrace file" in errors_for(b"hello world, not blktrace" * 3, tmp_path)


@pytest.mark.parametrize("tool", ["parse", "report", "import"])
def test_cli_on_corrupt_blktrace(tmp_path: Path, tool: str) -> None:
    path = tmp_path / "x.blktrace.0"
    write(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])    # the last record cut
    args = [tool, str(path)] + (["-o", str(tmp_path / "out.ioscope")] if tool == "import" else [])
    p = run_ioscope(*args, timeout=60)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert f"byte offset {len(data) - 48}" in p.stderr or "byte offset" in p.stderr
    assert str(path) in p.stderr
    assert not (tmp_path / "out.ioscope").exists() and not (tmp_path / "out.ioscope.part").exists()


def test_encode_empty_and_notes() -> None:
    assert blktrace.encode(np.zeros(0, dtype=EVENT)) == b""
    notes = blktrace.process_notes({5: "a-very-long-command-name"}, [5], bs.LOOP0, 0, 10)
    data = blktrace.encode(notes)
    offs, _e, order = blktrace.record_offsets(data)
    d = blktrace.decode(data, offs, order)
    assert d.comms == {5: "a-very-long-com"}   # 15 characters and the NUL, as the kernel's comm
    buf = io.BytesIO()
    w = blktrace.BlktraceWriter(buf, 0, None, {})
    w.write(notes)   # notes alone write nothing: they are emitted before a pid's first event
    assert buf.getvalue() == b""
