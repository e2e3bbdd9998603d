"""ioscope readahead, live: sequential and random reads on ext4 over a loop device."""

from __future__ import annotations

import mmap
import os
import random
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import json_lines
from test_readsize import Traced

MB = 1 << 20
PAGE = 4096


@pytest.fixture
def fs_ra(live: None, request: pytest.FixtureRequest) -> Iterator[Any]:
    from ioscope.ra.fs import LoopFS

    with LoopFS(size_mb=160, read_ahead_kb=request.param) as fs:
        yield fs


def _check_accounting(doc: dict[str, Any]) -> None:
    """Every page read ahead is used, wasted, still cached or untracked: nothing else."""
    for f in doc["files"]:
        assert f["used"] + f["wasted"] + f["cached"] + f["untracked"] == f["pages"], f
    t = doc["totals"]
    assert t["used"] + t["wasted"] + t["cached"] + t["untracked"] == t["pages"]


@pytest.mark.parametrize("fs_ra", [128], indirect=True)
def test_sequential_read(fs_ra: Any) -> None:
    from ioscope.ra.fs import drop_caches

    size = 23 * MB + 7 * PAGE  # a prime number of pages: 5895
    path = fs_ra.make_file("seq", size)
    drop_caches()
    t = Traced("readahead", "-d", fs_ra.name, "-j")
    try:
        before = fs_ra.loop.diskstats()
        p = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=32k", "status=none"], check=True)
        assert p.returncode == 0
        after = fs_ra.loop.diskstats()
    finally:
        out, _err = t.stop()
    doc = json_lines(out)[0]
    assert doc["lost"] == 0, doc["lost_detail"]
    ra_pages = 128 * 1024 // PAGE
    dev = next(d for d in doc["devices"] if d["disk"] == fs_ra.name)
    assert dev["read_ahead_kb"] == 128 and dev["max_ra_pages_seen"] == ra_pages
    assert doc["decisions"]["sync"] >= 1 and doc["decisions"]["async"] >= 1
    for kind in ("sync", "async"):
        w = doc["windows"][kind]
        assert w["size"]["count"] >= 1
        assert 0 < w["size"]["max"] <= ra_pages
        assert w["async_size"]["max"] <= w["size"]["max"]
        assert w["ra_pages"]["max"] == ra_pages
    files = [f for f in doc["files"] if f["comm"] == "dd"]
    assert len(files) == 1
    f = files[0]
    # dd has exited, so the file is named by its mount point and inode
    assert f["ino"] == os.stat(path).st_ino and f["path"] in (path, f"{fs_ra.mnt} ino {f['ino']}")
    # the whole file came in through readahead, and dd read every page of it
    assert f["pages"] >= size // PAGE
    assert f["used"] == size // PAGE
    _check_accounting(doc)
    # readahead cannot bring in more than the device read
    assert doc["totals"]["pages"] * PAGE <= (after.sectors_read - before.sectors_read) * 512
    assert doc["age_ns"]["count"] == f["used"]


@pytest.mark.parametrize("fs_ra", [4096], indirect=True)
def test_random_mmap_reads_waste(fs_ra: Any) -> None:
    """Random access through a mapping: read-around brings in ra_pages around each fault."""
    from ioscope.ra.fs import drop_caches

    size = 128 * MB
    path = fs_ra.make_file("rand", size)
    drop_caches()
    t = Traced("readahead", "-d", fs_ra.name, "-j")
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            rnd = random.Random(211)
            for _ in range(211):
                m[rnd.randrange(0, size)]
            m.close()
        finally:
            os.close(fd)
        # evict: what was never read is now wasted
        drop_caches()
    finally:
        out, _err = t.stop()
    doc = json_lines(out)[0]
    _check_accounting(doc)
    tot = doc["totals"]
    assert tot["wasted"] > 0 and tot["cached"] == 0
    assert tot["efficiency"] is not None and tot["efficiency"] < 0.25
    assert doc["windows"]["other"]["size"]["max"] == 4096 * 1024 // PAGE


@pytest.mark.parametrize("fs_ra", [4096], indirect=True)
def test_random_preads_are_read_exactly(fs_ra: Any) -> None:
    """Random buffered preads: Linux sees they are random and reads only what was asked."""
    from ioscope.ra.fs import drop_caches

    size = 64 * MB
    path = fs_ra.make_file("rand", size)
    drop_caches()
    t = Traced("readahead", "-d", fs_ra.name, "-j")
    rnd = random.Random(101)
    offsets = {rnd.randrange(1, size // PAGE) * PAGE for _ in range(101)}
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            for off in sorted(offsets, key=lambda _: rnd.random()):
                os.pread(fd, PAGE, off)
        finally:
            os.close(fd)
    finally:
        out, _err = t.stop()
    doc = json_lines(out)[0]
    _check_accounting(doc)
    sync = doc["windows"]["sync"]["size"]
    assert doc["decisions"]["sync"] >= len(offsets) * 0.9
    # most windows are a single page; a neighbour of an earlier read may get a bigger one
    one = sum(c for lo, _hi, c in sync["buckets"] if lo == 1)
    assert one >= sync["count"] * 0.9
    assert doc["totals"]["used"] >= len(offsets) * 0.9


@pytest.mark.parametrize("fs_ra", [128], indirect=True)
def test_missing_tracepoint_is_reported(fs_ra: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without mm_filemap_get_pages: the rest still works and the report says what is missing."""
    from ioscope.loader import BPFObject
    from ioscope.ra.fs import drop_caches
    from ioscope.ra.readahead.collector import ReadaheadCollector, ReadaheadOptions
    from ioscope.ra.readahead.model import build_report
    from ioscope.ra.readahead.view import RaViewOptions, renderables, to_json
    from ioscope.render import render_plain

    real = BPFObject._kernel_offers

    def offers(self: BPFObject, variant: str, h: Any) -> bool:
        return h.tracepoint != "mm_filemap_get_pages" and real(self, variant, h)

    monkeypatch.setattr(BPFObject, "_kernel_offers", offers)
    path = fs_ra.make_file("seq", 4 * MB)
    drop_caches()
    c = ReadaheadCollector(ReadaheadOptions(disks=[fs_ra.loop.device]))
    try:
        assert "btf_get_pages" not in c.bpf.attached and "raw_get_pages" not in c.bpf.attached
        subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=32k", "status=none"], check=True)
        report = build_report(c.read())
    finally:
        c.close()
    assert any(m.startswith("used pages") for m in c.missing) and c.unavailable == c.missing
    t = report.totals
    assert t["pages"] >= 4 * MB // PAGE and t["used"] == 0 and t["cached"] == t["pages"]
    assert to_json(report)["unavailable"] == c.missing
    text = "\n".join(render_plain(x, width=200) for x in renderables(report, RaViewOptions(rows=5)))
    assert "note: used pages and age at first use" in text and "unavailable" in text
