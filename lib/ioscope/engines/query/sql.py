"""ioscope sql: one SQL query, run by DuckDB (embedded), over the per-I/O table and the events of captures and
parquet exports. Captures are exported to a private temporary directory first (the same code as export
--format parquet, streaming), so that every input is read the same way: Parquet files in Hive partitions."""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ioscope.base.errors import IoscopeError
from ioscope.engines.pairing import ios
from ioscope.engines.query.parquet import TABLES, export_parquet, open_capture_source

# procs and devices summarise ios (one row per process or disk of each capture)
DERIVED = {
    "procs": "select host, capture_id, pid, tgid, comm, count(*) as ios, sum(bytes) as bytes, "
             "count(*) filter (where op = 'read') as reads, count(*) filter (where op = 'write') as writes, "
             "min(q_time) as first_q, max(q_time) as last_q from ios where pid is not null group by all",
    "devices": "select host, capture_id, disk, dev, major, minor, count(*) as ios, sum(bytes) as bytes, "
               "count(*) filter (where op = 'read') as reads, count(*) filter (where op = 'write') as writes, "
               "min(q_time) as first_q, max(c_time) as last_c from ios group by all",
}


def parquet_files(root: str, table: str) -> list[str]:
    """The finished files of one table of an export directory (hidden, unfinished ones left out)."""
    top = os.path.join(root, table)
    out = []
    if os.path.isdir(top):
        for part in sorted(os.listdir(top)):
            d = os.path.join(top, part)
            if part.startswith("host=") and os.path.isdir(d):
                out += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".parquet")
                        and not f.startswith(".")]
    return out


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def inputs_as_dirs(inputs: list[str], tmp: str, need_events: bool) -> list[str]:
    """The export directories to read for these inputs: directories as given, captures (and bundles)
    exported into tmp, each once and not when an export given already holds it. Every input is
    checked before any is read. Used by sql and fleet."""
    dirs: list[str] = []
    captures: list[str] = []
    given: set[str] = set()
    for path in inputs:
        if os.path.realpath(path) in given:   # each input once
            continue
        given.add(os.path.realpath(path))
        if os.path.isdir(path):
            if not any(os.path.isdir(os.path.join(path, t)) for t in TABLES):
                raise IoscopeError(f"{path}: not a parquet export (no ios/ or events/ in it)",
                                   "give a capture, or a directory written by ioscope export --format parquet")
            dirs.append(path)
        elif not os.path.exists(path):
            raise IoscopeError(f"cannot open {path}: no such file", "give a capture or a parquet export directory")
        else:
            open_capture_source(path).close()   # every input checked before any is read
            captures.append(path)
    if captures:
        seen = {os.path.basename(f)[:-len(".parquet")] for d in dirs for t in TABLES for f in parquet_files(d, t)}
        for c in captures:
            src = open_capture_source(c)
            cid = ios.capture_id(src)
            src.close()
            if cid in seen:   # the same capture twice (or already in an export given): once is enough
                continue
            seen.add(cid)
            export_parquet(c, tmp, with_events=need_events)
        dirs.append(tmp)
    return dirs


def connect(inputs: list[str], tmp: str, need_events: bool) -> Any:
    """A DuckDB connection with the views over every input."""
    import duckdb

    dirs = inputs_as_dirs(inputs, tmp, need_events)
    con = duckdb.connect()
    for table, schema in (("ios", ios.IOS_SCHEMA), ("events", ios.EVENTS_SCHEMA)):
        files = [f for d in dirs for f in parquet_files(d, table)]
        if files:
            lst = "[" + ", ".join(_sql_str(f) for f in files) + "]"
            # host is text whatever it looks like (DuckDB would guess a number for host=123)
            con.execute(f"create view {table} as select host, * exclude (host) from read_parquet({lst}, "
                        "hive_partitioning = true, hive_types = {'host': varchar}, union_by_name = true)")
        else:   # no file (an idle capture, or events not exported): an empty view of the same columns
            empty = pa.Table.from_batches([], pa.schema([pa.field("host", pa.string()), *schema]))
            con.register(f"_{table}_empty", empty)
            con.execute(f"create view {table} as select * from _{table}_empty")

    for name, q in DERIVED.items():
        con.execute(f"create view {name} as {q}")
    return con


def view_columns(con: Any) -> str:
    out = []
    for v in ("ios", "events", "procs", "devices"):
        cols = [r[0] for r in con.execute(f"describe {v}").fetchall()]
        out.append(f"{v}({', '.join(cols)})")
    return "; ".join(out)


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


def first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0]


def run(args: argparse.Namespace) -> int:
    import duckdb

    fmt = "json" if args.json else "csv" if args.csv else "table"
    need_events = re.search(r"\bevents\b", args.query, re.IGNORECASE) is not None
    with tempfile.TemporaryDirectory(prefix="ioscope-sql-") as tmp:
        con = connect(args.inputs, tmp, need_events)
        try:
            rel = con.sql(args.query)
            if rel is None:   # a statement with no result (set, create view, ...)
                return 0
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow   # duckdb >= 1.4, before
            tab = fetch()
        except duckdb.Error as exc:
            raise IoscopeError(f"query failed: {first_line(exc)}", f"views: {view_columns(con)}") from None
        emit(tab, fmt)
        con.close()
    return 0
