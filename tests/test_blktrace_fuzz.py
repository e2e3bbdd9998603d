"""Fuzzing the readers: any bytes give events or one BlktraceError/IoscopeError, never another exception."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blk_scenarios as bs
from ioscope.base.errors import IoscopeError
from ioscope.capture import blktrace

_ev = bs.mixed().events()
GOOD = blktrace.encode(_ev, np.arange(1, len(_ev) + 1, dtype=np.uint32), int(_ev["ts"][0]) - 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    try:
        offs, end, order = blktrace.record_offsets(data, "<fuzz>")
        blktrace.decode(data, offs, order)
        assert end == len(data)
    except blktrace.BlktraceError as exc:
        assert "<fuzz>" in str(exc) and "byte offset" in str(exc)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(GOOD) - 1), st.integers(0, 255)), max_size=8),
       st.integers(0, len(GOOD)))
def test_mutated_streams(flips: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(GOOD[:cut])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    try:
        offs, end, order = blktrace.record_offsets(bytes(data), "<fuzz>")
        d = blktrace.decode(bytes(data), offs, order)
        assert end == len(data) and len(d.events) <= len(offs)
    except blktrace.BlktraceError as exc:
        msg = str(exc)
        assert "byte offset" in msg and "\n" not in msg


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6), st.integers(1, 10_000))
def test_mutated_files_through_the_offline_tools(tmp_path: Path, flips: list[tuple[int, int]], cut: int) -> None:
    """The whole path parse/report use (file reading in blocks, merging, btt) on damaged files."""
    from ioscope.tools.report.view import analyse_source
    data = bytearray(GOOD[:cut])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    path = tmp_path / "f.blktrace.0"
    path.write_bytes(bytes(data))
    try:
        analyse_source(str(path))
    except IoscopeError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 4000), st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=4))
def test_damaged_captures(tmp_path: Path, cut: int, flips: list[tuple[int, int]]) -> None:
    """Captures cut or with flipped bytes: report reads them or says where they are broken."""
    from ioscope.tools.report.view import analyse_source
    cap = tmp_path / "c.ioscope"
    if not cap.exists():
        bs.write_capture(str(cap), bs.mixed())
    good = cap.read_bytes()
    data = bytearray(good[:max(cut, 1)] if cut < len(good) else good)
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    bad = tmp_path / "bad.ioscope"
    bad.write_bytes(bytes(data))
    try:
        analyse_source(str(bad))
    except IoscopeError as exc:
        assert "\n" not in str(exc)
