"""ioscope import: blktrace binaries into an ioscope capture (so parse and report work on them)."""

from __future__ import annotations

import argparse
import base64
import binascii
import bisect
import os
import re
import sys
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base import outfile
from ioscope.base.devices import kdev_split, kdev_str
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.base.fmt import comm_str
from ioscope.capture import blktrace
from ioscope.capture.events import EV_NOTE_PROCESS, EVENT

PER_CPU = re.compile(r"^(?P<stem>.+)\.blktrace\.(?P<cpu>\d+)$")


def expand_inputs(args: list[str]) -> list[tuple[str, list[str]]]:
    """[(name, files)]: each per-CPU set (NAME.blktrace.N, or NAME alone) once, each dump on its own."""
    out: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    for a in args:
        m = PER_CPU.match(a)
        if m or (not os.path.exists(a) and os.path.exists(f"{a}.blktrace.0")):
            stem = m.group("stem") if m else a
            if stem in seen:
                continue
            seen.add(stem)
            files = blktrace.per_cpu_files(f"{stem}.blktrace.0") if os.path.exists(f"{stem}.blktrace.0") else [a]
            if m and a not in files:
                files.append(a)
            out.append((os.path.basename(stem), files))
        else:
            if not os.path.exists(a):
                raise IoscopeError(f"cannot open {a}: no such file", "give blktrace files (NAME.blktrace.N) or dumps")
            if a in seen:
                continue
            seen.add(a)
            out.append((os.path.basename(a), [a]))
    return out


