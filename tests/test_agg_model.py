"""ioscope agg's model and views without root: synthetic records through the kernel's evaluation
(model.aggregate), the function values, buckets, percentiles, -n, JSON shape and text."""

from __future__ import annotations

import os
import random
import statistics
import subprocess
from pathlib import Path

import numpy as np

from ioscope.base.hist import RELATIVE_ERROR, Hist
from ioscope.base.losses import Losses
from ioscope.base.render import render_plain
from ioscope.capture import events as ev
from ioscope.engines.aggregate import abi
from ioscope.engines.aggregate.capture import records as bio_records
from ioscope.engines.aggregate.expr import compile_cond, parse_all
from ioscope.engines.aggregate.model import (
    AggResult,
    AggSample,
    Scalar,
    aggregate,
    build_result,
    key_mask,
    quantize_buckets,
)
from ioscope.engines.aggregate.names import flags_bits, flags_name, name_rows
from ioscope.engines.pairing.bios import Bios
from ioscope.kernel import abi as core_abi
from ioscope.tools.agg.view import renderables, to_json


class FakeNamer:
    def disk(self, dev: int) -> str:
        return f"disk{dev}"

    def comm(self, tgid: int) -> str:
        return {100: "dd", 200: "fio", 201: "fio"}.get(tgid, "[unknown]")

    def cgroup(self, cg: int) -> str:
        return f"/cg{cg}"


def records(n: int, seed: int = 1) -> list[dict[str, int | None]]:
    rng = random.Random(seed)
    out: list[dict[str, int | None]] = []
    for _ in range(n):
        size = rng.choice([4096, 16384, 65536])
        out.append({"disk": rng.choice([1, 2]), "op": rng.choice([0, 1]), "flags": 0, "pid": 0,
                    "tgid": rng.choice([100, 200, 201]), "cgroup": 0, "cpu": rng.choice([0, 1]), "size": size,
                    "bytes": size, "q2c": rng.randint(1_000, 5_000_000), "q2d": rng.randint(0, 1000),
                    "d2c": rng.choice([None, rng.randint(1_000, 4_000_000)]), "seek": None, "inflight": 0})
    return out


def result(texts: list[str], recs: list[dict[str, int | None]], limit: int | None = None) -> AggResult:
    exprs = parse_all(texts)
    progs = [compile_cond(e.where, lambda f, lit: {"read": 0, "write": 1}[str(lit.value)]) if e.where else []
             for e in exprs]
    rows = name_rows(exprs, aggregate(exprs, progs, recs), FakeNamer())
    return build_result(exprs, AggSample(10.0, 9.0, rows, Losses()), limit)


def test_scalar_functions_match_python() -> None:
    recs = records(997)
    r = result(["count() by disk,op", "sum(bytes) by op", "avg(q2c)", "min(q2c) by disk", "max(d2c)",
                "stddev(q2c) by op"], recs)
    count, sums, avg, mins, mx, sd = r.tables
    for row in count.rows:
        want = sum(1 for x in recs if f"disk{x['disk']}" == row.keys["disk"] and
                   ("read", "write")[x["op"] or 0] == row.keys["op"])
        assert row.value == want
    assert sum(row.count for row in count.rows) == 997
    for row in sums.rows:
        assert row.value == sum(x["bytes"] or 0 for x in recs if ("read", "write")[x["op"] or 0] == row.keys["op"])
    assert avg.rows[0].value == statistics.fmean(x["q2c"] or 0 for x in recs)
    for row in mins.rows:
        assert row.value == min(x["q2c"] or 0 for x in recs if f"disk{x['disk']}" == row.keys["disk"])
    d2cs = [x["d2c"] for x in recs if x["d2c"] is not None]
    assert mx.rows[0].value == max(d2cs) and mx.rows[0].count == len(d2cs)  # only I/Os that have it
    for row in sd.rows:
        vals = [x["q2c"] or 0 for x in recs if ("read", "write")[x["op"] or 0] == row.keys["op"]]
        assert abs(float(row.value or 0) - statistics.pstdev(vals)) < 1e-6 * statistics.pstdev(vals)


