"""Renders compared as text (no root needed)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from ioscope.base.hist import Hist
from ioscope.base.render import HistView, fmt_ns, percentile_table
from ioscope.engines.latency.model import LatHist
from ioscope.tools.lat.view import hist_json


def test_fmt_ns() -> None:
    assert [fmt_ns(v) for v in (0, 812, 1500, 64_200, 1_050_000, 2_310_000_000)] == \
        ["0ns", "812ns", "1.50us", "64.2us", "1.05ms", "2.31s"]
    assert fmt_ns(1_050_000, "ms") == "1.050ms"


GOLDEN = """\
q2c: queue to completion
n=6 avg=20.3us p50=12.3us p90=41.0us p99=41.0us p99.9=41.0us max=41.0us
        range          : count     distribution
   8.19us -> 16.4us    : 3         |****************************************|
   16.4us -> 32.8us    : 2         |***************************             |
   32.8us -> 65.5us    : 1         |*************                           |"""


def test_hist_view_plain_and_rich_agree() -> None:
    h = Hist.from_values([9000, 10000, 12000, 20000, 30000, 41000])
    view = HistView("q2c: queue to completion", h)
    assert str(view) == GOLDEN
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(view)
    assert buf.getvalue().rstrip("\n") == GOLDEN
    assert max(len(line) for line in GOLDEN.splitlines()) <= 80
    big = HistView("d2c", Hist.from_values([10**9 + 7] * 3 + [123456789012]))
    assert max(len(line) for line in big.lines()) <= 80


def test_percentile_table_fits_80_columns() -> None:
    h = Hist.from_values(range(1000, 200000, 7))
    lines = percentile_table([("read", "q2c", h), ("write", "d2c", h)])
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines)
    assert lines[1].split()[:3] == ["read", "q2c", str(h.count)]


def test_lat_json_shape() -> None:
    h = Hist.from_values([100, 200, 300])
    doc = hist_json(LatHist(dev=(7 << 20) | 1, disk="loop1", op="read", pid=None, comm=None, phase="d2c", hist=h))
    assert json.loads(json.dumps(doc)) == doc
    assert set(doc) >= {"disk", "dev", "op", "pid", "comm", "phase", "unit", "count", "sum", "min", "max",
                        "p50", "p90", "p99", "p999", "buckets"}
    assert doc["dev"] == "7:1" and doc["unit"] == "ns" and doc["count"] == 3 and doc["sum"] == 600
    assert doc["buckets"] == [[96, 104, 1], [192, 208, 1], [288, 320, 1]]
    all_disks = hist_json(LatHist(dev=0, disk="all", op="all", pid=None, comm=None, phase="q2c", hist=h))
    assert all_disks["disk"] == "all" and all_disks["op"] == "all"


def test_hist_bars_take_the_terminal_width() -> None:
    """On a terminal the bars stretch with the console; plain output keeps 40 columns."""
    h = Hist.from_values([9000, 10000, 12000, 20000, 30000, 41000])
    for width in (60, 80, 132):
        buf = io.StringIO()
        Console(file=buf, width=width, force_terminal=True, color_system=None).print(HistView("q2c", h))
        rows = [ln for ln in buf.getvalue().splitlines() if ln.endswith("|")]
        assert rows and all(len(ln) == width - 3 for ln in rows), (width, rows)
        assert max(ln.count("*") for ln in rows) == width - 40
    assert max(ln.count("*") for ln in str(HistView("q2c", h)).splitlines()) == 40
