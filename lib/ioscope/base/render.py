"""Renderers shared by the tools: numbers, histogram bars (plain text or rich)."""

from __future__ import annotations

import io
from collections.abc import Iterator

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from ioscope.base.fmt import fmt_bytes, fmt_ns
from ioscope.base.hist import Hist

BAR_WIDTH = 40


PCTS = (50.0, 90.0, 99.0, 99.9)


def summary_line(h: Hist, unit: str | None = None) -> str:
    p = h.percentiles(PCTS)
    return (f"n={h.count} avg={fmt_ns(h.mean, unit)} p50={fmt_ns(p[50.0], unit)} p90={fmt_ns(p[90.0], unit)}"
            f" p99={fmt_ns(p[99.0], unit)} p99.9={fmt_ns(p[99.9], unit)} max={fmt_ns(h.max, unit)}")


def hist_rows(h: Hist, fine: bool = False, unit: str | None = None, fmt: str = "ns",
              bar_width: int = BAR_WIDTH) -> Iterator[tuple[str, int, int]]:
    """(range label, count, bar length) rows, DTrace-quantize style."""
    rows = h.nonzero_buckets() if fine else h.coarse()
    peak = max((n for _, _, n in rows), default=0)
    for low, high, n in rows:
        if fmt == "ns":
            label = f"{fmt_ns(low, unit):>9} -> {fmt_ns(high, unit):<9}"
        else:
            label = f"{fmt_bytes(low):>9} -> {fmt_bytes(high):<9}"
        bar = round(bar_width * n / peak) if peak else 0
        if n and not bar:
            bar = 1
        yield label, n, bar


ROW_FIXED = 40  # columns of a histogram row that are not bar: range (22), " : ", count (9), " |", "|", margin


def bar_width(width: int, terminal: bool) -> int:
    """The bar width for a console: it stretches with a terminal; plain output (files, pipes) keeps
    BAR_WIDTH so that text is stable across machines."""
    if not terminal:
        return BAR_WIDTH
    return max(10, width - ROW_FIXED)


def render_plain(renderable: object, width: int = 80) -> str:
    """A renderable as plain text, the way a non-terminal console prints it (no second text path)."""
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False, emoji=False).print(renderable)
    return buf.getvalue().rstrip("\n")


class HistView:
    """A titled histogram, DTrace-quantize style; bars take the console's width on a terminal."""

    def __init__(self, title: str, h: Hist, fine: bool = False, unit: str | None = None,
                 fmt: str = "ns", summary: str | None = None) -> None:
        self.title = title
        self.h = h
        self.fine = fine
        self.unit = unit
        self.fmt = fmt
        self.summary = summary if summary is not None else summary_line(h, unit=unit)

    def lines(self) -> list[str]:
        return str(self).split("\n")

    def __str__(self) -> str:
        return render_plain(self)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(self.title, style="bold")
        yield Text(self.summary, style="cyan")
        if not self.h.count:
            return
        width = bar_width(options.max_width, console.is_terminal)
        yield Text(f"{'range':^22} : {'count':<9} distribution", style="dim")
        for label, n, bar in hist_rows(self.h, self.fine, self.unit, self.fmt, width):
            line = Text(f"{label} : {n:<9} |")
            line.append("*" * bar, style="green")
            line.append(" " * (width - bar) + "|")
            yield line


def percentile_table(rows: list[tuple[str, str, Hist]], unit: str | None = None) -> list[str]:
    """One line per (label, phase, histogram): count, avg and percentiles; fits 80 columns."""
    out = [f"{'':<8}{'phase':<6}{'count':>9}{'avg':>9}{'p50':>9}{'p90':>9}{'p99':>9}{'p99.9':>9}{'max':>9}"]
    for label, phase, h in rows:
        p = h.percentiles(PCTS)
        vals = [h.mean, p[50.0], p[90.0], p[99.0], p[99.9], float(h.max)]
        out.append(f"{label:<8}{phase:<6}{h.count:>9}" + "".join(f"{fmt_ns(v, unit):>9}" for v in vals))
    return out