def test_comm_rows_of_one_name_merge_and_order_is_dtrace_s() -> None:
    recs = records(500)
    r = result(["count() by comm"], recs)
    rows = r.tables[0].rows
    assert {row.keys["comm"]: row.value for row in rows} == {
        "dd": sum(1 for x in recs if x["tgid"] == 100), "fio": sum(1 for x in recs if x["tgid"] in (200, 201))}
    values = [float(row.value or 0) for row in rows]
    assert values == sorted(values)  # ascending: the largest last


def test_rows_limit_keeps_the_largest() -> None:
    recs: list[dict[str, int | None]] = [{"cpu": c, "bytes": 1, "disk": 1, "op": 0, "tgid": 1, "pid": 0,
                                          "cgroup": 0, "flags": 0, "size": 1}
            for c in range(10) for _ in range(c + 1)]
    t = result(["count() by cpu"], recs, limit=3).tables[0]
    assert [(row.keys["cpu"], row.value) for row in t.rows] == [(7, 8), (8, 9), (9, 10)]
    assert t.truncated == 7


def test_where_filters_exactly() -> None:
    recs = records(1000, seed=3)
    r = result(["count() where bytes >= 64k", "count() where op == write and not q2c < 1ms"], recs)
    assert r.tables[0].rows[0].value == sum(1 for x in recs if (x["bytes"] or 0) >= 65536)
    assert r.tables[1].rows[0].value == sum(1 for x in recs if x["op"] == 1 and (x["q2c"] or 0) >= 1_000_000)


def test_quantize_buckets_are_exact_powers_of_two() -> None:
    vals = [0, 1, 2, 3, 4, 7, 8, 1000, 1023, 1024, 5_000_000]
    h = Hist.from_values(vals)
    got = quantize_buckets(h)
    for lo, hi, n in got:
        assert n == sum(1 for v in vals if lo <= v < hi)
        assert lo == 0 or (lo & (lo - 1)) == 0
    assert sum(n for *_x, n in got) == len(vals)


def test_lquantize_and_llquantize() -> None:
    recs = records(800, seed=5)
    r = result(["lquantize(q2c, 1ms, 4ms, 1ms)", "llquantize(q2c)"], recs)
    lq, ll = r.tables
    b = lq.rows[0].buckets
    vals = [x["q2c"] or 0 for x in recs]
    for lo, hi, n in b:
        assert n == sum(1 for v in vals if lo <= v < hi), (lo, hi)
    assert sum(n for *_x, n in b) == 800
    row = ll.rows[0]
    assert row.percentiles.keys() == {"p50", "p90", "p99", "p999"}
    # llquantize's percentiles come from the one log-linear histogram (base/hist.py): within its bucket bound
    # (rounded to 0.1 in the row, hence the last term)
    truth = float(np.percentile(vals, 50))
    assert abs(row.percentiles["p50"] - truth) <= RELATIVE_ERROR * truth + 0.05


def test_scalar_square_sum_matches_kernel_halves() -> None:
    """The kernel's 128-bit sum of squares (32-bit halves) is the plain square: same algebra here."""
    for x in [0, 1, 0xFFFF_FFFF, 1 << 32, (1 << 40) + 12345, (1 << 64) - 1]:
        a, b = x >> 32, x & 0xFFFF_FFFF
        lo, mid, hi = b * b, a * b, a * a
        s = (lo + ((mid << 33) & (2**64 - 1))) & (2**64 - 1)
        carry = int(s < lo)
        high = hi + (mid >> 31) + carry
        assert (high << 64) + s == x * x
    sc = Scalar()
    for v in (3, 4):
        sc.add(v)
    assert sc.sumsq == 25 and sc.stddev == 0.5


def test_json_shape_is_the_issue_s() -> None:
    r = result(["count() by comm,disk", "llquantize(q2c) by op", "quantize(bytes)", "avg(q2c)"], records(50))
    doc = to_json(r)
    assert set(doc) == {"time", "interval_s", "lost", "lost_detail", "io_unit", "timing", "aggs"}
    assert doc["io_unit"] == "bios"   # no disk timed from the kernel's stamps: every record is a bio
    assert doc["interval_s"] == 1.0
    assert [a["expr"] for a in doc["aggs"]] == ["count() by comm,disk", "llquantize(q2c) by op",
                                                "quantize(bytes)", "avg(q2c)"]
    row = doc["aggs"][0]["rows"][0]
    assert set(row) == {"keys", "count"} and set(row["keys"]) == {"comm", "disk"}
    row = doc["aggs"][1]["rows"][0]
    assert set(row) == {"keys", "buckets", "p50", "p90", "p99", "p999"}
    assert all(len(b) == 3 and b[0] < b[1] for b in row["buckets"])
    assert set(doc["aggs"][3]["rows"][0]) == {"keys", "avg"}


