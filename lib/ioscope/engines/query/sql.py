"""The SQL engine: DuckDB (embedded) over the per-I/O table and the events of captures and parquet exports
(the views ios, events, procs, devices), for ioscope sql and ioscope fleet. Captures are exported to a private
temporary directory first (the same code as export --format parquet, streaming), so that every input is read the
same way: Parquet files in Hive partitions."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

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


def first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0]
