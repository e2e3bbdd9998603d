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
    from ioscope.base.testbed import LoopFS

    with LoopFS(size_mb=160, read_ahead_kb=request.param) as fs:
        yield fs


def resident_pages(*paths: str) -> int:
    """Pages of these files in the page cache now, as the kernel says (fincore: mincore(2))."""
    out = subprocess.run(["fincore", "-n", "-r", "-o", "PAGES", *paths], check=True, capture_output=True,
                         text=True).stdout
    return sum(int(x) for x in out.split())


def _check_accounting(doc: dict[str, Any]) -> None:
    """Every page read ahead is used, wasted, still cached or untracked: nothing else."""
    for f in doc["files"]:
        assert f["used"] + f["wasted"] + f["cached"] + f["untracked"] == f["pages"], f
    t = doc["totals"]
    assert t["used"] + t["wasted"] + t["cached"] + t["untracked"] == t["pages"]


@pytest.mark.parametrize("fs_ra", [128], indirect=True)
def test_sequential_read(fs_ra: Any) -> None:
    from ioscope.base.testbed import drop_caches

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
    # dd has exited (its fd table is gone): the file is named by its path from the kernel's dentries
    assert f["ino"] == os.stat(path).st_ino and f["path"] == path
    # the whole file came in through readahead, and dd read every page of it
    assert f["pages"] >= size // PAGE
    assert f["used"] == size // PAGE
    _check_accounting(doc)
    # readahead cannot bring in more than the device read
    assert doc["totals"]["pages"] * PAGE <= (after.sectors_read - before.sectors_read) * 512
    assert doc["age_ns"]["count"] == f["used"]


@pytest.mark.parametrize("attach", [None, "raw_tp"])
def test_block_device_read(live: None, attach: str | None) -> None:
    """dd of the raw device: its page cache is the device's inode in the kernel's bdev file system, the
    pages are on the device, -d picks them and the file is the device."""
    from ioscope.base.testbed import LoopDevice, drop_caches

    count = 1999  # 4 KiB blocks: not a multiple of the 32-page window
    with LoopDevice(size_mb=64, read_ahead_kb=128) as loop:
        path, name = loop.path, loop.name
        ma, mi = (int(x) for x in loop.device.majmin.split(":"))
        drop_caches()
        t = Traced("readahead", "-d", name, "-j", env={"IOSCOPE_ATTACH": attach} if attach else None)
        try:
            before = loop.diskstats()
            subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=4k", f"count={count}", "status=none"],
                           check=True)
            after = loop.diskstats()
        finally:
            out, _err = t.stop()
    doc = json_lines(out)[0]
    assert doc["lost"] == 0, doc["lost_detail"]
    _check_accounting(doc)
    dev = next(d for d in doc["devices"] if d["disk"] == name)
    assert dev["read_ahead_kb"] == 128 and dev["max_ra_pages_seen"] == 128 * 1024 // PAGE
    assert doc["decisions"]["sync"] >= 1 and doc["decisions"]["async"] >= 1
    files = [f for f in doc["files"] if f["comm"] == "dd"]
    assert len(files) == 1 and files[0]["path"] == path and files[0]["dev"] == f"{ma}:{mi}", files
    f = files[0]
    # every page dd read came in through readahead and was used; all the device read was readahead
    assert f["used"] == count and f["pages"] >= count
    assert doc["totals"]["pages"] * PAGE == (after.sectors_read - before.sectors_read) * 512, (doc["totals"],
                                                                                             before, after)


@pytest.mark.parametrize("fs_ra", [4096], indirect=True)
def test_random_mmap_reads_waste(fs_ra: Any) -> None:
    """Random access through a mapping: read-around brings in ra_pages around each fault."""
    from ioscope.base.testbed import drop_caches

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
        resident = resident_pages(path)
    finally:
        out, _err = t.stop()
    doc = json_lines(out)[0]
    _check_accounting(doc)
    tot = doc["totals"]
    # drop_caches leaves the pages it cannot evict (6.1: a few held in per-CPU LRU batches): still
    # cached, and still in the page cache by the kernel's own account
    assert tot["wasted"] > 0 and tot["cached"] <= resident, (tot, resident)
    assert tot["efficiency"] is not None and tot["efficiency"] < 0.25
    assert doc["windows"]["other"]["size"]["max"] == 4096 * 1024 // PAGE


