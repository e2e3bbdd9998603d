"""The pairing engines run once over the blktrace corpus (tests/traces/) and over a capture recorded live,
each rule set against its ground truth:

- btt's rules (report's btt view, tracecore/bttsim.c): Q2C, D2C and I2D counts and averages equal the real
  `btt`'s on the same records;
- ioscope's rules (each bio an I/O, each piece of a split bio one, remaps on their target): one pairing
  engine (tracecore/bios.c) that agg -r and snoop read record by record (engines/pairing/bios.py) and
  report's ioscope view reads stage by stage (tracecore/pairing.c): the two count and time the same I/Os,
  and live those equal the workload's own count (fio's, times the pieces the kernel split each bio into)
  and /proc/diskstats' completions.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from blk_scenarios import run_btt
from conftest import ioscope_cmd
from ioscope.capture.offline import open_source
from ioscope.engines.pairing.bios import BR_FLUSH, BR_UNPAIRED, NO_TIME, Bios
from ioscope.engines.pairing.btt import BttResult, is_remapper
from ioscope.tools.report.view import analyse_source

TRACES = Path(__file__).parent / "traces"
DUMPS = ["splits.dump", "nostamp.dump", "bigend.dump", "partition.dump", "parttraced.dump", "dm.dump",
         "messages.dump", "cfqidle.dump"]


def btt_all(text: str) -> dict[str, tuple[float, int]]:
    """The All Devices table of btt's .avg file: phase -> (average s, N)."""
    rows: dict[str, tuple[float, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] in ("Q2C", "D2C", "I2D") and parts[0].lower() not in rows:
            rows[parts[0].lower()] = (float(parts[2]), int(parts[4]))
    return rows


def bio_records(path: str, machines: dict[int, bool] | None = None) -> np.ndarray:
    """Every I/O the per-bio engine completes (flush requests and I/O queued before the start left out)."""
    b = Bios(machines)
    parts = []
    with open_source(path) as src:
        for c in src.chunks():
            r = b.feed(c)
            parts.append(r[(r["flags"] & (BR_FLUSH | BR_UNPAIRED)) == 0])
    return np.concatenate(parts) if parts else np.zeros(0)


def assert_ioscope_rules_agree(path: str, res: BttResult) -> np.ndarray:
    """The per-bio engine's I/Os with data are report's ioscope view's, count and q2c total, q2d count (its
    0-byte bios, empty PREFLUSH writes, are agg's only: the kernel agg object counts them)."""
    recs = bio_records(path)
    recs = recs[recs["bytes"] > 0]
    dm = np.array([is_remapper(int(d)) for d in recs["dev"]], dtype=bool)
    for rows, phase in ((recs[~dm], "q2c"), (recs[dm], "q2c_dm")):
        st = res.stat(phase)
        assert len(rows) == st.n, (path, phase)
        q2c = np.maximum(rows["c"].astype(np.int64) - rows["q"].astype(np.int64), 1)
        assert int(q2c.sum()) == st.total, (path, phase)
    issued = recs[(recs["d"] != NO_TIME) & ~dm]
    assert len(issued) == res.stat("q2d").n, path
    return recs


@pytest.mark.parametrize("dump", DUMPS)
def test_corpus_btt_rules_and_ioscope_rules(dump: str, tmp_path: Path) -> None:
    path = str(TRACES / dump)
    res, _src = analyse_source(path)
    assert res.btt is not None
    real = btt_all(run_btt(path, str(tmp_path)))
    for phase in ("q2c", "d2c", "i2d"):
        avg = res.btt.all[phase]
        got = (round(avg.avg, 9), avg.n) if avg.n else None
        assert got == (real.get(phase) if phase in real else None), (dump, phase, got, real.get(phase))
    assert_ioscope_rules_agree(path, res)


NIOS = 301
PIECES = 4   # a 64 KiB write on a queue of max_sectors_kb=16


def test_live_capture_both_rule_sets(loopdev: Callable[..., Any], tmp_path: Path) -> None:
    """fio writes NIOS bios of 64 KiB on a disk whose requests hold 16 KiB at most: the kernel splits each
    into PIECES. ioscope's rules count NIOS * PIECES I/Os (each piece), as /proc/diskstats does; btt's
    numbers (which ignore splits) equal the real btt's on the capture's export."""
    from ioscope.base.testbed import run_fio
    from ioscope.engines.recording.recorder import flush_machines

    ld = loopdev(size_mb=64, scheduler="none")
    ld.set_queue("max_sectors_kb", "16")
    cap = tmp_path / "split.ioscope"
    rec = subprocess.Popen(ioscope_cmd("record", "-d", ld.name, "-o", str(cap), "-q"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # the recorder attaches
        assert rec.poll() is None, rec.communicate()
        before = ld.diskstats()
        job = run_fio(ld.path, rw="randwrite", bs="64k", number_ios=NIOS, size="60M", iodepth=4)
        time.sleep(0.2)
        after = ld.diskstats()
    finally:
        rec.send_signal(2)
        _out, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert int(job["write"]["total_ios"]) == NIOS
    completed = after.writes - before.writes
    assert completed == NIOS * PIECES
    res, _src = analyse_source(str(cap))
    recs = bio_records(str(cap))
    assert len(recs) == NIOS * PIECES and set(recs["bytes"].tolist()) == {16384}
    # report's ioscope view pairs through the same engine: the same pieces, the same Q2C
    assert len(assert_ioscope_rules_agree(str(cap), res)) == NIOS * PIECES
    assert res.stat("q2c").n == NIOS * PIECES and res.stat("d2c").n == NIOS * PIECES
    # agg -r over the capture counts the same I/Os
    p = subprocess.run(ioscope_cmd("agg", "-e", "count() by op", "-r", str(cap), "-j"), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout.splitlines()[0])
    assert sum(r["count"] for r in doc["aggs"][0]["rows"]) == NIOS * PIECES
    with open_source(str(cap)) as s:
        machines = flush_machines(s.meta.get("devices") or {})
    assert len(bio_records(str(cap), machines)) == NIOS * PIECES
    # btt's rules: the real btt on the export
    blk = tmp_path / "split.blktrace"
    subprocess.run(ioscope_cmd("export", "-o", str(blk), str(cap)), check=True, capture_output=True)
    assert res.btt is not None
    real = btt_all(run_btt(str(blk), str(tmp_path)))
    for phase in ("q2c", "d2c"):
        avg = res.btt.all[phase]
        got = (round(avg.avg, 9), avg.n) if avg.n else None
        assert got == real.get(phase), (phase, got, real.get(phase))
