"""ioscope agg over a capture (-r): the capture's events paired into one record per bio by ioscope's
per-bio pairing (engines/pairing/bios.py: the rules of the agg BPF object, so that a question asked live
and of a capture of the same I/O gets the same answer), then the same evaluation (model.aggregate, which
runs the kernel's WHERE program) and the same naming, model and views.

Why not report's btt records: they are one per *phase* (q2c, q2d, d2c separately, keyed by device and
process), not one per I/O carrying its size, op, flags, thread, CPU, seek and in-flight count together,
which is what a WHERE condition such as `d2c > 1ms and bytes >= 64k` needs. I/O already in flight when the
capture started (a C or D without its Q) is left out (counted as completed_without_start), where live it
is counted with d2c only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ioscope.base import devices, units
from ioscope.base.cgroups import within
from ioscope.base.errors import UsageError
from ioscope.base.losses import Losses
from ioscope.base.rate import Span
from ioscope.capture.events import EV_NOTE_PROCESS, TC_DISCARD, TC_FLUSH, TC_WRITE, action_mask_note, note_comm
from ioscope.capture.store import open_capture
from ioscope.engines.aggregate import names
from ioscope.engines.aggregate.expr import Expr, ExprError, Insn, Resolver, compile_cond
from ioscope.engines.aggregate.model import AggResult, AggSample, RawRow, aggregate, build_result
from ioscope.engines.pairing.bios import BR_FIRST, BR_FLUSH, BR_UNPAIRED, NO_TIME, Bios
from ioscope.kernel import abi as core_abi

TC_SHOWN = 0x1 | 0x2 | 0x4 | 0x8 | 0x800 | 0x1000 | 0x2000 | 0x8000  # bpf/agg.bpf.c TC_SHOWN
MISSING_IN_CAPTURES = {"kstack": "stacks (record does not store them)",
                       "ustack": "stacks (record does not store them)",
                       "file": "file names (record does not store them)",
                       "throttle": "blk-throttle's waits (record does not store them)",
                       "iowait": "the threads' I/O waits (record does not store them)",
                       "swapin": "the threads' I/O waits (record does not store them)"}


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
NO_TIME_INT = int(NO_TIME)


def comm_words(name: str) -> tuple[int, int]:
    """A process name as the kernel's two comm words (the comm condition compares them)."""
    raw = name.encode()[:15].ljust(16, b"\0")
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


def records(recs: np.ndarray, comms: dict[int, str] | None = None) -> Iterator[tuple[int, Record]]:
    """(completion time, agg record) of each bio the pairing completed (bios.BIOREC), as the kernel object
    builds them; comms (tgid -> name): add the comm words. Completions of I/O queued before the events
    began are left out (the pairing counts them)."""
    keep = recs[(recs["flags"] & BR_UNPAIRED) == 0]
    words: dict[int, tuple[int, int]] = {}
    for c, q, d, _sector, seek, dev, nbytes, c_bytes, pid, tgid, infl, cpu, cat, _err, flags, cg in keep.tolist():
        if flags & BR_FLUSH:
            yield c, {"disk": dev, "op": core_abi.OP_FLUSH, "flags": cat & TC_SHOWN, "pid": 0, "tgid": 0,
                      "cgroup": 0, "cpu": 0, "size": 0, "bytes": 0, "d2c": c - d, "inflight": infl}
            continue
        rec: Record = {"disk": dev, "op": op_of(cat, c_bytes), "flags": cat & TC_SHOWN, "pid": pid, "tgid": tgid,
                       "cgroup": cg, "cpu": cpu, "size": nbytes, "bytes": nbytes, "q2c": c - q,
                       "seek": None if seek < 0 else seek, "inflight": None if infl < 0 else infl}
        if d != NO_TIME_INT and d:
            rec["q2d"] = d - q
            if flags & BR_FIRST:
                rec["d2c"] = c - d
        if comms is not None:
            w = words.get(tgid)
            if w is None and (name := comms.get(tgid)) is not None:
                w = words[tgid] = comm_words(name)
            if w is not None:
                rec["comm0"], rec["comm1"] = w
        yield c, rec


