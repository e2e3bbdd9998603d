"""Views of an AggResult: JSON, and rich renderables (plain text is the same renderables on a console
without colour). Formatting only: every number comes from the result."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from ioscope.base import units
from ioscope.base.fmt import fmt_bytes, fmt_ns, iso_time
from ioscope.base.render import HistView
from ioscope.engines.aggregate.expr import STACK_KEYS
from ioscope.engines.aggregate.folded import FoldedStack
from ioscope.engines.aggregate.model import AggResult, AggTable, ResultRow
from ioscope.kernel.stamps import io_unit

DIST_WIDTH = 40  # DTrace's: 40 '@' are the whole count


def unit_of(r: AggResult) -> str | dict[str, str]:
    """What one record counts: a request under the kernel's stamps, a bio piece under the probes and over a
    capture (the pairing cuts a split bio into its pieces, each a record), else a bio."""
    if r.unit is not None:
        return r.unit
    return io_unit(r.timing) if r.timing else units.BIOS


def row_json(t: AggTable, r: ResultRow) -> dict[str, Any]:
    keys: dict[str, Any] = dict(r.keys)
    for k in STACK_KEYS:  # a list of frames, leaf first
        if k in keys:
            keys[k] = str(keys[k]).split("\n")
    out: dict[str, Any] = {"keys": keys}
    if r.value is not None:
        out[t.func] = round(r.value, 3) if isinstance(r.value, float) else r.value
        out.update(r.extra)
    else:
        out["buckets"] = [list(b) for b in r.buckets]
        out.update(r.percentiles)
    return out


def to_json(r: AggResult) -> dict[str, Any]:
    return {
        "time": iso_time(r.wall), "interval_s": round(r.interval_s, 6),
        **r.losses.to_json(),
        **units.to_json(unit_of(r)),
        "timing": r.timing,
        "aggs": [{"expr": t.expr, "rows": [row_json(t, row) for row in t.rows]} for t in r.tables],
    }


def fmt_value(v: float | int, unit: str, func: str) -> str:
    """Durations in human units (3 significant digits); everything else as the number itself."""
    if unit == "ns" and func != "count":
        return fmt_ns(v)
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def fmt_bound(v: int, unit: str) -> str:
    if unit == "ns":
        return fmt_ns(v)
    if unit == "bytes":
        return fmt_bytes(v)
    return str(v)


def key_text(keys: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v}" for k, v in keys.items()) or "(all)"


class Dist:
    """A DTrace-style distribution (value = the bucket's lower bound, 40 '@' the whole count) with
    the percentiles beside it."""

    def __init__(self, row: ResultRow, unit: str) -> None:
        self.row, self.unit = row, unit

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        r = self.row
        side = [f"count {r.count}"] + [f"{k} {fmt_bound(round(v), self.unit)}" for k, v in r.percentiles.items()]
        yield Text(f"{'value':>14}  {'-' * 13} Distribution {'-' * 13} {'count':>9}", style="dim")
        for i, (low, _high, n) in enumerate(r.buckets):
            at = round(DIST_WIDTH * n / r.count) if r.count else 0
            line = Text(f"{fmt_bound(low, self.unit):>14} |")
            line.append("@" * at, style="green")
            line.append(" " * (DIST_WIDTH - at) + f" {n:>9}")
            if i < len(side):
                line.append(f"    {side[i]}", style="cyan")
            yield line
        for extra in side[len(r.buckets):]:
            yield Text(f"{'':>14}  {'':<{DIST_WIDTH}} {'':>9}    {extra}", style="cyan")


def table_renderables(t: AggTable) -> Iterator[RenderableType]:
    yield Text(t.expr, style="bold")
    if not t.rows:
        yield Text("  (no rows)", style="dim")
        return
    if t.rows[0].value is not None:
        tab = Table(box=None, show_header=True, header_style="dim", pad_edge=False, padding=(0, 2, 0, 2))
        for k in t.keys:
            tab.add_column(k)
        tab.add_column(t.func, justify="right")
        extra = list(t.rows[0].extra)
        for name in extra:
            tab.add_column(name, justify="right")
        for r in t.rows:
            assert r.value is not None
            # Text, not str: a name such as "[unknown]" is not rich markup
            tab.add_row(*[Text(str(r.keys[k])) for k in t.keys], Text(fmt_value(r.value, t.unit, t.func)),
                        *[Text(str(r.extra.get(name, ""))) for name in extra])
            if any(k in t.keys for k in STACK_KEYS):  # multi-line keys: a blank line between rows
                tab.add_row()
        yield tab
    else:
        for r in t.rows:
            if t.func == "llquantize" and r.hist is not None:
                yield HistView(f"  {key_text(r.keys)}", r.hist, fine=True, fmt="ns" if t.unit == "ns" else "bytes")
            else:
                yield Group(Text(f"  {key_text(r.keys)}"), Dist(r, t.unit))
    if t.truncated:
        yield Text(f"  ({t.truncated} smaller rows left out by -n)", style="dim")


def header_text(r: AggResult) -> str:
    """The interval's first line: when, how long, what was lost, what one record counts."""
    return f"{iso_time(r.wall)}  interval {r.interval_s:.3f}s  lost {r.losses.lost}  {units.says(unit_of(r))}"


def folded_lines(stacks: Sequence[FoldedStack]) -> list[str]:
    """--folded: 'frame;frame;... VALUE', root first (the frames are made safe by folded.frame_text)."""
    return [f"{';'.join(s.frames)} {s.value}" for s in stacks]


def renderables(r: AggResult) -> Iterator[RenderableType]:
    yield Text(header_text(r), style="dim")
    for t in r.tables:
        yield Group(*table_renderables(t), Text(""))


__all__ = ["Dist", "folded_lines", "header_text", "renderables", "row_json", "to_json"]
