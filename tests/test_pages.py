"""report --html / --svg / --png and diff --html on synthetic captures with I/Os planted slow: the page's numbers
against report's --json, the planted I/Os in the right cell and time, and the page looked at in headless Chromium
with the network cut (no console error, nothing fetched, pictures drawn, the drawn cells adding up)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import run_ioscope
from ioscope.base import hist
from ioscope.base.devices import kdev
from ioscope.capture.events import (
    EVENT,
    TA_COMPLETE,
    TA_GETRQ,
    TA_INSERT,
    TA_ISSUE,
    TA_QUEUE,
    TC_COMPLETE,
    TC_ISSUE,
    TC_QUEUE,
    TC_READ,
    TC_WRITE,
)

T0 = 5_000_000_000
SLOW = [(0.250, 40_000_000), (0.600, 41_000_000), (0.601, 39_000_000)]   # (completion s, q2c ns) on loop0 reads
N_FAST = 1009


def _capture(path: Path, seed: int = 1, slow: bool = True, scale: float = 1.0) -> dict[str, Any]:
    """Two disks, reads and writes by two processes, fast I/Os (20-90 us) and, on loop0, 3 reads planted
    slow (~40 ms) completing at known times. Returns what was planted."""
    from ioscope.capture.store import CaptureWriter
    rng = np.random.default_rng(seed)
    rows = []
    ios = []
    for i in range(N_FAST):
        dev = (7, 0) if i % 3 else (7, 1)
        q = T0 + int(i * 900_000 * scale) + int(rng.integers(0, 1000))
        lat = int(rng.integers(20_000, 90_000) * scale)
        ios.append((dev, q, lat, bool(i % 5 == 0), 4101 if i % 2 else 4102, 8 * i * 16))
    if slow:
        for k, (c_s, lat) in enumerate(SLOW):
            ios.append(((7, 0), T0 + int(c_s * 1e9) - lat, lat, False, 4101, 10_000_000 + 64 * k))
    for dev, q, lat, write, pid, sector in ios:
        g, i_, d = q + 500, q + 900, q + 1500
        c = q + lat
        cat = TC_WRITE if write else TC_READ
        for ts, act, extra in ((q, TA_QUEUE, TC_QUEUE), (g, TA_GETRQ, 0), (i_, TA_INSERT, 0), (d, TA_ISSUE, TC_ISSUE),
                               (c, TA_COMPLETE, TC_COMPLETE)):
            rows.append((ts, act, cat | extra, kdev(*dev), pid, sector))
    ev = np.zeros(len(rows), EVENT)
    arr = np.array(rows, dtype=np.int64)
    ev["ts"], ev["action"], ev["category"], ev["dev"] = arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]
    ev["pid"] = ev["tgid"] = arr[:, 4]
    ev["sector"] = arr[:, 5]
    ev["bytes"] = 4096
    ev = ev[np.argsort(ev["ts"], kind="stable")]
    meta = {"devices": {"7,0": {"name": "loop0", "major": 7, "minor": 0, "size_bytes": 1 << 30},
                        "7,1": {"name": "loop1", "major": 7, "minor": 1, "size_bytes": 1 << 30}}}
    with CaptureWriter(str(path), meta, force=True) as w:
        w.add_comms({4101: "fio", 4102: "postgres"})
        w.write(ev)
    return {"first_ts": int(ev["ts"][0])}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("pages")
    cap = d / "slow.ioscope"
    planted = _capture(cap)
    rep = run_ioscope("report", "--json", str(cap), check=True)
    page = d / "slow.html"
    p = run_ioscope("report", "--html", str(page), "--svg", str(d / "svg"), "--png", str(d / "png"), str(cap),
                    timeout=180, check=True)
    assert p.stdout == "", p.stdout   # the pictures only: no text report unless asked for
    return {"dir": d, "cap": cap, "page": page, "json": json.loads(rep.stdout), "planted": planted}


def _numbers(page: Path) -> dict[str, Any]:
    text = page.read_text()
    tag = "<script type='application/json' id=numbers>"
    start = text.index(tag) + len(tag)
    return dict(json.loads(text[start:text.index("</script>", start)]))


def test_page_numbers_equal_report_json(made: dict[str, Any]) -> None:
    rep, nums = made["json"], _numbers(made["page"])
    assert nums["ios"] == rep["phases"]["q2c"]["n"] == N_FAST + len(SLOW)
    by_disk = {r["disk"]: r for r in nums["rows"] if r["op"] == "all"}
    for dev in rep["devices"].values():
        name = dev["name"].split()[0]
        for ph in ("q2c", "d2c", "q2d"):
            want, got = dev["phases"][ph], by_disk[name][ph]
            assert got["n"] == want["n"], (name, ph)
            for p in ("p50", "p99", "p99.9"):
                assert got[p] / 1e9 == pytest.approx(want[p], rel=1e-9), (name, ph, p)
            assert got["max"] / 1e9 == pytest.approx(want["max"], rel=1e-12)


def test_cells_hold_every_io_and_the_planted_ones_where_they_are(made: dict[str, Any]) -> None:
    from ioscope.engines.pages.cells import KEY_BITS, MAX_KEYS, aggregate
    c = aggregate(str(made["cap"]))
    rep = made["json"]
    for ph in ("q2c", "d2c", "q2d"):
        assert int(c.heat[ph].vals["n"].sum()) == rep["phases"][ph]["n"]
    s = c.heat["q2c"]
    slow_b = hist.bucket_index(39_000_000)
    hot = s.other >> KEY_BITS >= slow_b
    assert int(s.vals["n"][hot].sum()) == len(SLOW)
    t0 = made["planted"]["first_ts"]
    got = sorted(((int(t) * s.res + t0 - T0) / 1e9, int(b)) for t, b in zip(s.tb[hot], s.other[hot] >> KEY_BITS))
    for (c_s, lat), (t, b) in zip(sorted(SLOW), got):
        assert t <= c_s < t + s.res / 1e9
        assert b == hist.bucket_index(lat)
    loop0 = {k for k in c.keys_where(disk="loop0", op="read")}
    assert all(int(k) in loop0 for k in (s.other[hot] & (MAX_KEYS - 1)))
    # every I/O is a point (a small capture), the planted ones with their latency
    assert not c.points_sampled and len(c.points) == rep["phases"]["q2c"]["n"]
    assert sorted(c.points["q2c"])[-3:] == sorted(lat for _, lat in SLOW)


def test_cells_stay_within_their_budgets(made: dict[str, Any]) -> None:
    """Small budgets: columns widen, every I/O is still counted, the points are the slowest of each disk."""
    from ioscope.engines.pages.cells import aggregate
    c = aggregate(str(made["cap"]), heat_budget=300, access_budget=200, curve_budget=100, points=20)
    rep = made["json"]
    for ph in ("q2c", "d2c", "q2d"):
        assert len(c.heat[ph].tb) <= 300 and c.heat[ph].res > 1000
        assert int(c.heat[ph].vals["n"].sum()) == rep["phases"][ph]["n"]
    assert len(c.access.tb) <= 200 and len(c.curves.tb) <= 100
    assert int(c.curves.vals["ios"].sum()) == rep["phases"]["q2c"]["n"]
    assert c.points_sampled and len(c.points) <= 40
    assert sorted(c.points["q2c"])[-3:] == sorted(lat for _, lat in SLOW)   # the outliers are kept


def test_curves_equal_report_iostat(made: dict[str, Any]) -> None:
    """The throughput curves' requests, bytes and queue depth per disk equal report's iostat table summed."""
    from ioscope.engines.pages.cells import aggregate
    c = aggregate(str(made["cap"]))
    rep = made["json"]
    names = {k: d["name"].split()[0] for k, d in rep["devices"].items()}
    for dev, name in names.items():
        rows = [r for r in rep["iostat"] if r["device"] == dev]
        keys = set(c.keys_where(disk=name))
        m = np.isin(c.curves.other, list(keys))
        assert int(c.curves.vals["req"][m].sum()) == round(sum(r["r/s"] + r["w/s"] for r in rows))
        kb = sum(r["rkB/s"] + r["wkB/s"] for r in rows)
        assert int(c.curves.vals["bytes"][m].sum()) == round(kb * 1024)
        assert c.curves.vals["q2c_sum"][m].sum() / 1e9 == pytest.approx(sum(r["avgqu-sz"] for r in rows), rel=1e-9)
        # the phases picture: btt's Device Overhead of the disk
        tot = {x: sum(c.overhead[k][x] for k in keys if k in c.overhead) for x in ("q2g", "g2i", "q2m", "i2d",
                                                                                  "d2c", "q2c")}
        for x, pct in rep["devices"][dev]["overhead_pct"].items():
            assert 100 * tot[x] / tot["q2c"] == pytest.approx(pct, rel=1e-9, abs=1e-12), (name, x)


def test_files_are_private_and_pictures_written(made: dict[str, Any]) -> None:
    assert stat.S_IMODE(os.stat(made["page"]).st_mode) == 0o600
    for fmt in ("svg", "png"):
        files = sorted(os.listdir(made["dir"] / fmt))
        assert "heat-q2c." + fmt in files and "access." + fmt in files and "phases." + fmt in files, files
        for f in files:
            body = (made["dir"] / fmt / f).read_bytes()
            assert body.startswith(b"<svg" if fmt == "svg" else b"\x89PNG"), f
    assert b"<rect" in (made["dir"] / "svg" / "heat-q2c.svg").read_bytes()


def test_page_is_self_contained(made: dict[str, Any]) -> None:
    text = made["page"].read_text()
    assert "<script src" not in text and "<link" not in text
    assert "https://cdn" not in text and "unpkg.com" not in text


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    p = run_ioscope("report", "--html", str(tmp_path / "x.html"), str(tmp_path / "missing.ioscope"))
    assert p.returncode != 0 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run_ioscope("report", "--html", str(tmp_path / "nodir" / "x.html"), str(tmp_path / "missing.ioscope"))
    assert p.returncode != 0 and "does not exist" in p.stderr, p.stderr


# ------------------------------------------------------------------ in a real browser

browser = pytest.mark.skipif(not os.path.exists("/usr/bin/chromium") and not os.environ.get("CI"),
                             reason="no /usr/bin/chromium (scripts/bootstrap.sh --test installs it)")


@browser
def test_page_in_chromium_offline(made: dict[str, Any]) -> None:
    from ioscope.engines.pages.browser import chromium, open_page
    rep = made["json"]
    with chromium() as ctx:
        o = open_page(ctx, made["page"].as_uri())
        assert not o.errors, o.errors
        assert not o.requests, o.requests
        assert o.page.evaluate("document.body.dataset.error") is None
        for view in ("overview", "heat", "access", "scatter", "curves", "phases"):
            assert o.inked(f"#{view}", 0.01) > 0.01, view
        cells = o.marks("heat", "heat")
        assert sum(int(x["n"]) for x in cells) == rep["phases"]["q2c"]["n"]
        # the IOPS curve as drawn: rate x column width, summed, is every request completed (iostat's)
        iops = o.marks("curves", "iops")
        done = sum(r["r/s"] + r["w/s"] for r in rep["iostat"])
        assert round(sum(x["v"] * (x["col2"] - x["col"]) for x in iops)) == done
        slow_b = hist.bucket_index(39_000_000)
        planted = sorted((x["col"], x["col2"], x["b"], x["n"]) for x in cells if x["b"] >= slow_b)
        assert sum(p[3] for p in planted) == len(SLOW)
        t0 = (made["planted"]["first_ts"] - T0) / 1e9
        for c_s, lat in SLOW:
            assert any(lo <= c_s - t0 < hi and b == hist.bucket_index(lat) for lo, hi, b, _n in planted), (c_s, planted)
        # zoom to the two planted 1 ms apart: down to single I/Os, each in a column of its own
        o.page.evaluate("([a, b]) => window.ioscopeZoom(a, b)", [0.5995 - t0, 0.6015 - t0])
        o.page.wait_for_function("document.body.dataset.ready >= 2")
        cells = [x for x in o.marks("heat", "heat") if x["b"] >= slow_b]
        assert sorted(int(x["n"]) for x in cells) == [1, 1], cells
        # drill down: loop1 has no slow I/O, and its cells add up to its Q2C N
        o.page.select_option("select[name=f_disk]", "loop1")
        o.page.evaluate("window.ioscopeZoom(0, 1e9)")
        o.page.wait_for_function("document.body.dataset.ready >= 4")
        cells = o.marks("heat", "heat")
        n1 = next(d["phases"]["q2c"]["n"] for d in rep["devices"].values() if d["name"].startswith("loop1"))
        assert sum(int(x["n"]) for x in cells) == n1
        assert not [x for x in cells if x["b"] >= slow_b]
        assert not o.errors, o.errors


@browser
def test_diff_page_in_chromium(tmp_path: Path, made: dict[str, Any]) -> None:
    from ioscope.engines.pages.browser import chromium, open_page
    after = tmp_path / "fast.ioscope"
    _capture(after, seed=2, slow=False, scale=0.5)
    page = tmp_path / "d.html"
    run_ioscope("diff", "--html", str(page), str(made["cap"]), str(after), timeout=180, check=True)
    a = made["json"]["phases"]["q2c"]["n"]
    b = json.loads(run_ioscope("report", "--json", str(after), check=True).stdout)["phases"]["q2c"]["n"]
    with chromium() as ctx:
        o = open_page(ctx, page.as_uri())
        assert not o.errors and not o.requests, (o.errors, o.requests)
        cells = o.marks("heat", "heat")
        parts: dict[str, int] = {}
        for x in cells:
            parts[x["cap"]] = parts.get(x["cap"], 0) + int(x["n"])
        assert parts == {"before": a, "after": b}
        assert o.page.locator("#change").screenshot()
        assert "x0." in o.page.locator("table#changes").inner_text()   # after is faster: ratios below 1


def test_chunk_losses_read_from_the_capture(tmp_path: Path) -> None:
    """Where in a capture losses were counted: each chunk written after the recorder's loss counters
    changed carries them (capture-format.md), and pages place them on the time axis from there."""
    from ioscope.capture.offline import open_source
    from ioscope.capture.store import CaptureWriter
    from ioscope.engines.pages.source import chunk_losses

    ev = np.zeros(6, EVENT)
    ev["ts"] = [T0 + k * 1_000_000 for k in range(6)]
    ev["action"], ev["category"], ev["dev"], ev["bytes"] = TA_QUEUE, TC_READ | TC_QUEUE, kdev(7, 0), 4096
    path = tmp_path / "lossy.ioscope"
    with CaptureWriter(str(path), {"devices": {"7,0": {"name": "loop0", "major": 7, "minor": 0}}},
                       force=True, reorder_window_ns=0) as w:
        w.write(ev[:2])
        w.flush()
        w.set_lost({"ringbuf_full": 3})
        w.write(ev[2:4])
        w.flush()
        w.write(ev[4:])   # counters unchanged: this chunk says nothing new
    with open_source(str(path)) as src:
        assert [i["rows"] for i in src.chunk_infos() if i["rows"]] == [2, 2, 2]
        assert chunk_losses(src) == [(int(ev["ts"][2]), int(ev["ts"][3]), {"ringbuf_full": 3})]