def check_file(path: str, block: int = 16 << 20) -> tuple[int, str]:
    """Walk every record of a blktrace file: (records, byte order); BlktraceError names the file and offset."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise IoscopeError(f"cannot open {path}: {exc.strerror}") from None
    if size == 0:  # blktrace's file of a CPU that saw no event: valid, and empty
        return 0, "<"
    n = 0
    order: str | None = None
    with open(path, "rb") as f:
        pos = 0
        carry = b""
        while True:
            data = f.read(block)
            buf = carry + data
            final = len(data) < block
            if not buf:
                break
            offs, used, order = blktrace.record_offsets(buf, path, pos, order, final=final)
            n += len(offs)
            pos += used
            carry = buf[used:]
            if final:
                break
    return n, order or "<"


def survey(groups: list[tuple[str, list[str]]]) -> tuple[dict[int, str], list[tuple[int, int]], int]:
    """First pass: devices (named after their per-CPU files), timestamp notes and the highest CPU."""
    devs: dict[int, str] = {}
    stamps: list[tuple[int, int]] = []
    max_cpu = 0
    for name, fs in groups:
        named = len(fs) > 1 or bool(PER_CPU.match(os.path.basename(fs[0])))
        seen: set[int] = set()
        traced: set[int] = set()   # the set's own disk: its notes carry it (a remap's records may not)
        for d in blktrace.read_merged(fs):
            stamps.extend(d.timestamps)
            if len(d.events):
                max_cpu = max(max_cpu, int(d.events["cpu"].max()))
                seen.update(np.unique(d.events["dev"]).tolist())
                notes = (d.events["flags"] & EV_NOTE_PROCESS) != 0
                traced.update(np.unique(d.events["dev"][notes]).tolist())
        for dev in sorted(seen):
            devs.setdefault(int(dev), name if named and (not traced or dev in traced) else "")
    return devs, stamps, max_cpu


SIDE_KEY = "blktrace_files"   # the end record's part that keeps what EVENT does not (see FileSets)


def _pack(arr: npt.NDArray[Any]) -> str:
    return base64.b64encode(zlib.compress(np.ascontiguousarray(arr).tobytes(), 6)).decode()


def _unpack(text: str, dtype: Any, n: int) -> npt.NDArray[Any]:
    out = np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=dtype)
    if len(out) != n:
        raise ValueError(f"{len(out)} values for {n} events")
    return out


@dataclass
class FileSets:
    """What an import of blktrace's per-CPU files kept beside the events (the end record's SIDE_KEY).

    Indexes count the capture's block events (process notes left out), in the capture's order, which is
    the order blkparse read them in. seq: each one's sequence number; set_of: the file set (NAME of
    NAME.blktrace.N) it came from; notes: every notify record as (set, cpu, block records before it in
    its file, block events blkparse printed before it or -1 when it is not printed, its bytes); raw:
    the records EVENT does not give back byte for byte, by index.
    """

    sets: list[dict[str, Any]]
    seq: npt.NDArray[np.uint32]
    set_of: npt.NDArray[np.uint16]
    notes: list[tuple[int, int, int, int, bytes]]
    raw: dict[int, bytes]
    rank: npt.NDArray[np.uint32] | None = None   # capture index -> place in blkparse's order (None: the same)

    def in_blkparse_order(self, ev: npt.NDArray[np.void]) -> tuple[npt.NDArray[np.void], FileSets]:
        """The capture's block events, and this record, in blkparse's order (a no-op unless rank)."""
        if self.rank is None:
            return ev, self
        pos = np.empty(len(self.rank), dtype=np.int64)   # blkparse's place -> capture index
        pos[self.rank] = np.arange(len(self.rank))
        back = np.empty(len(pos), dtype=np.int64)
        back[pos] = np.arange(len(pos))
        return blktrace.select_events(ev, pos), FileSets(self.sets, self.seq[pos], self.set_of[pos], self.notes,
                                                         {int(back[g]): r for g, r in self.raw.items()})

    @property
    def names(self) -> list[str]:
        return [str(x["name"]) for x in self.sets]

    def wall_clock(self) -> int | None:
        """The wall clock (ns) of the last BLK_TN_TIMESTAMP note blkparse reads first (files in order)."""
        wall = None
        for si, cpu, _fp, _mp, rec in sorted(self.notes, key=lambda n: (n[0], n[1])):
            order = self.order(si, cpu)
            act, _t = _note_action(rec, order)
            if act == blktrace.NOTIFY_ACTION | blktrace.TN_TIMESTAMP and len(rec) >= 56:
                sec, nsec = np.frombuffer(rec[48:56], dtype=order + "u4").tolist()
                wall = int(sec) * 1_000_000_000 + int(nsec)
        return wall

    def own_devices(self) -> dict[int, int]:
        """index -> the record's own device, where it is not the event's (kept records only)."""
        out = {}
        for g, rec in self.raw.items():   # the magic's first byte tells the record's byte order
            out[g] = int.from_bytes(rec[36:40], "little" if rec[0] == blktrace.VERSION else "big")
        return out

    def order(self, set_idx: int, cpu: int) -> str:
        for f in self.sets[set_idx]["files"]:
            if f["cpu"] == cpu:
                return str(f["order"])
        return "<"


def file_sets(src: Any) -> FileSets | None:
    """The kept blktrace records of a capture imported from per-CPU files (None for any other)."""
    cap = getattr(src, "_capture", None)
    end = getattr(cap, "end", None)
    side = end.get(SIDE_KEY) if isinstance(end, dict) else None
    if not isinstance(side, dict):
        return None
    return _from_side(side, src.path)


class _Collect:
    """A writer that keeps what import_sets writes, for reading per-CPU files without a capture."""

    def __init__(self) -> None:
        self.parts: list[npt.NDArray[np.void]] = []
        self.comms: dict[int, str] = {}

    def add_comms(self, comms: dict[int, str]) -> None:
        self.comms.update(comms)

    def write(self, ev: npt.NDArray[np.void]) -> None:
        self.parts.append(ev)


@dataclass
class FileSetSource:
    """blktrace's per-CPU files read whole, as an import reads them: chunks and comms like a Source's."""

    path: str
    parts: list[npt.NDArray[np.void]]
    comms: dict[int, str]
    fs: FileSets

    def chunks(self) -> Any:
        yield from self.parts


def read_file_sets(path: str) -> FileSetSource | None:
    """parse's way into per-CPU files given directly (NAME or NAME.blktrace.N): None for a dump."""
    groups = expand_inputs([path])
    if not all(len(fs) > 1 or PER_CPU.match(os.path.basename(fs[0])) for _n, fs in groups):
        return None
    for _n, fs in groups:
        for f in fs:
            check_file(f)
    w = _Collect()
    _n_events, _comms, side = import_sets(groups, w)
    return FileSetSource(path, w.parts, w.comms, _from_side(side, path))