def test_text_carries_the_json_numbers() -> None:
    r = result(["count() by comm", "quantize(bytes) by op", "lquantize(bytes, 0, 64k, 16k)"], records(300))
    text = "\n".join(render_plain(x, width=120) for x in renderables(r))
    for row in r.tables[0].rows:
        assert f"{row.keys['comm']}" in text and f" {row.value}" in text
    assert "Distribution" in text and "p50" in text
    for row in r.tables[1].rows:
        for _lo, _hi, n in row.buckets:
            assert f" {n}" in text


def test_flags_names_round_trip() -> None:
    for s in ("R", "W", "WS", "RA", "RM", "WFS", "FWS", "FN", "D"):
        assert flags_name(flags_bits(s, 1)) == s


def test_capture_pairing_is_the_kernel_s() -> None:
    """Q/D/C events of a merged two-bio request and a split bio -> one record per bio, d2c once per
    request, in-flight counts and seek as the kernel object computes them."""
    rows = np.zeros(9, dtype=ev.EVENT)

    def put(i: int, ts: int, action: int, sector: int, nbytes: int, cat: int, pid: int = 7, aux: int = 0) -> None:
        rows[i]["ts"], rows[i]["action"], rows[i]["sector"], rows[i]["bytes"] = ts, action, sector, nbytes
        rows[i]["category"], rows[i]["pid"], rows[i]["tgid"], rows[i]["dev"], rows[i]["aux"] = cat, pid, pid, 5, aux

    put(0, 100, ev.TA_QUEUE, 0, 4096, ev.TC_READ)
    put(1, 110, ev.TA_QUEUE, 8, 4096, ev.TC_READ)          # back-merged into the first's request
    put(2, 200, ev.TA_ISSUE, 0, 8192, ev.TC_READ)
    put(3, 300, ev.TA_QUEUE, 100, 16384, ev.TC_WRITE)
    put(4, 301, ev.TA_SPLIT, 100, 16384, ev.TC_WRITE, aux=116)
    put(5, 400, ev.TA_COMPLETE, 0, 8192, ev.TC_READ)
    put(6, 410, ev.TA_ISSUE, 100, 8192, ev.TC_WRITE)
    put(7, 420, ev.TA_ISSUE, 116, 8192, ev.TC_WRITE)
    put(8, 500, ev.TA_COMPLETE, 100, 8192, ev.TC_WRITE)
    p = Bios()
    out = list(bio_records(p.feed(rows)))
    assert [t for t, _r in out] == [400, 400, 500]   # the completion time of each record
    recs = [r for _t, r in out]
    assert [(r["op"], r["bytes"], r["q2c"], r.get("q2d"), r.get("d2c")) for r in recs] == [
        (0, 4096, 300, 100, 200), (0, 4096, 290, 90, None), (1, 8192, 200, 110, 90)]
    assert [r["seek"] for r in recs] == [None, 0, 84]     # 100 - (8 + 8)
    assert [r["inflight"] for r in recs] == [0, 0, 0]
    assert p.in_flight() == 1 and p.requests(5) == 1     # the split's second piece: issued, not completed


def test_comm_and_tgid_share_one_kernel_key_field() -> None:
    """comm is keyed by the process (tgid) in the kernel and named in user space: both keys at once
    select that one field (a sum of their bits once selected the cgroup field instead)."""
    (e,) = parse_all(["count() by comm,tgid,disk"])
    assert key_mask(e) == (1 << abi.FIELDS["tgid"]) | (1 << abi.FIELDS["disk"])
    recs = records(200)
    r = result(["count() by comm,tgid"], recs)
    assert {(row.keys["comm"], row.keys["tgid"]) for row in r.tables[0].rows} == {
        ("dd", 100), ("fio", 200), ("fio", 201)}


