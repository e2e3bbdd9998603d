"""ioscope parse: a capture as blkparse text (one line per event, then per-CPU and per-device totals).

The output is meant to be identical to `blkparse -i -` reading the blktrace
export of the same capture (ioscope export), so that scripts written for
blkparse output keep working: the same event order (time, device, sequence),
line format, format specifiers (-f, -F), category mask (-a, -A), stopwatch
window (-w) and summary blocks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ioscope.base import outfile
from ioscope.base.devices import kdev_split, kdev_str
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.capture import _tracecore
from ioscope.capture.blktrace import Sequencer
from ioscope.capture.blktrace import bit_dtype as blktrace_dtype
from ioscope.capture.events import (
    ACTION_LETTERS,
    EV_CGROUP,
    EV_MESSAGE,
    EV_NOTE_PROCESS,
    EVENT,
    TA_BACKMERGE,
    TA_BOUNCE,
    TA_COMPLETE,
    TA_DRV_DATA,
    TA_FRONTMERGE,
    TA_GETRQ,
    TA_INSERT,
    TA_ISSUE,
    TA_PLUG,
    TA_QUEUE,
    TA_REMAP,
    TA_REQUEUE,
    TA_SLEEPRQ,
    TA_SPLIT,
    TA_UNPLUG_IO,
    TA_UNPLUG_TIMER,
    FirstNames,
    rwbs,
)
from ioscope.capture.masks import parse_mask

VALID_SPECS = "ABCDFGIMPQRSTUWX"
FS_ACTIONS = {TA_QUEUE, TA_INSERT, TA_BACKMERGE, TA_FRONTMERGE, TA_GETRQ, TA_SLEEPRQ, TA_REQUEUE, TA_ISSUE,
              TA_COMPLETE, TA_PLUG, TA_UNPLUG_IO, TA_UNPLUG_TIMER, TA_SPLIT, TA_BOUNCE, TA_REMAP, TA_DRV_DATA}
U64 = (1 << 64) - 1


def size_cnv(num: int, in_kb: bool) -> str:
    """blkparse's number column: 8 wide, scaled by 1000 with a K/M/G/P suffix past a million."""
    suff = ["", "K", "M", "G", "P"]
    i = 1 if in_kb else 0
    num &= U64
    while num > 1000 * 1000 and i < len(suff) - 1:
        i += 1
        num //= 1000
    return f"{num:8d}{suff[i]}"


@dataclass
class IoStats:
    """blkparse's counters for one CPU of one device (unsigned, as in blkparse)."""

    v: dict[str, int] = field(default_factory=lambda: dict.fromkeys((
        "qreads", "qwrites", "creads", "cwrites", "mreads", "mwrites", "ireads", "iwrites", "rrqueue", "wrqueue",
        "qread_kb", "qwrite_kb", "cread_kb", "cwrite_kb", "qread_b", "qwrite_b", "cread_b", "cwrite_b",
        "iread_kb", "iwrite_kb", "mread_kb", "mwrite_kb", "mread_b", "mwrite_b", "iread_b", "iwrite_b",
        "io_unplugs", "timer_unplugs"), 0))

    def add(self, key: str, n: int) -> None:
        self.v[key] = (self.v[key] + n) & U64

    def merged(self, other: IoStats) -> IoStats:
        out = IoStats()
        for k in out.v:
            out.v[k] = (self.v[k] + other.v[k]) & U64
        return out


def parse_window(text: str) -> tuple[int, int]:
    """-w [start:]end in seconds -> (start_ns, end_ns), as blkparse reads it."""
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            start, end = float(a), float(b)
        else:
            start, end = 0.0, float(text)
    except ValueError:
        raise UsageError(f"invalid time window '{text}'", "give -w END or -w START:END in seconds") from None
    s_ns, e_ns = int(start * 1e9), int(end * 1e9)
    if e_ns <= s_ns or s_ns < 0:
        raise UsageError(f"invalid time window '{text}': the end must come after the start")
    return s_ns, e_ns


