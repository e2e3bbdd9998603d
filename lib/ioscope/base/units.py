"""What an I/O count counts: one vocabulary for every tool's header, JSON and docs (issue 24, design 8.6).

One write can be counted as several different things, and tools disagreed without saying so (same 10 s:
agg 200 bios, v1 blkio io_serviced 309, top ~30 w/s). Measured on 6.18 (design 4): 16 O_DIRECT writes of
1 MiB with max_sectors_kb 128 are 16 bios at block_bio_queue and 128 requests in /proc/diskstats; 4096
sequential 4 KiB writes are 4096 bios and 4065 requests (31 merged). Bytes agree in every unit.

- BIOS: bios as the block layer's queue event sees them (block_bio_queue), before any split; a bio
  split into n pieces is one. The workload's own count of I/Os when nothing splits.
- PIECES: bios after any split, before merge: each piece a split makes is one, and a bio merged into
  another's request is still one (btt's per-bio phases; cgroup io.stat's and v1 io_serviced's unit on
  6.12+). Equal to REQUESTS when nothing merges, to BIOS when nothing splits.
- REQUESTS: requests as dispatched to the driver (block_rq_issue/complete), after split and merge:
  the unit of /proc/diskstats and iostat.
- SYSCALLS: read/write system calls and async read/write requests (libaio iocbs, io_uring requests), each
  counted when it returns or completes, before the page cache (fair, readsize).
- WAITS: a thread's sleeps in an I/O wait (io_schedule and its kin: bpf/iowait.bpf.h), each counted when
  the thread is woken (agg's expressions that read iowait).

A tool says its unit in the line it starts with ("Tracing ...; counts requests ..."), in its JSON
("io_unit": "requests", or {"section": unit} when its parts count differently) and on its doc page.
"""

from __future__ import annotations

from collections.abc import Mapping

BIOS = "bios"
PIECES = "pieces"
REQUESTS = "requests"
SYSCALLS = "syscalls"
WAITS = "waits"

MEANING = {
    BIOS: "bios (as queued, before any split)",
    PIECES: "bio pieces (after any split, before merge)",
    REQUESTS: "requests (as dispatched to the driver, after split and merge: /proc/diskstats' unit)",
    SYSCALLS: "read/write syscalls and aio/io_uring requests",
    WAITS: "I/O waits of threads (each when it ended: the thread was woken)",
}


def says(unit: str | Mapping[str, str]) -> str:
    """The header's words: 'counts bios (as queued, before any split)', or per part
    'counts processes' bios (...), devices' requests (...)'."""
    if isinstance(unit, str):
        return f"counts {MEANING[unit]}"
    return "counts " + ", ".join(f"{part}: {MEANING[u]}" for part, u in unit.items())


def to_json(unit: str | Mapping[str, str]) -> dict[str, object]:
    """The JSON field every tool carries: {"io_unit": "bios"} or {"io_unit": {"devices": "requests", ...}}."""
    return {"io_unit": unit if isinstance(unit, str) else dict(unit)}


__all__ = ["BIOS", "MEANING", "PIECES", "REQUESTS", "SYSCALLS", "WAITS", "says", "to_json"]