def _from_side(side: dict[str, Any], path: str) -> FileSets:
    try:
        n = int(side["events"])
        return FileSets(list(side["sets"]), _unpack(side["seq"], "<u4", n).astype(np.uint32),
                        _unpack(side["set"], "<u2", n).astype(np.uint16),
                        [(int(a), int(b), int(c), int(d), bytes.fromhex(e)) for a, b, c, d, e in side["notes"]],
                        {int(g): bytes.fromhex(h) for g, h in side["raw"]},
                        _unpack(side["rank"], "<u4", n).astype(np.uint32) if "rank" in side else None)
    except (KeyError, ValueError, TypeError, zlib.error, binascii.Error) as exc:
        raise IoscopeError(f"{path}: corrupt blktrace record of the import ({exc})",
                           "import the blktrace files again") from None


@dataclass
class _Stream:
    """One per-CPU file as blkparse reads it: its traces (block records and messages) in file order."""

    set_idx: int
    cpu: int
    ft: blktrace.FileTrace
    times: npt.NDArray[np.int64]     # time of each trace
    ref: npt.NDArray[np.int64]       # >= 0: block record index; < 0: -1 - index in ft.notes (a message)
    cur: int = 0


def _note_action(rec: bytes, order: str) -> tuple[int, int]:
    """(action word, time) of a notify record's bytes."""
    return (int.from_bytes(rec[28:32], "little" if order == "<" else "big"),
            int.from_bytes(rec[8:16], "little" if order == "<" else "big"))


def _is_message(action: int) -> bool:
    """A message blkparse prints (1.2.0 prints none that carries a cgroup id: it takes them for unknown notes)."""
    return action == blktrace.NOTIFY_ACTION | blktrace.TN_MESSAGE


def _note_cpu(rec: bytes, order: str) -> int:
    return int.from_bytes(rec[40:44], "little" if order == "<" else "big")


def _stream(set_idx: int, cpu: int, ft: blktrace.FileTrace) -> _Stream:
    msg = [(k, pos) for k, (pos, rec) in enumerate(ft.notes)
           if _is_message(_note_action(rec, ft.order)[0]) and _note_cpu(rec, ft.order) == cpu]
    n = len(ft.events)
    key = np.concatenate([2 * np.arange(n, dtype=np.int64) + 1, np.array([2 * p for _k, p in msg], dtype=np.int64)])
    ref = np.concatenate([np.arange(n, dtype=np.int64), np.array([-1 - k for k, _p in msg], dtype=np.int64)])
    times = np.concatenate([ft.events["ts"].astype(np.int64),
                            np.array([_note_action(ft.notes[k][1], ft.order)[1] for k, _p in msg], dtype=np.int64)])
    o = np.argsort(key, kind="stable")
    return _Stream(set_idx, cpu, ft, times[o], ref[o])


def blkparse_merge(streams: list[_Stream]) -> list[tuple[int, int, int]]:
    """The order blkparse prints the traces of its input files in: [(stream, first, end)] runs.

    blkparse keeps its streams in a list ordered by the time of each one's next trace (a stream goes in
    before the first whose next trace is later, or as the head when it is earlier than the head's) and
    prints the head's traces while each is no later than the second stream's next one; then the head
    goes back into the list by the same rule (blkparse.c: ms_sort, ms_resort).
    """
    lst: list[int] = []
    times: list[list[int]] = [st.times.tolist() for st in streams]
    cur = [st.cur for st in streams]

    def t_of(s: int) -> int:
        return times[s][cur[s]]

    def ms_sort(s: int) -> None:
        t = t_of(s)
        if not lst:
            lst.append(s)
        elif t < t_of(lst[0]):
            lst.insert(0, s)
        else:
            j = 0
            while j + 1 < len(lst) and t_of(lst[j + 1]) < t:
                j += 1
            lst.insert(j + 1, s)

    for i, st in enumerate(streams):
        if len(st.times):
            ms_sort(i)
    is_sorted = [bool((np.diff(st.times) >= 0).all()) for st in streams]
    runs: list[tuple[int, int, int]] = []
    while lst:
        h = lst[0]
        th = times[h]
        start = cur[h]
        end = start + 1
        if len(lst) == 1:
            end = len(th)
        else:
            tn = t_of(lst[1])
            if is_sorted[h]:
                end = max(end, bisect.bisect_right(th, tn, start))
            else:
                while end < len(th) and th[end] <= tn:
                    end += 1
        runs.append((h, start, end))
        cur[h] = end
        lst.pop(0)
        if end < len(th):
            ms_sort(h)
    for st, c in zip(streams, cur):
        st.cur = c
    return runs


