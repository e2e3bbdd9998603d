"""Renderings of ioscope top: batch text, the screen (rich Text lines), the heat map, key handling.

The screen is a list of rich Text lines computed by screen_lines() from a
snapshot and a ViewState: pure, so the same code draws the terminal and the
golden tests (Console(file=io.StringIO(), width=80)). Terminal owns the tty
(raw keys, alternate screen) and gives it back on every exit path.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from types import FrameType, TracebackType
from typing import Any

from rich.console import Console
from rich.control import Control
from rich.segment import ControlType
from rich.text import Text

from ioscope.base import cgroups, psi, units
from ioscope.base.fmt import fmt_ns, iso_time
from ioscope.base.heat import HEAT_CHARS, HeatGrid
from ioscope.base.heat import level as heat_level
from ioscope.engines.context.throttle import held_json, summary
from ioscope.kernel import inflight
from ioscope.kernel.inflight import in_flight_lines
from ioscope.tools.top import PROC_SORT_KEYS
from ioscope.tools.top.model import (
    CgroupRow,
    DeviceRow,
    HeatHistory,
    ProcRow,
    Snapshot,
    WaitRow,
    filter_snapshot,
    sort_devices,
    sort_procs,
)


@dataclass(frozen=True)
class Column:
    key: str       # row attribute (also the JSON field)
    header: str
    width: int     # characters, including the separating space
    keep: int      # columns with the lowest keep are dropped first when the screen is narrow
    kind: str = "num"  # num | ms | str | int | tail (a string cut at its start: a path's last parts)

    def cell(self, row: Any) -> str:
        v = getattr(row, self.key)
        if self.kind == "tail":
            s = "-" if v is None else str(v)
            s = s if len(s) <= self.width - 1 else "…" + s[len(s) - self.width + 2:]
            return (" " + s).ljust(self.width)
        if self.kind == "str":
            s = str(v)[: self.width - 1]
            return (" " + s).ljust(self.width) if self.key != "pid" else s.rjust(self.width)
        if self.kind == "int":
            return str(v).rjust(self.width)
        if v is None:
            return "-".rjust(self.width)
        return fmt_num(float(v), self.width - 1).rjust(self.width)

    def head(self) -> str:
        if self.kind in ("str", "tail"):
            return (" " + self.header).ljust(self.width)
        return self.header.rjust(self.width)


DEV_COLUMNS = (
    Column("disk", "Device", 9, 100, "str"),
    Column("r_s", "r/s", 9, 90),
    Column("w_s", "w/s", 9, 90),
    Column("rkB_s", "rkB/s", 10, 85),
    Column("wkB_s", "wkB/s", 10, 85),
    Column("rrqm_s", "rrqm/s", 8, 20),
    Column("wrqm_s", "wrqm/s", 8, 20),
    Column("r_await", "r_await", 8, 70),
    Column("w_await", "w_await", 8, 70),
    Column("aqu_sz", "aqu-sz", 7, 40),
    Column("rareq_sz", "rareq-sz", 9, 30),
    Column("wareq_sz", "wareq-sz", 9, 30),
    Column("util", "%util", 7, 95),
    Column("p99_ms", "p99ms", 8, 80),
)

PROC_COLUMNS = (
    Column("pid", "PID", 7, 100, "int"),
    Column("comm", "COMM", 15, 99, "str"),
    Column("disk", "DISK", 8, 98, "str"),
    Column("r_s", "r/s", 7, 90),
    Column("w_s", "w/s", 7, 90),
    Column("rkB_s", "rkB/s", 8, 88),
    Column("wkB_s", "wkB/s", 8, 88),
    Column("avg_kB", "avgKB", 6, 60),
    Column("avg_ms", "avg_ms", 7, 70),
    Column("p99_ms", "p99ms", 7, 75),
    Column("swapin_pct", "SWAPIN", 7, 86),  # the part of IO> in swap-ins (iotop's SWAPIN)
    Column("io_pct", "IO>", 7, 89),   # % of the interval blocked in I/O waits (iotop's IO>), the process's
)

# with the cgroup view (-G) or -c: each process row's cgroup, after its disk
PROC_CGROUP_COLUMN = Column("cgroup", "CGROUP", 24, 97, "tail")

CGROUP_COLUMNS = (
    Column("label", "CGROUP", 30, 100, "tail"),
    Column("disk", "DISK", 8, 98, "str"),
    Column("procs", "PROCS", 6, 50, "int"),
    Column("r_s", "r/s", 7, 90),
    Column("w_s", "w/s", 7, 90),
    Column("rkB_s", "rkB/s", 8, 88),
    Column("wkB_s", "wkB/s", 8, 88),
    Column("avg_ms", "avg_ms", 7, 70),
    Column("p99_ms", "p99ms", 7, 75),
    Column("held", "HELD", 6, 72, "int"),         # bios blk-throttle held (their wait is not in avg_ms, p99ms)
    Column("thr_p99_ms", "thr_p99", 8, 71),       # their wait in it, where measured (fentry or submit notes)
    Column("swapin_pct", "SWAPIN", 7, 86),        # the part of IO> in swap-ins
    Column("io_pct", "IO>", 7, 89),               # % of the interval its tasks were blocked in I/O waits
    Column("psi_pct", "PSI", 6, 87),              # % of the interval some of its tasks were stalled on I/O (v2)
)


PSI_HIGH = 40.0   # the screen's pressure line is drawn bold from this share of the interval (%)


def pressure_text(s: Snapshot) -> list[str]:
    """The host's I/O pressure over the interval (PSI: /proc/pressure/io), with the kernel's averages."""
    return psi.share_lines(s.pressure, "interval")


def throttle_text(s: Snapshot) -> list[str]:
    """The bios blk-throttle held in the interval, one line per cgroup and disk (throttle.summary)."""
    return summary(s.throttled, s.throttle_no_wait, fmt_ns)


def in_flight_text(s: Snapshot) -> list[str]:
    """A line per disk whose oldest I/O in flight is older than 1 s (kernel/inflight.py), oldest first."""
    return in_flight_lines(s.in_flight, "top")


SWAPIN = "swapin_pct"


def _with_swapin(cols: tuple[Column, ...], rows: Sequence[Any], sort: str | None) -> tuple[Column, ...]:
    """SWAPIN only where a row swapped in during the interval, or sorted by it: most hosts have no swap,
    and an always-0 column would take a narrow screen's room from the others (JSON always has it)."""
    if sort == SWAPIN or any(r.swapin_pct > 0 for r in rows):
        return cols
    return tuple(c for c in cols if c.key != SWAPIN)


