"""Acceptance: which service suffered, from a saved capture, as an engineer on a container host types it.

A database (`postgresql.service`) writes and a container (`docker-<id>.scope`) reads on one disk, each in
its cgroup of the io controller's hierarchy, while `ioscope record` saves the disk's events. Afterwards,
offline: `ioscope report CAPTURE` has a "Per cgroup (ioscope)" table naming the container by its short id,
with each service's I/Os and bytes as its dd did them; `ioscope sql "select cgroup, count(*) ... group by
cgroup" CAPTURE` counts the same; `ioscope parse -G CAPTURE` prints each Q with its cgroup's id as the
kernel's blk tracer does. The cgroups are removed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cg_capture import READ_BS, READS, WRITE_BS, WRITES, record_two_cgroups
from conftest import run_ioscope

CONTAINER_ID = "3f9c2e61b0d84a7c95e1f2a6b7c8d9e0" * 2
CONTAINER = f"docker-{CONTAINER_ID}.scope"


def test_which_service_suffered(loopdev: Callable[..., Any], tmp_path: Path) -> None:
    disk = loopdev(size_mb=256)
    cap = record_two_cgroups(disk, tmp_path / "incident.ioscope", writer="postgresql.service", reader=CONTAINER)
    db, app = cap.cgroup("postgresql.service"), cap.cgroup(CONTAINER)

    report = run_ioscope("report", str(cap.path), check=True).stdout
    lines = report.split("==================== Per cgroup (ioscope) ====================\n", 1)[1].split("\n\n")[1]
    head, rule, *rows = lines.splitlines()
    assert head.split()[:3] == ["I/Os", "BYTES", "Q2C"] and set(rule) == {"-"}
    by_path = {ln.split("  ")[-1].split(" [")[0]: ln for ln in rows}
    assert by_path[db].split()[:2] == [str(WRITES), str(WRITES * WRITE_BS)]
    assert by_path[app].split()[:2] == [str(READS), str(READS * READ_BS)]
    assert by_path[app].endswith(f"{app} [docker {CONTAINER_ID[:12]}]")   # the container, by its short id

    sql = run_ioscope("sql", "--csv", "select cgroup, count(*) as ios, sum(bytes) as bytes from ios "
                      "where cgroup is not null group by cgroup order by cgroup", str(cap.path), check=True).stdout
    assert sql.splitlines() == ["cgroup,ios,bytes", *sorted([f"{db},{WRITES},{WRITES * WRITE_BS}",
                                                             f"{app},{READS},{READS * READ_BS}"])]

    parse = run_ioscope("parse", "-G", str(cap.path), check=True).stdout
    ids = [m.group(1) for m in re.finditer(r"^\s*\d+,\d+ .* ([0-9a-f]+,[0-9a-f]+)  Q ", parse, re.M)]
    assert ids.count(f"{cap.ids[db]:x},0") == WRITES and ids.count(f"{cap.ids[app]:x},0") == READS