def import_sets(groups: list[tuple[str, list[str]]], w: Any) -> tuple[int, dict[int, str], dict[str, Any]]:
    """Per-CPU file sets into the writer, in blkparse's order; (block events, comms, the side record)."""
    streams: list[_Stream] = []
    sets: list[dict[str, Any]] = []
    for si, (name, fs) in enumerate(groups):
        cpus = []
        for f in fs:
            m = PER_CPU.match(os.path.basename(f))
            cpu = int(m.group("cpu")) if m else 0
            ft = blktrace.read_file(f, cpu)
            cpus.append({"cpu": cpu, "bytes": ft.size, "order": ft.order})
            streams.append(_stream(si, cpu, ft))
        sets.append({"name": name, "files": cpus})
    runs = np.array(blkparse_merge(streams), dtype=np.int64).reshape(-1, 3)
    # every trace in blkparse's order as an index into all streams' traces laid end to end
    toff = np.cumsum([0] + [len(st.ref) for st in streams])
    eoff = np.cumsum([0] + [len(st.ft.events) for st in streams])
    lens = runs[:, 2] - runs[:, 1]
    total = int(lens.sum())
    first = np.repeat(runs[:, 1] + toff[runs[:, 0]] - (np.cumsum(lens) - lens), lens)
    trace = first + np.arange(total)
    ref = np.concatenate([st.ref for st in streams]) if streams else np.zeros(0, np.int64)
    sid = np.repeat(runs[:, 0], lens)
    r = ref[trace]
    isblk = r >= 0
    gblk = eoff[sid[isblk]] + r[isblk]                 # block events, as indexes into all files' events
    n = len(gblk)
    before: npt.NDArray[np.int64] = np.cumsum(isblk) - isblk   # block events printed before each trace
    msg_at = {(int(s), int(-1 - k)): int(b) for s, k, b in zip(sid[~isblk].tolist(), r[~isblk].tolist(),
                                                                 before[~isblk].tolist())}
    all_ev = blktrace.join_events([st.ft.events for st in streams]) if streams else np.zeros(0, dtype=EVENT)
    ev = blktrace.select_events(all_ev, gblk)
    seq = np.concatenate([st.ft.seq for st in streams])[gblk] if streams else np.zeros(0, np.uint32)
    set_of = np.repeat(np.array([st.set_idx for st in streams], dtype=np.uint16), np.diff(eoff))[gblk]
    where = np.empty(len(all_ev), dtype=np.int64)
    where[gblk] = np.arange(n)
    raw_kept = {int(where[eoff[s] + i]): rec for s, st in enumerate(streams) for i, rec in st.ft.raw.items()}
    # process notes name pids for the capture's readers (report, snoop, ...): each goes in at its time
    notes_rows: list[npt.NDArray[np.void]] = []
    comms: dict[int, str] = {}
    side_notes: list[list[Any]] = []
    for s, st in enumerate(streams):
        order = st.ft.order
        for k, (pos, rec) in enumerate(st.ft.notes):
            act, t = _note_action(rec, order)
            side_notes.append([st.set_idx, st.cpu, pos, msg_at.get((s, k), -1), rec.hex()])
            if (act & ~blktrace.TA_CGROUP_NOTE) == blktrace.NOTIFY_ACTION | blktrace.TN_PROCESS and len(rec) >= 64 \
                    and _note_cpu(rec, order) == st.cpu:
                pid = int.from_bytes(rec[32:36], "little" if order == "<" else "big")
                dev = int.from_bytes(rec[36:40], "little" if order == "<" else "big")
                name = comm_str(rec[48:64])
                comms[pid] = name
                notes_rows.append(blktrace.process_notes({pid: name}, [pid], dev, st.cpu, t))
    # a capture is in time order (its writer sorts what is not); blkparse's order is that too unless a file
    # is not (a clock that went back, a damaged time): then the capture holds the events by time and
    # "rank" gives each one's place in blkparse's order
    rank = None
    if len(ev) and not (np.diff(ev["ts"].astype(np.int64)) >= 0).all():
        rank = np.argsort(ev["ts"], kind="stable")
        ev, seq, set_of = blktrace.select_events(ev, rank), seq[rank], set_of[rank]
        cap_at = np.empty(len(rank), dtype=np.int64)   # blkparse's place -> capture index
        cap_at[rank] = np.arange(len(rank))
        raw_kept = {int(cap_at[g]): rec for g, rec in raw_kept.items()}
    if notes_rows:
        nev = blktrace.join_events(notes_rows)
        allev = blktrace.join_events([nev, ev])
        is_b = np.r_[np.zeros(len(nev), np.int8), np.ones(len(ev), np.int8)]
        # by time; at one time a note before the block events, block events in their order
        o = np.lexsort((np.r_[np.zeros(len(nev), np.int64), np.arange(len(ev))], is_b, allev["ts"]))
        allev = blktrace.select_events(allev, o)
    else:
        allev = ev
    if comms:
        w.add_comms(comms)
    step = 1 << 16
    for i in range(0, len(allev), step):
        w.write(allev[i:i + step])
    side = {"sets": sets, "events": n, "seq": _pack(seq.astype("<u4")), "set": _pack(set_of.astype("<u2")),
            "notes": side_notes, "raw": [[g, raw_kept[g].hex()] for g in sorted(raw_kept)]}
    if rank is not None:
        side["rank"] = _pack(rank.astype("<u4"))
    return n, comms, side


