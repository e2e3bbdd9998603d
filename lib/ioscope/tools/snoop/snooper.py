"""ioscope snoop: one line per completed block I/O, live (biosnoop-like).

Uses the recorder's BPF object (bpf/record.bpf.c) with only the queue, split, issue and completion hooks
attached. Events are paired by ioscope's per-bio pairing (engines/pairing/bios.py, in C), the one agg -r
uses: a line per completed request (its first bio's queue time, its issue and completion), a flush request
a line of its own, a write through the flush sequence one line (at its last completion), each piece of a
split bio a line with the bio's queue time. A poll reads the rings one after the other, so events are
sorted by time and those after the poll's start (minus a margin) wait for the next poll.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ioscope.base import devices
from ioscope.base.cgroups import CgroupNames, within
from ioscope.capture.events import EV_NOTE_PROCESS, EVENT, join_events, note_comm, rwbs, select_events
from ioscope.capture.store import clock_pair
from ioscope.engines.pairing.bios import BR_FIRST, NO_TIME, Bios
from ioscope.engines.recording.recorder import Recorder, RecorderOptions

SNOOP_HOOKS = ["bio_queue", "split", "rq_issue", "rq_complete", "bio_complete", "task_rename"]
PENDING_MAX_AGE_NS = 30 * 1_000_000_000  # a bio unmatched for this long is dropped (merged bios, lost C)
COMM_HISTORY = 8   # names kept per pid: I/O in flight across that many renames is named right
# A poll reads the recorder's rings one after the other, so a completion can be seen before an
# event that happened earlier on another CPU (published just after its ring was read): events are
# paired only when older than the poll's start minus this margin, later ones wait for the next poll.
HORIZON_MARGIN_NS = 5_000_000


class LiveFeed:
    """EVENT batches (in any order within a batch) in, the records (bios.BIOREC) of the completed requests
    out: the first bio of each (its queue time, issue, completion), flush requests and completions of I/O
    queued before the start."""

    def __init__(self) -> None:
        self.bios = Bios()
        self.held = np.empty(0, EVENT)
        self.dropped = 0  # bios given up (merged into another request, or their completion lost)

    def feed(self, batch: np.ndarray, horizon_ns: int | None = None) -> np.ndarray:
        """With horizon_ns, events at or after it are kept for the next call (events before them may
        still be on their way)."""
        ev = join_events([self.held, batch]) if len(self.held) else batch
        if len(ev):
            ev = select_events(ev, np.argsort(ev["ts"], kind="stable"))
        if horizon_ns is not None:
            cut = int(np.searchsorted(ev["ts"], np.uint64(max(horizon_ns, 0)), side="left"))
            ev, self.held = ev[:cut], ev[cut:].copy()
        else:
            self.held = np.empty(0, EVENT)
        out = self.bios.feed(ev)
        if len(ev):
            self.dropped += self.bios.expire(int(ev["ts"][-1]) - PENDING_MAX_AGE_NS)
        first: np.ndarray = out[(out["flags"] & BR_FIRST) != 0]
        return first


@dataclass
class SnoopLine:
    t: float
    wall_ns: int
    comm: str
    pid: int
    disk: str
    dev: str
    op: str
    sector: int
    bytes: int
    queue_ns: int | None
    service_ns: int | None
    error: int  # -errno, 0 = success
    cgroup: str = ""  # the cgroup the bio is charged to, as a path of the io controller's hierarchy ("": none)


def _signed16(v: int) -> int:
    """The -errno blktrace-style u16 error back to a signed number (65531 -> -5)."""
    return v - 65536 if v > 32767 else v


class Snooper:
    """Recorder + LiveFeed: yields SnoopLines until stopped."""

    def __init__(self, opts: RecorderOptions, cgroup_filter: str | None = None) -> None:
        self.rec = Recorder(opts)
        self.feed = LiveFeed()
        self.completed: dict[int, int] = {}  # kernel dev_t -> C events seen (the completions check)
        self.completed_attached: dict[int, int] = {}  # ... of them while every program ran
        self.names = devices.DevNames()
        self.comms: dict[int, list[tuple[int, str]]] = {}   # pid -> its last names, from when (exec, prctl)
        self.clock = clock_pair()
        self.start_ns = self.clock["mono_ns"]
        self.cgroups = CgroupNames()
        self.cgroup_filter = cgroup_filter   # -c: only the I/O of this cgroup and those under it

    def cgroup_path(self, cg: int) -> str:
        return self.cgroups.name(cg) if cg else ""

    def wanted(self, path: str) -> bool:
        return self.cgroup_filter is None or within(path, self.cgroup_filter)

    def lines(self, rows: np.ndarray) -> Iterator[SnoopLine]:
        none = int(NO_TIME)
        for r in rows:
            q, d, ts = int(r["q"]), int(r["d"]), int(r["c"])
            q, d = (0 if q == none else q), (0 if d == none else d)
            nbytes = int(r["c_bytes"]) or int(r["bytes"])   # a flush sequence's end: 0 bytes, the write's
            pid = int(r["pid"])
            dev = int(r["dev"])
            cg = self.cgroup_path(int(r["cgroup"]))
            if not self.wanted(cg):
                continue
            ma, mi = devices.kdev_split(dev)
            yield SnoopLine(
                t=(ts - self.start_ns) / 1e9, wall_ns=self.clock["wall_ns"] + ts - self.clock["mono_ns"],
                comm=self.comm_at(pid, q or ts), pid=int(r["tgid"]), disk=self.names.name(dev), dev=f"{ma},{mi}",
                op=rwbs(int(r["category"]), nbytes), sector=int(r["sector"]), bytes=nbytes,
                queue_ns=d - q if q and d else None, service_ns=ts - d if d else None,
                error=_signed16(int(r["error"])), cgroup=cg)

    def note_comms(self, notes: np.ndarray) -> None:
        """Keep each pid's names with their times: an I/O is named as its process was when it was queued
        (a poll may hold a shell's read and, after its exec, dd's reads)."""
        for ts, pid, comm in sorted((int(e["ts"]), int(e["pid"]), note_comm(e)) for e in notes):
            names = self.comms.setdefault(pid, [])
            if not names or names[-1][1] != comm:
                names.append((ts, comm))
                del names[:-COMM_HISTORY]

    def comm_at(self, pid: int, ts: int) -> str:
        names = self.comms.get(pid)
        if not names:
            return "?"
        i = bisect_right(names, ts, key=lambda n: n[0])
        return names[max(i - 1, 0)][1]

    def poll(self, timeout_ms: int) -> list[SnoopLine]:
        """The lines of the I/Os completed by now. The rings are read after the wait, not during it: a
        signal that stops the tool lands in the wait (nothing taken yet) or, when the caller holds signals
        around poll() and its output (the cmd does), after the lines are out, so none is lost between the
        rings and the screen."""
        if timeout_ms > 0:
            time.sleep(timeout_ms / 1000)
        horizon = time.monotonic_ns() - HORIZON_MARGIN_NS  # before the rings are read
        ev = self.rec.poll(0)
        return self._take(ev, horizon)

    def _take(self, ev: np.ndarray, horizon_ns: int | None) -> list[SnoopLine]:
        self.rec.count_completions(ev, self.completed, self.completed_attached)
        if len(ev) and (ev["action"] == 0).any():
            self.note_comms(ev[(ev["action"] == 0) & ((ev["flags"] & EV_NOTE_PROCESS) != 0)])
        return list(self.lines(self.feed.feed(ev, horizon_ns)))

    def finish(self) -> list[SnoopLine]:
        self.rec.detach()
        return self._take(self.rec.drain(), None)

    def close(self) -> None:
        self.rec.close()
