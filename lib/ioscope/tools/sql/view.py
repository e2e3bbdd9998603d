"""ioscope sql's views: a query's result (an Arrow table) as a table, CSV or JSON lines."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def _jsonable(col: pa.ChunkedArray) -> list[Any]:
    t = col.type
    if pa.types.is_decimal(t):
        try:
            return list(pc.cast(col, pa.int64()).to_pylist()) if t.scale == 0 else \
                list(pc.cast(col, pa.float64()).to_pylist())
        except pa.ArrowInvalid:
            return list(pc.cast(col, pa.string()).to_pylist())
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t):
        return list(col.to_pylist())
    return list(_text(col))


def _text(col: pa.ChunkedArray) -> list[str | None]:
    try:
        return list(pc.cast(col, pa.string()).to_pylist())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return [None if v is None else str(v) for v in col.to_pylist()]


def _rows(tab: pa.Table, conv: Any) -> Iterator[tuple[Any, ...]]:
    cols = [conv(tab.column(i)) for i in range(tab.num_columns)]
    yield from zip(*cols) if cols else iter(())


def emit(tab: pa.Table, fmt: str) -> None:
    names = tab.column_names
    if fmt == "json":
        for row in _rows(tab, _jsonable):
            sys.stdout.write(json.dumps(dict(zip(names, row)), allow_nan=False, default=str) + "\n")
        return
    if fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(names)
        for row in _rows(tab, _text):
            w.writerow(["" if v is None else v for v in row])
        return
    from rich.table import Table

    from ioscope.tools.common import console

    t = Table(show_edge=False, box=None, pad_edge=False)
    for n, f in zip(names, tab.schema):
        numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
        t.add_column(n, justify="right" if numeric else "left", no_wrap=True)
    for row in _rows(tab, _text):
        t.add_row(*("NULL" if v is None else v for v in row))
    console().print(t)