def test_capture_pairing_two_ios_of_one_sector_in_flight() -> None:
    """Random I/O can queue the same sector twice before either is issued (fio's norandommap): two
    bios, two records, as the kernel object counts them; a split's remainder queued again is one. Which
    of the two a completion ends the events do not say: the newest issued (see the orphan test below),
    so the two times are each one's from its own queue or the other's, within their overlap."""
    rows = np.zeros(8, dtype=ev.EVENT)
    spec = [(100, ev.TA_QUEUE, 64, 4096, 0), (110, ev.TA_QUEUE, 64, 4096, 0), (200, ev.TA_ISSUE, 64, 4096, 0),
            (210, ev.TA_ISSUE, 64, 4096, 0), (300, ev.TA_COMPLETE, 64, 4096, 0), (310, ev.TA_COMPLETE, 64, 4096, 0),
            (400, ev.TA_QUEUE, 0, 16384, 0), (401, ev.TA_SPLIT, 0, 16384, 16)]
    for i, (ts, act, sector, nbytes, aux) in enumerate(spec):
        rows[i]["ts"], rows[i]["action"], rows[i]["sector"] = ts, act, sector
        rows[i]["bytes"], rows[i]["aux"] = nbytes, aux
        rows[i]["category"], rows[i]["pid"], rows[i]["tgid"], rows[i]["dev"] = ev.TC_READ, 7, 7, 5
    p = Bios()
    recs = [r for _t, r in bio_records(p.feed(rows))]
    assert [(r["q2c"], r["q2d"], r["d2c"]) for r in recs] == [(190, 100, 90), (210, 100, 110)]
    more = np.zeros(5, dtype=ev.EVENT)
    for i, (ts, act, sector, nbytes) in enumerate([(402, ev.TA_QUEUE, 16, 8192), (500, ev.TA_ISSUE, 0, 8192),
                                                   (510, ev.TA_ISSUE, 16, 8192), (600, ev.TA_COMPLETE, 0, 8192),
                                                   (610, ev.TA_COMPLETE, 16, 8192)]):
        more[i]["ts"], more[i]["action"], more[i]["sector"], more[i]["bytes"] = ts, act, sector, nbytes
        more[i]["category"], more[i]["pid"], more[i]["tgid"], more[i]["dev"] = ev.TC_READ, 7, 7, 5
    recs = [r for _t, r in bio_records(p.feed(more))]
    assert [(r["bytes"], r["q2c"]) for r in recs] == [(8192, 200), (8192, 210)]  # both keep the first Q time
    assert not p.in_flight()


def test_capture_pairing_keeps_a_read_and_a_write_of_one_sector_apart() -> None:
    """fio's randrw can have a 16 KiB read and a 4 KiB write of one sector in flight at once: the write's
    completion ends the write, whichever was issued last (paired by sector alone, it ended the newer
    read and took its size: a live/capture difference of one I/O in `where bytes >= 8k`)."""
    rows = np.zeros(6, dtype=ev.EVENT)
    spec = [(100, ev.TA_QUEUE, 4096, ev.TC_WRITE), (110, ev.TA_ISSUE, 4096, ev.TC_WRITE),
            (120, ev.TA_QUEUE, 16384, ev.TC_READ), (130, ev.TA_ISSUE, 16384, ev.TC_READ),
            (200, ev.TA_COMPLETE, 4096, ev.TC_WRITE), (260, ev.TA_COMPLETE, 16384, ev.TC_READ)]
    for i, (ts, act, nbytes, cat) in enumerate(spec):
        rows[i]["ts"], rows[i]["action"], rows[i]["sector"], rows[i]["bytes"] = ts, act, 64, nbytes
        rows[i]["category"], rows[i]["pid"], rows[i]["tgid"], rows[i]["dev"] = cat, 7, 7, 5
    p = Bios()
    recs = [r for _t, r in bio_records(p.feed(rows))]
    assert [(r["op"], r["bytes"], r["q2c"], r["d2c"]) for r in recs] == [
        (core_abi.OP_WRITE, 4096, 100, 90), (core_abi.OP_READ, 16384, 140, 130)]
    assert not p.in_flight()


