"""report's one model: every summary row btt's text prints (Overall, TOTAL, Average, AVG, Total Sys), each
device's overhead and Q2D shares, the iostat rows and the heat map are in the JSON with the same values,
because text and JSON render one ReportModel. The text is parsed back here, not formatted a second time."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import blk_scenarios as bs
from conftest import run_ioscope
from ioscope.base import heat, hist


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    cap = tmp_path_factory.mktemp("model") / "mixed.ioscope"
    bs.write_capture(str(cap), bs.mixed())   # two disks, two processes: btt's summary rows all appear
    text = run_ioscope("report", str(cap), check=True).stdout
    doc = json.loads(run_ioscope("report", "--json", str(cap), check=True).stdout)
    return text, doc


def _section(text: str, title: str) -> list[str]:
    return bs.section(text, title).splitlines()


def _row(lines: list[str], label: str) -> list[str]:
    hit = [ln for ln in lines if ln.split("|")[0].strip() == label]
    assert len(hit) == 1, (label, lines)
    return hit[0].split("|", 1)[1].replace("%", " ").replace("|", " ").split()


def _dev(label: str, doc: dict[str, Any]) -> str:
    """'(  7,  0)' -> '7,0', the JSON's device key."""
    m = re.fullmatch(r"\(\s*(\d+),\s*(\d+)\)", label)
    assert m, label
    key = f"{m[1]},{m[2]}"
    assert key in doc["devices"]
    return key


def test_overhead_rows(reports: tuple[str, dict[str, Any]]) -> None:
    text, doc = reports
    lines = _section(text, "Device Overhead")
    overall = [float(x) for x in _row(lines, "Overall")]
    assert overall == [round(doc["summary"]["overhead_pct"][k], 4) for k in ("q2g", "g2i", "q2m", "i2d", "d2c")]
    devs = [ln for ln in lines if ln.lstrip().startswith("(")]
    assert len(devs) == 2
    for ln in devs:
        label, cells = ln.split("|")
        pct = doc["devices"][_dev(label.strip(), doc)]["overhead_pct"]
        assert [float(x) for x in cells.replace("%", " ").split()] == [
            round(pct[k], 4) for k in ("q2g", "g2i", "q2m", "i2d", "d2c")]


def test_merge_total(reports: tuple[str, dict[str, Any]]) -> None:
    text, doc = reports
    q, d, ratio, bmin, bavg, bmax, total = _row(_section(text, "Device Merge Information"), "TOTAL")
    m = doc["summary"]["merge"]
    assert (int(q), int(d), int(bmin), int(bavg), int(bmax), int(total)) == (
        m["q"], m["d"], m["blk_min"], m["blk_avg"], m["blk_max"], m["blk_total"])
    assert float(ratio) == round(m["ratio"], 1)
    # the TOTAL row is the devices' rows summed as btt sums them
    rows = [doc["devices"][k]["merge"] for k in doc["devices"] if doc["devices"][k]["merge"]]
    assert m["q"] == sum(r["q"] for r in rows) and m["blk_total"] == sum(r["blk_total"] for r in rows)
    assert m["blk_avg"] == m["blk_total"] // m["d"] and m["blk_min"] == min(r["blk_min"] for r in rows)


@pytest.mark.parametrize(("title", "key"), [("Device Q2Q Seek Information", "seek_q2q"),
                                            ("Device D2D Seek Information", "seek_d2d")])
def test_seek_average(reports: tuple[str, dict[str, Any]], title: str, key: str) -> None:
    text, doc = reports
    n, mean, median, mode = _row(_section(text, title), "Average")
    s = doc["summary"][key]
    assert (int(n), float(mean), int(median)) == (s["n"], round(s["mean"], 1), s["btt_median"])
    assert mode == f"{s['modes'][0]}({s['mode_count']})"
    per_dev = [doc["devices"][k][key] for k in doc["devices"] if doc["devices"][k][key]["n"] > 0]
    assert s["n"] == sum(x["n"] for x in per_dev)


def test_unplug_active_live_and_q2d(reports: tuple[str, dict[str, Any]]) -> None:
    text, doc = reports
    s = doc["summary"]
    plug = _section(text, "Plug Information")
    unp = plug[plug.index(next(ln for ln in plug if "IOs/Unp" in ln)):]
    a, at = _row(unp, "Average")
    assert (float(a), float(at)) == (round(s["ios_per_unplug"]["ios_per_unplug"], 1),
                                     round(s["ios_per_unplug"]["ios_per_timer_unplug"], 1))
    (avg,) = _row(_section(text, "Active Requests At Q Information"), "Average")
    assert float(avg) == round(s["avg_reqs_at_q"], 1)
    n, act, nact, live = _row(_section(text, "I/O Active Period Information"), "Total Sys")
    ap = s["active_periods"]
    assert (int(n), float(act), float(nact), float(live)) == (
        ap["n"], round(ap["avg_active"], 9), round(ap["avg_inactive"], 9), round(ap["pct_live"], 2))
    assert ap == doc["active_periods"]
    q2d = [float(x) for x in _row(_section(text, "Q2D Histogram"), "AVG")]
    assert q2d == [round(v, 1) for v in s["q2d_histogram"].values()]
    assert sum(s["q2d_histogram"].values()) == pytest.approx(100.0)


