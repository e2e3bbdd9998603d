"""ioscope import: blktrace binaries into an ioscope capture (so parse and report work on them)."""

from __future__ import annotations

import argparse
import base64
import binascii
import bisect
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base import outfile
from ioscope.base.devices import kdev_split, kdev_str
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.base.fmt import comm_str
from ioscope.capture import blktrace
from ioscope.capture.events import EV_CGROUP, EV_NOTE_PROCESS, EVENT, TA_QUEUE

PER_CPU = blktrace.PER_CPU_NAME
DUMP_CPU = -1   # the "CPU" of a dump's one file in a FileSets record: a stream of every CPU's records
# a file named NAME.blktrace.N holding more than this share of records of other CPUs is a stream (a dump)
# stored under a per-CPU name, not blktrace's file of CPU N (whose stray records blkparse skips: "trace
# info has error cpu")
OTHER_CPU_SHARE = 0.01


@dataclass
class Group:
    """One input as blkparse would read it: a per-CPU set (NAME.blktrace.N; cpus the files' CPUs) or a
    stream (a `blkparse -d` dump, or a file given alone: cpus [DUMP_CPU])."""

    name: str
    files: list[str]
    cpus: list[int]
    missing: list[int]            # CPUs below the highest whose file is not there (read: every file)
    note: str | None = None       # said on stderr: how the input was read, when its name says otherwise

    @property
    def dump(self) -> bool:
        return self.cpus == [DUMP_CPU]


def other_cpu_share(path: str, cpu: int) -> float:
    """The share of a file's block records that are not of CPU cpu."""
    n = other = 0
    for d in blktrace.read_stream(path):
        blk = (d.events["flags"] & EV_NOTE_PROCESS) == 0
        n += int(blk.sum())
        other += int((blk & (d.events["cpu"] != cpu)).sum())
    return other / n if n else 0.0


def expand_inputs(args: list[str]) -> list[Group]:
    """Each per-CPU set (NAME.blktrace.N, or NAME alone) once, with every file it has; each stream on its own.
    What a file is comes from its content, not only its name: a file named NAME.blktrace.N whose records
    are of several CPUs is a stream (a dump under a per-CPU name), read as one, as btt reads it."""
    out: list[Group] = []
    seen: set[str] = set()
    for a in args:
        m = PER_CPU.match(os.path.basename(a))
        fs = blktrace.file_set(a) if m or not os.path.exists(a) else None
        if fs is None:
            if not os.path.exists(a):
                raise IoscopeError(f"cannot open {a}: no such file", "give blktrace files (NAME.blktrace.N) or dumps")
            if a not in seen:
                seen.add(a)
                out.append(Group(os.path.basename(a), [a], [DUMP_CPU], []))
            continue
        if fs.stem in seen:
            continue
        seen.add(fs.stem)
        files: list[str] = []
        cpus: list[int] = []
        for cpu, f in fs.files:
            share = other_cpu_share(f, cpu)
            if share > OTHER_CPU_SHARE:
                out.append(Group(os.path.basename(f), [f], [DUMP_CPU], [],
                                 f"{f} holds records of other CPUs than {cpu} ({100 * share:.0f}%): it is one stream "
                                 "of every CPU's records (a blkparse -d dump), not blktrace's file of CPU "
                                 f"{cpu}; read as a stream, as btt reads it"))
            else:
                files.append(f)
                cpus.append(cpu)
        if files:
            have = set(cpus)
            missing = [c for c in range(cpus[-1]) if c not in have]   # cpus[-1] <= blktrace.MAX_CPU
            note = None
            if missing:
                gaps = ", ".join(f"{os.path.basename(fs.stem)}.blktrace.{c}" for c in missing[:8])
                if len(missing) > 8:
                    gaps += f" and {len(missing) - 8} more"
                note = (f"{os.path.basename(fs.stem)}: {gaps} {'is' if len(missing) == 1 else 'are'} missing: read "
                        f"the {len(files)} other files (blkparse would stop at the first missing one)")
            out.append(Group(os.path.basename(fs.stem), files, cpus, missing, note))
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


SIDE_KEY = "blktrace_files"   # the end record's part that keeps what EVENT does not (see FileSets)


def _pack(arr: npt.NDArray[Any]) -> str:
    return base64.b64encode(zlib.compress(np.ascontiguousarray(arr).tobytes(), 6)).decode()


def _unpack(text: str, dtype: Any, n: int) -> npt.NDArray[Any]:
    """n values packed by _pack; inflated no further than n values and one byte (a file's zlib stream
    could otherwise inflate to any size)."""
    want = n * np.dtype(dtype).itemsize
    z = zlib.decompressobj()
    data = z.decompress(base64.b64decode(text, validate=True), want + 1)
    if len(data) > want:
        raise ValueError(f"more than {n} values for {n} events")
    if len(data) != want:
        raise ValueError(f"{len(data) // np.dtype(dtype).itemsize} values for {n} events")
    if not z.eof:
        raise ValueError("a packed array cut short")
    return np.frombuffer(data, dtype=dtype)


