"""blktrace files with cgroup records (__BLK_TA_CGROUP) keep their cgroup ids through import, and an export of a
capture with cgroups names them in `cgroup <id> <path>` message notes that the real blkparse and btt 1.2.0 read.

Ground truth: tests/traces/cgroup/ (made by the kernel's own blk tracer, tests/blk_cgroup_trace.py) with the
workload's dd write counts and the cgroup directories' inode numbers in cgroups.json; the live test makes such a
trace now; the real blkparse and btt read the exports."""

from __future__ import annotations

import json
import struct
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import blk_scenarios as bs
import test_cgroup_offline as tco
from conftest import ROOT, run_ioscope
from ioscope.capture.events import EV_CGROUP, EV_NOTE_PROCESS, TA_QUEUE, TC_WRITE
from ioscope.capture.store import open_capture

CORPUS = ROOT / "tests" / "traces" / "cgroup"
HEAD = struct.Struct("<IIQQIIIIIHH")


def _truth(d: Path, name: str = "cgroups") -> dict[int, int]:
    """cgroup id -> dd's writes in it, from the JSON written when the trace was made."""
    t = json.loads((d / f"{name}.json").read_text())
    out = {int(c["id"]): int(c["writes"]) for c in t["cgroups"].values()}
    out[int(t["root"]["id"])] = int(t["root"]["writes"])
    return out


def _queued_writes_per_cgroup(cap: str) -> Counter[int]:
    with open_capture(cap) as c:
        ev = c.read_all()
    q = (ev["action"] == TA_QUEUE) & ((ev["flags"] & EV_NOTE_PROCESS) == 0) & ((ev["category"] & TC_WRITE) != 0)
    assert ((ev["flags"][q] & EV_CGROUP) != 0).all(), "a Q of the kernel's cgroup trace lost its cgroup"
    return Counter(ev["aux"][q].tolist())


def _check_trace(d: Path, name: str, tmp: Path) -> None:
    truth = _truth(d, name)
    cap = str(tmp / "imp.ioscope")
    p = run_ioscope("import", str(d / f"{name}.blktrace.0"), "-o", cap, check=True)
    assert " cgroups -> " in p.stderr, p.stderr
    # every Q is there with its cgroup id: the writes per cgroup are dd's, the ids the directories' inodes
    got = _queued_writes_per_cgroup(cap)
    assert {k: v for k, v in got.items() if k in truth} == truth
    with open_capture(cap) as c:
        names = dict(c.cgroups)
    # no note in the file: each id named cgroup:<id> (nothing guessed from this host)
    assert all(names[i] == f"cgroup:{i}" for i in truth), names
    # agg -r: count() by cgroup gives the same counts
    rows = _agg_rows(run_ioscope("agg", "-r", cap, "-j", "-e", "count() by cgroup", check=True).stdout)
    assert {k: v for k, v in rows.items() if k in {f"cgroup:{i}" for i in truth}} == \
        {f"cgroup:{i}": n for i, n in truth.items()}
    # the import gives the kernel's files back, byte for byte (the cgroup records kept whole)
    back = tmp / "back"
    run_ioscope("export", cap, "--per-cpu", "-o", str(back), check=True)
    for f in d.glob(f"{name}.blktrace.*"):
        assert (back / f.name).read_bytes() == f.read_bytes(), f.name
    # parse: the default lines are blkparse's of the same records without the cgroup ids (1.3's default line
    # does not show the id); -G shows it on the Qs, LOW32,HIGH32 in hex
    stripped = tmp / "stripped"
    stripped.mkdir()
    for f in d.glob(f"{name}.blktrace.*"):
        (stripped / f.name).write_bytes(_strip_cgroups(f.read_bytes()))
    ref = subprocess.run(["blkparse", "-D", str(stripped), "-i", name], capture_output=True, text=True, timeout=60)
    assert ref.returncode == 0 and "Bad fs action" not in ref.stdout + ref.stderr
    mine = run_ioscope("parse", str(d / f"{name}.blktrace.0"), check=True).stdout
    assert mine == ref.stdout.replace(str(stripped), str(d))
    with_g = run_ioscope("parse", "-G", str(d / f"{name}.blktrace.0"), check=True).stdout
    for i, n in truth.items():
        tag = f" {i & 0xFFFFFFFF:x},{i >> 32:x}  Q  WS "
        assert sum(tag in ln for ln in with_g.splitlines()) == n, (tag, n)


def _agg_rows(out: str) -> dict[str, int]:
    """agg -j's rows of its one aggregation: {cgroup: count}."""
    rows: dict[str, int] = {}
    for line in out.splitlines():
        doc: Any = json.loads(line)
        for r in doc["aggs"][0]["rows"]:
            rows[str(r["keys"]["cgroup"])] = rows.get(str(r["keys"]["cgroup"]), 0) + int(r["count"])
    return rows