@pytest.mark.parametrize("fs_ra", [4096], indirect=True)
def test_random_preads_are_read_exactly(fs_ra: Any) -> None:
    """Random buffered preads: Linux sees they are random and reads only what was asked."""
    from ioscope.base.testbed import drop_caches

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
    import time

    from ioscope.base.collector import Tick
    from ioscope.base.render import render_plain
    from ioscope.base.testbed import drop_caches
    from ioscope.kernel.loader import BPFObject
    from ioscope.tools.readahead.collector import ReadaheadCollector, ReadaheadOptions
    from ioscope.tools.readahead.model import build_report
    from ioscope.tools.readahead.view import RaViewOptions, renderables, to_json

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
        report = build_report(c.sample(Tick(time.time())))
    finally:
        c.close()
    assert any(m.startswith("used pages") for m in c.missing) and c.unavailable == c.missing
    t = report.totals
    assert t["pages"] >= 4 * MB // PAGE and t["used"] == 0 and t["cached"] == t["pages"]
    assert to_json(report)["unavailable"] == c.missing
    text = "\n".join(render_plain(x, width=200) for x in renderables(report, RaViewOptions(rows=5)))
    assert "note: used pages and age at first use" in text and "unavailable" in text


def _hooks_with_both() -> list[str]:
    """The readahead hooks this kernel offers both as a tracepoint and through fentry."""
    from ioscope.kernel.loader import BPFObject
    from ioscope.tools.readahead.collector import RA_HOOKS

    with BPFObject("readahead") as b:
        b.choose(required=[], optional=list(RA_HOOKS))
        return [h for h in RA_HOOKS if b.hooks[h].chosen not in (None, "fentry") and b.hooks[h].functions
                and b._kernel_offers("fentry", b.hooks[h])]


@pytest.mark.parametrize("fs_ra", [256], indirect=True)
def test_fentry_gives_the_tracepoints_numbers(fs_ra: Any) -> None:
    """Where a kernel has a tracepoint and fentry on its function (6.12: the used-page hooks; 6.13 on:
    all), the same workload traced both ways gives the same decisions, windows and page fates."""
    from ioscope.base.testbed import drop_caches

    both = _hooks_with_both()
    if not both:
        pytest.skip("n/a on this kernel: no readahead hook is both a tracepoint and an attachable function "
                    "(fentry refused, or no tracepoints)")
    seq = fs_ra.make_file("seq", 6 * MB + 3 * PAGE)
    mapped = fs_ra.make_file("mapped", 8 * MB)

    def work() -> None:
        subprocess.run(["dd", f"if={seq}", "of=/dev/null", "bs=64k", "status=none"], check=True)
        fd = os.open(mapped, os.O_RDONLY)
        try:
            m = mmap.mmap(fd, 8 * MB, prot=mmap.PROT_READ)
            for off in range(0, 8 * MB, 37 * PAGE):
                m[off]
            m.close()
        finally:
            os.close(fd)
        drop_caches()  # what was not used is wasted now (or still cached, if drop_caches left it)

    docs = {}
    for how, env in (("tracepoints", None), ("fentry", {"IOSCOPE_ATTACH": "fentry"})):
        drop_caches()
        t = Traced("readahead", "-d", fs_ra.name, "-j", env=env)
        try:
            work()
        finally:
            out, _err = t.stop()
        docs[how] = json_lines(out)[0]
    tp, fe = docs["tracepoints"], docs["fentry"]
    assert set(both) <= set(fe["fentry"]) and not set(both) & set(tp["fentry"]), (both, tp["fentry"], fe["fentry"])
    for d in (tp, fe):
        assert d["lost"] == 0, d["lost_detail"]
        _check_accounting(d)
    assert fe["decisions"] == tp["decisions"]
    for kind in ("sync", "async", "other"):
        for what in ("size", "async_size", "ra_pages"):
            a, b = tp["windows"][kind][what], fe["windows"][kind][what]
            assert (a["count"], a["sum"]) == (b["count"], b["sum"]), (kind, what, a, b)
    for k in ("pages", "used"):
        assert fe["totals"][k] == tp["totals"][k], (k, tp["totals"], fe["totals"])
    # unused pages are wasted or, where drop_caches could not evict them, still cached
    assert fe["totals"]["wasted"] + fe["totals"]["cached"] == tp["totals"]["wasted"] + tp["totals"]["cached"]
    assert fe["age_ns"]["count"] == tp["age_ns"]["count"]
    # dd read every page of its file
    f = next(x for x in fe["files"] if x["comm"] == "dd")
    assert f["used"] == (6 * MB + 3 * PAGE) // PAGE
