"""The offline tools' cgroups on a real recording (root, BPF): two services in two cgroups of the io
controller's hierarchy, dd with direct I/O in each (tests/cg_capture.py), then report's per-cgroup table
(text and JSON), sql's cgroup column and parse -G, against the workload's own counts, the cgroups' ids
read from the hierarchy, and the kernel's blk tracer (option blk_cgroup) that watched the same I/O.
btt's sections of report stay the real btt's, byte for byte."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import blk_scenarios as bs
from cg_capture import CgCapture, record_two_cgroups
from conftest import run_ioscope
from ioscope.base.cgroups import label

# the kernel's blk tracer with blk_cgroup: "7,0   3931,0  Q  WS 2048 + 128 [dd]"
_TRACER_Q = re.compile(r"^\s*\S+\s+\[\d+\]\s+\S+\s+[\d.]+:\s+(\d+,\d+)\s+([0-9a-f]+),([0-9a-f]+)\s+Q\s+(\S+) "
                       r"(\d+) \+ (\d+) \[(.*)\]$")
# parse -G: "  7,0    1        1     0.000000000 15499 37b5,0  Q  WS 2048 + 128 [dd]"
_PARSE_Q = re.compile(r"^\s*(\d+,\d+)\s+\d+\s+\d+\s+[\d.]+\s+\d+ ([0-9a-f]+),([0-9a-f]+)\s+Q\s+(\S+) (\d+) \+ (\d+) "
                      r"\[(.*)\]$")


@pytest.fixture
def cgcap(loopdev: Callable[..., Any], tmp_path: Path) -> Iterator[CgCapture]:
    disk = loopdev(size_mb=256)
    yield record_two_cgroups(disk, tmp_path / "cg.ioscope")


def test_report_sql_parse_per_cgroup(cgcap: CgCapture, tmp_path: Path) -> None:
    cap = str(cgcap.path)
    # report --json: each service's completed I/Os and bytes are its dd's, each with its Q2C and D2C
    doc = json.loads(run_ioscope("report", "--json", cap, check=True).stdout)
    rows = {r["path"]: r for r in doc["cgroups"]}
    for path, (n, nbytes) in cgcap.expected.items():
        r = rows[path]
        assert (r["id"], r["ios"], r["bytes"], r["unfinished"]) == (cgcap.ids[path], n, nbytes, 0), r
        assert r["q2c"]["n"] == n and r["d2c"]["n"] == n
        assert r["label"] == label(path)
    # every completed I/O is in one row: the rows add up to report's Q2C N
    assert sum(r["ios"] for r in doc["cgroups"]) == doc["phases"]["q2c"]["n"]

    # sql: group by cgroup gives the same I/Os and bytes, and the same Q2C maxima and totals as report
    q = ("select cgroup, cgroup_id, count(*) as n, sum(bytes) as b, count(q2c) as nq, max(q2c) as mx, "
         "sum(q2c) as tot from ios where cgroup is not null group by cgroup, cgroup_id order by cgroup")
    sql = [json.loads(line) for line in run_ioscope("sql", "--json", q, cap, check=True).stdout.splitlines()]
    got = {r["cgroup"]: r for r in sql}
    for path, (n, nbytes) in cgcap.expected.items():
        r = got[path]
        assert (r["cgroup_id"], r["n"], r["b"], r["nq"]) == (cgcap.ids[path], n, nbytes, n), r
        assert r["mx"] / 1e9 == rows[path]["q2c"]["max"]
        assert r["tot"] / 1e9 == pytest.approx(rows[path]["q2c"]["total"], abs=1e-12)

    # report's text: btt's sections are the real btt's of the same capture, byte for byte; then the table
    text = run_ioscope("report", cap, check=True).stdout
    out = tmp_path / "cg.bin"
    run_ioscope("export", cap, "-o", str(out), check=True)
    avg = bs.run_btt(str(out), str(tmp_path), "-A")
    assert text.startswith(avg)
    table = bs.section(text, "Per cgroup (ioscope)")
    for path, (n, nbytes) in cgcap.expected.items():
        line = next(ln for ln in table.splitlines() if ln.endswith(f"  {path}"))
        assert line.split()[:2] == [str(n), str(nbytes)], line

    # parse -G: each Q with its cgroup's id, as the kernel's blk tracer printed the same Qs; every other
    # line, and the totals, are parse's default output
    plain = run_ioscope("parse", cap, check=True).stdout
    with_cg = run_ioscope("parse", "-G", cap, check=True).stdout
    assert re.sub(r" [0-9a-f]+,[0-9a-f]+(  Q )", r"\1", with_cg) == plain
    parsed = Counter(m.groups() for m in map(_PARSE_Q.match, with_cg.splitlines()) if m)
    traced = Counter(m.groups() for m in map(_TRACER_Q.match, cgcap.tracer.splitlines()) if m)
    assert parsed == traced
    per_id = Counter((int(hi, 16) << 32) | int(lo, 16) for _d, lo, hi, *_rest in parsed.elements())
    for path, (n, _b) in cgcap.expected.items():
        assert per_id[cgcap.ids[path]] == n
