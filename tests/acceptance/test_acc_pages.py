"""Acceptance: a support engineer turns captures of every kind into pages and pictures (issue 26).

A loop disk; `ioscope record -d DISK -o before.ioscope` while fio makes 1009 direct 4 KiB random reads and
dd 67 direct 64 KiB writes (Ctrl-C); `ioscope collect -o after.ioscope -d DISK -w 3` while fio makes 503
reads; `ioscope record --ring 30s -d DISK -o flt` with 211 reads and a `kill -USR1` save; `ioscope export
before.ioscope -o before.bin` (blktrace). Then, as typed: `ioscope report CAPTURE --html PAGE` for each,
`ioscope report --svg pics/ before.ioscope`, `ioscope diff before.ioscope after.ioscope --html diff.html`.
Each page opens in headless Chromium with the network cut, with no console error, nothing fetched, every
picture drawn; the heat map's drawn cells add up to report --json's Q2C N, and the reads among them to
/proc/diskstats' reads over each recording (fio's own count).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from conftest import ioscope_cmd, run_ioscope
from ioscope.base.testbed import run_fio


def _reads(disk: Any) -> tuple[int, int]:
    s = disk.diskstats()
    return s.reads, s.writes


def _page_sums(page: Path) -> tuple[int, dict[str, int]]:
    """Opened in Chromium offline: (I/Os in the drawn Q2C heat map, per op)."""
    from ioscope.engines.pages.browser import chromium, open_page
    with chromium() as ctx:
        o = open_page(ctx, page.as_uri())
        assert not o.errors and not o.requests, (o.errors, o.requests)
        for view in ("overview", "heat", "access", "scatter", "curves", "phases"):
            assert o.inked(f"#{view}", 0.005) > 0.005, view
        cells = o.marks("heat", "heat")
        per_op: dict[str, int] = {}
        for x in cells:
            op = x["part"].split()[-1]
            per_op[op] = per_op.get(op, 0) + int(x["n"])
        return sum(per_op.values()), per_op


def _check(cap: Path, page: Path, reads: int) -> None:
    p = run_ioscope("report", str(cap), "--html", str(page), timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert f"wrote {page}" in p.stderr and p.stdout == "", p.stderr
    rep = json.loads(run_ioscope("report", "--json", str(cap), timeout=120, check=True).stdout)
    total, per_op = _page_sums(page)
    assert total == rep["phases"]["q2c"]["n"]
    assert per_op.get("read", 0) == reads, (per_op, reads)


def test_pages_of_every_capture_kind(loopdev: Any, tmp_path: Path) -> None:
    disk = loopdev(size_mb=256)
    d = tmp_path
    # record
    rec = subprocess.Popen(ioscope_cmd("record", "-d", disk.name, "-o", str(d / "before.ioscope")),
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert rec.stderr is not None
    assert rec.stderr.readline().startswith("Recording block I/O events")
    r0 = _reads(disk)
    run_fio(disk.path, number_ios=1009, iodepth=4, size="128m")
    subprocess.run(["dd", "if=/dev/zero", f"of={disk.path}", "bs=64k", "count=67", "seek=3000", "oflag=direct",
                    "status=none"], check=True)
    time.sleep(0.3)
    r1 = _reads(disk)
    os.killpg(rec.pid, signal.SIGINT)
    _out, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert r1[0] - r0[0] == 1009 and r1[1] - r0[1] == 67
    # collect (a bundle)
    col = subprocess.Popen(ioscope_cmd("collect", "-o", str(d / "after.ioscope"), "-d", disk.name, "-w", "4"),
                           stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    c0 = _reads(disk)
    run_fio(disk.path, number_ios=503, iodepth=2, size="128m")
    c1 = _reads(disk)
    _out, err = col.communicate(timeout=120)
    assert col.returncode == 0, err
    # the flight recorder, a save asked with SIGUSR1
    flt = subprocess.Popen(ioscope_cmd("record", "--ring", "30s", "-d", disk.name, "-o", str(d / "flt")),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert flt.stderr is not None and flt.stdout is not None
    assert flt.stderr.readline().startswith("Flight recorder: keeping")
    f0 = _reads(disk)
    run_fio(disk.path, number_ios=211, iodepth=1, size="128m")
    f1 = _reads(disk)
    flt.send_signal(signal.SIGUSR1)
    saved = flt.stdout.readline()
    m = re.match(r"ioscope record: saved (\S+):", saved)
    assert m, saved
    os.killpg(flt.pid, signal.SIGINT)
    flt.communicate(timeout=60)
    # a blktrace file (what `ioscope import` reads)
    run_ioscope("export", str(d / "before.ioscope"), "--format", "blktrace", "-o", str(d / "before.bin"),
                check=True)

    _check(d / "before.ioscope", d / "before.html", 1009)
    _check(d / "after.ioscope", d / "after.html", c1[0] - c0[0])
    _check(Path(m[1]), d / "flight.html", f1[0] - f0[0])
    _check(d / "before.bin", d / "blktrace.html", 1009)

    p = run_ioscope("report", "--svg", str(d / "pics"), str(d / "before.ioscope"), timeout=300, check=True)
    assert "wrote 8 pictures" in p.stderr
    assert (d / "pics" / "heat-q2c.svg").read_text().startswith("<svg")

    p = run_ioscope("diff", str(d / "before.ioscope"), str(d / "after.ioscope"), "--html", str(d / "diff.html"),
                    timeout=300)
    assert p.returncode == 0 and p.stdout == "", p.stderr
    from ioscope.engines.pages.browser import chromium, open_page
    with chromium() as ctx:
        o = open_page(ctx, (d / "diff.html").as_uri())
        assert not o.errors and not o.requests, (o.errors, o.requests)
        sides: dict[str, int] = {}
        for x in o.marks("heat", "heat"):
            if x["part"].endswith(" read"):
                sides[x["cap"]] = sides.get(x["cap"], 0) + int(x["n"])
        assert sides == {"before": 1009, "after": c1[0] - c0[0]}, sides