def test_capture_pairing_leaves_an_orphan_behind() -> None:
    """A bio whose completion the capture missed (the kernel ran no program for it: completion_unseen)
    must not pair with the next I/O at its sector: each later read there keeps its own q2c, as report's
    engine (btt) times it, and the orphan is never counted (neither live agg nor report counts it).
    Pairing the oldest once gave a fio capture q2c of 220-450 ms among reads of 30-70 us."""
    rows = np.zeros(9, dtype=ev.EVENT)
    spec = [(100, ev.TA_QUEUE), (110, ev.TA_ISSUE),                       # the orphan: no completion
            (5000, ev.TA_QUEUE), (5010, ev.TA_ISSUE), (5040, ev.TA_COMPLETE),
            (9000, ev.TA_QUEUE), (9005, ev.TA_ISSUE), (9030, ev.TA_COMPLETE), (9100, ev.TA_QUEUE)]
    for i, (ts, act) in enumerate(spec):
        rows[i]["ts"], rows[i]["action"], rows[i]["sector"], rows[i]["bytes"] = ts, act, 64, 4096
        rows[i]["category"], rows[i]["pid"], rows[i]["tgid"], rows[i]["dev"] = ev.TC_READ, 7, 7, 5
    p = Bios()
    recs = [r for _t, r in bio_records(p.feed(rows))]
    assert [(r["q2c"], r["q2d"], r["d2c"]) for r in recs] == [(40, 10, 30), (30, 5, 25)]
    assert p.in_flight() == 2                                 # the orphan, and the last read still queued
    assert p.expire(9100) == 1 and p.in_flight() == 1         # the orphan was the one queued before 9100


def test_kernel_symbols_and_stack_text(tmp_path: Path) -> None:
    from ioscope.engines.aggregate.names import KernelSymbols, stack_text

    ks = tmp_path / "kallsyms"
    ks.write_text("ffffffff81000000 T _stext\nffffffff81000100 t submit_bio_noacct\nffffffff81000200 d some_data\n"
                  "ffffffff81000300 T vfs_read\nffffffffa0000000 t bpf_prog_abc_btf_bio_queue\n"
                  "ffffffffa0001000 T bpf_trace_run1\n")
    syms = KernelSymbols(str(ks))
    assert syms.name(0xFFFFFFFF81000105) == "submit_bio_noacct+0x5"
    assert syms.name(0xFFFFFFFF81000250) == "submit_bio_noacct+0x150"   # data symbols are not code
    assert syms.name(0x1000) == "0x1000" and syms.unresolved == 1
    frames = [0xFFFFFFFFA0000010, 0xFFFFFFFFA0001004, 0xFFFFFFFF81000101, 0xFFFFFFFF81000302, 0, 0]
    assert stack_text(frames, syms) == "submit_bio_noacct+0x1\nvfs_read+0x2"


def test_file_paths_from_the_files_map(tmp_path: Path) -> None:
    from ioscope.base.devices import kdev
    from ioscope.engines.aggregate.abi import FILE
    from ioscope.engines.aggregate.names import file_path, mount_points

    mi = tmp_path / "mountinfo"
    mi.write_text("36 25 7:0 / /mnt/data rw,relatime - ext4 /dev/loop0 rw\n"
                  "37 25 7:0 /sub /mnt/bind rw,relatime - ext4 /dev/loop0 rw\n"
                  "38 25 8:1 / /mnt/with\\040space rw - xfs /dev/sda1 rw\n")
    mounts = mount_points(str(mi))
    assert mounts == {kdev(7, 0): "/mnt/data", kdev(8, 1): "/mnt/with space"}

    def rec(dev: int, comps: list[bytes], ino: int = 12) -> np.void:
        r = np.zeros(1, dtype=FILE)[0]
        r["ino"], r["dev"], r["depth"] = ino, dev, len(comps)
        for i, c in enumerate(comps):
            r["comp"][i] = c
        return r

    assert file_path(rec(kdev(7, 0), [b"b.dat", b"sub", b"dir", b"/"]), mounts) == "/mnt/data/dir/sub/b.dat"
    assert file_path(rec(kdev(8, 1), [b"x", b"/"]), mounts) == "/mnt/with space/x"
    assert file_path(rec(kdev(9, 9), [b"x", b"/"]), mounts) == "[9:9]/x"                 # not mounted here
    assert file_path(rec(kdev(7, 0), [b"h", b"g", b"f", b"e", b"d", b"c", b"b", b"a"]), mounts) == ".../a/b/c/d/e/f/g/h"
    assert file_path(rec(kdev(0, 5), [b""]), mounts) == "[block device cache]"
    assert file_path(rec(kdev(7, 0), []), mounts) == "[inode 12 on 7:0]"


