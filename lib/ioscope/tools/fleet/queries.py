"""The fleet report's one definition: SQL that DuckDB and Spark SQL both run, over the view `ios` (the per-I/O
table, docs/ios-table.md). Only standard SQL both dialects share: `percentile_cont(p) within group (order by
x)` (linear interpolation between the closest ranks, in both), window functions, joins; no dialect's own
functions. Every I/O counted is one of report's I/Os that completed (`q2c is not null`)."""

from __future__ import annotations

from ioscope.base.rate import SPAN_SQL

PCTS = (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))


def _pct(col: str) -> str:
    return ", ".join(f"percentile_cont({q}) within group (order by i.{col}) as {col}_{name}" for name, q in PCTS)


# each capture's active span (ioscope.base.rate: first Q to last C), summed per host: every rate's divisor
_SPANS = f"""host_span as (
  select host, sum(span_s) as span_s from (
    select host, capture_id, {SPAN_SQL} as span_s
    from ios where q2c is not null group by host, capture_id) s
  group by host)"""

PER_DISK_OP = f"""with {_SPANS}
select i.host, i.disk, i.op, count(*) as ios, sum(i.bytes) as bytes,
  count(*) / max(h.span_s) as iops, sum(i.bytes) / max(h.span_s) / 1e6 as mb_s,
  {_pct("q2c")}, {_pct("d2c")}
from ios i join host_span h on i.host = h.host
where i.q2c is not null
group by i.host, i.disk, i.op
order by i.host, i.disk, i.op"""


def top_processes(n: int) -> str:
    return f"""select host, pos, comm, ios, bytes from (
  select host, comm, count(*) as ios, sum(bytes) as bytes,
    row_number() over (partition by host order by sum(bytes) desc, comm) as pos
  from ios where q2c is not null group by host, comm) t
where pos <= {int(n)}
order by host, pos"""


HOSTS = """select i.host, count(*) as ios, percentile_cont(0.99) within group (order by i.q2c) as q2c_p99
from ios i where i.q2c is not null
group by i.host
order by q2c_p99 desc, i.host"""


def queries(top_n: int) -> dict[str, str]:
    return {"per_disk_op": PER_DISK_OP, "top_processes": top_processes(top_n), "hosts": HOSTS}