class Formatter:
    """blkparse's -f/-F format strings: %a %c %C %d %D %e %g %M %m %n %N %p %P %s %S %t %T %U %z, widths (%g:
    blkparse 1.3's cgroup id, LOW32,HIGH32 in hex, 0,0 for an event that carries none)."""

    def __init__(self, fmt: str, wall_base: int | None) -> None:
        self.fmt = fmt
        self.wall_base = wall_base
        self.parts = self._compile(fmt)

    @staticmethod
    def _compile(fmt: str) -> list[tuple[str, str, bool, int | None]]:
        """[(literal, field, minus, width)] with field '' for plain text."""
        out: list[tuple[str, str, bool, int | None]] = []
        i = 0
        lit = []
        while i < len(fmt):
            ch = fmt[i]
            if ch == "%":
                i += 1
                if i >= len(fmt):
                    lit.append("%")
                    break
                if fmt[i] == "%":
                    lit.append("%")
                    i += 1
                    continue
                minus = False
                if fmt[i] == "-":
                    minus = True
                    i += 1
                width = None
                j = i
                while j < len(fmt) and fmt[j].isdigit():
                    j += 1
                if j > i:
                    width = int(fmt[i:j])
                i = j
                if i < len(fmt):
                    out.append(("".join(lit), fmt[i], minus, width))
                    lit = []
                    i += 1
                continue
            if ch == "\\":
                nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
                esc = {"b": "\b", "n": "\n", "r": "\r", "t": "\t"}.get(nxt)
                if esc is None:
                    raise UsageError(f"invalid escape char in format: \\{nxt}", "use \\b, \\n, \\r or \\t")
                lit.append(esc)
                i += 2
                continue
            lit.append(ch)
            i += 1
        if lit:
            out.append(("".join(lit), "", False, None))
        return out

    def render(self, e: dict[str, Any]) -> str:
        out = []
        for lit, f, minus, width in self.parts:
            out.append(lit)
            if not f:
                continue
            if f == "D":
                out.append(f"{e['major']:3d},{e['minor']:<3d}")
                continue
            if f == "P":
                if e["pdu"]:
                    out.append(dump_pdu(e["pdu"]))
                continue
            if f == "t":
                out.append(f"{e['nsec']:0{width if width is not None else 9}d}")
                continue
            if f == "u":
                raise IoscopeError("format %u needs per-I/O elapsed times (blkparse -t), which parse does not track",
                                   "leave %u out of the format")
            val: Any
            # %C of a process with no name: blkparse hands printf a NULL string
            val = {"a": e["act"], "c": e["cpu"], "C": e["comm"] or "(null)", "d": e["rwbs"], "e": e["error"],
                   "g": cgroup_text(e.get("cgroup")),
                   "M": e["major"], "m": e["minor"], "n": e["nblocks"], "N": e["bytes"], "p": e["pid"],
                   "s": e["seq"], "S": e["sector"], "T": e["sec"], "U": e["pdu_int"],
                   "z": self._clock(e["time"])}.get(f, f)
            s = str(val)
            if width is not None:
                s = s.ljust(width) if minus else s.rjust(width)
            out.append(s)
        return "".join(out)

    def _clock(self, t: int) -> str:
        # without a timestamp note blkparse's wall clock at time zero is the epoch
        w = (self.wall_base or 0) + t
        sec, ns = divmod(w, 1_000_000_000)
        return time.strftime("%H:%M:%S", time.localtime(sec)) + f".{ns // 1000:06d}"


def cgroup_text(cg: int | None) -> str:
    """A cgroup id as the kernel's blk tracer (option blk_cgroup) and blkparse 1.3's %g print it: its low
    and high 32 bits in hex, "LOW,HIGH" (id 1221: "4c5,0"); "0,0" for none, as blkparse's %g."""
    cg = cg or 0
    return f"{cg & 0xFFFFFFFF:x},{cg >> 32:x}"


def dump_pdu(pdu: bytes) -> str:
    """blkparse's %P: hex bytes, stopping with ' ..' where only zeros remain."""
    out = []
    for i, b in enumerate(pdu):
        out.append(f"{b:02x}")
        if b == 0 and not any(pdu[i:]):
            out[-1] += " .."
            break
    return " ".join(out)


CPU_FIELDS = ("qreads", "qwrites", "creads", "cwrites", "mreads", "mwrites", "ireads", "iwrites", "rrqueue", "wrqueue",
              "qread_kb", "qwrite_kb", "cread_kb", "cwrite_kb", "qread_b", "qwrite_b", "cread_b", "cwrite_b",
              "iread_kb", "iwrite_kb", "mread_kb", "mwrite_kb", "mread_b", "mwrite_b", "iread_b", "iwrite_b",
              "io_unplugs", "timer_unplugs", "nelems")
D_CUR, D_MAX, D_EVENTS, D_FIRST, D_LAST = 0, 2, 4, 5, 6
BATCH = 512   # blkparse reads a stream this many events at a time (its -b default) and sorts each batch alone