def proc_columns(s: Snapshot, sort: str | None = None) -> tuple[Column, ...]:
    """The process table's columns: with a CGROUP column when the rows carry their cgroup, SWAPIN when one
    swapped in (_with_swapin)."""
    cols = _with_swapin(PROC_COLUMNS, s.procs, sort)
    if not any(p.cgroup is not None for p in s.procs):
        return cols
    return (*cols[:3], PROC_CGROUP_COLUMN, *cols[3:])


def cgroup_columns(s: Snapshot) -> tuple[Column, ...]:
    return _with_swapin(CGROUP_COLUMNS, s.cgroups or [], None)


def fmt_num(v: float, width: int) -> str:
    """v in at most width characters: 2 decimals when they fit (like iostat), fewer, then k/M/G."""
    for digits in (2, 1, 0):
        s = f"{v:.{digits}f}"
        if len(s) <= width:
            return s
    for div, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        for digits in (1, 0):
            s = f"{v / div:.{digits}f}{suffix}"
            if len(s) <= width:
                return s
    return "#" * width


def fit_columns(cols: Sequence[Column], width: int, stretch: str | None = None, most: int = 32) -> list[Column]:
    """Drop the least important columns until the rest fit in width (order kept); then widen the
    `stretch` column (up to `most` characters) into the room left over."""
    chosen = list(cols)
    for c in sorted(cols, key=lambda c: c.keep):
        if sum(x.width for x in chosen) <= width:
            break
        chosen.remove(c)
    room = width - sum(x.width for x in chosen)
    if stretch and room > 0:
        chosen = [replace(c, width=min(most, c.width + room)) if c.key == stretch else c for c in chosen]
    return chosen


