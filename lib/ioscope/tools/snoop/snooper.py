"""ioscope snoop: one line per completed block I/O, live (biosnoop-like).

Uses the recorder's BPF object (bpf/record.bpf.c) with only the queue, issue
and completion hooks attached. Events are paired in user space, one numpy
pass per ring-buffer batch: every completion (C) is matched with the last
issue (D) of the same (disk, sector) before it, and that with the last queue
event (Q) before the issue; what is not matched yet waits for later batches.
A split (X) counts as the queueing of the bio's remainder, which gets no Q of
its own.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ioscope.base import devices
from ioscope.capture.events import (
    EV_NOTE_PROCESS,
    EVENT,
    TA_COMPLETE,
    TA_ISSUE,
    TA_QUEUE,
    TA_SPLIT,
    TC_WRITE,
    note_comm,
    rwbs,
)
from ioscope.capture.store import clock_pair
from ioscope.engines.recording.recorder import Recorder, RecorderOptions

SNOOP_HOOKS = ["bio_queue", "split", "rq_issue", "rq_complete", "bio_complete", "task_rename"]
PENDING_MAX_AGE_NS = 30 * 1_000_000_000  # a Q or D unmatched for this long is dropped (merged bios, lost C)
PENDING_MAX = 1 << 20
COMM_HISTORY = 8   # names kept per pid: I/O in flight across that many renames is named right
# A poll reads the recorder's rings one after the other, so a completion can be seen before an
# event that happened earlier on another CPU (published just after its ring was read): completions
# are paired only when older than the poll's start minus this margin, later ones wait for the next poll.
HORIZON_MARGIN_NS = 5_000_000

PAIRED = np.dtype([
    ("ts", np.uint64),        # completion time (CLOCK_MONOTONIC ns)
    ("sector", np.uint64),
    ("q_ts", np.uint64),      # 0: not seen
    ("d_ts", np.uint64),      # 0: not seen (bio-based devices have no issue)
    ("bytes", np.uint32),
    ("dev", np.uint32),
    ("pid", np.uint32),       # thread that queued the I/O (or issued it, or completed it)
    ("tgid", np.uint32),
    ("category", np.uint16),
    ("error", np.uint16),
])


class Pairer:
    """Turns EVENT batches into one PAIRED row per completion; no Python per event."""

    def __init__(self) -> None:
        self.pending = np.empty(0, EVENT)
        self.dropped = 0  # unmatched Q/D given up (merged into another request, or too old)

    def feed(self, batch: np.ndarray, horizon_ns: int | None = None) -> np.ndarray:
        """Completions in batch (and pending) paired with their Q and D; with horizon_ns, completions
        at or after it are kept for the next call (events before them may still be on their way)."""
        act = batch["action"]
        sel = batch[(act == TA_QUEUE) | (act == TA_ISSUE) | (act == TA_COMPLETE) | (act == TA_SPLIT)]
        later = np.empty(0, EVENT)
        if horizon_ns is not None:
            if len(self.pending):
                sel = np.concatenate([self.pending, sel])
                self.pending = np.empty(0, EVENT)
            wait = (sel["action"] == TA_COMPLETE) & (sel["ts"] >= np.uint64(max(horizon_ns, 0)))
            if wait.any():
                later, sel = sel[wait], sel[~wait]
        out = self._pair(sel)
        if len(later):
            self.pending = np.concatenate([self.pending, later])
        return out

    def _pair(self, sel: np.ndarray) -> np.ndarray:
        split = sel["action"] == TA_SPLIT
        if split.any():
            # the rest of a split bio is queued again without a Q of its own: the split stands for it
            sel = sel.copy()
            sel["sector"][split] = sel["aux"][split]
            sel["action"][split] = TA_QUEUE
        if not len(sel) and not len(self.pending):
            return np.empty(0, PAIRED)
        ev = np.concatenate([self.pending, sel]) if len(self.pending) else sel
        ev = ev[np.lexsort((ev["ts"], ev["sector"], ev["dev"]))]
        n = len(ev)
        idx = np.arange(n)
        a = ev["action"]
        is_q, is_d, is_c = a == TA_QUEUE, a == TA_ISSUE, a == TA_COMPLETE
        new_group = np.ones(n, bool)
        new_group[1:] = (ev["dev"][1:] != ev["dev"][:-1]) | (ev["sector"][1:] != ev["sector"][:-1])
        gstart = np.maximum.accumulate(np.where(new_group, idx, 0))
        last_d = np.maximum.accumulate(np.where(is_d, idx, -1))
        last_q = np.maximum.accumulate(np.where(is_q, idx, -1))
        last_c = np.maximum.accumulate(np.where(is_c, idx, -1))
        ci = idx[is_c]
        g = gstart[ci]
        d = last_d[ci]
        d = np.where(d >= g, d, -1)
        # a Q belongs to the first D (or, without a D, the first C) after it: one already
        # followed by another D or C of the same sector was used up (no stale queue times)
        before_d = np.where(d > 0, last_d[np.maximum(d - 1, 0)], -1)
        before_c = np.where(ci > 0, last_c[np.maximum(ci - 1, 0)], -1)
        q = np.where(d >= 0, last_q[np.maximum(d, 0)], last_q[ci])
        used = np.where(d >= 0, q <= before_d, q <= before_c)
        q = np.where((q >= g) & ~used, q, -1)
        out = np.zeros(len(ci), PAIRED)
        c = ev[ci]
        for f in ("ts", "sector", "bytes", "dev", "category", "error"):
            out[f] = c[f]
        out["q_ts"] = np.where(q >= 0, ev["ts"][np.maximum(q, 0)], 0)
        out["d_ts"] = np.where(d >= 0, ev["ts"][np.maximum(d, 0)], 0)
        who = np.where(q >= 0, q, np.where(d >= 0, d, ci))
        out["pid"] = ev["pid"][who]
        out["tgid"] = ev["tgid"][who]
        # keep the Q and D events that no completion of their group has followed yet
        gid = np.cumsum(new_group) - 1
        last_c_in_group = np.maximum.reduceat(np.where(is_c, idx, -1), idx[new_group])
        keep = (is_q | is_d) & (idx > last_c_in_group[gid])
        pend = ev[keep]
        if len(pend):
            newest = int(ev["ts"].max())
            young = pend["ts"] + PENDING_MAX_AGE_NS >= newest
            self.dropped += int(np.count_nonzero(~young))
            pend = pend[young]
            if len(pend) > PENDING_MAX:
                self.dropped += len(pend) - PENDING_MAX
                pend = pend[np.argsort(pend["ts"], kind="stable")[-PENDING_MAX:]]
        self.pending = pend.copy()
        # A write with data through the flush sequence (PREFLUSH or FUA on a write-back disk) completes
        # twice: its data, then its request is ended again after the flush, 0 bytes at the same
        # sector, with no Q between. The kernel counts one I/O, and so does snoop: the second is
        # dropped. (An empty PREFLUSH bio has a Q of its own before its 0-byte completion: kept.)
        is_w = (ev["category"] & TC_WRITE) != 0
        last_dc = np.maximum.accumulate(np.where(is_c & is_w & (ev["bytes"] > 0), idx, -1))
        prev_dc = np.where(ci > 0, last_dc[np.maximum(ci - 1, 0)], -1)
        seq_end = (c["bytes"] == 0) & is_w[ci] & (prev_dc >= g) & (last_q[ci] < prev_dc)
        if seq_end.any():
            out = out[~seq_end]
        return out[np.argsort(out["ts"], kind="stable")]


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


def _signed16(v: int) -> int:
    """The -errno blktrace-style u16 error back to a signed number (65531 -> -5)."""
    return v - 65536 if v > 32767 else v


class Snooper:
    """Recorder + Pairer: yields SnoopLines until stopped."""

    def __init__(self, opts: RecorderOptions) -> None:
        self.rec = Recorder(opts)
        self.pairer = Pairer()
        self.completed: dict[int, int] = {}  # kernel dev_t -> C events seen (the completions check)
        self.completed_attached: dict[int, int] = {}  # ... of them while every program ran
        self.names = devices.DevNames()
        self.comms: dict[int, list[tuple[int, str]]] = {}   # pid -> its last names, from when (exec, prctl)
        self.clock = clock_pair()
        self.start_ns = self.clock["mono_ns"]

    def lines(self, rows: np.ndarray) -> Iterator[SnoopLine]:
        for r in rows:
            q, d, ts = int(r["q_ts"]), int(r["d_ts"]), int(r["ts"])
            pid = int(r["pid"])
            dev = int(r["dev"])
            ma, mi = devices.kdev_split(dev)
            yield SnoopLine(
                t=(ts - self.start_ns) / 1e9, wall_ns=self.clock["wall_ns"] + ts - self.clock["mono_ns"],
                comm=self.comm_at(pid, q or ts), pid=int(r["tgid"]), disk=self.names.name(dev), dev=f"{ma},{mi}",
                op=rwbs(int(r["category"]), int(r["bytes"])), sector=int(r["sector"]), bytes=int(r["bytes"]),
                queue_ns=d - q if q and d else None, service_ns=ts - d if d else None,
                error=_signed16(int(r["error"])))

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
        horizon = time.monotonic_ns() - HORIZON_MARGIN_NS  # before the rings are read
        ev = self.rec.poll(timeout_ms)
        return self._take(ev, horizon)

    def _take(self, ev: np.ndarray, horizon_ns: int | None) -> list[SnoopLine]:
        self.rec.count_completions(ev, self.completed, self.completed_attached)
        if len(ev) and (ev["action"] == 0).any():
            self.note_comms(ev[(ev["action"] == 0) & ((ev["flags"] & EV_NOTE_PROCESS) != 0)])
        return list(self.lines(self.pairer.feed(ev, horizon_ns)))

    def finish(self) -> list[SnoopLine]:
        self.rec.detach()
        return self._take(self.rec.drain(), None)

    def close(self) -> None:
        self.rec.close()
