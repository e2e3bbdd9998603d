#!/usr/bin/env python3
"""Parquet export and ioscope sql vs ioscope report on the same large capture: time and peak memory, side by side.

1. Generate report_speed.py's synthetic capture (default 10 million events: I/Os from four processes,
   10% back-merged, plugs; every I/O Q G I D C or Q M).
2. Run, alternating, --repeat times: `ioscope report --json CAPTURE`, `ioscope export --format parquet -o DIR
   CAPTURE` (a fresh DIR each time), `ioscope sql GROUPBY DIR` (a group-by over every I/O of the export) and
   `ioscope sql GROUPBY CAPTURE` (the capture turned into the table on the fly, then the query). Wall time and
   peak RSS (GNU time) of each; the fastest run of each kept.
3. Print the ratios to report (below 1: faster / smaller than report) and check that the group-by's
   counts equal report's per-process Q2C counts.

usage: bench/parquet_speed.py [--events N] [--dir DIR] [--keep] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from report_speed import run_child

GROUPBY = ("select comm, op, count(*) n, sum(bytes) bytes, quantile_cont(q2c, 0.99) p99_q2c "
           "from ios group by comm, op order by comm, op")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, alternating; the fastest is kept")
    args = ap.parse_args()
    if not os.path.exists("/usr/bin/time"):
        sys.exit("GNU time (/usr/bin/time) is needed to measure peak memory: apt install time")
    work = args.dir or tempfile.mkdtemp(prefix="ioscope-bench-pq-")
    os.makedirs(work, exist_ok=True)
    cap = os.path.join(work, "synth.ioscope")
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        t0 = time.perf_counter()
        if not os.path.exists(cap):
            subprocess.run([sys.executable, os.path.join(here, "report_speed.py"), "--generate", cap, "--events",
                            str(args.events)], check=True)
        print(f"capture: {os.path.getsize(cap) / 1e6:.0f} MB, ready in {time.perf_counter() - t0:.1f} s")
        runs: dict[str, list[tuple[float, int]]] = {"report": [], "export": [], "sql_dir": [], "sql_cap": []}
        out_report = out_sql = b""
        for i in range(max(1, args.repeat)):
            w, rss, out_report, rc = run_child([*ioscope, "report", "--json", cap], True)
            assert rc == 0, "report failed"
            runs["report"].append((w, rss))
            pq = os.path.join(work, f"pq{i}")
            shutil.rmtree(pq, ignore_errors=True)
            w, rss, _o, rc = run_child([*ioscope, "export", "--format", "parquet", "-o", pq, cap], False)
            assert rc == 0, "export failed"
            runs["export"].append((w, rss))
            w, rss, out_sql, rc = run_child([*ioscope, "sql", "-j", GROUPBY, pq], True)
            assert rc == 0, "sql on the export failed"
            runs["sql_dir"].append((w, rss))
            w, rss, out_cap, rc = run_child([*ioscope, "sql", "-j", GROUPBY, cap], True)
            assert rc == 0, "sql on the capture failed"
            assert out_cap == out_sql
            runs["sql_cap"].append((w, rss))
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(os.path.join(work, "pq0"))
                   for f in fs)
        doc = json.loads(out_report)
        rows = [json.loads(x) for x in out_sql.decode().splitlines()]
        per_comm: dict[str, int] = {}
        for r in rows:
            per_comm[r["comm"].split("/")[0]] = per_comm.get(r["comm"].split("/")[0], 0) + r["n"]
        ref = {p: v["phases"]["q2c"]["n"] for p, v in doc["processes"].items() if "q2c" in v["phases"]}
        print(f"group-by counts per process {'equal' if per_comm == ref else 'DIFFERENT'} to report's Q2C N: "
              f"{per_comm} vs {ref}")
        print(f"parquet export: {size / 1e6:.0f} MB (ios + events)")
        print("all runs (s): " + ", ".join(f"{k} {[round(x[0], 1) for x in v]}" for k, v in runs.items()))
        best = {k: min(v) for k, v in runs.items()}
        wr, rr = best["report"]
        for k, label in (("report", "ioscope report --json CAPTURE"), ("export", "export --format parquet"),
                         ("sql_dir", "sql GROUPBY EXPORT_DIR"), ("sql_cap", "sql GROUPBY CAPTURE")):
            w, rss = best[k]
            print(f"{label:30s}: {w:7.1f} s, peak RSS {rss / 1024:6.0f} MiB; ratio to report: time {w / wr:.2f}, "
                  f"memory {rss / rr:.2f}")
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
