"""ioscope agg over a capture (-r): the capture's events paired into one record per bio, the way the
agg BPF object builds them at completion, then the same evaluation (model.aggregate, which runs the
kernel's WHERE program) and the same naming, model and views.

Why a pairing of its own and not report's engine (engines/pairing/btt.py): btt's core emits one record per
*phase* (q2c, q2d, d2c separately, keyed by device and process), not one record per I/O carrying
its size, op, flags, thread, CPU, seek and in-flight count together, which is what a WHERE
condition such as `d2c > 1ms and bytes >= 64k` needs. The rules here are the kernel object's
(bpf/agg.bpf.c over bpf/rqpath.bpf.h), so that a question asked live and of a capture of the
same I/O gets the same answer:

- a Q starts a bio (its thread, process, CPU, category; the seek from the end of the previous Q on
  the disk); a Q of the same range while the bio is not yet issued is a split's remainder queued
  again and keeps the first queue time; an X (split) cuts the bio in two at the new sector, both
  pieces keeping the Q's details;
- a D issues every bio in flight inside its range, walked as a request's chain from its sector
  (only the first issue counts); the request's in-flight count is the disk's requests issued and
  not completed before it;
- a C ends every bio inside its range, each one record; the request's first bio (at the C's
  sector) carries d2c; a bio-less flush request (D and C of 0 bytes, FLUSH) is one op=flush record
  with d2c only;
- on a disk with a write-back cache (the capture's device table), a write with PREFLUSH (or FUA,
  when the disk has no FUA) goes through the flush sequence: its data's C is a step, and the
  write ends with the 0-byte C at its sector, as the kernel object sees it; an empty PREFLUSH
  write (fsync's) is a 0-byte bio timed from when it became a request (its G), as live;
- other events without data are ignored (as btt does); I/O already in flight when the capture
  started (a C or D without its Q) is left out, where live it is counted with d2c only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ioscope.base import devices
from ioscope.base.errors import UsageError
from ioscope.base.fmt import comm_str
from ioscope.base.losses import Losses
from ioscope.base.rate import Span
from ioscope.capture.events import (
    EV_NOTE_PROCESS,
    TA_COMPLETE,
    TA_GETRQ,
    TA_ISSUE,
    TA_QUEUE,
    TA_SPLIT,
    TC_DISCARD,
    TC_FLUSH,
    TC_FUA,
    TC_WRITE,
    action_mask_note,
)
from ioscope.capture.store import open_capture
from ioscope.engines.aggregate import names
from ioscope.engines.aggregate.expr import Expr, ExprError, Insn, Resolver, compile_cond
from ioscope.engines.aggregate.model import AggResult, AggSample, RawRow, aggregate, build_result
from ioscope.kernel import abi as core_abi

TC_SHOWN = 0x1 | 0x2 | 0x4 | 0x8 | 0x800 | 0x1000 | 0x2000 | 0x8000  # bpf/agg.bpf.c TC_SHOWN
MISSING_IN_CAPTURES = {"cgroup": "cgroup ids (record does not store them)",
                       "kstack": "stacks (record does not store them)",
                       "ustack": "stacks (record does not store them)",
                       "file": "file names (record does not store them)",
                       "throttle": "blk-throttle's waits (record does not store them)"}


@dataclass
class _Bio:
    sector: int
    nbytes: int
    q_ns: int
    pid: int
    tgid: int
    cpu: int
    seek: int | None
    seq: bool = False    # ends with its request's 0-byte completion (the flush sequence; an empty PREFLUSH write)
    split: bool = False  # the remainder of a split, whose Q comes (again) next
    d_ns: int = 0
    g_ns: int = 0        # an empty PREFLUSH write: when it became a request
    inflight: int | None = None
    write: bool = False  # its direction (TC_WRITE): a completion ends a bio of its own direction


def op_of(category: int, nbytes: int) -> int:
    """The kernel's opf_to_op() from a completion's category bits (bpf/core_fixes.bpf.h)."""
    if category & TC_DISCARD:
        return core_abi.OP_DISCARD
    if category & TC_WRITE:
        return core_abi.OP_FLUSH if (nbytes == 0 and category & TC_FLUSH) else core_abi.OP_WRITE
    if category & TC_FLUSH and nbytes == 0:
        return core_abi.OP_FLUSH
    return core_abi.OP_READ


Record = dict[str, int | None]


class Pairing:
    """Events in time order in, one record per completed bio (and flush request) out.

    machines: the disks whose writes with PREFLUSH (or FUA, when the disk has no FUA) go through the
    block layer's flush sequence (kernel dev_t -> the disk has FUA), from the capture's device table
    (trace.recorder.flush_machines): such a write ends with a 0-byte completion after its data's.
    """

    def __init__(self, comm_words: bool = False, comms: dict[int, str] | None = None,
                 machines: dict[int, bool] | None = None) -> None:
        # bios in flight by (disk, sector): a list, as two I/Os of one sector can be in flight at once
        self.bios: dict[tuple[int, int], list[_Bio]] = {}
        self.last_end: dict[int, int] = {}
        self.inflight: dict[int, int] = {}
        self.flushes: dict[int, list[tuple[int, int]]] = {}
        self.machines = machines or {}
        self.comm_words = comm_words
        self.comms = comms if comms is not None else {}
        self.unpaired = 0  # completions of I/O queued before the capture started
        self.last_ts = 0

    def _comm(self, rec: Record, tgid: int) -> None:
        if not self.comm_words:
            return
        name = self.comms.get(tgid)
        if name is None:
            return
        raw = name.encode()[:15].ljust(16, b"\0")
        rec["comm0"] = int.from_bytes(raw[:8], "little")
        rec["comm1"] = int.from_bytes(raw[8:], "little")

    def _get(self, dev: int, sector: int, issued: bool | None = None, newest: bool = False,
             write: bool | None = None) -> _Bio | None:
        """The oldest (or newest) bio in flight at sector (issued or not, of one direction, when asked)."""
        bios = self.bios.get((dev, sector), ())
        for b in (reversed(bios) if newest else bios):
            if (issued is None or bool(b.d_ns) == issued) and (write is None or b.write == write):
                return b
        return None

    def _put(self, dev: int, b: _Bio) -> None:
        self.bios.setdefault((dev, b.sector), []).append(b)

    def _drop(self, dev: int, b: _Bio) -> None:
        lst = self.bios.get((dev, b.sector))
        if lst is None:
            return
        lst.remove(b)
        if not lst:
            del self.bios[(dev, b.sector)]

    def _in_sequence(self, dev: int, cat: int) -> bool:
        if dev not in self.machines:
            return False
        return bool(cat & TC_FLUSH) or bool(cat & TC_FUA and not self.machines[dev])

    def feed(self, ev: np.ndarray) -> Iterator[tuple[int, Record]]:
        """(completion time, record) of every bio the events complete."""
        for e in ev.tolist():
            ts, sector, aux, nbytes, dev, _auxdev, pid, tgid, cpu, _err, action, cat, flags = e
            self.last_ts = ts
            if action == 0:
                if flags & EV_NOTE_PROCESS and pid == tgid:
                    self.comms[tgid] = comm_str(np.array([sector, aux], dtype="<u8").tobytes())
                continue
            if action == TA_QUEUE:
                self._queue(ts, dev, sector, nbytes, pid, tgid, cpu, cat)
            elif action == TA_GETRQ and not nbytes:
                b = self._get(dev, sector, issued=False)
                if b is not None and not b.nbytes and not b.g_ns:
                    b.g_ns = ts
            elif action == TA_SPLIT:
                self._split(dev, sector, aux)
            elif action == TA_ISSUE:
                self._issue(ts, dev, sector, nbytes, cat)
            elif action == TA_COMPLETE:
                yield from self._complete(ts, dev, sector, nbytes, cat)

    def _queue(self, ts: int, dev: int, sector: int, nbytes: int, pid: int, tgid: int, cpu: int, cat: int) -> None:
        if not nbytes and not cat & TC_FLUSH:
            return  # no data and no flush: nothing the kernel object times
        for old in self.bios.get((dev, sector), ()):
            if old.split and nbytes and not old.d_ns and old.nbytes == nbytes:
                old.split = False
                return  # a split's remainder queued again: its first queue time stays
        seek = abs(sector - self.last_end[dev]) if dev in self.last_end else None
        self.last_end[dev] = sector + (nbytes >> 9)
        self._put(dev, _Bio(sector, nbytes, ts, pid, tgid, cpu, seek, seq=not nbytes or self._in_sequence(dev, cat),
                            write=bool(cat & TC_WRITE)))

    def _split(self, dev: int, sector: int, new_sector: int) -> None:
        b = self._get(dev, sector, issued=False)
        if b is None or not (sector < new_sector < sector + (b.nbytes >> 9)):
            return
        front = (new_sector - sector) << 9
        self._drop(dev, b)
        self._put(dev, _Bio(sector, front, b.q_ns, b.pid, b.tgid, b.cpu, b.seek, b.seq, write=b.write))
        self._put(dev, _Bio(new_sector, b.nbytes - front, b.q_ns, b.pid, b.tgid, b.cpu, None, b.seq, split=True,
                            write=b.write))

    def _issue(self, ts: int, dev: int, sector: int, nbytes: int, cat: int) -> None:
        if not nbytes:
            if cat & TC_FLUSH:  # a flush request of the block layer's own
                before = self.inflight.get(dev, 0)
                self.inflight[dev] = before + 1
                self.flushes.setdefault(dev, []).append((ts, before))
            return
        chain = self._chain(dev, sector, nbytes, False, bool(cat & TC_WRITE))
        if not chain:
            return
        first = chain[0]
        if first.inflight is None:
            first.inflight = self.inflight.get(dev, 0)
            self.inflight[dev] = first.inflight + 1
        for b in chain:
            if not b.d_ns:
                b.d_ns = ts

    def _complete(self, ts: int, dev: int, sector: int, nbytes: int, cat: int) -> Iterator[tuple[int, Record]]:
        if not nbytes and cat & TC_FLUSH:
            pend = self.flushes.get(dev)
            if pend:
                d_ns, before = pend.pop(0)
                self.inflight[dev] = max(0, self.inflight.get(dev, 0) - 1)
                yield ts, {"disk": dev, "op": core_abi.OP_FLUSH, "flags": cat & TC_SHOWN, "pid": 0, "tgid": 0,
                           "cgroup": 0, "cpu": 0, "size": 0, "bytes": 0, "d2c": ts - d_ns, "inflight": before}
            return
        if not nbytes:  # the end of a flush-sequence write, or of an empty PREFLUSH write
            b = next((x for x in self.bios.get((dev, sector), ()) if x.seq and x.write == bool(cat & TC_WRITE)), None)
            if b is None:
                return
            chain = [b]
        else:
            chain = self._chain(dev, sector, nbytes, True, bool(cat & TC_WRITE))
            if not chain:
                self.unpaired += 1
                return
            if chain[0].seq:
                return  # the data step of a flush sequence: the write ends with its 0-byte completion
        op = op_of(cat, nbytes)
        first = chain[0]
        if first.inflight is not None:
            self.inflight[dev] = max(0, self.inflight.get(dev, 0) - 1)
        for i, b in enumerate(chain):
            self._drop(dev, b)
            rec: Record = {
                "disk": dev, "op": op, "flags": cat & TC_SHOWN, "pid": b.pid, "tgid": b.tgid,
                "cgroup": 0, "cpu": b.cpu, "size": b.nbytes, "bytes": b.nbytes,
                "q2c": ts - b.q_ns, "seek": b.seek, "inflight": first.inflight,
            }
            d_ns = b.d_ns
            if i == 0 and not d_ns and not b.nbytes:
                d_ns = max(b.g_ns, b.q_ns)  # as the kernel object: from when it became a request
            if d_ns:
                rec["q2d"] = d_ns - b.q_ns
                if i == 0:
                    rec["d2c"] = ts - d_ns
            self._comm(rec, b.tgid)
            yield ts, rec

    def _chain(self, dev: int, sector: int, nbytes: int, issued: bool, write: bool) -> list[_Bio]:
        """The bios in flight that make up the request [sector, sector + nbytes) of one direction: a chain
        from sector (at issue, of bios not issued yet; at completion, of issued ones, or any when none is).
        A read and a write of one sector in flight at once (fio's randrw) are told apart by direction."""
        out = []
        end = sector + (nbytes >> 9)
        s = sector
        while s < end:
            # a completion ends the newest issued bio at the sector: a bio whose completion the capture
            # missed (completion_unseen, docs/lat.md) stays behind as an orphan, and the oldest would pair
            # every later I/O at that sector with the queue time of the one before (q2c of 220-450 ms
            # among fio's 30-70 us reads, in diff's p99.9 and not in report's or fleet's)
            b = self._get(dev, s, issued, newest=issued, write=write)
            if b is None and issued:
                b = self._get(dev, s, write=write)  # completed without its issue in view
            if b is None or not b.nbytes:
                break
            out.append(b)
            s += b.nbytes >> 9
        return out


class CaptureNamer:
    def __init__(self, meta: dict[str, Any], comms: dict[int, str]) -> None:
        self.devs: dict[int, str] = {}
        for d in (meta.get("devices") or {}).values():
            try:
                self.devs[devices.kdev(int(d["major"]), int(d["minor"]))] = str(d["name"])
            except (KeyError, TypeError, ValueError):
                continue
        self.comms = comms

    def disk(self, dev: int) -> str:
        if dev in self.devs:
            return self.devs[dev]
        ma, mi = devices.kdev_split(dev)
        return f"{ma}:{mi}"

    def comm(self, tgid: int) -> str:
        return self.comms.get(tgid, "[unknown]")

    def cgroup(self, cg: int) -> str:
        return "[not recorded]"

    def kstack(self, sid: int) -> str:
        return "[not recorded]"

    def ustack(self, sid: int, tgid: int) -> str:
        return "[not recorded]"

    def file(self, ip: int) -> str:
        return "[not recorded]"


def _capture_resolver(namer: CaptureNamer) -> Resolver:
    def resolve(field: str, lit: Any) -> int:
        if field == "disk":
            text = str(lit.value)
            for dev, name in namer.devs.items():
                if name == text or text == f"/dev/{name}":
                    return dev
            if ":" in text:
                ma, _, mi = text.partition(":")
                if ma.isdigit() and mi.isdigit():
                    return devices.kdev(int(ma), int(mi))
            raise ExprError(f"disk '{text}' is not in the capture (it has {', '.join(namer.devs.values())})",
                            lit.col)
        return names.resolve(field, lit)
    return resolve


def results_from_capture(path: str, exprs: Sequence[Expr], every: float | None = None,
                         disks: Sequence[str] | None = None, pid: int | None = None,
                         limit: int | None = None, note: Callable[[str], None] | None = None) -> Iterator[AggResult]:
    """One AggResult per --every window of the capture's time (or one for all of it); note() gets a
    line for a capture recorded with `record -a` (what it holds; what it cannot answer)."""
    for e in exprs:
        for f in e.fields():
            if f in MISSING_IN_CAPTURES:
                raise UsageError(f"'{e.text}' needs {f}, which a capture does not hold: "
                                 f"{MISSING_IN_CAPTURES[f]}", "ask it live instead")
    with open_capture(path) as cap:
        masked = action_mask_note(path, cap.meta.get("action_mask"))
        if masked and note is not None:  # agg pairs each I/O from its queue event on
            note(masked)
        namer = CaptureNamer(cap.meta, {})
        resolve = _capture_resolver(namer)
        progs: list[list[Insn]] = [compile_cond(w, resolve) if (w := e.kernel_where) is not None else []
                                   for e in exprs]
        want_devs: set[int] | None = None
        if disks:
            want_devs = set()
            for d in disks:
                got = [dev for dev, name in namer.devs.items() if name == d.removeprefix("/dev/")]
                if not got:
                    raise UsageError(f"disk '{d}' is not in the capture",
                                     f"it has {', '.join(namer.devs.values()) or 'no device table'}")
                want_devs |= set(got)
        comm_words = any("comm" in e.fields() for e in exprs)
        from ioscope.engines.recording.recorder import flush_machines
        pairing = Pairing(comm_words, dict(cap.comms), flush_machines(cap.meta.get("devices") or {}))
        namer.comms = pairing.comms
        window_ns = int(every * 1e9) if every else None
        records: list[Record] = []
        span = Span()  # the window's active span (ioscope.base.rate): its first I/O queued to its last completed
        t0: int | None = None
        w_start = 0
        for ev in cap.iter_chunks():
            if not len(ev):
                continue
            if t0 is None:
                t0 = int(ev["ts"][0])
                w_start = t0
            for rec_ts, rec in pairing.feed(ev):
                if window_ns is not None:
                    while rec_ts >= w_start + window_ns:
                        yield _result(exprs, progs, records, namer, w_start, w_start + window_ns, t0, cap, limit,
                                      active_s=span.seconds)
                        records = []
                        span = Span()
                        w_start += window_ns
                if want_devs is not None and rec["disk"] not in want_devs:
                    continue
                if pid is not None and rec.get("tgid") != pid:
                    continue
                records.append(rec)
                q2c = rec.get("q2c")
                if q2c is not None:
                    span.add(rec_ts - q2c, rec_ts)
        end = int((cap.meta.get("end") or {}).get("mono_ns") or 0)
        last = w_start + window_ns if window_ns is not None else max(end, pairing.last_ts, w_start)
        yield _result(exprs, progs, records, namer, w_start, last, t0 or 0, cap, limit, unpaired=pairing.unpaired,
                      active_s=span.seconds)


def _result(exprs: Sequence[Expr], progs: list[list[Insn]], records: list[dict[str, int | None]],
            namer: CaptureNamer, start: int, end: int, t0: int, cap: Any, limit: int | None,
            unpaired: int = 0, active_s: float | None = None) -> AggResult:
    raw: list[RawRow] = aggregate(exprs, progs, records)
    rows = names.name_rows(exprs, raw, namer)
    clock = cap.meta.get("start") or cap.meta.get("clock") or {}
    wall0 = (int(clock.get("wall_ns", 0)) - int(clock.get("mono_ns", 0))) / 1e9  # wall time of monotonic 0
    losses = Losses({"completed_without_start": unpaired}, frozenset(), {})
    sample = AggSample(wall=wall0 + end / 1e9, started=wall0 + start / 1e9, rows=rows, losses=losses, final=True)
    res = build_result(exprs, sample, limit)
    res.active_s = active_s
    return res


__all__ = ["Pairing", "op_of", "results_from_capture"]