def import_blktrace(inputs: list[str], out: str) -> dict[str, Any]:
    """Write a capture at out from blktrace files; returns a summary.

    Every file is checked first (a corrupt or cut file is reported with its
    byte offset before anything is written); the capture is written to
    OUT.part and renamed when complete.
    """
    from ioscope.capture.store import CaptureWriter
    groups = expand_inputs(inputs)
    files = [f for _name, fs in groups for f in fs]
    if not files:
        raise UsageError("no input files", "give blktrace files or dumps")
    orders = {f: check_file(f)[1] for f in files}
    devs, stamps, max_cpu = survey(groups)
    devices: dict[str, Any] = {}
    for dev, name in devs.items():
        ma, mi = kdev_split(dev)
        info: dict[str, Any] = {"major": ma, "minor": mi}
        if name:
            info["name"] = name
        devices[kdev_str(dev)] = info
    meta: dict[str, Any] = {
        # the host that recorded is unknown: blktrace files do not say
        "host": None, "kernel": None, "kernel_version": None, "machine": None, "ncpus": max_cpu + 1,
        "source": "blktrace", "imported_from": [os.path.abspath(f) for f in files],
        "byte_orders": sorted({"big" if o == ">" else "little" for o in orders.values()}),
        "devices": devices, "tracepoints": [], "lost": {},
    }
    if stamps:
        mono, wall = stamps[0]   # the wall clock at a trace time (blktrace's timestamp note)
        meta["clock"] = meta["start"] = {"mono_ns": mono, "wall_ns": wall, "uncertainty_ns": 0}
    tmp = out + ".part"
    w = CaptureWriter(tmp, meta, force=True)   # our own scratch file, renamed when complete
    comms: dict[int, str] = {}
    n_events = 0
    per_cpu = all(len(fs) > 1 or PER_CPU.match(os.path.basename(fs[0])) for _n, fs in groups)
    try:
        if per_cpu:   # blktrace's own files: everything kept, in the order blkparse reads them
            n_events, comms, side = import_sets(groups, w)
            w.close({"imported_events": n_events, SIDE_KEY: side})
            files_done = True
        else:
            files_done = False
        for d in ([] if files_done else blktrace.read_merged(files)):
            if d.comms:
                comms.update(d.comms)
                w.add_comms(d.comms)
            if len(d.events):
                n_events += int(((d.events["flags"] & EV_NOTE_PROCESS) == 0).sum())
                w.write(d.events)
        if not files_done:
            w.close({"imported_events": n_events})
    except BaseException:
        w.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        os.replace(tmp, out)
    except OSError as exc:
        raise IoscopeError(f"cannot write {out}: {exc.strerror}") from None
    return {"files": files, "events": n_events, "devices": devs, "comms": len(comms)}


def run(args: argparse.Namespace) -> int:
    outfile.check_output(args.output, args.force)
    info = import_blktrace(args.inputs, args.output)
    sys.stderr.write(f"ioscope import: {info['events']} events from {len(info['files'])} file(s), "
                     f"{len(info['devices'])} device(s), {info['comms']} process names -> {args.output}\n")
    if not info["events"]:
        sys.stderr.write("ioscope import: note: the input holds no block events (an idle disk, or not the files "
                         "you meant); the capture is empty\n")
    return 0