@dataclass
class FileSets:
    """What an import of blktrace files kept beside the events (the end record's SIDE_KEY).

    A set is blktrace's per-CPU files of one name (NAME.blktrace.N), or one stream (a dump: its one file's
    "cpu" is DUMP_CPU). Indexes count the capture's block events (process notes left out), in the
    capture's order, which is the order blkparse read them in (a dump's: its file's order). seq: each
    one's sequence number; set_of: the set it came from; notes: every notify record (and, in a per-CPU
    file, every record of another CPU) as (set, cpu, block records before it in its file, block events
    blkparse printed before it or -1 when it is not printed, its bytes); raw: the records EVENT does not
    give back byte for byte, by index; printed: the notes blkparse prints (its messages) in the order it
    prints them (see messages()).
    """

    sets: list[dict[str, Any]]
    seq: npt.NDArray[np.uint32]
    set_of: npt.NDArray[np.uint16]
    notes: list[tuple[int, int, int, int, bytes]]
    raw: dict[int, bytes]
    rank: npt.NDArray[np.uint32] | None = None   # capture index -> place in blkparse's order (None: the same)
    printed: npt.NDArray[np.uint32] | None = None   # message notes, in blkparse's order (None: not kept)

    def messages(self) -> list[tuple[int, int]]:
        """The messages blkparse prints, in its order: [(block events printed before it, note index)].

        How many block events come before a message does not order the messages between two block events:
        blkparse prints those in its merge of the per-CPU files (blkparse_merge), so messages of several
        CPUs with no block event between them come in the order of their times, not their files'. The
        import keeps that order (printed); an import made before it did gives these, at one place, by their
        time, then file order (blkparse's order when the files' times only go forward and none are equal)."""
        if self.printed is not None:
            return [(self.notes[k][3], k) for k in self.printed.tolist()]
        ks = [k for k, n in enumerate(self.notes) if n[3] >= 0 and self.note_kind(k) == "message"]
        key = {k: (self.notes[k][3], _note_action(self.notes[k][4], self.order(*self.notes[k][:2]))[1], k)
               for k in ks}
        return [(self.notes[k][3], k) for k in sorted(ks, key=key.__getitem__)]

    def in_blkparse_order(self, ev: npt.NDArray[np.void]) -> tuple[npt.NDArray[np.void], FileSets]:
        """The capture's block events, and this record, in blkparse's order (a no-op unless rank)."""
        if self.rank is None:
            return ev, self
        pos = np.empty(len(self.rank), dtype=np.int64)   # blkparse's place -> capture index
        pos[self.rank] = np.arange(len(self.rank))
        back = np.empty(len(pos), dtype=np.int64)
        back[pos] = np.arange(len(pos))
        return blktrace.select_events(ev, pos), FileSets(self.sets, self.seq[pos], self.set_of[pos], self.notes,
                                                         {int(back[g]): r for g, r in self.raw.items()},
                                                         printed=self.printed)

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

    def is_dump(self, set_idx: int) -> bool:
        return [f["cpu"] for f in self.sets[set_idx]["files"]] == [DUMP_CPU]

    @property
    def dumps_only(self) -> bool:
        return all(self.is_dump(i) for i in range(len(self.sets)))

    def streams(self) -> list[tuple[int, int]]:
        """(set, cpu) of every file, in the order blkparse sets them up (sets as given, CPUs ascending)."""
        return [(si, int(f["cpu"])) for si, st in enumerate(self.sets) for f in st["files"]]

    def stream_ids(self, g0: int, cpu: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The stream (index into streams()) of the block events g0, g0 + 1, ... (their CPUs given)."""
        st = self.streams()
        # a sorted table of (set, cpu) keys, as many as files (a table indexed by CPU number was sets x the
        # largest CPU: a file-set record naming CPU 65535 in many sets made it hundreds of MB); an event of a
        # CPU its set has no file of is -1; every event of a dump's set is the dump's
        per = sorted((si * 0x10000 + c, i) for i, (si, c) in enumerate(st) if c != DUMP_CPU)
        keys = np.array([k for k, _i in per], dtype=np.int64)
        vals = np.array([i for _k, i in per], dtype=np.int64)
        sets = self.set_of[g0:g0 + len(cpu)].astype(np.int64)
        want = sets * 0x10000 + cpu.astype(np.int64)
        pos = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
        out = np.where((keys[pos] == want) if len(keys) else np.zeros(len(want), bool), vals[pos] if len(vals)
                       else -1, -1)
        for i, (si, c) in enumerate(st):
            if c == DUMP_CPU:
                out[sets == si] = i
        return np.asarray(out, dtype=np.int64)

    def note_kind(self, k: int) -> str:
        """process, timestamp, message, other (a notify record blkparse ignores), or cpu (a record of another
        CPU than its per-CPU file's, which blkparse skips: 'trace info has error cpu')."""
        si, cpu, _fp, _mp, rec = self.notes[k]
        order = self.order(si, cpu)
        act, _t = _note_action(rec, order)
        if cpu != DUMP_CPU and _note_cpu(rec, order) != cpu:
            return "cpu"
        if not act & (blktrace.NOTIFY_ACTION):
            return "cpu"
        if act == blktrace.NOTIFY_ACTION | blktrace.TN_PROCESS:
            return "process"
        if act == blktrace.NOTIFY_ACTION | blktrace.TN_TIMESTAMP:
            return "timestamp"
        return "message" if _is_message(act) else "other"

    def timestamp(self, k: int) -> tuple[int, int]:
        """A timestamp note's (trace time, wall clock ns)."""
        si, cpu, _fp, _mp, rec = self.notes[k]
        order = self.order(si, cpu)
        _act, t = _note_action(rec, order)
        sec, nsec = np.frombuffer(rec[48:56], dtype=order + "u4").tolist()
        return t, int(sec) * 1_000_000_000 + int(nsec)

    def note_text(self, k: int) -> str:
        """A message's text."""
        si, cpu, _fp, _mp, rec = self.notes[k]
        plen = int.from_bytes(rec[46:48], "little" if self.order(si, cpu) == "<" else "big")
        return rec[48:48 + plen].split(b"\0", 1)[0].decode(errors="replace")

    def note_seq(self, k: int) -> int:
        si, cpu, _fp, _mp, rec = self.notes[k]
        return int.from_bytes(rec[4:8], "little" if self.order(si, cpu) == "<" else "big")

    def note_pid_name(self, k: int) -> tuple[int, str]:
        si, cpu, _fp, _mp, rec = self.notes[k]
        pid = int.from_bytes(rec[32:36], "little" if self.order(si, cpu) == "<" else "big")
        return pid, comm_str(rec[48:64])


class NoteOrder:
    """Where, among an imported file set's block events in blkparse's order, each of its notes is read.

    blkparse reads blktrace's per-CPU files 512 traces (block records and messages) at a time, a file's
    next batch right after it printed the last trace of the one before, and acts on a note when it reads
    it: a process note names its pid from then on (the first one read wins, for good). Every file's first
    batch is read before anything is printed. So a note in a file's batch b > 0 takes effect after the
    last trace of its batch b - 1 is printed; `blkparse -d` writes it there, which is where btt reads it.
    A dump (a stream) is read in file order: btt meets its notes where they are (where="file"); blkparse
    reads 512 events, then sorts and prints them (where="batch": a note counts from its batch's first).

    positions(g0, cpu) is fed the block events in order, chunk by chunk (cpu: their CPUs), and returns the
    notes taking effect in that chunk as (position, note index), position g meaning before block event g.
    """

    def __init__(self, fs: FileSets, kinds: tuple[str, ...] = ("process",), where: str = "batch") -> None:
        self.fs = fs
        self.counts = np.zeros(len(fs.streams()), dtype=np.int64)
        self.fixed: list[tuple[int, int, int]] = []                # (position, stream, note) known now
        self.pending: dict[int, list[tuple[int, int, int, int]]] = {}   # stream -> [(k, delta, stream, note)]
        streams = {st: i for i, st in enumerate(fs.streams())}
        per: dict[int, list[int]] = {}
        for k, n in enumerate(fs.notes):
            per.setdefault(streams.get((n[0], n[1]), 0), []).append(k)
        for sid, ks in per.items():
            traces = 0          # messages and other-CPU records before each note in its file
            marks: list[tuple[int, int, int]] = []   # (trace number, kind 0 message 1 cpu, note) of those traces
            for k in ks:
                kind = fs.note_kind(k)
                fpos = fs.notes[k][2]
                if kind in ("message", "cpu"):
                    marks.append((fpos + traces, 0 if kind == "message" else 1, k))
                    traces += 1
                    continue
                if kind not in kinds:
                    continue
                tn = fpos + traces       # traces before it in its file
                if fs.is_dump(fs.notes[k][0]):
                    if where == "file":
                        self._target(sid, fpos, 0, k)
                    else:   # from the first block record of its batch
                        start = (tn // 512) * 512
                        self._target(sid, start - sum(1 for m in marks if m[0] < start), 0, k)
                    continue
                b = tn // 512
                if b == 0:
                    self.fixed.append((0, sid, k))
                    continue
                last = 512 * b - 1          # the last trace of the batch before, not a record of another CPU
                skip = {m[0]: m for m in marks}
                while last in skip and skip[last][1] == 1:
                    last -= 1
                if last in skip:    # a message: blkparse printed it after mp block events
                    self.fixed.append((max(fs.notes[skip[last][2]][3], 0), sid, k))
                else:
                    self._target(sid, last - sum(1 for m in marks if m[0] < last), 1, k)

    def _target(self, sid: int, kth: int, delta: int, note: int) -> None:
        self.pending.setdefault(sid, []).append((kth, delta, sid, note))

    def positions(self, g0: int, cpu: npt.NDArray[Any]) -> list[tuple[int, int]]:
        sid = self.fs.stream_ids(g0, cpu)
        out = [(p, s, k) for p, s, k in self.fixed]
        self.fixed = []
        for s, targets in list(self.pending.items()):
            idx = np.flatnonzero(sid == s)
            before = int(self.counts[s])
            keep = []
            for kth, delta, st, k in targets:
                j = kth - before
                if j < 0:
                    out.append((g0, st, k))
                elif j < len(idx):
                    out.append((g0 + int(idx[j]) + delta, st, k))
                else:
                    keep.append((kth, delta, st, k))
            if keep:
                self.pending[s] = keep
            else:
                del self.pending[s]
        self.counts += np.bincount(sid[sid >= 0], minlength=len(self.counts))
        out.sort()
        return [(p, k) for p, _s, k in out]

    def rest(self, g: int) -> list[tuple[int, int]]:
        """Notes whose block record never came (after the last block event g - 1)."""
        out = sorted((g, st, k) for targets in self.pending.values() for _kth, _d, st, k in targets)
        self.pending = {}
        return [(p, k) for p, _s, k in out]


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
        self.cgroups: dict[int, str] = {}

    def add_comms(self, comms: dict[int, str]) -> None:
        self.comms.update(comms)

    def add_cgroups(self, cgroups: dict[int, str]) -> None:
        self.cgroups.update(cgroups)

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


def read_file_sets(path: str, warn: Any = None) -> FileSetSource | None:
    """The way of parse and report into per-CPU files given directly (NAME or NAME.blktrace.N): read whole,
    as an import reads them. None for a stream (a dump, even one under a per-CPU name: read it as one).
    warn(line): told how the input was read where its names say otherwise (a missing CPU file, a dump)."""
    groups = expand_inputs([path])
    for g in groups:
        if g.note and warn is not None:
            warn(g.note)
    if any(g.dump for g in groups):
        return None
    for g in groups:
        for f in g.files:
            check_file(f)
    w = _Collect()
    sets = read_sets(groups)
    sets.write(w)
    return FileSetSource(path, w.parts, w.comms, _from_side(sets.side, path))


class _Corrupt(ValueError):
    """What is wrong in an import's file-set record (FileSets): _from_side names the file."""


def _int(v: Any, what: str, lo: int, hi: int) -> int:
    if type(v) is not int or not lo <= v <= hi:   # bool is no number here
        raise _Corrupt(f"{what}: {'missing' if v is None else repr(v)[:40]}, not a whole number in [{lo}, {hi}]")
    return v


def _list(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list):
        raise _Corrupt(f"{what}: not a list")
    return v


def _record(h: Any, what: str) -> bytes:
    """A blk_io_trace record kept whole: hex of its 48-byte header and payload (pdu_len, either order)."""
    if not isinstance(h, str):
        raise _Corrupt(f"{what}: not a hex string")
    rec = bytes.fromhex(h)
    if len(rec) < 48:
        raise _Corrupt(f"{what}: {len(rec)} bytes, a record has at least 48")
    return rec


def _check_sets(sets: Any) -> list[dict[str, Any]]:
    """Each set: its name and its files, one per CPU (0-65535, EVENT's cpu) or the one file of a dump
    (DUMP_CPU), each with its byte order and size."""
    for i, st in enumerate(_list(sets, "sets")):
        if not isinstance(st, dict) or not isinstance(st.get("name"), str):
            raise _Corrupt(f"set {i}: no name")
        files = _list(st.get("files"), f"set {i}: files")
        cpus = []
        for f in files:
            if not isinstance(f, dict) or f.get("order") not in ("<", ">"):
                raise _Corrupt(f"set {i}: a file without its byte order")
            cpus.append(_int(f.get("cpu"), f"set {i}: cpu", DUMP_CPU, 0xFFFF))
            _int(f.get("bytes"), f"set {i}: bytes", 0, 1 << 62)
        if not cpus or len(set(cpus)) != len(cpus) or (DUMP_CPU in cpus and len(cpus) > 1):
            raise _Corrupt(f"set {i}: files {cpus} (one per CPU, or one dump)")
        for c in _list(st.get("missing_cpus", []), f"set {i}: missing_cpus"):
            _int(c, f"set {i}: missing cpu", 0, 0xFFFF)
    if len(sets) > 0x10000:   # set_of is 16 bits
        raise _Corrupt(f"{len(sets)} sets")
    out: list[dict[str, Any]] = sets
    return out


def _from_side(side: dict[str, Any], path: str) -> FileSets:
    """The one reader of an import's file-set record (the capture's end record, SIDE_KEY: JSON that no
    checksum covers): every type and range the readers rely on is checked here, once, and anything else is
    one IoscopeError naming the file."""
    try:
        if not isinstance(side, dict):
            raise _Corrupt("not an object")
        n = _int(side.get("events"), "events", 0, 1 << 40)
        sets = _check_sets(side.get("sets"))
        for k in ("seq", "set"):
            if not isinstance(side.get(k), str):
                raise _Corrupt(f"{k}: not packed")
        seq = _unpack(side["seq"], "<u4", n).astype(np.uint32)
        set_of = _unpack(side["set"], "<u2", n).astype(np.uint16)
        if n and int(set_of.max()) >= len(sets):
            raise _Corrupt(f"an event of set {int(set_of.max())}, of {len(sets)}")
        rank = None
        if "rank" in side:
            if not isinstance(side["rank"], str):
                raise _Corrupt("rank: not packed")
            rank = _unpack(side["rank"], "<u4", n).astype(np.uint32)
            if n and (int(rank.max()) >= n or not (np.bincount(rank, minlength=n) == 1).all()):
                raise _Corrupt("rank: not a permutation of the events")
        streams = {(si, int(f["cpu"])) for si, st in enumerate(sets) for f in st["files"]}
        notes = []
        for j, nt in enumerate(_list(side.get("notes"), "notes")):
            if not isinstance(nt, list) or len(nt) != 5:
                raise _Corrupt(f"note {j}: not [set, cpu, position, printed at, record]")
            si = _int(nt[0], f"note {j}: set", 0, max(len(sets) - 1, 0))
            cpu = _int(nt[1], f"note {j}: cpu", DUMP_CPU, 0xFFFF)
            if (si, cpu) not in streams:
                raise _Corrupt(f"note {j}: CPU {cpu} is no file of set {si}")
            fpos = _int(nt[2], f"note {j}: position", 0, n)
            mpos = _int(nt[3], f"note {j}: printed at", -1, n)
            rec = _record(nt[4], f"note {j}")
            order = "<" if rec[0] == blktrace.VERSION else ">"   # the magic's first byte (own_devices)
            plen = int.from_bytes(rec[46:48], "little" if order == "<" else "big")
            act, t = _note_action(rec, order)
            if len(rec) != 48 + plen:
                raise _Corrupt(f"note {j}: {len(rec)} bytes, its header says {48 + plen}")
            if t >> 63:   # as blktrace.record_offsets refuses in a file: the readers' times are signed
                raise _Corrupt(f"note {j}: time {t} ns (2^63 or more)")
            if act == blktrace.NOTIFY_ACTION | blktrace.TN_TIMESTAMP and plen < 8:
                raise _Corrupt(f"note {j}: a timestamp note of {plen} bytes")
            notes.append((si, cpu, fpos, mpos, rec))
        printed = None
        if "printed" in side:   # the message notes (printed at >= 0), in blkparse's order
            if not isinstance(side["printed"], str):
                raise _Corrupt("printed: not packed")
            shown = [j for j, nt in enumerate(notes) if nt[3] >= 0]
            printed = _unpack(side["printed"], "<u4", len(shown)).astype(np.uint32)
            if sorted(printed.tolist()) != shown:
                raise _Corrupt("printed: not the notes printed")
            at = [notes[j][3] for j in printed.tolist()]
            if any(b < a for a, b in zip(at, at[1:])):
                raise _Corrupt("printed: a message before one printed after fewer block events")
        raw: dict[int, bytes] = {}
        for j, r in enumerate(_list(side.get("raw"), "raw")):
            if not isinstance(r, list) or len(r) != 2:
                raise _Corrupt(f"raw record {j}: not [event, record]")
            g = _int(r[0], f"raw record {j}: event", 0, max(n - 1, 0))
            raw[g] = _record(r[1], f"raw record {j}")
        if raw and not n:
            raise _Corrupt("raw records of no event")
        return FileSets(sets, seq, set_of, notes, raw, rank, printed)
    except (ValueError, TypeError, zlib.error, binascii.Error) as exc:   # _Corrupt is a ValueError
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
           if _is_message(_note_action(rec, ft.order)[0]) and cpu in (DUMP_CPU, _note_cpu(rec, ft.order))]
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


@dataclass
class ImportedSets:
    """blktrace files read whole, in blkparse's order, ready to write into a capture (ImportedSets.write)."""

    events: npt.NDArray[np.void]            # block events and process notes, as the capture holds them
    n_events: int                           # block events
    comms: dict[int, str]
    side: dict[str, Any]                    # the end record's SIDE_KEY part (FileSets)
    devices: dict[int, str]                 # device -> name (a per-CPU set's NAME for its own device, else "")
    stamps: list[tuple[int, int, bool]]     # timestamp notes: (trace time ns, wall ns, in a dump)
    max_cpu: int
    orders: list[str]                       # byte order of each file
    span: tuple[int, int] | None            # first and last block event's time
    cgroups: dict[int, str] = field(default_factory=dict)   # id -> path of the ids the Qs carry, and noted ones

    def write(self, w: Any) -> None:
        if self.comms:
            w.add_comms(self.comms)
        if self.cgroups:
            w.add_cgroups(self.cgroups)
        step = 1 << 16
        for i in range(0, len(self.events), step):
            w.write(self.events[i:i + step])


def read_sets(groups: list[Group]) -> ImportedSets:
    """Per-CPU file sets and streams, every record kept, in the order blkparse reads them."""
    streams: list[_Stream] = []
    sets: list[dict[str, Any]] = []
    orders: list[str] = []
    for si, g in enumerate(groups):
        cpus = []
        for f, cpu in zip(g.files, g.cpus):
            ft = blktrace.read_file(f, None if cpu == DUMP_CPU else cpu)
            cpus.append({"cpu": cpu, "bytes": ft.size, "order": ft.order})
            orders.append(ft.order)
            streams.append(_stream(si, cpu, ft))
        entry: dict[str, Any] = {"name": g.name, "files": cpus}
        if g.missing:
            entry["missing_cpus"] = g.missing
        sets.append(entry)
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
    noff = np.cumsum([0] + [len(st.ft.notes) for st in streams])
    printed = (noff[sid[~isblk]] - 1 - r[~isblk]).astype("<u4")   # the messages as side notes, in print order
    all_ev = blktrace.join_events([st.ft.events for st in streams]) if streams else np.zeros(0, dtype=EVENT)
    ev = blktrace.select_events(all_ev, gblk)
    seq = np.concatenate([st.ft.seq for st in streams])[gblk] if streams else np.zeros(0, np.uint32)
    set_of = np.repeat(np.array([st.set_idx for st in streams], dtype=np.uint16), np.diff(eoff))[gblk]
    where = np.empty(len(all_ev), dtype=np.int64)
    where[gblk] = np.arange(n)
    raw_kept = {int(where[eoff[s] + i]): rec for s, st in enumerate(streams) for i, rec in st.ft.raw.items()}
    side_notes: list[list[Any]] = []
    stamps: list[tuple[int, int, bool]] = []
    for s, st in enumerate(streams):
        for k, (pos, rec) in enumerate(st.ft.notes):
            side_notes.append([st.set_idx, st.cpu, pos, msg_at.get((s, k), -1), rec.hex()])
            act, t = _note_action(rec, st.ft.order)
            if act == blktrace.NOTIFY_ACTION | blktrace.TN_TIMESTAMP and len(rec) >= 56:
                sec, nsec = np.frombuffer(rec[48:56], dtype=st.ft.order + "u4").tolist()
                stamps.append((t, int(sec) * 1_000_000_000 + int(nsec), st.cpu == DUMP_CPU))
    side: dict[str, Any] = {"sets": sets, "events": n, "seq": _pack(seq.astype("<u4")),
                            "set": _pack(set_of.astype("<u2")), "notes": side_notes, "printed": _pack(printed),
                            "raw": [[g, raw_kept[g].hex()] for g in sorted(raw_kept)]}
    # the capture's process notes (for its own readers: snoop, agg, report's own view, parquet): a per-CPU
    # file's at its own time (the records' clock); a dump's notes keep the kernel's time while its records
    # count from the first one (blkparse -d), so those go in at the time of the record they precede
    fs = _from_side(side, "")
    notes_rows: list[npt.NDArray[np.void]] = []
    comms: dict[int, str] = {}
    order = NoteOrder(fs, ("process",), "file")
    for at, k in order.positions(0, ev["cpu"]) + order.rest(n):
        pid, name = fs.note_pid_name(k)
        comms.setdefault(pid, name)   # the name blkparse and btt give it: the first one read
        si, cpu, _fp, _mp, rec = fs.notes[k]
        t = _note_action(rec, fs.order(si, cpu))[1] if not fs.is_dump(si) else \
            (int(ev["ts"][min(at, n - 1)]) if n else 0)
        dev = int.from_bytes(rec[36:40], "little" if fs.order(si, cpu) == "<" else "big")
        notes_rows.append(blktrace.process_notes({pid: name}, [pid], dev, max(cpu, 0), t))
    # a capture is in time order (its writer sorts what is not); blkparse's order is that too unless a file
    # is not (a clock that went back, a damaged time): then the capture holds the events by time and
    # "rank" gives each one's place in blkparse's order
    rank = None
    if len(ev) and not (np.diff(ev["ts"].astype(np.int64)) >= 0).all():
        rank = np.argsort(ev["ts"], kind="stable")
        ev, seq, set_of = blktrace.select_events(ev, rank), seq[rank], set_of[rank]
        cap_at = np.empty(len(rank), dtype=np.int64)   # blkparse's place -> capture index
        cap_at[rank] = np.arange(len(rank))
        side["raw"] = [[int(cap_at[g]), h] for g, h in side["raw"]]
        side["raw"].sort()
        side["seq"], side["set"] = _pack(seq.astype("<u4")), _pack(set_of.astype("<u2"))
        side["rank"] = _pack(rank.astype("<u4"))
    if notes_rows:
        nev = blktrace.join_events(notes_rows)
        allev = blktrace.join_events([nev, ev])
        is_b = np.r_[np.zeros(len(nev), np.int8), np.ones(len(ev), np.int8)]
        # by time; at one time a note before the block events, block events in their order
        o = np.lexsort((np.r_[np.zeros(len(nev), np.int64), np.arange(len(ev))], is_b, allev["ts"]))
        allev = blktrace.select_events(allev, o)
    else:
        allev = ev
    # devices: a per-CPU set's own device (its records' notes carry it) is named after the set
    devices: dict[int, str] = {}
    for si, g in enumerate(groups):
        on = set_of == si
        devs = np.unique(ev["dev"][on]).tolist()
        traced = {int.from_bytes(rec[36:40], "little" if fs.order(si, c) == "<" else "big")
                  for s2, c, _f, _m, rec in fs.notes if s2 == si}
        for dev in sorted(set(devs)):
            named = not g.dump and (not traced or dev in traced)
            devices.setdefault(int(dev), g.name if named else "")
    span = (int(ev["ts"].min()), int(ev["ts"].max())) if n else None
    return ImportedSets(allev, n, comms, side, devices, stamps, int(ev["cpu"].max()) if n else 0, orders, span,
                        cgroup_names(fs, ev))


def cgroup_names(fs: FileSets, ev: npt.NDArray[np.void]) -> dict[int, str]:
    """The cgroups of imported files: each id a Q carries (a record with __BLK_TA_CGROUP: EV_CGROUP) and each
    id a message note `cgroup <id> <path>` names (as ioscope export writes them), with that path (the first
    note of an id read wins); an id no note names is `cgroup:<id>`. Nothing comes from the importing host:
    the ids are those of the host that traced, which need not be this one."""
    noted: dict[int, str] = {}
    for k in range(len(fs.notes)):
        if fs.note_kind(k) == "message":
            got = blktrace.cgroup_of_note(fs.note_text(k))
            if got is not None:
                noted.setdefault(*got)
    ids = np.unique(ev["aux"][((ev["flags"] & EV_CGROUP) != 0) & (ev["action"] == TA_QUEUE)]).tolist()
    return {**noted, **{int(cg): noted.get(int(cg), f"cgroup:{int(cg)}") for cg in ids}}


def file_clock(sets: ImportedSets) -> tuple[dict[str, Any] | None, str | None]:
    """The capture's clock from the files' own timestamp note (BLK_TN_TIMESTAMP: the wall clock when the
    trace started), in the files' time base, and a note on how exact it is; (None, None) without one.

    In blktrace's per-CPU files the note and the records share the kernel's clock. A `blkparse -d` dump
    counts its records from its first one (blkparse's genesis) but keeps the note's kernel time: there the
    wall clock is taken for the dump's time 0, which it precedes by the time from the start of tracing to
    the first record (the dump does not keep it)."""
    if not sets.stamps:
        return None, None
    t, wall, in_dump = sets.stamps[0]
    if in_dump and sets.span is not None and not sets.span[0] <= t <= sets.span[1]:
        return ({"mono_ns": 0, "wall_ns": wall, "uncertainty_ns": 0},
                "the dump's times count from its first record, its timestamp note from the start of tracing: its "
                "wall clock is taken for the first record (it may be early by the time between the two)")
    return {"mono_ns": t, "wall_ns": wall, "uncertainty_ns": 0}, None


def import_blktrace(inputs: list[str], out: str, warn: Any = None) -> dict[str, Any]:
    """Write a capture at out from blktrace files; returns a summary.

    Every file is checked first (a corrupt or cut file is reported with its byte offset before anything is
    written); the capture is written to OUT.part and renamed when complete. Nothing in it comes from the
    importing host: its times, clock, start and end are the files' own (their time base kept as is), its
    host, kernel and machine unknown. warn(line): told how the inputs were read where their names say
    otherwise (a missing CPU file, a dump under a per-CPU name).
    """
    from ioscope.capture.store import CaptureWriter
    groups = expand_inputs(inputs)
    files = [f for g in groups for f in g.files]
    if not files:
        raise UsageError("no input files", "give blktrace files or dumps")
    for g in groups:
        if g.note and warn is not None:
            warn(g.note)
    for f in files:
        check_file(f)
    sets = read_sets(groups)
    devices: dict[str, Any] = {}
    for dev, name in sets.devices.items():
        ma, mi = kdev_split(dev)
        info: dict[str, Any] = {"major": ma, "minor": mi}
        if name:
            info["name"] = name
        devices[kdev_str(dev)] = info
    orders = sorted({"big" if o == ">" else "little" for o in sets.orders})
    clock, clock_note = file_clock(sets)
    meta: dict[str, Any] = {
        # the host that recorded is unknown: blktrace files do not say
        "host": None, "kernel": None, "kernel_version": None, "machine": None, "ncpus": sets.max_cpu + 1,
        "source": "blktrace", "imported_from": [os.path.abspath(f) for f in files],
        "byte_orders": orders, "byte_order": orders[0] if len(orders) == 1 else None,
        "devices": devices, "tracepoints": [], "lost": {},
        # times are the files' own; the wall clock only where a timestamp note gives it
        "time_base": "blktrace", "clock": clock, "start": clock,
    }
    if clock_note:
        meta["clock_note"] = clock_note
    end: dict[str, Any] | None = None
    if sets.span is not None:
        last = sets.span[1]
        end = {"mono_ns": last, "wall_ns": None if clock is None else clock["wall_ns"] + last - clock["mono_ns"],
               "uncertainty_ns": 0}
    tmp = out + ".part"
    w = CaptureWriter(tmp, meta, force=True)   # our own scratch file, renamed when complete
    try:
        sets.write(w)
        w.close({"imported_events": sets.n_events, SIDE_KEY: sets.side, "end": end})
    except BaseException:
        w.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        os.replace(tmp, out)
    except OSError as exc:
        raise IoscopeError(f"cannot write {out}: {exc.strerror}") from None
    return {"files": files, "events": sets.n_events, "devices": sets.devices, "comms": len(sets.comms),
            "cgroups": len(sets.cgroups),
            "missing": {g.name: g.missing for g in groups if g.missing}}


def run(args: argparse.Namespace) -> int:
    outfile.check_output(args.output, args.force)
    info = import_blktrace(args.inputs, args.output, lambda line: sys.stderr.write(f"ioscope import: note: {line}\n"))
    sys.stderr.write(f"ioscope import: {info['events']} events from {len(info['files'])} file(s), "
                     f"{len(info['devices'])} device(s), {info['comms']} process names"
                     f"{', ' + str(info['cgroups']) + ' cgroups' if info['cgroups'] else ''} -> {args.output}\n")
    if not info["events"]:
        sys.stderr.write("ioscope import: note: the input holds no block events (an idle disk, or not the files "
                         "you meant); the capture is empty\n")
    return 0


def message_rows(fs: FileSets, ks: list[int]) -> npt.NDArray[np.void]:
    """EV_MESSAGE rows for the message notes ks (their record's time, device, CPU and pid): btt sets a
    message up on its device, so where it is read matters to btt's view (btt.Btt.feed)."""
    from ioscope.capture.events import EV_MESSAGE
    out = np.zeros(len(ks), dtype=EVENT)
    for j, k in enumerate(ks):
        si, cpu, _fp, _mp, rec = fs.notes[k]
        h = np.frombuffer(rec[:48], dtype=blktrace.bit_dtype(fs.order(si, cpu)))[0]
        out[j]["ts"], out[j]["dev"], out[j]["cpu"], out[j]["pid"] = h["time"], h["device"], h["cpu"], h["pid"]
        out[j]["tgid"], out[j]["flags"] = h["pid"], EV_MESSAGE
        out[j]["category"] = int(h["action"]) >> 16
    return out


def note_rows(fs: FileSets, ks: list[int], ts: int) -> npt.NDArray[np.void]:
    """Process note rows (EV_NOTE_PROCESS) for the notes ks, at time ts."""
    rows = []
    for k in ks:
        pid, name = fs.note_pid_name(k)
        rows.append(blktrace.process_notes({pid: name}, [pid], 0, max(fs.notes[k][1], 0), ts))
    return blktrace.join_events(rows) if rows else np.zeros(0, dtype=EVENT)


def btt_stream(fs: FileSets, chunks: Any, texts: bool = False) -> Iterator[Any]:
    """An imported file set as btt reads it: what `blkparse -d` writes from blktrace's per-CPU files (every
    record in the order blkparse prints them, each process note where blkparse reads it, the messages
    where it prints them), or a dump's records in its own order. Yields (events with notes and messages,
    each record's own device), and with texts {row: note index} of the message rows. chunks: the
    capture's (or read_file_sets') EVENT chunks."""
    own = fs.own_devices()
    keys = np.array(sorted(own), dtype=np.int64)
    if fs.rank is not None:   # files not in time order: the capture's events, put back in blkparse's order
        whole = [c[(c["flags"] & EV_NOTE_PROCESS) == 0] for c in chunks]
        allev = blktrace.join_events(whole) if whole else np.zeros(0, dtype=EVENT)
        allev, fs = fs.in_blkparse_order(allev)
        own = fs.own_devices()
        keys = np.array(sorted(own), dtype=np.int64)
        chunks = [allev]
    order = NoteOrder(fs, ("process",), "file")
    msgs = fs.messages()
    mi = 0
    g = 0
    for c in chunks:
        blk = c[(c["flags"] & EV_NOTE_PROCESS) == 0] if len(c) else c
        n = len(blk)
        if not n:
            continue
        dev = blk["dev"].astype(np.uint32)
        a, b = np.searchsorted(keys, [g, g + n])
        for gi in keys[a:b].tolist():
            dev[gi - g] = own[gi]
        ins: list[tuple[int, int, int]] = [(p, 0, k) for p, k in order.positions(g, blk["cpu"])]
        while mi < len(msgs) and msgs[mi][0] < g + n:
            ins.append((msgs[mi][0], 1, msgs[mi][1]))
            mi += 1
        if not ins:
            yield (blk, dev, {}) if texts else (blk, dev)
            g += n
            continue
        ins.sort(key=lambda x: (x[0], x[1]))   # stable: the messages at one place stay in blkparse's order
        parts: list[npt.NDArray[np.void]] = []
        owns: list[npt.NDArray[np.uint32]] = []
        rows_of: dict[int, int] = {}
        at = 0
        size = 0
        for p, kind, k in ins:
            cut = min(max(p - g, 0), n)
            if cut > at:
                parts.append(blk[at:cut])
                owns.append(dev[at:cut])
                size += cut - at
                at = cut
            row = note_rows(fs, [k], int(blk["ts"][min(cut, n - 1)])) if kind == 0 else message_rows(fs, [k])
            if kind == 1:
                rows_of[size] = k
            parts.append(row)
            owns.append(row["dev"].astype(np.uint32))
            size += len(row)
        parts.append(blk[at:])
        owns.append(dev[at:])
        out = (blktrace.join_events(parts), np.concatenate(owns))
        yield (*out, rows_of) if texts else out
        g += n
    notes_left = [k for _p, k in order.rest(g)]
    msgs_left = [k for _p, k in msgs[mi:]]
    if notes_left or msgs_left:
        tail = blktrace.join_events([note_rows(fs, notes_left, 0), message_rows(fs, msgs_left)])
        rows = {len(notes_left) + j: k for j, k in enumerate(msgs_left)}
        yield (tail, tail["dev"].astype(np.uint32), rows) if texts else (tail, tail["dev"].astype(np.uint32))


def time_zero(fs: FileSets, first_ts: int | None) -> int:
    """The time btt's view counts from for an imported file set: 0 for dumps (btt reads them as they are),
    else blkparse's genesis, the first trace it prints (`blkparse -d` writes times from there)."""
    if fs.dumps_only or first_ts is None:
        return 0
    msgs = fs.messages()
    if msgs and msgs[0][0] == 0:   # a message printed first
        t = int(message_rows(fs, [msgs[0][1]])["ts"][0])
        return min(t, first_ts)
    return first_ts
