"""ioscope top renderings: golden screens (80x24, 200x50), batch text, keys (no root)."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text

import top_fixture
from ioscope.base import heat
from ioscope.tools.top import view
from ioscope.tools.top.model import InFlightRow

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def _screen(st: view.ViewState, width: int, height: int) -> str:
    lines = view.screen_lines(st, top_fixture.snapshot(), top_fixture.heat(), width, height)
    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, highlight=False)
    for t in lines:
        con.print(t, crop=True, no_wrap=True)
    return buf.getvalue()


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("IOSCOPE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"render differs from {path} (IOSCOPE_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_screen_golden(width: int, height: int) -> None:
    text = _screen(view.ViewState(), width, height)
    lines = text.splitlines()
    assert len(lines) == height
    assert max(len(line) for line in lines) <= width
    _golden(f"top_{width}x{height}.txt", text)


def test_screen_80x24_keeps_the_essentials() -> None:
    text = _screen(view.ViewState(), 80, 24)
    for word in ("lost 0", "r/s", "w/s", "rkB/s", "wkB/s", "%util", "p99ms", "PID", "COMM", "latency heat map loop2"):
        assert word in text
    # the device columns that do not fit in 80 are the ones dropped first
    assert "rrqm/s" not in text and "rareq-sz" not in text
    wide = _screen(view.ViewState(), 200, 50)
    for word in ("rrqm/s", "wrqm/s", "aqu-sz", "rareq-sz", "wareq-sz", "postgres: walwriter"):
        assert word in wide


def test_batch_golden() -> None:
    _golden("top_batch.txt", view.batch_text(top_fixture.snapshot()))


def test_sort_and_filter_keys_change_the_screen() -> None:
    st = view.ViewState()
    body = _screen(st, 80, 24).splitlines()
    pids = [ln.split()[0] for ln in body if ln[:7].strip().isdigit()]
    assert pids[:4] == ["31337", "4021", "1", "0"]  # by total throughput
    # < > move among the columns on the screen: at 80 columns avgKB and avg_ms are left out
    assert st.shown[-3:] == ("wkB_s", "p99_ms", "io_pct") and "avg_ms" not in st.shown
    view.handle_key(st, ">")  # from the default (rkB/s + wkB/s): as from rkB/s
    assert st.sort == "wkB_s" and st.reverse
    view.handle_key(st, ">")
    assert st.sort == "p99_ms" and st.reverse
    body = _screen(st, 80, 24).splitlines()
    assert "sort p99ms desc" in body[1]
    pids = [ln.split()[0] for ln in body if ln[:7].strip().isdigit()]
    assert pids[:4] == ["1", "4021", "31337", "0"]
    view.handle_key(st, "r")
    assert "sort p99ms asc" in _screen(st, 80, 24)
    for k in ">>":
        view.handle_key(st, k)
    assert st.sort == "pid" and not st.reverse  # past IO>, round to the first column, ascending
    view.handle_key(st, "<")
    assert st.sort == "io_pct" and "sort IO> desc" in _screen(st, 80, 24).splitlines()[1]
    for k in "<<":
        view.handle_key(st, k)
    assert st.sort == "wkB_s"
    _screen(st, 130, 30)  # all columns fit
    view.handle_key(st, ">")
    assert st.sort == "avg_kB"
    _screen(st, 60, 24)  # narrower: avgKB is sorted on but not shown; < > go on from where it was
    assert "avg_kB" not in st.shown
    view.handle_key(st, ">")
    assert st.sort in st.shown and view.SORT_KEYS.index(st.sort) > view.SORT_KEYS.index("avg_kB")
    # filter by disk: d, type, Enter
    for k in ["d", *"vda", "ENTER"]:
        view.handle_key(st, k)
    assert st.disk == "vda" and st.heat_disk == "vda"
    text = _screen(st, 80, 24)
    assert "disk=vda" in text and "31337" not in text and "loop2 " not in text
    assert "latency heat map vda" in text
    # filter by pid
    for k in ["c", "p", *"31337", "ENTER"]:
        view.handle_key(st, k)
    text = _screen(st, 80, 24)
    assert "pid=31337" in text and "postgres" not in text and "31337 fio" in text
    view.handle_key(st, "p")
    for k in ["x", "ENTER"]:
        view.handle_key(st, k)
    assert st.message == "not a PID: x" and st.pid == 31337
    view.handle_key(st, "c")
    assert st.disk is None and st.pid is None


def test_other_keys() -> None:
    st = view.ViewState(disks_seen=["loop2", "vda"])
    view.handle_key(st, "TAB")
    assert st.heat_disk == "loop2"
    view.handle_key(st, "h")
    assert st.heat_disk == "vda"
    view.handle_key(st, " ")
    assert st.paused and "PAUSED" in _screen(st, 80, 24)
    view.handle_key(st, "+")
    assert st.interval == 2.0
    view.handle_key(st, "-")
    view.handle_key(st, "-")
    assert st.interval == 0.5
    view.handle_key(st, "?")
    assert "ioscope top keys" in _screen(st, 80, 24)
    view.handle_key(st, "x")  # any key leaves the help
    assert not st.help and not st.quit
    view.handle_key(st, "d")
    view.handle_key(st, "ESC")
    assert st.prompt is None and st.disk is None
    view.handle_key(st, "q")
    assert st.quit


def test_parse_keys() -> None:
    assert view.parse_keys("q") == ["q"]
    assert view.parse_keys("\t\x1b[C\x1b[D\x7f\r") == ["TAB", "RIGHT", "LEFT", "BS", "ENTER"]
    assert view.parse_keys("\x1b[1;5A>") == [">"]  # unknown sequences are dropped
    assert view.parse_keys("\x1b") == ["ESC"]


def test_fmt_num_fits() -> None:
    assert view.fmt_num(0.0, 6) == "0.00"
    assert view.fmt_num(1234.5678, 7) == "1234.57"
    assert view.fmt_num(123456.0, 6) == "123456"
    assert view.fmt_num(12345678.0, 6) == "12346k" or len(view.fmt_num(12345678.0, 6)) <= 6
    for v in (0.001, 9.99, 1e3, 1e5, 1e7, 1e9, 1e13):
        assert len(view.fmt_num(v, 5)) <= 5


def test_heat_levels_are_log_scaled() -> None:
    assert heat.level(0, 1000) == 0
    assert heat.level(1, 1000) >= 1
    assert heat.level(1000, 1000) == len(heat.HEAT_CHARS)
    # one I/O next to a thousand is still visible and clearly fainter than the peak
    assert heat.level(1, 1000) < heat.level(30, 1000) < heat.level(1000, 1000)


def test_optional_panel_extension_point() -> None:
    """A panel registered under a name draws snapshot.extras[name] on the screen and in batch text."""
    def balance(data: Any, width: int, rows: int) -> list[Text]:
        return [Text(f"balance: Jain index {data['jain']:.2f} over {data['n']} processes")][:rows]

    view.register_panel("balance", balance)
    try:
        snap = top_fixture.snapshot()
        assert "Jain" not in _screen(view.ViewState(), 80, 24)  # no data: no panel
        snap.extras["balance"] = {"jain": 0.93, "n": 4}
        lines = view.screen_lines(view.ViewState(), snap, top_fixture.heat(), 80, 24)
        assert any("Jain index 0.93 over 4" in t.plain for t in lines)
        assert "Jain index 0.93" in view.batch_text(snap)
        assert view.snapshot_json(snap)["extras"] == {"balance": {"jain": 0.93, "n": 4}}
    finally:
        del view.PANELS["balance"]


@pytest.mark.parametrize(("width", "height"), [(1, 1), (10, 3), (20, 5), (40, 10), (80, 8), (300, 100)])
def test_any_terminal_size_fits(width: int, height: int) -> None:
    lines = _screen(view.ViewState(), width, height).splitlines()
    assert len(lines) <= height and max(len(ln) for ln in lines) <= width


def test_empty_and_first_screens() -> None:
    from ioscope.tools.top.model import HeatHistory, Snapshot
    empty = Snapshot(top_fixture.WALL, 1.0, "h", "k", [], [])
    text = view.render_text(view.screen_lines(view.ViewState(), empty, HeatHistory(), 80, 24), 80)
    assert "no disk did I/O" in text and "no process I/O" in text and "lost 0" in text
    first = view.render_text(view.screen_lines(view.ViewState(), None, HeatHistory(), 80, 24), 80)
    assert "first refresh" in first


def test_optional_sources_are_loaded_when_present() -> None:
    from ioscope.tools.top import cmd
    table = [("count", "top_fixture", "counting_source"), ("ra", "ioscope.no_such_module", "x")]
    srcs = cmd.optional_sources(None, table)
    assert list(srcs) == ["count"]  # a module that is not part of the build is skipped
    assert srcs["count"](1.0) == {"calls": 1, "interval_s": 1.0}
    srcs["count"].close()
    assert top_fixture.CountingSource.closed


def test_cgroup_view_in_batch_screen_and_json() -> None:
    """The cgroup view (-G): the cgroups' table after the devices (HELD: the bios blk-throttle held,
    thr_p99 their wait where measured), a CGROUP column in the process rows, and the held bios' line
    under the devices in batch text and on the screen; JSON carries the same."""
    from dataclasses import replace

    from ioscope.base.hist import Hist
    from ioscope.engines.context.throttle import HeldBios
    from ioscope.tools.top.model import cgroup_rows

    snap = top_fixture.snapshot()
    docker = "/system.slice/docker-" + "ab" * 32 + ".scope"
    cgs = {31337: "/batch.slice/backup.service", 4021: docker, 1: "/", 0: "/"}
    snap.procs = [replace(p, cgroup=cgs[p.pid]) for p in snap.procs]
    held = [HeldBios(7 << 20 | 2, "loop2", "/batch.slice/backup.service", 27,
                     Hist.from_values([250_000_000] * 26 + [1_020_000_000]))]
    snap.cgroups, snap.throttled = cgroup_rows(snap.procs, held), held
    text = view.batch_text(snap)
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith(" CGROUP"))
    assert lines[head].split()[-4:] == ["HELD", "thr_p99", "IO>", "PSI"]
    backup = next(ln for ln in lines[head:] if ln.startswith(" /batch.slice/backup.service"))
    # no io.pressure (a v1 blkio cgroup, or PSI off): PSI "-"
    assert backup.split()[1:3] == ["loop2", "1"] and backup.split()[-4] == "27" and backup.split()[-1] == "-", backup
    assert "[docker abababababab]" in text
    assert ("blk-throttle held 27 bios of cgroup /batch.slice/backup.service on loop2: their wait is not in q2c; "
            "waited (measured for 27) p50 ") in text
    assert " CGROUP " in next(ln for ln in lines if ln.lstrip().startswith("PID"))
    screen = _screen_of(snap, 160, 40)
    assert "blk-throttle held 27 bios" in screen and "HELD" in screen and "[docker abababababab]" in screen
    doc = view.snapshot_json(snap)
    row = next(c for c in doc["cgroups"] if c["cgroup"] == docker)
    assert (row["kind"], row["name"], row["procs"]) == ("docker", "ab" * 6, 1)
    assert doc["throttle"]["held"][0]["held"] == 27 and doc["throttle"]["held"][0]["wait_measured"] == 27
    assert {p["cgroup"] for p in doc["procs"]} == set(cgs.values())


def _screen_of(snap: Any, width: int, height: int) -> str:
    lines = view.screen_lines(view.ViewState(), snap, top_fixture.heat(), width, height)
    return "\n".join(t.plain for t in lines)


def test_hung_io_line_in_bold_red_and_json() -> None:
    snap = top_fixture.snapshot()
    lines = view.screen_lines(view.ViewState(), snap, top_fixture.heat(), 80, 24)
    hung = [t for t in lines if t.plain.startswith("vda: oldest I/O in flight")]
    assert [t.plain for t in hung] == ["vda: oldest I/O in flight 12.3 s, pid 4242 dd, 3 over 1 s"]
    assert str(hung[0].style) == "bold red"
    j = view.snapshot_json(snap)["in_flight_oldest"]
    assert j == {"vda": {"age_s": 12.3, "pid": 4242, "comm": "dd", "issued": None, "over_1s": 3, "known": True}}
    # no bio of top's in flight there (queued before top started): what /proc/diskstats says
    late = replace(snap, in_flight=[InFlightRow("vda", 7.25, 0, "[unknown]", None, 2, known=False)])
    assert view.in_flight_text(late) == [
        "vda: 2 in flight, none completed for 7.2 s (queued before top started: who queued it is not known)"]
    # a disk filter keeps that disk's line only
    assert view.snapshot_json(view.filter_snapshot(snap, disk="loop2"))["in_flight_oldest"] == {}


def test_io_pressure_line_column_and_json() -> None:
    """The host's I/O pressure over the interval (a line under the disks, in bold magenta on the screen from
    PSI_HIGH), a cgroup's in its PSI column, and both in JSON with the kernel's averages and totals."""
    from ioscope.base import psi
    from ioscope.tools.top.model import cgroup_rows

    snap = top_fixture.snapshot()
    end = psi.Pressure(psi.Line(41.5, 20.25, 5.0, 12_500_000), psi.Line(1.0, 0.5, 0.25, 1_000_000))
    snap.pressure = psi.Share(62.5, 2.5, 0.625, 0.025, end)
    text = view.batch_text(snap)
    assert ("I/O pressure (PSI): some 62.5%, full 2.5% of the interval (avg10/60/300 some 41.50/20.25/5.00, "
            "full 1.00/0.50/0.25)") in text.splitlines()
    pr = [t for t in view.screen_lines(view.ViewState(), snap, top_fixture.heat(), 120, 40)
          if t.plain.startswith("I/O pressure")]
    assert len(pr) == 1 and str(pr[0].style) == "bold magenta"
    snap.procs = [replace(p, cgroup="/svc" if k == 0 else "/") for k, p in enumerate(snap.procs)]
    snap.cgroups = cgroup_rows(snap.procs, [])
    assert len(snap.cgroups) >= 2
    snap.cgroups[0].psi, snap.cgroups[0].psi_pct = psi.Share(12.345, None, 0.123, None, end), 12.345
    doc = view.snapshot_json(snap)
    assert doc["io_pressure"] == {
        "some": {"interval_pct": 62.5, "interval_s": 0.625, "avg10": 41.5, "avg60": 20.25, "avg300": 5.0,
                 "total_s": 12.5},
        "full": {"interval_pct": 2.5, "interval_s": 0.025, "avg10": 1.0, "avg60": 0.5, "avg300": 0.25,
                 "total_s": 1.0}}
    row = doc["cgroups"][0]
    assert row["psi_pct"] == 12.345 and row["io_pressure"]["some"]["interval_pct"] == 12.345
    assert all(c["io_pressure"] is None for c in doc["cgroups"][1:])
    line = next(ln for ln in view.batch_text(snap).splitlines() if ln.startswith(f" {snap.cgroups[0].label}"))
    assert line.split()[-1] == "12.35", line   # (fmt_num: as many digits as the column holds)
    # without PSI (no /proc/pressure/io, or its first interval): no line, null
    snap.pressure = None
    assert not any(ln.startswith("I/O pressure") for ln in view.batch_text(snap).splitlines())
    assert view.snapshot_json(snap)["io_pressure"] is None