def _strip_cgroups(data: bytes) -> bytes:
    """The records without __BLK_TA_CGROUP: the flag cleared and the 8-byte id taken off the payload."""
    out = []
    at = 0
    while at < len(data):
        h = list(HEAD.unpack_from(data, at))
        pay = data[at + 48:at + 48 + h[10]]
        if h[5] & (1 << 8) and h[10] >= 8:
            h[5] &= ~(1 << 8)
            pay = pay[8:]
            h[10] -= 8
        out.append(HEAD.pack(*h) + pay)
        at += 48 + len(data[at + 48:at + 48 + HEAD.unpack_from(data, at)[10]])
    return b"".join(out)


def test_corpus_trace_keeps_cgroup_ids(tmp_path: Path) -> None:
    _check_trace(CORPUS, "cgroups", tmp_path)


def test_export_names_cgroups_in_notes_that_blkparse_and_btt_read(tmp_path: Path) -> None:
    cap = tco._capture(tmp_path / "c.ioscope", {101: tco.BACKUP_ID, 100: tco.APP_ID},
                       {tco.BACKUP_ID: tco.BACKUP, tco.APP_ID: tco.APP})
    out = tmp_path / "c.bin"
    run_ioscope("export", cap, "-o", str(out), check=True)
    text = bs.run_blkparse(str(out))
    notes = [ln for ln in text.splitlines() if "  m   N cgroup " in ln]
    assert [ln.split(" N ", 1)[1] for ln in notes] == [f"cgroup {tco.BACKUP_ID} {tco.BACKUP}",
                                                       f"cgroup {tco.APP_ID} {tco.APP}"]
    # blkparse's Q count is the capture's
    with open_capture(cap) as c:
        nq = int((c.read_all()["action"] == TA_QUEUE).sum())
    assert sum(" Q " in ln for ln in text.splitlines()) == nq
    # ioscope parse of the capture prints what blkparse prints of its export, notes included, to the byte
    assert run_ioscope("parse", cap, check=True).stdout == text
    # btt reads it; its numbers are those of the same export without the notes
    plain = tmp_path / "plain.bin"
    plain.write_bytes(_without_messages(out.read_bytes()))
    assert len(plain.read_bytes()) < len(out.read_bytes())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert bs.run_btt(str(out), str(tmp_path / "a"), "-A") == bs.run_btt(str(plain), str(tmp_path / "b"), "-A")
    # the round trip keeps the names
    imp = str(tmp_path / "back.ioscope")
    run_ioscope("import", str(out), "-o", imp, check=True)
    with open_capture(imp) as c:
        assert dict(c.cgroups) == {tco.BACKUP_ID: tco.BACKUP, tco.APP_ID: tco.APP}


def test_export_per_cpu_notes_once(tmp_path: Path) -> None:
    cap = tco._capture(tmp_path / "c.ioscope", {101: tco.BACKUP_ID}, {tco.BACKUP_ID: tco.BACKUP})
    d = tmp_path / "pc"
    run_ioscope("export", cap, "--per-cpu", "-o", str(d), check=True)
    p = subprocess.run(["blkparse", "-D", str(d), "-i", "loop0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    assert [ln.split(" N ", 1)[1] for ln in p.stdout.splitlines() if "  m   N " in ln] == \
        [f"cgroup {tco.BACKUP_ID} {tco.BACKUP}"]


def test_capture_without_cgroups_exports_no_note(tmp_path: Path) -> None:
    cap = tco._capture(tmp_path / "c.ioscope", {}, {})
    out = tmp_path / "c.bin"
    run_ioscope("export", cap, "-o", str(out), check=True)
    assert "  m   N " not in bs.run_blkparse(str(out))


def _without_messages(data: bytes) -> bytes:
    out = []
    at = 0
    while at < len(data):
        h = HEAD.unpack_from(data, at)
        n = 48 + h[10]
        if h[5] != ((1 << 10) << 16) | 2:
            out.append(data[at:at + n])
        at += n
    return b"".join(out)


def test_live_kernel_cgroup_trace(live: None, tmp_path: Path) -> None:
    """A trace made now by the kernel's blk tracer (blk_cgroup, bin) keeps dd's writes per cgroup."""
    import blk_cgroup_trace
    d = tmp_path / "t"
    d.mkdir()
    truth = blk_cgroup_trace.record(d, "live")
    assert len(truth["cgroups"]) == 2
    _check_trace(d, "live", tmp_path)