def table_lines(rows: Sequence[Any], cols: Sequence[Column], sort_key: str | None = None) -> list[Text]:
    """Header plus one line per row; the sort column's header is highlighted."""
    head = Text()
    for c in cols:
        head.append(c.head(), style="bold reverse" if c.key == sort_key else "bold")
    out = [head]
    for r in rows:
        out.append(Text("".join(c.cell(r) for c in cols)))
    return out


# -- optional panels ---------------------------------------------------------------

# An optional panel draws snapshot.extras[name] (data from an extra source of the Sampler, see cmd.py) in at
# most `rows` lines of `width` cells; it is drawn between the process table and the heat map, and printed
# in batch mode. This is the extension point for the per-process balance (Jain index) and readahead panels.
PanelFn = Callable[[Any, int, int], list[Text]]
PANELS: dict[str, PanelFn] = {}
# A panel registered with a key is off until that key is pressed (and again toggles it); batch text leaves
# it out. key -> (panel name, the help line's text).
PANEL_KEYS: dict[str, tuple[str, str]] = {}


def register_panel(name: str, fn: PanelFn, key: str | None = None, help: str = "") -> None:
    PANELS[name] = fn
    if key:
        PANEL_KEYS[key] = (name, help)


def stacks_panel(data: Any, width: int, rows: int) -> list[Text]:
    """One line per stacked device: each member's kB/s and share, so that a path or mirror carrying
    the load while its twin idles is seen (issue 13)."""
    out: list[Text] = []
    for st in data[: max(0, rows)]:
        label = st["label"] or st["name"]
        parts = [f"{m['disk']} {m['kB_s']:.0f} kB/s {100 * m['share']:.0f}% util {m['util']:.0f}%"
                 for m in st["members"]]
        out.append(Text(f"{st['kind']} {label}: " + " | ".join(parts))[:width])
    return out


register_panel("stacks", stacks_panel)