def paired(bios: Bios, ev: np.ndarray, comms: dict[int, str], want_comm: bool) -> Iterator[tuple[int, Record]]:
    """The records of a chunk, each process note applied where it is (a rename names the I/Os that
    complete after it)."""
    notes = np.flatnonzero((ev["action"] == 0) & ((ev["flags"] & EV_NOTE_PROCESS) != 0) & (ev["pid"] == ev["tgid"]))
    start = 0
    for k in [*notes.tolist(), len(ev)]:
        if k > start:
            yield from records(bios.feed(ev[start:k]), comms if want_comm else None)
        if k < len(ev):
            comms[int(ev["tgid"][k])] = note_comm(ev[k])
        start = k + 1


class CaptureNamer:
    def __init__(self, meta: dict[str, Any], comms: dict[int, str], cgroups: dict[int, str] | None = None) -> None:
        self.devs: dict[int, str] = {}
        self.cgroups = cgroups or {}   # id -> path, as the capture stores them
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
        if not cg:   # I/O whose queue event came before the capture's, or a capture recorded before cgroups were
            return "[unknown]" if self.cgroups else "[not recorded]"
        return self.cgroups.get(cg, f"cgroup:{cg}")

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
        if field == "cgroup":
            text = str(lit.value)
            for cg, p in namer.cgroups.items():
                if p == text or p == "/" + text.lstrip("/"):
                    return cg
            raise ExprError(f"cgroup '{text}' has no I/O in the capture (it has "
                            f"{', '.join(sorted(namer.cgroups.values())) or 'no cgroups: recorded without them'})",
                            lit.col)
        return names.resolve(field, lit)
    return resolve


def capture_cgroups(cgroups: dict[int, str], path: str) -> set[int]:
    """The ids of a cgroup and those under it among a capture's cgroups (-c CGROUP over a capture)."""
    top = "/" + path.strip("/")
    got = {cg for cg, p in cgroups.items() if within(p, top)}
    if not got:
        raise UsageError(f"cgroup '{path}' has no I/O in the capture",
                         f"it has {', '.join(sorted(cgroups.values()))}" if cgroups else
                         "it holds no cgroups (recorded by an ioscope that did not store them, or imported "
                         "from blktrace files)")
    return got


def results_from_capture(path: str, exprs: Sequence[Expr], every: float | None = None,
                         disks: Sequence[str] | None = None, pid: int | None = None, cgroup: str | None = None,
                         limit: int | None = None, note: Callable[[str], None] | None = None) -> Iterator[AggResult]:
    """One AggResult per --every window of the capture's time (or one for all of it); note() gets a
    line for a capture recorded with `record -a` (what it holds; what it cannot answer). cgroup: only
    the I/O of this cgroup and those under it (-c), by the paths the capture stores."""
    for e in exprs:
        for f in e.fields():
            if f in MISSING_IN_CAPTURES:
                raise UsageError(f"'{e.text}' needs {f}, which a capture does not hold: "
                                 f"{MISSING_IN_CAPTURES[f]}", "ask it live instead")
    with open_capture(path) as cap:
        masked = action_mask_note(path, cap.meta.get("action_mask"))
        if masked and note is not None:  # agg pairs each I/O from its queue event on
            note(masked)
        namer = CaptureNamer(cap.meta, {}, dict(cap.cgroups))
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
        want_cgs = capture_cgroups(cap.cgroups, cgroup) if cgroup is not None else None
        want_comm = any("comm" in e.fields() for e in exprs)
        from ioscope.engines.recording.recorder import flush_machines
        bios = Bios(flush_machines(cap.meta.get("devices") or {}))
        comms = dict(cap.comms)
        namer.comms = comms
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
            for rec_ts, rec in paired(bios, ev, comms, want_comm):
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
                if want_cgs is not None and rec.get("cgroup") not in want_cgs:
                    continue
                records.append(rec)
                q2c = rec.get("q2c")
                if q2c is not None:
                    span.add(rec_ts - q2c, rec_ts)
        end = int((cap.meta.get("end") or {}).get("mono_ns") or 0)
        last = w_start + window_ns if window_ns is not None else max(end, bios.last_ts, w_start)
        yield _result(exprs, progs, records, namer, w_start, last, t0 or 0, cap, limit, unpaired=bios.unpaired,
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
    res.unit = units.PIECES   # bios.c cuts a split bio into its pieces, each a record
    return res


__all__ = ["op_of", "records", "results_from_capture"]
