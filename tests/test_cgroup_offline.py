"""The offline tools' cgroups without root: report's per-cgroup table, the ios table's cgroup columns (sql) and
parse -G / %g on synthetic captures written as record writes them (CaptureWriter), whose queue events carry
cgroup ids (EV_CGROUP) as record's do. The rules checked: a split bio's pieces are its Q's cgroup; Qs with no
cgroup are a row of their own; an id without a stored path is named cgroup:ID; a capture without cgroups
has no table and parse's output is unchanged; chunking changes nothing. (tests/test_cgroup_offline_live.py
checks the same on a real recording against the workload, the cgroups' ids and the kernel's blk tracer.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import blk_scenarios as bs
from conftest import run_ioscope
from ioscope.capture.events import EV_CGROUP, TA_QUEUE
from ioscope.capture.offline import open_source
from ioscope.capture.store import CaptureWriter
from ioscope.engines.pairing import btt, ios

BACKUP_ID, BACKUP = 0x1221, "/system.slice/backup.service"
APP_ID = 0x1_0000_04C5   # an id wider than 32 bits: blk_cgroup's LOW32,HIGH32 is "4c5,1"
APP = "/system.slice/docker-" + "ab" * 32 + ".scope"
NBIOS, PIECES, PIECE = 5, 3, 256 << 10     # bs.split_bios: pid 101 (dd) queues them, pid 100 (fio) one 4 KiB read


def _events(cgroups: dict[int, int]) -> npt.NDArray[np.void]:
    """bs.split_bios' events, each Q of pid P carrying cgroup cgroups[P] (none for a pid not in it)."""
    ev = bs.split_bios(NBIOS, PIECES).events()
    for pid, cg in cgroups.items():
        q = (ev["action"] == TA_QUEUE) & (ev["pid"] == pid)
        ev["flags"][q] |= EV_CGROUP
        ev["aux"][q] = cg
    return ev


def _capture(path: Path, cgroups: dict[int, int], names: dict[int, str]) -> str:
    w = CaptureWriter(str(path), {"devices": {"7,0": {"name": "loop0", "major": 7, "minor": 0}},
                                  "cgroup_hierarchy": "v2" if cgroups else None})
    w.add_comms({101: "dd", 100: "fio"})
    w.add_cgroups(names)
    w.write(_events(cgroups))
    w.close()
    return str(path)