def test_iostat_rows(reports: tuple[str, dict[str, Any]]) -> None:
    text, doc = reports
    lines = [ln for ln in bs.section(text, "iostat per").splitlines()[1:] if re.match(r"\S+ \d+,\d+ ", ln)]
    assert len(lines) == len(doc["iostat"]) > 0
    cols = ("rrqm/s", "wrqm/s", "r/s", "w/s", "rkB/s", "wkB/s", "avgrq-sz", "avgqu-sz", "await")
    for ln, row in zip(lines, doc["iostat"]):
        words = ln.split()
        assert words[1] == row["device"] and float(words[2]) == round(row["time"], 3)
        assert [float(x) for x in words[3:]] == [round(row[c], 2) for c in cols]


def test_heat_map(reports: tuple[str, dict[str, Any]]) -> None:
    """The text's cells are the JSON's counts, quantised with ioscope.base.heat (top's scale); every completed I/O
    is in one cell."""
    text, doc = reports
    hm = doc["heat_map"]
    counts = hm["counts"]
    assert sum(map(sum, counts)) == doc["phases"]["q2c"]["n"]
    assert all(hist.bucket_low(0) <= lo < hi for lo, hi in zip(hm["band_low_ns"], hm["band_high_ns"]))
    rows = [ln for ln in bs.section(text, "Q2C heat map").splitlines() if re.match(r"\s*[\d.]+[num]?s \|", ln)]
    assert len(rows) == len(counts)
    peak = max(map(max, counts))
    for ln, band in zip(rows, reversed(counts)):       # the text shows the slowest band first
        cells = ln.split("|")[1]
        assert cells == "".join(heat.char(c, peak) for c in band)


def test_heat_map_of_an_empty_capture_is_null(tmp_path: Path) -> None:
    cap = tmp_path / "empty.ioscope"
    bs.write_capture(str(cap), bs.Scenario())
    doc = json.loads(run_ioscope("report", "--json", str(cap), check=True).stdout)
    assert doc["heat_map"] is None and doc["summary"]["merge"] is None


def test_dm_stack_members_from_remap_events_through_blktrace_files(tmp_path: Path) -> None:
    """A device-mapper device (253,0) whose bios go 30 to one path (8,0) and 10 to the other (8,16): the
    events as the kernel's blk tracer emits them (Q on the dm device, A remapping it to the path, then
    the path's Q G I D C), written as blktrace files (`ioscope export`, blkparse's format) and read back
    (`ioscope import`): report's stacked-device view shows the dm device with both paths, their bios,
    bytes, shares and each path's own latency. (No device-mapper on these machines: the kernel's event
    sequence is constructed, as docs/report.md says.)"""
    from ioscope.base.devices import kdev
    dm, sda, sdb = kdev(253, 0), kdev(8, 0), kdev(8, 16)
    s = bs.Scenario()
    t = 1_000_000
    for i in range(40):
        path = sda if i % 4 else sdb          # three of four bios to sda
        sector = 8 * i
        s.add(t, bs.TA_QUEUE, sector, 4096, dev=dm)
        s.add(t + 100, bs.TA_REMAP, sector, 4096, dev=path, aux=sector, aux_dev=dm)
        s.io(t + 200, sector, 4096, dev=path, d2c=30_000 if path == sda else 90_000)
        t += 200_000
    cap, exp, imp = tmp_path / "dm.ioscope", tmp_path / "dm.bin", tmp_path / "dm-imported.ioscope"
    bs.write_capture(str(cap), s, {"devices": {}})
    run_ioscope("export", "-o", str(exp), str(cap), check=True)
    run_ioscope("import", str(exp), "-o", str(imp), check=True)
    for path in (cap, imp):
        doc = json.loads(run_ioscope("report", "--json", str(path), check=True).stdout)
        (st,) = [x for x in doc["stacks"] if x["kind"] == "dm"]
        assert st["name"] == "253,0" and st["source"] == "remaps"
        m = {x["name"]: x for x in st["members"]}
        assert {k: (v["ios"], v["bytes"]) for k, v in m.items()} == {"8,0": (30, 30 * 4096), "8,16": (10, 10 * 4096)}
        assert (m["8,0"]["share_ios"], m["8,16"]["share_bytes"]) == (0.75, 0.25)
        assert m["8,0"]["d2c"]["avg"] == pytest.approx(30e-6) and m["8,16"]["d2c"]["avg"] == pytest.approx(90e-6)
        text = run_ioscope("report", str(path), check=True).stdout
        rows = bs.section(text, "Stacked devices and their members").splitlines()
        assert any(r.split()[:3] == ["8,0", "30", "75.0%"] for r in rows), rows
