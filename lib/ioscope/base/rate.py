"""The one definition of a rate over a capture, for every tool that prints one (diff, fleet): I/Os (or
bytes) per second of the capture's **active span**, from the first I/O queued to the last one completed,
counting the I/Os that completed after a queue event, as both tools count them. A recording's idle time
before its first I/O and after its last is not in it: a `record` started a second before a fio run and
stopped a second after gives fio's own IOPS, not two thirds of it. (Live tools divide by their interval,
as iostat does; report's per-interval table is btt's iostat emulation; neither spans a capture.)

Python (diff, through agg's capture engine) keeps a Span while pairing; SQL (fleet, DuckDB and Spark
alike) uses SPAN_SQL over the per-I/O table. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

# what every view says next to a rate
BASIS = "per second of the active span: first I/O queued to last I/O completed"
# a capture's active span in the per-I/O table (docs/ios-table.md), over its rows with `q2c is not null`
SPAN_SQL = "(max(c_ns) - min(q_ns)) / 1e9"


@dataclass
class Span:
    """The active span of the I/Os seen so far (ns on the capture's clock)."""

    first_q_ns: int | None = None
    last_c_ns: int | None = None

    def add(self, q_ns: int, c_ns: int) -> None:
        """One completed I/O: queued at q_ns, completed at c_ns."""
        if self.first_q_ns is None or q_ns < self.first_q_ns:
            self.first_q_ns = q_ns
        if self.last_c_ns is None or c_ns > self.last_c_ns:
            self.last_c_ns = c_ns

    @property
    def seconds(self) -> float | None:
        if self.first_q_ns is None or self.last_c_ns is None:
            return None
        return (self.last_c_ns - self.first_q_ns) / 1e9


def per_second(amount: float, span_s: float | None) -> float | None:
    """amount per second of an active span (None without one)."""
    if span_s is None or span_s <= 0:
        return None
    return amount / span_s


__all__ = ["BASIS", "SPAN_SQL", "Span", "per_second"]