class Parser:
    """Turns time-ordered EVENT chunks into blkparse lines and totals.

    Counting and the default line format are one C loop (_tracecore.format_blkparse); -f/-F
    formats are rendered here from the same sorted events.
    """

    def __init__(self, out: IO[str], comms: dict[int, str], mask: int = 0xFFFF,
                 window: tuple[int, int] | None = None, fmt_all: str | None = None,
                 fmt_per: dict[str, str] | None = None, wall_base: int | None = None,
                 wall_of: Callable[[int], int | None] | None = None, names: str = "blkparse",
                 first_names: bool = False, cgroups: bool = False) -> None:
        """wall_base: wall-clock ns at the first event; or wall_of(mono_ns), asked once the first
        block event is seen (a capture may begin with empty chunks or only process notes).

        names: "blkparse" (blkparse's naming: a pid is named by the first process note blkparse reads for
        it, from then on and for good, "(null)" before and without one; comms is not used), or "ioscope"
        (ioscope's: comms first, then each process note renames its pid from its time on, so that a pid
        that exec'd has its I/O under each name it had). first_names: blkparse's naming of a capture
        recorded by ioscope, as blkparse names the pids reading its export (events.FirstNames).

        cgroups: the default line of a Q that carries a cgroup (EV_CGROUP) has its id before the action, as
        the kernel's blk tracer prints it with blk_cgroup (`7,2 4c5,0 Q WS ...`) and blkparse 1.3 its
        messages (`... 0 4c5,0  m N ...`): `  7,0    1   3   0.000001  4242 36b5,0  Q  WS 0 + 8 [dd]`;
        every other line as blkparse's."""
        self.out = out
        self.cgroups = cgroups
        self.wall_of = wall_of
        self.comms = comms
        self.naming = names
        self.first: dict[int, tuple[str, int]] = {}   # blkparse's naming: pid -> (name, from which event on)
        self.first_names = FirstNames(comms) if first_names and names == "blkparse" else None
        self.mask = mask
        self.window = window
        self.genesis: int | None = None
        self.dev_idx: dict[int, int] = {}
        self.cpustats = np.zeros((4, 4, len(CPU_FIELDS)), dtype=np.int64)   # [block][column][field]
        # cpustats' columns: the CPUs seen, numbered as they come (a dump's CPU is any 16-bit number: a table
        # sized by it, per device, was 2 GiB for a 7 KB dump); col_cpu: each column's CPU
        self._cpu_col = np.full(1 << 16, -1, dtype=np.int32)
        self.col_cpu: list[int] = []
        self.devstats = np.zeros((4, 7), dtype=np.int64)
        self.seq = Sequencer()
        self.formats: dict[str, Formatter] = {}
        for spec, fmt in (fmt_per or {}).items():
            self.formats[spec] = Formatter(fmt, wall_base)
        if fmt_all is not None:
            for spec in VALID_SPECS:
                self.formats.setdefault(spec, Formatter(fmt_all, wall_base))
        self.stopped = False
        self.nread = 0
        self.nbatched = 0   # block events seen so far, for blkparse's read batches (_batches)
        self.nfed = 0       # block events fed so far: the read index of the next one
        # blktrace's per-CPU files (an import of them): blkparse reading `-i NAME` counts every record of
        # NAME's files under NAME, whatever its own device, and prints them in the order it merged them
        self.set_names: list[str] | None = None
        self.opened: list[str] = []   # blkparse's "Input file ... added" lines, still to print

    def use_file_sets(self, names: list[str]) -> None:
        """Count and name by file set (blkparse -i NAME ...), in the given order; print in the order fed."""
        self.set_names = list(names)
        for i in range(len(names)):
            self.dev_idx[i] = i

    def note(self, pid: int, name: str, at: int) -> None:
        """blkparse's naming: a process note for pid, read before the block event of read index at (the
        first note of a pid is kept, for good)."""
        self.first.setdefault(pid, (name, at))

    def _register(self, devs: npt.NDArray[Any]) -> None:
        """Devices get their totals block in the order blkparse first reads them."""
        u, first = np.unique(devs, return_index=True)
        for dev in u[np.argsort(first)].tolist():
            if dev not in self.dev_idx:
                self.dev_idx[dev] = len(self.dev_idx)

    def _columns(self, cpus: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
        """The cpustats column of each CPU, new CPUs numbered in order; the table grown to hold them."""
        cols = self._cpu_col[cpus]
        if (cols < 0).any():
            for cpu in sorted(set(cpus[cols < 0].tolist())):
                self._cpu_col[cpu] = len(self.col_cpu)
                self.col_cpu.append(cpu)
            cols = self._cpu_col[cpus]
        self._grow(len(self.col_cpu))
        return np.asarray(cols, dtype=np.int32)

    def _grow(self, ncpus: int) -> None:
        nd, nc, nf = self.cpustats.shape
        want_d, want_c = max(nd, len(self.dev_idx)), max(nc, ncpus)
        if (want_d, want_c) != (nd, nc):
            grown = np.zeros((want_d, want_c, nf), dtype=np.int64)
            grown[:nd, :nc] = self.cpustats
            self.cpustats = grown
        if len(self.devstats) < want_d:
            g = np.zeros((want_d, 7), dtype=np.int64)
            g[:len(self.devstats)] = self.devstats
            self.devstats = g

    def feed(self, ev: npt.NDArray[np.void], seq: npt.NDArray[np.uint32] | None = None,
             own_dev: npt.NDArray[Any] | None = None, texts: dict[int, str] | None = None) -> None:
        """A chunk of a stream (a dump, or a capture), in read order: block events, and process notes and
        messages (EV_MESSAGE rows, their texts in texts by row) where they were read. seq: the records'
        sequence numbers (None: numbered as blktrace numbers them); own_dev: each record's own device
        (None: its device), where blkparse counts it."""
        if self.stopped or not len(ev):
            return
        from ioscope.capture.events import EV_MESSAGE, EV_NOTE_PROCESS, note_comm
        flags = ev["flags"]
        notes = (flags & EV_NOTE_PROCESS) != 0
        msg = (flags & EV_MESSAGE) != 0
        if texts is None:
            msg[:] = False
        keep = ~notes & ((flags & EV_MESSAGE) == 0) | msg   # block events and the messages blkparse prints
        if seq is None:
            seq = self.seq.number(ev)
        ridx = self.nfed + np.cumsum(keep) - keep    # each trace's read index (messages count, as blkparse's)
        renames: list[tuple[int, int, str]] = []
        if self.naming == "ioscope":
            # a process note names its pid from its time on (exec, prctl): events before it keep
            # the name they were done under
            renames = sorted((int(e["ts"]), int(e["pid"]), note_comm(e)) for e in ev[notes])
        elif self.first_names is not None:
            for k, pid, name in self.first_names.chunk(ev):
                if name is not None:
                    self.note(pid, name, int(ridx[k]))
        else:   # blkparse reads 512 events at a time: a note names its pid for the whole batch it is in
            for k in np.flatnonzero(notes).tolist():
                self.note(int(ev["pid"][k]), note_comm(ev[k]), int(ridx[k]) // BATCH * BATCH)
        self.nfed += int(keep.sum())
        if msg.any():
            assert texts is not None
            at = np.cumsum(keep) - 1
            texts = {int(at[i]): texts.get(int(i), "") for i in np.flatnonzero(msg).tolist()}
        else:
            texts = None
        if not keep.all():
            ev, seq, ridx = ev[keep], seq[keep], ridx[keep]
            if own_dev is not None:
                own_dev = own_dev[keep]
        try:
            self._feed_events(ev, seq, renames, own_dev=own_dev, ridx=ridx, texts=texts)
        finally:
            for _ts, pid, comm in renames:
                self.comms[pid] = comm

    def _names(self, ev: npt.NDArray[np.void], renames: list[tuple[int, int, str]],
               ridx: npt.NDArray[np.int64] | None) -> tuple[list[bytes | None], Any]:
        """(names, index per event): blkparse's naming (each event under the first name read for its pid
        before it, None before one), or ioscope's (each event named as its pid was at its time)."""
        upid, pinv = np.unique(ev["pid"], return_inverse=True)
        pinv = pinv.reshape(-1).astype(np.int32)
        if self.naming == "blkparse":
            names: list[str | None] = [None]
            out = np.zeros(len(ev), dtype=np.int32)
            for j, pid in enumerate(upid.tolist()):
                got = self.first.get(pid)
                if got is None:
                    continue
                names.append(got[0])
                hit = pinv == j
                if ridx is not None:
                    hit &= ridx >= got[1]
                out[hit] = len(names) - 1
            return [None if n is None else n.encode(errors="replace") for n in names], out
        names = [self.comms.get(int(p)) for p in upid.tolist()]
        if renames:
            ts = ev["ts"]
            pid_of = ev["pid"]
            for t, pid, comm in renames:   # in time order: later notes override earlier ones
                hit = (pid_of == pid) & (ts >= t)
                if hit.any():
                    pinv[hit] = len(names)
                    names.append(comm)
        return [None if n is None else n.encode(errors="replace") for n in names], pinv

    def start(self, genesis: int) -> None:
        """Time zero: the first record blkparse reads."""
        self.genesis = genesis
        if self.wall_of is not None:
            base = self.wall_of(self.genesis)
            for f in self.formats.values():
                f.wall_base = base

    def _feed_events(self, ev: npt.NDArray[np.void], seq: npt.NDArray[np.uint32],
                     renames: list[tuple[int, int, str]] | None = None,
                     sets: npt.NDArray[Any] | None = None, own_dev: npt.NDArray[Any] | None = None,
                     ridx: npt.NDArray[np.int64] | None = None, texts: dict[int, str] | None = None) -> None:
        """Render block events (no process notes), named by the naming in use (_names).

        sets: each event's file set (use_file_sets), for events already in blkparse's order. own_dev:
        each record's own device (None: its device), where blkparse counts it and what its %D prints.
        ridx: each event's read index (blkparse's naming)."""
        if self.stopped or not len(ev):
            return
        own = ev["dev"] if own_dev is None else np.asarray(own_dev, dtype=np.uint32)
        if self.genesis is None:   # blkparse: the earliest time of the first batch it reads
            self.start(int(ev["ts"][:BATCH].min()) if sets is None else int(ev["ts"][0]))
        assert self.genesis is not None
        if sets is not None:
            rel = ev["ts"].astype(np.int64) - self.genesis
            if self.window is not None:   # blkparse stops at the first record past the end
                lo, hi = self.window
                past = np.flatnonzero(rel > hi)
                keep = rel >= lo
                if len(past):
                    self.stopped = True
                    keep[int(past[0]):] = False
                ev, seq, rel, sets, own = ev[keep], seq[keep], rel[keep], sets[keep], own[keep]
                if ridx is not None:
                    ridx = ridx[keep]
                if not len(ev):
                    return
            self._render(ev, seq, rel, np.asarray(sets, dtype=np.int32), renames, own, ridx)
            return
        batch = self._batches(len(ev))
        if self.window is not None:
            if not self._register_read(own, ev["ts"]):
                return
        else:
            self._register(own)
        # blkparse (reading a stream) reads 512 events, sorts them by time, device and sequence, prints
        # them all, then reads the next 512: the sort never crosses a batch, so two events of one
        # nanosecond on two CPUs, one the last of a batch and the other the first of the next, print
        # in the order read whatever their sequence numbers. Within a batch, sequence numbers being
        # per CPU, two events can tie on all three keys, and then its sort tree puts the one it read
        # later first (both checked with blkparse 1.2.0: tests/test_parse.py). The device is the
        # record's own (a remap's traced disk's).
        o = np.lexsort((np.arange(len(ev))[::-1], seq, own, ev["ts"], batch))
        ev, seq, own = ev[o], seq[o], own[o]
        row = o   # each one's row as fed (a message's text)
        if ridx is not None:
            ridx = ridx[o]
        rel = ev["ts"].astype(np.int64) - self.genesis
        if self.window is not None:
            lo, hi = self.window
            inside = (rel >= lo) & (rel < hi)
            if (rel >= hi).any():
                self.stopped = True
            ev, seq, rel, own, row = ev[inside], seq[inside], rel[inside], own[inside], row[inside]
            if ridx is not None:
                ridx = ridx[inside]
            if not len(ev):
                return
        udev, dinv = np.unique(own, return_inverse=True)
        lut = np.array([self.dev_idx[int(d)] for d in udev.tolist()], dtype=np.int32)
        devidx = lut[dinv.reshape(-1)]
        if not texts:
            self._render(ev, seq, rel, devidx, renames, own, ridx)
            return
        # the messages, sorted in with the events: blkparse prints each where it sorted it
        from ioscope.capture.events import EV_MESSAGE
        cut = np.flatnonzero((ev["flags"] & EV_MESSAGE) != 0).tolist()
        at = 0
        for m in [*cut, len(ev)]:
            if m > at:
                self._render(ev[at:m], seq[at:m], rel[at:m], devidx[at:m], renames, own[at:m],
                             None if ridx is None else ridx[at:m])
            if m < len(ev):
                e = ev[m]
                self._message_line(int(devidx[m]), int(e["cpu"]), int(rel[m]), int(e["dev"]), int(e["category"]),
                                   texts.get(int(row[m]), ""))
            at = m + 1

    def _render(self, ev: npt.NDArray[np.void], seq: npt.NDArray[np.uint32], rel: npt.NDArray[np.int64],
                devidx: npt.NDArray[np.int32], renames: list[tuple[int, int, str]] | None,
                own: npt.NDArray[Any], ridx: npt.NDArray[np.int64] | None = None) -> None:
        """Count and print events in the order given, each under its summary block devidx. own: each
        record's own device (a remap recorded on the traced disk: blkparse's -f %D prints it, its default
        line the device the remap went to)."""
        cols = self._columns(ev["cpu"])
        names, pinv = self._names(ev, renames or [], ridx)
        c = np.ascontiguousarray
        text = _tracecore.format_blkparse(
            c(ev), rel=c(rel.astype(np.int64)), seq=c(seq.astype(np.uint32)), devidx=c(devidx.astype(np.int32)),
            pidx=c(pinv.astype(np.int32)), names=names, mask=self.mask, cpustats=self.cpustats,
            devstats=self.devstats, text=not self.formats, cgroups=self.cgroups,
            cpucol=c(cols))
        if not self.formats:
            self.out.write(text.decode(errors="replace"))
            return
        lines = []
        for t, s, dev, owner, cpu, pid, act, cat, sec, nb, err, aux, auxdev, ni, fl in zip(
                rel.tolist(), seq.tolist(), ev["dev"].tolist(), own.tolist(), ev["cpu"].tolist(), ev["pid"].tolist(),
                ev["action"].tolist(), ev["category"].tolist(), ev["sector"].tolist(), ev["bytes"].tolist(),
                ev["error"].tolist(), ev["aux"].tolist(), ev["aux_dev"].tolist(), pinv.tolist(), ev["flags"].tolist()):
            if not cat & self.mask or act not in FS_ACTIONS or act == TA_DRV_DATA:
                continue
            letters = ACTION_LETTERS[act]
            fm = self.formats.get(letters[0])
            fields = self._fields(t, s, dev, cpu, pid, act, cat, sec, nb, err, aux, auxdev, letters)
            fields["cgroup"] = aux if fl & EV_CGROUP else None
            nm = names[ni]
            fields["comm"] = "(null)" if nm is None else nm.decode(errors="replace")
            if fm is not None:
                fields["major"], fields["minor"] = kdev_split(owner)
            lines.append(fm.render(fields) if fm is not None else self._default(fields, act, aux, auxdev))
        self.out.write("".join(lines))

    def _default(self, e: dict[str, Any], act: int, aux: int, auxdev: int) -> str:
        """One default line (for actions without a -F format when others have one)."""
        cg = f"{cgroup_text(e['cgroup'])} " if self.cgroups and e["cgroup"] is not None else ""
        head = (f"{e['major']:3d},{e['minor']:<3d} {e['cpu']:2d} {e['seq']:8d} {e['sec']:5d}.{e['nsec']:09d} "
                f"{e['pid']:5d} {cg}{e['act']:>2s} {e['rwbs']:>3s} ")
        sec, nsec, name = e["sector"], e["nblocks"], e["comm"]
        if act in (TA_REQUEUE, TA_COMPLETE):
            return f"{head}{sec} + {nsec} [{e['error']}]\n" if nsec else f"{head}{sec} [{e['error']}]\n"
        if act == TA_PLUG:
            return f"{head}[{name}]\n"
        if act in (TA_UNPLUG_IO, TA_UNPLUG_TIMER):
            return f"{head}[{name}] {aux & 0xFFFFFFFF}\n"
        if act == TA_REMAP:
            return f"{head}{sec} + {nsec} <- ({kdev_str(auxdev)}) {aux}\n"
        if act == TA_SPLIT:
            return f"{head}{sec} / {aux & 0xFFFFFFFF} [{name}]\n"
        return f"{head}{sec} + {nsec} [{name}]\n" if nsec else f"{head}[{name}]\n"

    def _message_line(self, block: int, cpu: int, rel: int, dev: int, category: int, text: str) -> None:
        """A message read from a stream: counted under its device's block, printed as blkparse prints it."""
        col = int(self._columns(np.array([cpu], dtype=np.uint16))[0])
        self.cpustats[block, col, -1] += 1
        ds = self.devstats[block]
        ds[D_LAST] = rel
        if not category & self.mask:
            return
        if not ds[D_EVENTS]:
            ds[D_FIRST] = rel
        ds[D_EVENTS] += 1
        ma, mi = kdev_split(dev)
        self.out.write(f"{ma:3d},{mi:<3d} {cpu:2d} {'0':>8s} {rel // 1_000_000_000:5d}."
                       f"{rel % 1_000_000_000:09d} {0:5d} {'m':>2s} {'N':>3s} {text}\n")

    def message(self, rec: bytes, order: str, set_idx: int, cpu: int) -> None:
        """A BLK_TN_MESSAGE record: blkparse prints it as an 'm N' line and counts it as an event."""
        if self.stopped:
            return
        h = np.frombuffer(rec[:48], dtype=blktrace_dtype(order))[0]
        t = int(h["time"])
        if self.genesis is None:
            self.start(t)
        assert self.genesis is not None
        rel = t - self.genesis
        if self.window is not None:
            if rel > self.window[1]:
                self.stopped = True
                return
        if cpu < 0:   # a dump's note (DUMP_CPU): counted, as before, under the table's last CPU
            cpu = max([3, *self.col_cpu])
        col = int(self._columns(np.array([cpu], dtype=np.uint16))[0])
        self.cpustats[set_idx, col, -1] += 1
        ds = self.devstats[set_idx]
        ds[D_LAST] = rel
        action = int(h["action"])
        if not action & (self.mask << 16) or (self.window is not None and rel < self.window[0]):
            return
        if not ds[D_EVENTS]:
            ds[D_FIRST] = rel
        ds[D_EVENTS] += 1
        text = rec[48:48 + int(h["pdu_len"])].split(b"\0", 1)[0].decode(errors="replace")
        ma, mi = kdev_split(int(h["device"]))
        # blkparse 1.2.0 prints 0 for the pid (later versions print the record's)
        self.out.write(f"{ma:3d},{mi:<3d} {int(h['cpu']):2d} {'0':>8s} {rel // 1_000_000_000:5d}."
                       f"{rel % 1_000_000_000:09d} {0:5d} {'m':>2s} {'N':>3s} {text}\n")

    def _batches(self, n: int) -> npt.NDArray[np.int64]:
        """The blkparse read batch (BATCH block events at a time, in the source's order) of the next n events."""
        batch = (self.nbatched + np.arange(n, dtype=np.int64)) // BATCH
        self.nbatched += n
        return batch

    def _register_read(self, own: npt.NDArray[Any], ts: npt.NDArray[Any]) -> bool:
        """With a window, blkparse reads 512 events at a time and stops after the first batch that starts
        past the window's end; every device in what it read gets a summary block. False: nothing left."""
        assert self.window is not None and self.genesis is not None
        n = len(own)
        batch = (self.nread + np.arange(n)) // BATCH
        self.nread += n
        rel = ts.astype(np.int64) - self.genesis
        starts = np.flatnonzero(np.r_[True, batch[1:] != batch[:-1]])
        mins = np.minimum.reduceat(rel, starts)
        past = np.flatnonzero(mins > self.window[1])
        read = n if not len(past) else (int(starts[past[0] + 1]) if past[0] + 1 < len(starts) else n)
        self._register(own[:read])
        if len(past):
            self.stopped = True
        return True

    def _fields(self, t: int, s: int, dev: int, cpu: int, pid: int, act: int, cat: int, sec: int, nb: int,
                err: int, aux: int, auxdev: int, letters: str) -> dict[str, Any]:
        pdu = b""
        if act in (TA_UNPLUG_IO, TA_UNPLUG_TIMER, TA_SPLIT):
            pdu = aux.to_bytes(8, "big")
        elif act == TA_REMAP:
            pdu = auxdev.to_bytes(4, "big") + dev.to_bytes(4, "big") + aux.to_bytes(8, "big")
        major, minor = kdev_split(dev)
        return {"act": letters, "cpu": cpu, "comm": self.comms.get(pid, ""), "rwbs": rwbs(cat, nb),
                "major": major, "minor": minor, "error": err, "nblocks": nb >> 9, "bytes": nb,
                "pid": pid, "seq": s, "sector": sec, "sec": t // 1_000_000_000, "nsec": t % 1_000_000_000,
                # %P dumps the payload of SCSI pass-through (PC) events only, as blkparse does
                "time": t, "pdu": b"", "pdu_int": int.from_bytes(pdu[:8], "big") & 0xFFFFFFFF if pdu else 0,
                "cgroup": None}

    def summary(self) -> str:
        out: list[str] = []
        w = out.append
        for i, (dev, di) in enumerate(self.dev_idx.items()):
            name = kdev_str(dev) if self.set_names is None else self.set_names[dev]
            if i > 0:
                w("\n")
            total = IoStats()
            shown = 0
            ds = self.devstats[di] if di < len(self.devstats) else np.zeros(7, dtype=np.int64)
            depth = (int(ds[D_MAX]), int(ds[D_MAX + 1]))
            rows = self.cpustats[di] if di < len(self.cpustats) else np.zeros((0, len(CPU_FIELDS)), np.int64)
            for col in sorted(range(min(len(rows), len(self.col_cpu))), key=self.col_cpu.__getitem__):
                cpu, row = self.col_cpu[col], rows[col]
                if not row[-1]:
                    continue
                st = IoStats()
                for k, v in zip(CPU_FIELDS[:-1], row[:-1].tolist()):
                    st.v[k] = v & U64
                total = total.merged(st)
                w(dump_io_stats(st, f"CPU{cpu} ({name}):", depth))
                shown += 1
            if shown > 1:
                w("\n")
                w(dump_io_stats(total, f"Total ({name}):", None))
            msec = (int(ds[D_LAST]) - int(ds[D_FIRST])) // 1_000_000
            rrate = wrate = 0
            if msec:
                rrate = ((1000 * total.v["cread_kb"] + total.v["cread_b"]) & U64) // msec
                wrate = ((1000 * total.v["cwrite_kb"] + total.v["cwrite_b"]) & U64) // msec
            w(f"\nThroughput (R/W): {rrate}KiB/s / {wrate}KiB/s\n")
            w(f"Events ({name}): {int(ds[D_EVENTS])} entries\n")
            w("Skips: 0 forward (0 -   0.0%)\n")
        return "".join(out)


def dump_io_stats(ios: IoStats, msg: str, depth: tuple[int, int] | None) -> str:
    v = ios.v

    def kib(prefix: str) -> str:
        return size_cnv(v[prefix + "_kb"] + (v[prefix + "_b"] >> 10), True)

    lines = [f"{msg}\n",
             f" Reads Queued:    {size_cnv(v['qreads'], False)}, {kib('qread')}iB\t"
             f" Writes Queued:    {size_cnv(v['qwrites'], False)}, {kib('qwrite')}iB\n",
             f" Read Dispatches: {size_cnv(v['ireads'], False)}, {kib('iread')}iB\t"
             f" Write Dispatches: {size_cnv(v['iwrites'], False)}, {kib('iwrite')}iB\n",
             f" Reads Requeued:  {size_cnv(v['rrqueue'], False)}\t\t"
             f" Writes Requeued:  {size_cnv(v['wrqueue'], False)}\n",
             f" Reads Completed: {size_cnv(v['creads'], False)}, {kib('cread')}iB\t"
             f" Writes Completed: {size_cnv(v['cwrites'], False)}, {kib('cwrite')}iB\n",
             f" Read Merges:     {size_cnv(v['mreads'], False)}, {kib('mread')}iB\t"
             f" Write Merges:     {size_cnv(v['mwrites'], False)}, {kib('mwrite')}iB\n"]
    if depth is not None:
        lines.append(f" Read depth:      {depth[0]:8d}{' ':>8s}\t Write depth:      {depth[1]:8d}\n")
    lines.append(f" IO unplugs:      {v['io_unplugs']:8d}{' ':>8s}\t Timer unplugs:    {v['timer_unplugs']:8d}\n")
    return "".join(lines)


def parse_formats(specs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs or []:
        if len(spec) < 2 or spec[1] != "," or spec[0] not in VALID_SPECS:
            raise UsageError(f"bad format specifier '{spec}'",
                             f"give -F ACTION,FORMAT with ACTION one of {VALID_SPECS}")
        out[spec[0]] = spec[2:]
    return out


def run(args: argparse.Namespace) -> int:
    from ioscope.capture import importer
    from ioscope.capture.offline import open_source, wall_at
    mask = parse_mask(args.act_mask, args.set_mask)
    window = parse_window(args.stopwatch) if args.stopwatch else None
    fmt_per = parse_formats(args.format_spec)
    fmt_all = None
    if args.format is not None:
        fmt_all = args.format
    out: IO[str]
    if args.output:
        out = outfile.open_private(args.output, force=True)   # like blkparse -o: overwritten, but private
    else:
        out = sys.stdout
    naming = getattr(args, "names", "blkparse")

    def warn(line: str) -> None:
        sys.stderr.write(f"ioscope parse: note: {line}\n")

    try:
        with open_source(args.capture) as src:
            def wall_of(mono_ns: int) -> int | None:
                if src.kind == "capture":
                    return wall_at(src, mono_ns)
                if src.wall_stamps:
                    return src.wall_stamps[0][1] - src.wall_stamps[0][0] + mono_ns
                return None

            fs: importer.FileSets | None = None
            whole: importer.FileSetSource | None = None
            if src.kind == "capture":
                fs = importer.file_sets(src)
            else:   # per-CPU files given directly: read as an import reads them; a stream as it is
                whole = importer.read_file_sets(args.capture, warn)
                fs = whole.fs if whole is not None else None
            native = src.kind == "capture" and src.meta.get("source") != "blktrace"
            parser = Parser(out, dict(src.comms), mask, window, fmt_all, fmt_per, wall_of=wall_of, names=naming,
                            first_names=native, cgroups=getattr(args, "cgroups", False))
            if fs is not None and not fs.dumps_only:
                chunks = whole.chunks() if whole is not None else src.chunks()
                comms = whole.comms if whole is not None else src.comms
                feed_file_sets(parser, chunks, comms, fs, os.path.dirname(args.capture) if whole is not None else "")
            elif fs is not None:   # an imported stream: its records as they were, read as blkparse reads one
                stamps = [(t, w) for k in range(len(fs.notes)) if fs.note_kind(k) == "timestamp"
                          for t, w in [fs.timestamp(k)]]
                if stamps:
                    parser.wall_of = lambda genesis: stamps[0][1] - stamps[0][0] + genesis
                g = 0
                for ev, own, texts in importer.btt_stream(fs, src.chunks(), texts=True):
                    blk = (ev["flags"] & (EV_NOTE_PROCESS | EV_MESSAGE)) == 0
                    seq = np.zeros(len(ev), dtype=np.uint32)
                    seq[blk] = fs.seq[g:g + int(blk.sum())]
                    for i, k in (texts or {}).items():
                        seq[i] = fs.note_seq(k)
                    g += int(blk.sum())
                    parser.feed(ev, seq, own, {i: fs.note_text(k) for i, k in (texts or {}).items()})
                    if parser.stopped:
                        break
            else:
                noted: set[int] = set()
                for d in (src.decoded() if src.kind == "blktrace" else
                          (blktrace_decoded(c, src.cgroups, noted) for c in src.chunks())):
                    for pid, comm in src.comms.items():  # ioscope's naming: pids not seen yet; then the notes
                        parser.comms.setdefault(pid, comm)
                    parser.feed(d.events, d.seq, d.own_dev, d.texts)
                    if parser.stopped:
                        break
            if not args.quiet:
                out.write(parser.summary())
            if parser.opened:
                out.flush()
                sys.stdout.write("".join(parser.opened))
            if parser.genesis is None:
                sys.stderr.write(f"ioscope parse: note: {args.capture} holds no block events\n")
            if src.truncation:
                sys.stderr.write(f"ioscope parse: note: {src.truncation}\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def blktrace_decoded(ev: npt.NDArray[np.void], cgroups: dict[int, str] | None = None,
                     noted: set[int] | None = None) -> Any:
    """A capture's chunk as a decoded blktrace piece (no sequence numbers, no other devices). cgroups (the
    capture's): the `cgroup <id> <path>` message notes its export writes before the first Q of each id
    (noted: the ids done in chunks before), as rows where blkparse prints them."""
    from ioscope.capture.blktrace import Decoded, with_cgroup_messages
    if cgroups and noted is not None and len(ev):
        ev, texts = with_cgroup_messages(ev, cgroups, noted)
        return Decoded(ev, {}, [], texts=texts or None)
    return Decoded(ev, {}, [])


def feed_file_sets(parser: Parser, chunks: Any, comms: dict[int, str], fs: Any, where: str = "") -> None:
    """blktrace's per-CPU files (read directly or imported), as blkparse -i NAME ... prints them: its
    "Input file" lines, each record under its file set, its own sequence number, each process note from
    where blkparse reads it, the scheduler's messages where blkparse printed them."""
    from ioscope.capture.events import EV_NOTE_PROCESS, note_comm
    from ioscope.capture.importer import NoteOrder
    # blkparse says which files it opened, with printf: on its standard output whatever -o says, and, its
    # events going out through a stream of their own, first on a terminal and last anywhere else
    parser.opened = [f"Input file {os.path.join(where, st['name'])}.blktrace.{f['cpu']} added\n"
                     for st in fs.sets for f in st["files"] if int(f["bytes"])]
    if sys.stdout.isatty():
        sys.stdout.write("".join(parser.opened))
        sys.stdout.flush()
        parser.opened = []
    parser.use_file_sets(fs.names)
    wall = fs.wall_clock()
    if wall is not None:   # blkparse 1.2.0 reading files takes a timestamp note's clock for time zero, as is
        parser.wall_of = lambda _genesis: wall
    msgs = fs.messages()
    order = NoteOrder(fs, ("process",))
    mi = 0
    g = 0

    def message(k: int) -> None:
        si, cpu, _fp, _mp, rec = fs.notes[k]
        parser.message(rec, fs.order(si, cpu), si, cpu)

    owners = fs.own_devices()
    keys = np.array(sorted(owners), dtype=np.int64)

    def own(blk: npt.NDArray[np.void], lo: int, hi: int, first: int) -> npt.NDArray[Any] | None:
        a, b = np.searchsorted(keys, [lo, hi])
        if a == b:
            return None
        out = blk["dev"][first:first + hi - lo].copy()
        for gi in keys[a:b].tolist():
            out[gi - lo] = owners[gi]
        return out

    if fs.rank is not None:   # files not in time order: the capture's events, put back in blkparse's order
        from ioscope.capture.events import join_events
        whole = list(chunks)
        allev = join_events(whole) if whole else np.zeros(0, dtype=EVENT)
        isnote = (allev["flags"] & EV_NOTE_PROCESS) != 0
        blk_m, fs = fs.in_blkparse_order(allev[~isnote])
        chunks = iter([join_events([allev[isnote], blk_m])])
        owners = fs.own_devices()
        keys = np.array(sorted(owners), dtype=np.int64)
        order = NoteOrder(fs, ("process",))
    for ev in chunks:
        for pid, comm in comms.items():
            parser.comms.setdefault(pid, comm)
        notes = (ev["flags"] & EV_NOTE_PROCESS) != 0
        renames = sorted((int(e["ts"]), int(e["pid"]), note_comm(e)) for e in ev[notes]) \
            if notes.any() and parser.naming == "ioscope" else []
        blk = ev[~notes] if notes.any() else ev
        k = len(blk)
        for at, nk in order.positions(g, blk["cpu"]):   # blkparse's naming: where blkparse reads each note
            pid, name = fs.note_pid_name(nk)
            parser.note(pid, name, at)
        start = 0
        while mi < len(msgs) and msgs[mi][0] < g + k:
            p = msgs[mi][0] - g
            if p > start:
                parser._feed_events(blk[start:p], fs.seq[g + start:g + p], renames, fs.set_of[g + start:g + p],
                                    own(blk, g + start, g + p, start), np.arange(g + start, g + p))
                start = p
            message(msgs[mi][1])
            mi += 1
        if start < k:
            parser._feed_events(blk[start:], fs.seq[g + start:g + k], renames, fs.set_of[g + start:g + k],
                                own(blk, g + start, g + k, start), np.arange(g + start, g + k))
        g += k
        for _ts, pid, comm in renames:
            parser.comms[pid] = comm
        if parser.stopped:
            return
    while mi < len(msgs):
        message(msgs[mi][1])
        mi += 1


def lines_of(chunks: Iterable[npt.NDArray[np.void]], comms: dict[int, str], **kw: Any) -> str:
    """The whole parse output for EVENT chunks (for tests and small captures)."""
    import io
    buf = io.StringIO()
    p = Parser(buf, dict(comms), **kw)
    for c in chunks:
        p.feed(c)
    buf.write(p.summary())
    return buf.getvalue()