def _report(cap: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(run_ioscope("report", "--json", cap, check=True).stdout)
    return doc


def _sql(cap: str, q: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run_ioscope("sql", "--json", q, cap, check=True).stdout.splitlines()]


def test_split_pieces_are_their_bios_cgroup(tmp_path: Path) -> None:
    cap = _capture(tmp_path / "c.ioscope", {101: BACKUP_ID}, {BACKUP_ID: BACKUP})
    doc = _report(cap)
    rows = {r["path"]: r for r in doc["cgroups"]}
    assert set(rows) == {BACKUP, None}
    backup, none = rows[BACKUP], rows[None]
    # every piece of every split bio is the backup's; fio's read, whose Q carries no cgroup, is the other row
    assert (backup["id"], backup["ios"], backup["bytes"], backup["q2c"]["n"]) == (
        BACKUP_ID, NBIOS * PIECES, NBIOS * PIECES * PIECE, NBIOS * PIECES)
    assert (none["id"], none["label"], none["ios"], none["bytes"]) == (None, "(no cgroup)", 1, 4096)
    assert backup["ios"] + none["ios"] == doc["phases"]["q2c"]["n"]
    # each piece's Q2C from the bio's Q (bs.split_bios: piece p completes 90000 + 1000 p ns after it)
    assert backup["q2c"]["min"] == 90_000e-9 and backup["q2c"]["max"] == 92_000e-9
    assert backup["d2c"]["max"] == (92_000 - 240) * 1e-9
    got = _sql(cap, "select cgroup, cgroup_id, count(*) as n, sum(bytes) as b, sum(q2c) as q2c from ios "
                    "group by all order by cgroup nulls last")
    assert got == [{"cgroup": BACKUP, "cgroup_id": BACKUP_ID, "n": NBIOS * PIECES, "b": NBIOS * PIECES * PIECE,
                    "q2c": round(backup["q2c"]["total"] * 1e9)},
                   {"cgroup": None, "cgroup_id": None, "n": 1, "b": 4096, "q2c": round(none["q2c"]["total"] * 1e9)}]
    text = run_ioscope("report", cap, check=True).stdout
    table = bs.section(text, "Per cgroup (ioscope)").splitlines()
    assert "(v2)" in table[2]
    assert [[*ln.split()[:2], ln.split("  ")[-1]] for ln in table[6:8]] == [
        [str(NBIOS * PIECES), str(NBIOS * PIECES * PIECE), BACKUP], ["1", "4096", "(no cgroup)"]]
    # btt's sections do not change: the same capture without cgroups prints them byte for byte
    plain = run_ioscope("report", _capture(tmp_path / "p.ioscope", {}, {}), check=True).stdout
    assert text.split("==================== Latency percentiles")[0] == \
        plain.split("==================== Latency percentiles")[0]


def test_labels_and_ids_without_a_path(tmp_path: Path) -> None:
    cap = _capture(tmp_path / "c.ioscope", {101: APP_ID, 100: BACKUP_ID}, {APP_ID: APP})
    rows = {r["id"]: r for r in _report(cap)["cgroups"]}
    assert rows[APP_ID]["label"] == f"{APP} [docker {'ab' * 6}]"
    assert (rows[BACKUP_ID]["path"], rows[BACKUP_ID]["label"]) == (f"cgroup:{BACKUP_ID}", f"cgroup:{BACKUP_ID}")
    assert None not in rows   # every Q carries one
    # parse -G: the id before the action of each Q that carries one (LOW32,HIGH32), the rest unchanged
    with_cg = run_ioscope("parse", "-G", cap, check=True).stdout
    plain = run_ioscope("parse", cap, check=True).stdout
    qs = [ln for ln in with_cg.splitlines() if "  Q " in ln]
    assert sum(" 4c5,1  Q   W " in ln for ln in qs) == NBIOS and sum(" 1221,0  Q   R " in ln for ln in qs) == 1
    assert with_cg.replace(" 4c5,1  Q ", "  Q ").replace(" 1221,0  Q ", "  Q ") == plain
    # the lines -F leaves to the default format are written in Python (the others in C): the same
    assert run_ioscope("parse", "-G", "-F", "B,%a\\n", cap, check=True).stdout == with_cg
    fmt = run_ioscope("parse", "-q", "-f", "%a %g %S\\n", cap, check=True).stdout.splitlines()
    # the export's `cgroup <id> <path>` notes, which blkparse prints in its own format whatever -f says
    assert [ln.split(" N ", 1)[1] for ln in fmt if "  m   N " in ln] == [f"cgroup {APP_ID} {APP}",
                                                                        f"cgroup {BACKUP_ID} cgroup:{BACKUP_ID}"]
    fmt = [ln for ln in fmt if "  m   N " not in ln]
    assert fmt[0] == "Q 4c5,1 1000000" and fmt[-1] == "C 0,0 1000008"   # a C carries none: 0,0, as blkparse 1.3
    assert "Q 1221,0 1000008" in fmt


def test_no_cgroups_no_table(tmp_path: Path) -> None:
    cap = _capture(tmp_path / "c.ioscope", {}, {})
    assert _report(cap)["cgroups"] is None
    assert "Per cgroup" not in run_ioscope("report", cap, check=True).stdout
    assert _sql(cap, "select count(cgroup) as n, count(cgroup_id) as i, count(*) as rows from ios") == [
        {"n": 0, "i": 0, "rows": NBIOS * PIECES + 1}]
    assert run_ioscope("parse", "-G", cap, check=True).stdout == run_ioscope("parse", cap, check=True).stdout


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_chunking_changes_nothing(chunk: int) -> None:
    ev = _events({101: BACKUP_ID, 100: APP_ID})

    def totals(step: int) -> dict[int, tuple[int, int, int, int, int]]:
        sink = ios.CgroupSink()
        b = btt.Btt({}, on_io=sink, stats=False)
        for k in range(0, len(ev), step):
            b.feed(ev[k:k + step])
        b.finish_io()
        assert len(sink.queued.pending) <= 1   # the Qs no I/O in flight needs are forgotten
        return {cg: (a.ios, a.bytes, a.unfinished, a.q2c.total, a.d2c.total) for cg, a in sink.totals.items()}

    assert totals(chunk) == totals(len(ev))
    whole = totals(len(ev))
    assert whole[BACKUP_ID][:3] == (NBIOS * PIECES, NBIOS * PIECES * PIECE, 0) and whole[APP_ID][:3] == (1, 4096, 0)


def test_source_reads_the_capture_cgroups(tmp_path: Path) -> None:
    cap = _capture(tmp_path / "c.ioscope", {101: BACKUP_ID}, {BACKUP_ID: BACKUP})
    with open_source(cap) as src:
        assert src.cgroups == {BACKUP_ID: BACKUP}