def panels_off(on: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """The toggled panels not switched on."""
    return {name for name, _ in PANEL_KEYS.values()} - set(on)


def panel_lines(s: Snapshot, width: int, rows: int, hidden: set[str] | frozenset[str] = frozenset()) -> list[Text]:
    out: list[Text] = []
    for name, fn in PANELS.items():
        if name in s.extras and name not in hidden and rows - len(out) > 1:
            out += fn(s.extras[name], width, rows - len(out))
    return out


# -- batch and JSON -------------------------------------------------------------

# the device rows are iostat's, from /proc/diskstats; a process row adds up what it queued at each completion
# of a bio piece (bpf/top.bpf.c: a split piece is completed, and counted, on its own)
UNIT = {"devices": units.REQUESTS, "processes": units.PIECES}
UNIT_CGROUPS = {**UNIT, "cgroups": units.PIECES}

def header_words(s: Snapshot) -> str:
    return (f"host {s.host}  kernel {s.kernel}  interval {s.interval:.3f}s  devices {len(s.devices)}  "
            f"procs {len(s.procs)}  lost {s.lost}")


def batch_text(s: Snapshot, sort: str = "total", reverse: bool = True, limit: int | None = None) -> str:
    """One plain-text snapshot, like top -b: header, every device, every process with I/O."""
    from ioscope.base.fmt import iso_time
    unit = UNIT if s.cgroups is None else UNIT_CGROUPS
    lines = [f"ioscope top - {iso_time(s.wall)}  {header_words(s)}", units.says(unit)]
    if s.lost:
        lines.append("lost: " + ", ".join(f"{k} {v}" for k, v in s.lost_detail.items() if v))
    lines.append("")
    dev_cols = list(DEV_COLUMNS)
    lines.append("".join(c.head() for c in dev_cols).rstrip())
    for d in sort_devices(s.devices, "util"):
        lines.append("".join(c.cell(d) for c in dev_cols).rstrip())
    lines += pressure_text(s)
    lines += in_flight_text(s)
    lines += throttle_text(s)
    lines.append("")
    if s.cgroups is not None:
        cg_all = cgroup_columns(s)
        cg_cols = fit_columns(cg_all, sum(c.width for c in cg_all) + 18, stretch="label", most=48)
        lines.append("".join(c.head() for c in cg_cols).rstrip())
        for c in s.cgroups[:limit] if limit else s.cgroups:
            lines.append("".join(col.cell(c) for col in cg_cols).rstrip())
        if not s.cgroups:
            lines.append(" no cgroup's I/O completed in this interval")
        lines.append("")
    cols = proc_columns(s, sort)
    proc_cols = fit_columns(cols, sum(c.width for c in cols) + 9, stretch="comm")
    lines.append("".join(c.head() for c in proc_cols).rstrip())
    procs = sort_procs(s.procs, sort, reverse)
    for p in procs[:limit] if limit else procs:
        lines.append("".join(c.cell(p) for c in proc_cols).rstrip())
    lines.append("")
    extra = panel_lines(s, 200, 1000, hidden=panels_off())
    if extra:
        lines += [t.plain.rstrip() for t in extra] + [""]
    return "\n".join(lines)


# -- heat map ---------------------------------------------------------------------

# A false-colour ramp (dim and cold for a few I/Os, hot for many) on a log scale,
# so that the rare slow I/O stays visible next to a band of thousands.
HEAT_STYLES = ("grey42", "blue", "dodger_blue1", "cyan", "green3", "yellow", "dark_orange", "red", "bright_white")
LABEL_W = 8
RIGHT_W = 8


def heat_lines(grid: HeatGrid, disk: str, interval: float) -> list[Text]:
    """Rows top (slow) to bottom (fast): band label, one cell per interval, latest count on the right."""
    counts = grid.counts
    nrows, ncols = counts.shape
    peak = int(counts.max()) if counts.size else 0
    latest = counts[:, -1] if ncols else counts[:, :0]
    out = [Text(f"latency heat map {disk}: last {ncols} x {round(interval, 2):g}s, I/Os per band (log colour), "
                f"peak {peak}", style="bold")]
    for r in range(nrows - 1, -1, -1):
        line = Text(fmt_ns(grid.lows[r]).rjust(LABEL_W - 1) + " ", style="dim")
        row = counts[r]
        for c in range(ncols):
            lv = heat_level(int(row[c]), peak)
            if lv:
                line.append(HEAT_CHARS[lv - 1], style=HEAT_STYLES[lv - 1])
            else:
                line.append(" ")
        line.append("|" + str(int(latest[r])).rjust(RIGHT_W - 1), style="dim")
        out.append(line)
    span = round(ncols * interval)
    axis = f"-{span:g}s".ljust(max(0, ncols - 3)) + "now"
    out.append(Text(" " * LABEL_W + axis[:ncols] + "|" + "last".rjust(RIGHT_W - 1), style="dim"))
    return out


# -- interactive state ------------------------------------------------------------

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
SORT_KEYS = PROC_SORT_KEYS  # in the process table's order, its cgroup (with -G or -c) after its disk

HELP = """\
ioscope top keys
  q           quit (also Ctrl-C)
  < >         sort the process table by the column left / right of the current one
              (among the columns on the screen; a narrow screen drops the least needed)
  r           reverse the sort order
  t           sort by total throughput (read + write kB/s), the default
  space       pause / resume the display (collection goes on)
  d           filter by disk: type a disk name, Enter (empty: all disks)
  p           filter by process: type a PID, Enter (empty: all processes)
  c           clear both filters
  tab  h      next device for the latency heat map
  + -         longer / shorter refresh interval
  ?           this help (any key returns)

Processes: I/O is attributed to the process that queued it (block_bio_queue),
latency there is per bio from queue to completion. Devices: iostat -x numbers
from /proc/diskstats; p99ms from an in-kernel histogram of request latency.
"""


@dataclass
class ViewState:
    sort: str = "total"
    reverse: bool = True
    paused: bool = False
    disk: str | None = None
    pid: int | None = None
    heat_disk: str | None = None
    interval: float = 1.0
    help: bool = False
    prompt: str | None = None  # "disk" | "pid" while typing a filter
    typed: str = ""
    message: str = ""
    quit: bool = False
    disks_seen: list[str] = field(default_factory=list)
    panels_on: set[str] = field(default_factory=set)  # panels a key switched on (PANEL_KEYS)
    shown: tuple[str, ...] = SORT_KEYS  # the process columns on the screen at the last draw (< > move among them)


def handle_key(st: ViewState, key: str) -> None:
    """Apply one key (a character, or 'TAB', 'ENTER', 'ESC', 'BS', 'LEFT', 'RIGHT'; 'RESIZE' only redraws)."""
    if key == "RESIZE":
        return
    st.message = ""
    if st.prompt is not None:
        if key == "ENTER":
            val = st.typed.strip()
            if st.prompt == "disk":
                st.disk = val or None
                if val:
                    st.heat_disk = val
            else:
                if not val:
                    st.pid = None
                elif val.isdigit():
                    st.pid = int(val)
                else:
                    st.message = f"not a PID: {val}"
            st.prompt, st.typed = None, ""
        elif key == "ESC":
            st.prompt, st.typed = None, ""
        elif key == "BS":
            st.typed = st.typed[:-1]
        elif len(key) == 1 and key.isprintable():
            st.typed += key
        return
    if st.help:
        st.help = False
        if key != "q":
            return
    if key == "q":
        st.quit = True
    elif key in ("<", ">", "LEFT", "RIGHT"):
        keys = st.shown or SORT_KEYS
        step = -1 if key in ("<", "LEFT") else 1
        here = "rkB_s" if st.sort == "total" else st.sort  # the total moves as from rkB/s
        if here in keys:
            st.sort = keys[(keys.index(here) + step) % len(keys)]
        else:  # a column the screen no longer shows: the nearest shown one in that direction
            at = SORT_KEYS.index(here) if here in SORT_KEYS else 0
            after = [k for k in keys if (SORT_KEYS.index(k) - at) * step > 0]
            st.sort = (after[0] if step > 0 else after[-1]) if after else keys[0 if step > 0 else -1]
        st.reverse = st.sort not in ("pid", "comm", "disk", "cgroup")
    elif key == "r":
        st.reverse = not st.reverse
    elif key == "t":
        st.sort, st.reverse = "total", True
    elif key == " ":
        st.paused = not st.paused
    elif key in ("d", "p"):
        st.prompt, st.typed = ("disk" if key == "d" else "pid"), ""
    elif key == "c":
        st.disk, st.pid = None, None
    elif key in ("TAB", "h"):
        if st.disk is not None:
            st.message = f"the heat map shows the filtered disk {st.disk} (c clears the filter)"
        elif st.disks_seen:
            i = st.disks_seen.index(st.heat_disk) if st.heat_disk in st.disks_seen else -1
            st.heat_disk = st.disks_seen[(i + 1) % len(st.disks_seen)]
    elif key in ("+", "="):
        st.interval = next((i for i in INTERVALS if i > st.interval), st.interval)
    elif key in ("-", "_"):
        st.interval = next((i for i in reversed(INTERVALS) if i < st.interval), st.interval)
    elif key == "?":
        st.help = True
    elif key in PANEL_KEYS:
        st.panels_on ^= {PANEL_KEYS[key][0]}


def sort_label(st: ViewState) -> str:
    if st.sort == "total":
        return "rkB/s+wkB/s"
    return next(c.header for c in (*PROC_COLUMNS, PROC_CGROUP_COLUMN) if c.key == st.sort)


def heat_disk(st: ViewState, devs: Sequence[DeviceRow], heat: HeatHistory) -> str | None:
    """The disk of the heat map: the filtered one when a disk filter is on (even before it did any I/O),
    else the one chosen (first the busiest; Tab), else the busiest now, else any with history."""
    if st.disk is not None:
        return st.disk
    if st.heat_disk in heat.cols:
        return st.heat_disk
    if devs:
        return devs[0].disk
    return heat.disks()[0] if heat.disks() else None


def screen_lines(st: ViewState, snap: Snapshot | None, heat: HeatHistory, width: int, height: int) -> list[Text]:
    """The whole screen as exactly `height` lines (or fewer) of at most `width` cells."""
    import datetime as _dt
    if snap is None:
        lines = [Text("ioscope top: attaching, first refresh in a moment...")]
        return lines[:height]
    s = filter_snapshot(snap, st.disk, st.pid)
    now = _dt.datetime.fromtimestamp(snap.wall).strftime("%H:%M:%S")
    top = Text(f"ioscope top - {now}  {snap.host}  {snap.kernel}", style="bold")
    info = Text(f"{snap.interval:.2f}s  devs {len(s.devices)}  procs {len(s.procs)}  ")
    info.append(f"lost {snap.lost}", style="bold red" if snap.lost else "")
    info.append(f"  sort {sort_label(st)} {'desc' if st.reverse else 'asc'}")
    if st.disk is not None:
        info.append(f"  disk={st.disk}", style="yellow")
    if st.pid is not None:
        info.append(f"  pid={st.pid}", style="yellow")
    if st.paused:
        info.append("  PAUSED", style="bold reverse")
    if st.interval != snap.interval and abs(st.interval - snap.interval) > 0.05:
        info.append(f"  next {st.interval:g}s", style="dim")
    footer = Text("q quit <> sort r rev t total spc pause d/p filter c clear tab heat +- ivl ? help",
                  style="dim")
    if st.prompt is not None:
        footer = Text(f"{st.prompt} filter (Enter to apply, Esc to cancel): {st.typed}_", style="bold yellow")
    elif st.message:
        footer = Text(st.message, style="bold yellow")
    body_h = height - 3
    if st.help:
        body = [Text(line) for line in HELP.splitlines()]
        body += [Text(f"  {k:<12}{h}") for k, (_, h) in PANEL_KEYS.items()]
        return [top, info, *body[:body_h], footer][:height]
    dev_cols = fit_columns(DEV_COLUMNS, width)
    proc_cols = fit_columns(proc_columns(s, st.sort), width, stretch="comm")
    st.shown = tuple(c.key for c in proc_cols)
    devs = sort_devices(s.devices, "util")
    procs = sort_procs(s.procs, st.sort, st.reverse)
    # space: devices first (up to a third of the body), the heat map when there is room, processes get the rest
    dev_rows = min(len(devs), max(1, body_h // 3 - 1)) if devs else 0
    dev_block = table_lines(devs[:dev_rows], dev_cols)
    if not devs:
        dev_block.append(Text(" no disk did I/O in this interval", style="dim"))
    dev_block += [Text(line, style="bold magenta" if s.pressure and (s.pressure.some_pct or 0) >= PSI_HIGH else "")
                  for line in pressure_text(s)]
    dev_block += [Text(line, style="bold red") for line in in_flight_text(s)[:3]]
    dev_block += [Text(line, style="bold yellow") for line in throttle_text(s)[:3]]
    if s.cgroups is not None:  # the cgroup view: up to a quarter of the body, after the devices
        cg_rows = min(len(s.cgroups), max(1, body_h // 4 - 1))
        cg_block = table_lines(s.cgroups[:cg_rows], fit_columns(cgroup_columns(s), width, stretch="label", most=70))
        if not s.cgroups:
            cg_block.append(Text(" no cgroup's I/O completed in this interval", style="dim"))
        dev_block += cg_block
    rest = body_h - len(dev_block)
    heat_block: list[Text] = []
    hdisk = heat_disk(st, devs, heat)
    # processes keep at least half of what is left (or all they need), the heat map gets the rest
    proc_need = min(len(procs) + 1, max(5, rest // 2))
    heat_rows = min(16, rest - proc_need - 1 - 2)
    if hdisk is not None and heat_rows >= 3:
        grid = heat.grid(hdisk, width - LABEL_W - RIGHT_W, heat_rows)
        if grid is not None:
            heat_block = heat_lines(grid, hdisk, snap.interval)
        else:  # the filtered disk has not completed an I/O since top started
            heat_block = [Text(f"latency heat map {hdisk}: no I/O completed yet", style="dim")]
    extra = panel_lines(s, width, max(0, rest - len(heat_block) - proc_need - 1), hidden=panels_off(st.panels_on))
    proc_h = rest - len(heat_block) - (1 if heat_block else 0) - len(extra)
    proc_block = table_lines(procs[: max(0, proc_h - 1)], proc_cols, st.sort)
    if not procs:
        proc_block.append(Text(" no process I/O completed in this interval", style="dim"))
    body = dev_block + proc_block[:proc_h] + extra
    if heat_block:
        body += [Text(""), *heat_block]
    body = body[:body_h]
    body += [Text("")] * (body_h - len(body))
    out = [top, info, *body, footer]
    for t in out:
        t.truncate(width)
        t.no_wrap = True
    return out[:height]


def render_text(lines: Sequence[Text], width: int, color: bool = False) -> str:
    """Lines -> a string (ANSI colours when color), each line cut to width."""
    import io
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, color_system="256" if color else None,
                  highlight=False, emoji=False, no_color=not color, legacy_windows=False)
    for t in lines:
        con.print(t, overflow="crop", no_wrap=True, crop=True, soft_wrap=False)
    return buf.getvalue()


# -- the terminal -----------------------------------------------------------------

_KEYS = {"\t": "TAB", "\r": "ENTER", "\n": "ENTER", "\x7f": "BS", "\x08": "BS",
         "\x1b[D": "LEFT", "\x1b[C": "RIGHT"}


def parse_keys(data: str) -> list[str]:
    """Bytes typed since the last read -> key names (unknown escape sequences are dropped)."""
    out: list[str] = []
    i = 0
    while i < len(data):
        ch = data[i]
        if ch == "\x1b":
            seq = data[i:i + 3]
            if seq in _KEYS:
                out.append(_KEYS[seq])
                i += 3
                continue
            if len(data) > i + 1 and data[i + 1] in "[O":
                j = i + 2
                while j < len(data) and not data[j].isalpha() and data[j] != "~":
                    j += 1
                i = j + 1
                continue
            out.append("ESC")
            i += 1
            continue
        out.append(_KEYS.get(ch, ch))
        i += 1
    return out


class Terminal:
    """cbreak mode, no echo, alternate screen, hidden cursor; all undone by close(), on every path."""

    def __init__(self, fd_in: int | None = None, out: Any = None) -> None:
        self.fd = sys.stdin.fileno() if fd_in is None else fd_in
        self.out = out or sys.stdout
        # rich's Console owns the terminal modes it knows (alternate screen, cursor, clearing)
        self.console = Console(file=self.out, force_terminal=True, color_system=None, highlight=False)
        self.saved: list[Any] | None = None
        self._old_winch: Any = None
        self._wake_r, self._wake_w = -1, -1

    def __enter__(self) -> Terminal:
        self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)  # keeps ISIG: Ctrl-C still interrupts, and ends here through __exit__
        # a resize wakes the key wait up through a pipe, so the screen is redrawn at once
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._old_winch = signal.signal(signal.SIGWINCH, self._on_winch)
        self.console.set_alt_screen(True)
        self.console.show_cursor(False)
        self.console.control(Control.home(), Control.clear())
        self.out.flush()
        return self

    def _on_winch(self, signum: int, frame: FrameType | None) -> None:
        try:
            os.write(self._wake_w, b"w")
        except OSError:
            pass

    def size(self) -> tuple[int, int]:
        try:
            sz = os.get_terminal_size(self.out.fileno())
            return sz.columns, sz.lines
        except (OSError, ValueError):
            return 80, 24

    def read_keys(self, timeout: float) -> list[str]:
        fds = [self.fd] + ([self._wake_r] if self._wake_r >= 0 else [])
        ready, _, _ = select.select(fds, [], [], max(0.0, timeout))
        if self._wake_r in ready:
            os.read(self._wake_r, 64)
            return ["RESIZE"]
        if not ready:
            return []
        data = os.read(self.fd, 256)
        if not data:
            return ["q"]  # the terminal went away
        return parse_keys(data.decode(errors="replace"))

    def draw(self, text: str) -> None:
        """Repaint from the top left: each line then erase to its end, then the rest of the screen
        erased (lines of a taller previous frame)."""
        lines = text.rstrip("\n").split("\n")
        _, height = self.size()
        lines += [""] * max(0, height - len(lines))
        eol = Control((ControlType.ERASE_IN_LINE, 0)).segment.text
        self.out.write(Control.home().segment.text + (eol + "\n").join(lines[:height]) + eol)
        self.out.flush()

    def close(self) -> None:
        if self.saved is not None:
            try:
                self.console.show_cursor(True)
                self.console.set_alt_screen(False)
                self.out.flush()
            finally:
                termios.tcsetattr(self.fd, termios.TCSAFLUSH, self.saved)
                self.saved = None
        if self._old_winch is not None:
            signal.signal(signal.SIGWINCH, self._old_winch)
            self._old_winch = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r, self._wake_w = -1, -1

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def interactive(sample_fn: Callable[[], Snapshot], st: ViewState, heat: HeatHistory,
                count: int | None = None) -> int:
    """The top screen: refresh every st.interval, keys in between. Returns the exit code."""
    shown: Snapshot | None = None
    frozen: HeatHistory | None = None
    done = 0
    with Terminal() as term:
        next_at = time.monotonic() + st.interval
        while not st.quit:
            width, height = term.size()
            view_heat = frozen if (st.paused and frozen is not None) else heat
            term.draw(render_text(screen_lines(st, shown, view_heat, width, height), width, color=True))
            keys = term.read_keys(next_at - time.monotonic())
            for k in keys:
                was_paused = st.paused
                handle_key(st, k)
                if st.paused and not was_paused:
                    frozen = heat.copy()
            if time.monotonic() >= next_at:
                snap = sample_fn()
                done += 1
                heat.push(snap.wall, snap.disk_hists)
                for d in heat.disks():
                    if d not in st.disks_seen:
                        st.disks_seen.append(d)
                if st.heat_disk is None and snap.devices:
                    # the heat map stays on the disk that was busiest first, until Tab or a disk filter
                    st.heat_disk = sort_devices(snap.devices, "util")[0].disk
                if not st.paused:
                    shown = snap
                next_at = max(next_at + st.interval, time.monotonic() + 0.05)
                if count is not None and done >= count:
                    break
    return 0


def _rounded(row: DeviceRow | ProcRow | CgroupRow | WaitRow) -> dict[str, Any]:
    d = asdict(row)
    d.pop("hist", None)
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in d.items()}


def device_json(d: DeviceRow) -> dict[str, Any]:
    return {**_rounded(d), "lat_buckets": [list(b) for b in d.hist.nonzero_buckets()] if d.hist else []}


def proc_json(p: ProcRow) -> dict[str, Any]:
    return _rounded(p)


def wait_json(w: WaitRow) -> dict[str, Any]:
    """A process's waits; its seconds to the microsecond (they add up over intervals to delay accounting's)."""
    return {**_rounded(w), "waited_s": round(w.waited_s, 6), "oldest_s": round(w.oldest_s, 6),
            "dequeue_delayed_s": round(w.dequeue_delayed_s, 6), "swapin_s": round(w.swapin_s, 6)}


def in_flight_json(s: Snapshot) -> dict[str, Any]:
    """disk -> its oldest I/O in flight over 1 s (issued: null, top cannot tell)."""
    return inflight.in_flight_json(s.in_flight)


pressure_json = psi.share_json


def cgroup_json(c: CgroupRow) -> dict[str, Any]:
    d = _rounded(c)
    d.pop("label")
    d.pop("psi", None)
    d["io_pressure"] = pressure_json(c.psi)
    n = cgroups.named(cgroups.describe(c.cgroup)) if c.cgroup.startswith("/") else None
    k8s = {"namespace": n.namespace, "pod_name": n.pod_name, "container": n.container or None} \
        if n and n.pod_name else {}   # what the host says of a Kubernetes pod and container (base.kubenames)
    return {**d, **({"kind": n.kind, "name": n.name, "pod": n.pod or None, **k8s} if n else {})}


def snapshot_json(s: Snapshot) -> dict[str, Any]:
    """One refresh as JSON (--batch -j: one object per line)."""
    return {
        "time": iso_time(s.wall), "interval_s": round(s.interval, 6), "host": s.host,
        "kernel": s.kernel, "lost": s.lost, "lost_detail": s.lost_detail, "attach": s.attach,
        **units.to_json(UNIT if s.cgroups is None else UNIT_CGROUPS),
        "devices": [device_json(d) for d in s.devices], "procs": [proc_json(p) for p in s.procs],
        "waits": [wait_json(w) for w in s.waits],
        "in_flight_oldest": in_flight_json(s),
        "io_pressure": pressure_json(s.pressure),
        **({"cgroups": [cgroup_json(c) for c in s.cgroups]} if s.cgroups is not None else {}),
        "throttle": {"held": [held_json(h) for h in s.throttled],
                     **({"wait_not_measured": s.throttle_no_wait} if s.throttle_no_wait else {})},
        **({"extras": s.extras} if s.extras else {}),
    }