def test_user_symbols_of_a_running_process() -> None:
    """UserSymbols names an address in this very process: libc's getpid, found through
    /proc/self/maps and libc's ELF symbols (pyelftools); a return address (not the leaf) is looked
    up one byte back and printed as it is; an address in no file mapping, and a process that has
    exited, are said so and counted."""
    import ctypes
    import ctypes.util

    from ioscope.engines.aggregate.names import UserSymbols, ustack_text

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    addr = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    assert addr
    syms = UserSymbols()
    leaf, caller = syms.frames(os.getpid(), [addr + 2, addr + 1])
    assert leaf.startswith("getpid+0x2 (libc.so") or leaf.startswith("__getpid+0x2 (libc.so"), leaf
    assert caller.split(" ")[0].endswith("getpid+0x1"), caller
    assert syms.unresolved == 0
    stack_obj = ctypes.create_string_buffer(16)   # heap: mapped, but no file
    (heap,) = syms.frames(os.getpid(), [ctypes.addressof(stack_obj)])
    assert heap.endswith("[no file mapped]") and syms.unresolved == 1
    gone = subprocess.Popen(["true"])
    gone.wait()
    why = f"[process {gone.pid} exited: not symbolised]"
    assert ustack_text([0x401000, 0x401100, 0], gone.pid, syms).splitlines() == [f"0x401000 {why}", f"0x401100 {why}"]
    assert syms.unresolved == 3
    assert ustack_text([0, 0], 1, syms) == "[no user stack]"


def test_issued_bios_never_completed_become_losses_at_the_end() -> None:
    """The slot table's issued-not-completed gauge beyond what the kernel has in flight is a count of
    completions that ran no BPF program: a loss once nothing more can arrive, not before."""
    losses = Losses({"completion_unseen": 1, "issued_not_completed": 5}, frozenset({"completion_unseen"}))
    mid = build_result([], AggSample(10.0, 9.0, [], losses, final=False, kernel_in_flight=2))
    assert mid.losses.counters == {"completion_unseen": 1, "issued_not_completed": 5} and mid.losses.lost == 1
    end = build_result([], AggSample(10.0, 9.0, [], losses, final=True, kernel_in_flight=2))
    assert end.losses.counters == {"completion_unseen": 4, "issued_not_completed": 2} and end.losses.lost == 4
    assert losses.counters["issued_not_completed"] == 5  # the sample is left as read


def test_ustack_cycle_is_cut_at_the_first_repeat() -> None:
    """A frame-pointer walk that loops: 3 real frames, then a 7-address cycle repeated to the kernel's
    127-frame limit (as fio's stacks were) keeps the 3 and the cycle once, and says how much it cut."""
    from ioscope.engines.aggregate.model import cut_cycle

    cycle = [0x7F00 + 16 * i for i in range(7)]
    frames = [0x401000, 0x401100, 0x401200, *(cycle * 20)[:124]]
    got = cut_cycle(frames)
    assert got.frames == frames[:10] and (got.cycle, got.cut) == (7, 117)
    assert got.note() == "(cycle of 7 frames cut: 117 more repeated it)"
    assert len(got.frames) + got.cut == 127
    # a recursion that returns to its callers, and a stack with no repeat, are kept whole
    rec = [0x10, 0x20, 0x20, 0x20, 0x30, 0x40]
    assert cut_cycle(rec).frames == rec and cut_cycle(rec).note() is None
    assert cut_cycle([1, 2, 3]).frames == [1, 2, 3]
    # one frame calling itself to the limit: a cycle of one
    assert (cut_cycle([5, 6, 6, 6, 6]).frames, cut_cycle([5, 6, 6, 6, 6]).note()) == (
        [5, 6], "(cycle of 1 frame cut: 3 more repeated it)")
