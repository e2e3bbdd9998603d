"""blktrace version 7 binaries: write them from EVENT arrays, read them back.

Layout (struct blk_io_trace, 48 bytes, the file's byte order, told by the
magic): magic|version, sequence, time (ns), sector, bytes, action (low 16
bits: action code; high 16 bits: category bits), pid, device (major << 20 |
minor), cpu, error, pdu_len; then pdu_len bytes of payload. Payloads:
unplug/split hold a big-endian u64 (request count / new sector), remap a
big-endian {u32 device_from, u32 device_to, u64 sector_from}, process notes
the 16-byte command name, the timestamp note {u32 tv_sec, u32 tv_nsec} in the
file's byte order.

Both directions work on whole numpy arrays (the fixed part is a structured
dtype). Reading needs one sequential walk, since each record's length depends
on its payload: a small C loop (_tracecore) finds the records and copies them
into a regular array, no Python step per record.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from ioscope.base.errors import IoscopeError
from ioscope.base.fmt import comm_str
from ioscope.capture import _tracecore
from ioscope.capture.events import (
    EV_CGROUP,
    EV_MESSAGE,
    EV_NOTE_PROCESS,
    EVENT,
    TA_QUEUE,
    TA_REMAP,
    TA_SPLIT,
    TA_UNPLUG_IO,
    TA_UNPLUG_TIMER,
    TC_NOTIFY,
    FirstNames,
    join_events,
    select_events,
)

__all__ = ["join_events", "select_events"]

MAGIC = 0x65617400
VERSION = 0x07
TA_CGROUP = 1 << 8           # action flag: an 8-byte cgroup id starts the payload
TA_CGROUP_NOTE = 1 << 8      # __BLK_TN_CGROUP: the same flag on a notify record
TN_PROCESS, TN_TIMESTAMP, TN_MESSAGE = 0, 1, 2
NOTIFY_ACTION = TC_NOTIFY << 16


def bit_dtype(order: str = "<") -> np.dtype[np.void]:
    """struct blk_io_trace in byte order '<' or '>'."""
    return np.dtype([
        ("magic", order + "u4"), ("sequence", order + "u4"), ("time", order + "u8"),
        ("sector", order + "u8"), ("bytes", order + "u4"), ("action", order + "u4"),
        ("pid", order + "u4"), ("device", order + "u4"), ("cpu", order + "u4"),
        ("error", order + "u2"), ("pdu_len", order + "u2"),
    ])


BIT = bit_dtype("<")
# Exported times start at 1 ns, not 0: blkparse reading a stream whose first event has time 0 takes
# the 0 for "no time base yet" and re-bases every later batch of 512 events on its own first time.
EXPORT_BASE_OFFSET = 1
assert BIT.itemsize == 48
_PAYLOAD_ACTIONS = (TA_UNPLUG_IO, TA_UNPLUG_TIMER, TA_SPLIT, TA_REMAP)


class BlktraceError(IoscopeError):
    """A blktrace file that cannot be read; says which file and where."""


def _comm_bytes(comm: str) -> bytes:
    return comm.encode(errors="replace")[:15].ljust(16, b"\0")


# --------------------------------------------------------------------------- writing

def encode(events: npt.NDArray[np.void], seq: npt.NDArray[np.uint32] | None = None,
           base_ts: int = 0, order: str = "<") -> bytes:
    """blk_io_trace records for EVENT records, with their payloads (order: '<' little or '>' big endian).

    Process notes (EV_NOTE_PROCESS) become BLK_TN_PROCESS records. seq gives
    each record's sequence number; base_ts is subtracted from every time.
    """
    if len(events) == 0:
        return b""
    rows, length = encode_rows(events, seq, base_ts, order)
    keep = np.arange(64)[None, :] < length[:, None]
    return rows[keep].tobytes()


def encode_rows(events: npt.NDArray[np.void], seq: npt.NDArray[np.uint32] | None = None,
                base_ts: int = 0, order: str = "<") -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """encode()'s records as rows of 64 bytes (header and up to 16 payload bytes) and each one's length."""
    n = len(events)
    ev = events
    note = (ev["flags"] & EV_NOTE_PROCESS) != 0
    act = ev["action"].astype(np.uint32)
    pdu_len = np.zeros(n, dtype=np.uint16)
    is_unplug = ~note & ((act == TA_UNPLUG_IO) | (act == TA_UNPLUG_TIMER))
    is_split = ~note & (act == TA_SPLIT)
    is_remap = ~note & (act == TA_REMAP)
    pdu_len[is_unplug | is_split] = 8
    pdu_len[is_remap | note] = 16

    hdr = np.zeros(n, dtype=bit_dtype(order))
    hdr["magic"] = MAGIC | VERSION
    hdr["sequence"] = 0 if seq is None else seq
    ts = ev["ts"].astype(np.int64) - np.int64(base_ts)
    hdr["time"] = np.maximum(ts, 0).astype(np.uint64)
    hdr["sector"] = np.where(note, 0, ev["sector"])
    hdr["bytes"] = np.where(note, 0, ev["bytes"])
    hdr["action"] = np.where(note, np.uint32(NOTIFY_ACTION | TN_PROCESS),
                             act | (ev["category"].astype(np.uint32) << 16))
    hdr["pid"] = ev["pid"]
    hdr["device"] = ev["dev"]
    hdr["cpu"] = ev["cpu"]
    hdr["error"] = ev["error"]
    hdr["pdu_len"] = pdu_len

    # one row per record: 48 header bytes + up to 16 payload bytes, then drop the unused tail
    rows = np.zeros((n, 64), dtype=np.uint8)
    rows[:, :48] = hdr.view(np.uint8).reshape(n, 48)
    pay = rows[:, 48:]
    if is_unplug.any() or is_split.any():
        m = is_unplug | is_split
        pay[m, :8] = ev["aux"][m].astype(">u8").view(np.uint8).reshape(-1, 8)
    if is_remap.any():
        r = np.zeros(int(is_remap.sum()), dtype=[("f", ">u4"), ("t", ">u4"), ("s", ">u8")])
        r["f"] = ev["aux_dev"][is_remap]
        r["t"] = ev["dev"][is_remap]
        r["s"] = ev["aux"][is_remap]
        pay[is_remap, :16] = r.view(np.uint8).reshape(-1, 16)
    if note.any():
        pay[note, :16] = np.stack([ev["sector"][note], ev["aux"][note]], axis=1).astype("<u8") \
            .view(np.uint8).reshape(-1, 16)
    return rows, 48 + pdu_len.astype(np.int64)


def timestamp_note(dev: int, cpu: int, time_ns: int, wall_ns: int, order: str = "<") -> bytes:
    """The BLK_TN_TIMESTAMP record: the wall clock (tv_sec, tv_nsec) at trace time time_ns."""
    hdr = np.zeros(1, dtype=bit_dtype(order))
    hdr["magic"] = MAGIC | VERSION
    hdr["time"] = time_ns
    hdr["action"] = NOTIFY_ACTION | TN_TIMESTAMP
    hdr["device"] = dev
    hdr["cpu"] = cpu
    hdr["pdu_len"] = 8
    sec, nsec = divmod(int(wall_ns), 1_000_000_000)
    return hdr.tobytes() + np.array([sec & 0xFFFFFFFF, nsec], dtype=order + "u4").tobytes()


def message_note(dev: int, cpu: int, time_ns: int, text: str, order: str = "<") -> bytes:
    """A BLK_TN_MESSAGE record (pid 0, sequence 0, as the kernel's trace_note writes one) with text as its
    payload: blkparse prints it as an `m   N text` line, btt copies it to its .msg file."""
    data = text.encode(errors="replace")
    hdr = np.zeros(1, dtype=bit_dtype(order))
    hdr["magic"] = MAGIC | VERSION
    hdr["time"] = max(int(time_ns), 0)
    hdr["action"] = NOTIFY_ACTION | TN_MESSAGE
    hdr["device"] = dev
    hdr["cpu"] = cpu
    hdr["pdu_len"] = len(data)
    return hdr.tobytes() + data


CGROUP_NOTE = re.compile(r"^cgroup (?P<id>\d+) (?P<path>\S.*)$")


def cgroup_note_text(cg: int, path: str) -> str:
    """The message note an export writes for a cgroup: `cgroup <id> <path>` (docs/export.md)."""
    return f"cgroup {int(cg)} {path}"


def cgroup_of_note(text: str) -> tuple[int, str] | None:
    """(id, path) of a message note `cgroup <id> <path>`, else None."""
    m = CGROUP_NOTE.match(text)
    return (int(m.group("id")), m.group("path")) if m else None


def first_cgroup_queues(events: npt.NDArray[np.void], noted: set[int]) -> list[tuple[int, int]]:
    """(index, cgroup id) of the first queue event in events of each cgroup id (EV_CGROUP) not in noted,
    in order of those events; noted gets them."""
    qi = np.flatnonzero(((events["flags"] & EV_CGROUP) != 0) & (events["action"] == TA_QUEUE))
    if not len(qi):
        return []
    ids, first = np.unique(events["aux"][qi], return_index=True)
    out = sorted((int(qi[i]), int(cg)) for cg, i in zip(ids.tolist(), first.tolist()) if int(cg) not in noted)
    noted.update(cg for _i, cg in out)
    return out


def with_cgroup_messages(events: npt.NDArray[np.void], cgroups: dict[int, str], noted: set[int]
                         ) -> tuple[npt.NDArray[np.void], dict[int, str]]:
    """events with a message row (EV_MESSAGE: pid 0, the Q's time, device and CPU) before the first queue
    event of each cgroup not in noted, as an export writes its `cgroup <id> <path>` notes; and each
    message row's text by its index (what parse feeds to print them where blkparse prints them). An id
    without a path in cgroups is written as `cgroup:<id>`."""
    at = first_cgroup_queues(events, noted)
    if not at:
        return events, {}
    rows = np.zeros(len(at), dtype=EVENT)
    idx = np.array([i for i, _cg in at], dtype=np.int64)
    rows["ts"] = events["ts"][idx]
    rows["dev"] = events["dev"][idx]
    rows["cpu"] = events["cpu"][idx]
    rows["category"] = TC_NOTIFY
    rows["flags"] = EV_MESSAGE
    merged = np.insert(events, idx, rows)
    texts = {int(i) + k: cgroup_note_text(cg, cgroups.get(cg, f"cgroup:{cg}")) for k, (i, cg) in enumerate(at)}
    return merged, texts


def process_notes(comms: dict[int, str], pids: Iterable[int], dev: int, cpu: int, ts: int) -> npt.NDArray[np.void]:
    """EVENT process notes for pids, with names from comms ("pid<N>" style names are left to the reader)."""
    pids = [int(p) for p in pids]
    out = np.zeros(len(pids), dtype=EVENT)
    if not pids:
        return out
    raw = np.frombuffer(b"".join(_comm_bytes(comms.get(p, "") or "") for p in pids), dtype="<u8").reshape(-1, 2)
    out["ts"] = ts
    out["sector"] = raw[:, 0]
    out["aux"] = raw[:, 1]
    out["pid"] = pids
    out["tgid"] = pids
    out["dev"] = dev
    out["cpu"] = cpu
    out["category"] = TC_NOTIFY
    out["flags"] = EV_NOTE_PROCESS
    return out


@dataclass
class BlktraceWriter:
    """Streams time-ordered EVENT chunks into one blktrace stream (a `blkparse -d` style dump).

    Times are written relative to base_ts (the first event, as blkparse -d writes them). Each device gets
    the wall-clock timestamp note first; each pid one process note before its first event, with the name
    names.fixed gives it (events.FirstNames: the name it had at its first block event; the capture's own
    process notes are not written, and a pid with no name gets no note, as blktrace writes none).
    Sequence numbers run per (device, cpu) from 1, as the kernel numbers each per-CPU buffer.
    names: shared by the writers of one export (call names.chunk() on each whole chunk first), else own.
    """

    out: BinaryIO
    base_ts: int
    wall_at_base_ns: int | None = None
    comms: dict[int, str] = field(default_factory=dict)
    order: str = "<"                  # byte order of the records ('>' for a big-endian host's files)
    records: int = 0
    bytes_written: int = 0
    names: FirstNames | None = None
    _noted: set[int] = field(default_factory=set)
    _devs: set[int] = field(default_factory=set)
    sequencer: Sequencer = field(default_factory=lambda: Sequencer())
    # the capture's cgroups (id -> path): a `cgroup <id> <path>` message note before the first Q of each id
    # (blkparse and btt 1.2.0 read those; they reject records with __BLK_TA_CGROUP); None: no notes
    cgroups: dict[int, str] | None = None
    cg_noted: set[int] = field(default_factory=set)   # ids noted already (shared by the writers of one export)

    def write(self, events: npt.NDArray[np.void]) -> None:
        if len(events) == 0:
            return
        if self.names is None:
            self.names = FirstNames(self.comms)
            self._own_names = True
        if getattr(self, "_own_names", False):
            self.names.chunk(events)
        notes = (events["flags"] & EV_NOTE_PROCESS) != 0
        if notes.any():
            events = events[~notes]
            if len(events) == 0:
                return
        parts: list[bytes] = []
        for dev in np.unique(events["dev"]).tolist():
            if dev not in self._devs:
                self._devs.add(dev)
                if self.wall_at_base_ns is not None:
                    rel = max(int(events["ts"][0]) - self.base_ts, 0)
                    parts.append(timestamp_note(dev, int(events["cpu"][0]), rel, self.wall_at_base_ns + rel,
                                                self.order))
        # a process note before the first event of each pid that has a name
        upid, first = np.unique(events["pid"], return_index=True)
        new = sorted((i, p) for p, i in zip(upid.tolist(), first.tolist()) if p not in self._noted)
        at: list[int] = []
        rows: list[npt.NDArray[np.void]] = []
        for i, pid in new:
            self._noted.add(pid)
            name = self.names.fixed.get(pid)
            if name is None:
                continue
            e = events[i]
            at.append(i)
            rows.append(process_notes({pid: name}, [pid], int(e["dev"]), int(e["cpu"]), int(e["ts"])))
        merged = np.insert(events, np.array(at, dtype=np.int64), join_events(rows)) if rows else events
        texts: dict[int, str] = {}
        if self.cgroups is not None:
            merged, texts = with_cgroup_messages(merged, self.cgroups, self.cg_noted)
        seq = self._sequences(merged)
        if not texts:
            parts.append(encode(merged, seq, self.base_ts, self.order))
        else:   # the notes spliced in before their Qs
            blk = (merged["flags"] & EV_MESSAGE) == 0
            rows_b, length = encode_rows(select_events(merged, blk), seq[blk], self.base_ts, self.order)
            keep = np.arange(64)[None, :] < length[:, None]
            enc = rows_b[keep].tobytes()
            ends = np.r_[0, np.cumsum(length)]
            at_byte = 0
            for k, (i, text) in enumerate(sorted(texts.items())):
                cut = int(ends[i - k])
                parts.append(enc[at_byte:cut])
                m = merged[i]
                parts.append(message_note(int(m["dev"]), int(m["cpu"]), int(m["ts"]) - self.base_ts, text,
                                          self.order))
                at_byte = cut
            parts.append(enc[at_byte:])
        data = b"".join(parts)
        self.out.write(data)
        self.records += len(merged) + (len(parts) - 1)
        self.bytes_written += len(data)

    def _sequences(self, ev: npt.NDArray[np.void]) -> npt.NDArray[np.uint32]:
        return self.sequencer.number(ev)


class Sequencer:
    """blktrace's sequence numbers: per (device, cpu), from 1, for every record but the notes."""

    def __init__(self) -> None:
        self.next: dict[tuple[int, int], int] = {}

    def number(self, ev: npt.NDArray[np.void]) -> npt.NDArray[np.uint32]:
        notes = (ev["flags"] & (EV_NOTE_PROCESS | EV_MESSAGE)) != 0
        seq = np.zeros(len(ev), dtype=np.uint32)
        data_idx = np.flatnonzero(~notes)
        if not len(data_idx):
            return seq
        key = (ev["dev"][data_idx].astype(np.uint64) << np.uint64(32)) | ev["cpu"][data_idx].astype(np.uint64)
        order = np.argsort(key, kind="stable")
        sk = key[order]
        starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        counts = np.diff(np.r_[starts, len(sk)])
        rank = np.arange(len(sk)) - np.repeat(starts, counts)
        base = np.empty(len(starts), dtype=np.int64)
        for j, k in enumerate(sk[starts].tolist()):
            pair = (k >> 32, k & 0xFFFFFFFF)
            base[j] = self.next.get(pair, 0)
            self.next[pair] = int(base[j]) + int(counts[j])
        seq[data_idx[order]] = (np.repeat(base, counts) + rank + 1).astype(np.uint32)
        return seq


# --------------------------------------------------------------------------- reading

@dataclass
class Decoded:
    """One decoded piece of a blktrace stream."""

    events: npt.NDArray[np.void]                      # EVENT records (process notes included)
    comms: dict[int, str]
    timestamps: list[tuple[int, int]]                 # (trace time ns, wall ns) from TIMESTAMP notes
    messages: int = 0
    offsets: npt.NDArray[np.int64] | None = None      # byte offset of each event's record
    seq: npt.NDArray[np.uint32] | None = None         # each event's sequence number
    # each event's record's own device, where it is not the event's: a remap recorded on the traced disk
    # whose bio went to another device is an event of the device it went to (its payload's device_to, as
    # blkparse prints it and ioscope records it); btt counts it on the record's device
    own_dev: npt.NDArray[np.uint32] | None = None
    # decode(messages=True): the text of each message (BLK_TN_MESSAGE) row, by its index in events
    texts: dict[int, str] | None = None


def _order(buf: bytes | memoryview, path: str, offset: int) -> str:
    if len(buf) < 4:
        raise BlktraceError(f"{path}: truncated at byte offset {offset}: a record needs 48 bytes, "
                            f"{len(buf)} left", "the file was cut; re-copy it")
    le = int.from_bytes(bytes(buf[:4]), "little")
    be = int.from_bytes(bytes(buf[:4]), "big")
    if le & 0xFFFFFF00 == MAGIC:
        return "<"
    if be & 0xFFFFFF00 == MAGIC:
        return ">"
    raise BlktraceError(f"{path}: not a blktrace file: bad magic 0x{le:08x} at byte offset {offset}",
                        "expected blktrace version 7 records (magic 0x65617407)")


def record_offsets(buf: bytes | memoryview, path: str = "<data>", start: int = 0,
                   order: str | None = None, final: bool = True) -> tuple[npt.NDArray[np.int64], int, str]:
    """Byte offsets of the records in buf, the offset where parsing stopped, and the byte order.

    Each record's length depends on the one before, so the walk is done in C
    (_tracecore.scan_blktrace). With final=False an incomplete record at the
    end is left for the next call instead of being an error. Errors name the
    file and the byte offset (start + offset in buf).
    """
    mv = memoryview(buf)
    if order is None:
        order = _order(mv[:4], path, start)
    raw, end, status, bad_off, bad_val = _tracecore.scan_blktrace(mv, order == ">", final)
    offs = np.frombuffer(raw, dtype=np.int64)
    if status == 2:
        raise BlktraceError(f"{path}: bad magic 0x{bad_val:08x} at byte offset {start + bad_off}",
                            "the file is corrupt from there on (or not a blktrace file)")
    if status == 3:
        raise BlktraceError(f"{path}: unsupported blktrace version {bad_val} at byte offset {start + bad_off}",
                            "only version 7 is supported")
    if status == 4:
        raise BlktraceError(f"{path}: time {bad_val} ns (2^63 or more) at byte offset {start + bad_off}",
                            "no kernel clock reaches 292 years: the file is corrupt from there on")
    if status == 1 and final:
        left = len(mv) - bad_off
        if bad_val == 0:
            raise BlktraceError(f"{path}: truncated at byte offset {start + bad_off}: a record needs 48 bytes, "
                                f"{left} left", "the file was cut in the middle of a record")
        raise BlktraceError(f"{path}: truncated at byte offset {start + bad_off}: the record there has a "
                            f"{bad_val}-byte payload, only {left - 48} bytes follow its header",
                            "the file was cut in the middle of a payload")
    return offs, int(end), order


def decode(buf: bytes | memoryview, offs: npt.NDArray[np.int64], order: str, path: str = "<data>",
           start: int = 0, messages: bool = False) -> Decoded:
    """EVENT records for the blk_io_trace records at offs (from record_offsets). messages: the messages
    (BLK_TN_MESSAGE, the I/O scheduler's) as rows too, flagged EV_MESSAGE, their texts in Decoded.texts
    (blkparse prints them, and btt sets their device up)."""
    n = len(offs)
    dt = bit_dtype(order)
    if n == 0:
        return Decoded(np.zeros(0, dtype=EVENT), {}, [], 0, offs, np.zeros(0, dtype=np.uint32))
    rows = np.frombuffer(_tracecore.gather_blktrace(memoryview(buf), offs, order == ">"),
                         dtype=np.uint8).reshape(n, 64)
    hdr = rows[:, :48].copy().view(dt).reshape(n)
    pay = rows[:, 48:]
    action = hdr["action"].astype(np.uint32)
    code = (action & np.uint32(0xFFFF)).astype(np.uint32)
    cat = (action >> np.uint32(16)).astype(np.uint32)
    plen = hdr["pdu_len"].astype(np.int64)
    cg = ((code & TA_CGROUP) != 0) & (plen >= 8)
    cg_ids: npt.NDArray[np.uint64] | None = None
    if cg.any():   # an 8-byte cgroup id comes first (the file's byte order): kept, and those payloads shifted
        cg_ids = pay[:, :8].copy().view(order + "u8").reshape(-1).astype(np.uint64)
        pay = pay.copy()
        pay[cg, :8] = pay[cg, 8:]
        pay[cg, 8:] = 0
        plen = plen - np.where(cg, 8, 0)
    code = code & np.uint32(0xFF)
    notify = (cat & TC_NOTIFY) != 0

    ev = np.zeros(n, dtype=EVENT)
    ev["ts"] = hdr["time"]
    ev["sector"] = hdr["sector"]
    ev["bytes"] = hdr["bytes"]
    ev["dev"] = hdr["device"]
    ev["pid"] = hdr["pid"]
    ev["tgid"] = hdr["pid"]
    ev["cpu"] = hdr["cpu"].astype(np.uint16)
    ev["error"] = hdr["error"]
    ev["action"] = np.where(notify, 0, code)
    ev["category"] = cat.astype(np.uint16)
    one = ~notify & ((code == TA_UNPLUG_IO) | (code == TA_UNPLUG_TIMER) | (code == TA_SPLIT)) & (plen >= 8)
    if one.any():
        ev["aux"][one] = pay[one, :8].copy().view(">u8").reshape(-1)
    rm = ~notify & (code == TA_REMAP) & (plen >= 16)
    own: npt.NDArray[np.uint32] | None = None
    if rm.any():
        r = pay[rm].copy().view([("f", ">u4"), ("t", ">u4"), ("s", ">u8")]).reshape(-1)
        ev["aux_dev"][rm] = r["f"]
        ev["aux"][rm] = r["s"]
        if (r["t"] != hdr["device"][rm]).any():
            own = hdr["device"].astype(np.uint32)
            ev["dev"][rm] = r["t"]

    if cg_ids is not None:   # a Q keeps its bio's cgroup as ioscope's recorder writes it: EV_CGROUP, the id in aux
        q = cg & ~notify & (code == TA_QUEUE)
        ev["flags"][q] |= EV_CGROUP
        ev["aux"][q] = cg_ids[q]

    comms: dict[int, str] = {}
    stamps: list[tuple[int, int]] = []
    keep = ~notify
    proc = notify & (code == TN_PROCESS)
    if proc.any():
        ev["flags"][proc] = EV_NOTE_PROCESS
        ev["action"][proc] = 0
        le = pay[proc].copy().view("<u8").reshape(-1, 2)
        ev["sector"][proc] = le[:, 0]
        ev["aux"][proc] = le[:, 1]
        ev["bytes"][proc] = 0
        for pid, row in zip(hdr["pid"][proc].tolist(), pay[proc]):
            comms[int(pid)] = comm_str(bytes(row))
        keep |= proc
    ts_note = notify & (code == TN_TIMESTAMP) & (plen == 8)
    if ts_note.any():
        words = pay[ts_note][:, :8].copy().view(order + "u4").reshape(-1, 2)
        for t, (sec, ns) in zip(hdr["time"][ts_note].tolist(), words.tolist()):
            stamps.append((int(t), int(sec) * 1_000_000_000 + int(ns)))
    is_msg = notify & (code == TN_MESSAGE) & ((action & np.uint32(0xFFFF)) == TN_MESSAGE)
    texts: dict[int, str] | None = None
    if messages and is_msg.any():
        ev["flags"][is_msg] = EV_MESSAGE
        keep = keep | is_msg
        pos = np.cumsum(keep) - 1
        texts = {int(pos[i]): bytes(buf[int(offs[i]) + 48:int(offs[i]) + 48 + int(hdr["pdu_len"][i])])
                 .split(b"\0", 1)[0].decode(errors="replace") for i in np.flatnonzero(is_msg).tolist()}
    n_msg = int((notify & (code == TN_MESSAGE)).sum())
    return Decoded(select_events(ev, keep), comms, stamps, n_msg, offs[keep] + start,
                   hdr["sequence"][keep].astype(np.uint32), None if own is None else own[keep], texts)


def read_stream(path: str, block: int = 1 << 20, messages: bool = False) -> Iterator[Decoded]:
    """Decode one blktrace stream file block by block (bounded memory); messages: decode()'s."""
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except OSError as exc:
        raise BlktraceError(f"{path}: {exc.strerror or exc}", "check the path") from None
    with f:
        if size == 0:  # blktrace writes empty files for CPUs that saw no event of the disk
            return
        pos = 0
        carry = b""
        order: str | None = None
        while True:
            data = f.read(block)
            buf = carry + data
            final = len(data) < block
            if not buf:
                break
            offs, used, order = record_offsets(buf, path, pos, order, final=final)
            yield decode(buf, offs, order, path, pos, messages)
            pos += used
            carry = buf[used:]
            if final:
                break


MAX_CPU = 0xFFFF   # EVENT's cpu is 16 bits (Linux's NR_CPUS is at most 8192)
PER_CPU_NAME = re.compile(r"^(?P<stem>.+)\.blktrace\.(?P<cpu>\d+)$")


@dataclass
class FileSet:
    """blktrace's per-CPU files of one traced device, NAME.blktrace.CPU: every one there, and the CPUs
    below the highest whose file is not (blkparse stops at the first missing one; ioscope reads them all
    and says which are missing)."""

    stem: str
    files: list[tuple[int, str]]      # (cpu, path), by cpu
    missing: list[int]

    @property
    def paths(self) -> list[str]:
        return [f for _c, f in self.files]


def file_set(path: str) -> FileSet | None:
    """The per-CPU files NAME.blktrace.N for NAME or for one of them; None when there are none."""
    m = PER_CPU_NAME.match(path)
    stem = m.group("stem") if m and os.path.exists(path) else path
    d = os.path.dirname(stem) or "."
    base = os.path.basename(stem) + ".blktrace."
    try:
        names = os.listdir(d)
    except OSError:
        return None
    files = sorted((int(n[len(base):]), os.path.join(os.path.dirname(stem), n)) for n in names
                   if n.startswith(base) and n[len(base):].isdigit())
    if not files:
        return None
    if files[-1][0] > MAX_CPU:   # the missing CPUs below it are listed: a name's number must not size that
        raise BlktraceError(f"{files[-1][1]}: CPU {files[-1][0]} in a per-CPU file's name is past {MAX_CPU}",
                            "blktrace names its files NAME.blktrace.CPU; rename or move that file")
    have = {c for c, _f in files}
    return FileSet(stem, files, [c for c in range(files[-1][0]) if c not in have])


def per_cpu_files(path: str) -> list[str]:
    """blktrace's per-CPU files for a name: every NAME.blktrace.N there is (or the file itself)."""
    fs = file_set(path)
    return fs.paths if fs is not None else [path]


def read_merged(paths: list[str], block: int = 1 << 20) -> Iterator[Decoded]:
    """blktrace streams merged into one time-ordered sequence, chunk by chunk.

    One file (a `blkparse -d` dump) is read in file order, as btt reads it.
    Several (per-CPU files, each time-ordered) are merged by (time, device,
    sequence) as blkparse orders them; events are released up to the smallest
    latest-time-read among the streams that still have data, so memory stays
    bounded by a block per stream.
    """
    if len(paths) == 1:
        yield from read_stream(paths[0], block)
        return
    its = [read_stream(p, block) for p in paths]
    last = [-1] * len(paths)
    alive = [True] * len(paths)
    held = np.zeros(0, dtype=EVENT)
    held_seq = np.zeros(0, dtype=np.uint32)
    held_own = np.zeros(0, dtype=np.uint32)
    comms: dict[int, str] = {}
    while True:
        got: list[Decoded] = []
        for i in range(len(paths)):
            # one more block from every stream that still has data
            while alive[i]:
                try:
                    d = next(its[i])
                except StopIteration:
                    alive[i] = False
                    break
                got.append(d)
                if len(d.events):
                    last[i] = max(last[i], int(d.events["ts"].max()))
                    break
        for d in got:
            comms.update(d.comms)
        evs = join_events([held] + [d.events for d in got])
        seq = np.concatenate([held_seq] + [d.seq if d.seq is not None else np.zeros(len(d.events), np.uint32)
                                           for d in got])
        own = np.concatenate([held_own] + [d.own_dev if d.own_dev is not None else d.events["dev"].astype(np.uint32)
                                           for d in got])
        o = np.lexsort((seq, evs["dev"], evs["ts"]))
        evs, seq, own = select_events(evs, o), seq[o], own[o]
        live = [last[i] for i in range(len(paths)) if alive[i]]
        cut = int(np.searchsorted(evs["ts"], min(live), side="right")) if live else len(evs)
        out, held = evs[:cut], evs[cut:]
        out_seq, held_seq = seq[:cut], seq[cut:]
        out_own, held_own = own[:cut], own[cut:]
        yield Decoded(out, dict(comms), [s for d in got for s in d.timestamps], sum(d.messages for d in got),
                      None, out_seq, out_own)
        if not any(alive):
            if len(held):
                yield Decoded(held, dict(comms), [], 0, None, held_seq, held_own)
            break


@dataclass
class FileTrace:
    """One per-CPU file of blktrace, all of it: what an import must keep to give the file back.

    events: its block records as EVENT (file order), seq their sequence numbers; notes: every notify
    record (process, timestamp, message, any other) as (block records before it, its bytes); raw: the
    bytes of each block record that encode() would not write back identically (a remap whose payload's
    device_to is not the record's own device, a cgroup id, a payload longer than 16 bytes, action bits
    EVENT does not keep), by index in events.
    """

    events: npt.NDArray[np.void]
    seq: npt.NDArray[np.uint32]
    notes: list[tuple[int, bytes]]
    raw: dict[int, bytes]
    order: str
    size: int


def read_file(path: str, cpu: int | None = None) -> FileTrace:
    """A whole blktrace file (check_file first for errors naming the offset). With cpu (the file's, from
    its name), a record of another CPU is kept among the notes: blkparse skips it ("trace info has
    error cpu"), so it is no event, but the file is given back with it."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError as exc:
        raise BlktraceError(f"{path}: {exc.strerror or exc}", "check the path") from None
    if not buf:
        return FileTrace(np.zeros(0, dtype=EVENT), np.zeros(0, np.uint32), [], {}, "<", 0)
    offs, _end, order = record_offsets(buf, path, 0, None, final=True)
    data = np.frombuffer(buf, dtype=np.uint8)
    head = np.frombuffer(_tracecore.gather_blktrace(memoryview(buf), offs, order == ">"),
                         dtype=np.uint8).reshape(-1, 64)[:, :48].copy().view(bit_dtype(order)).reshape(-1)
    plen = head["pdu_len"].astype(np.int64)
    notify = ((head["action"] >> np.uint32(16)) & np.uint32(TC_NOTIFY)) != 0
    if cpu is not None:
        notify |= head["cpu"] != cpu
    block = np.flatnonzero(~notify)
    notes = [(int(np.searchsorted(block, i)), buf[int(offs[i]):int(offs[i]) + 48 + int(plen[i])])
             for i in np.flatnonzero(notify).tolist()]
    d = decode(buf, offs[block], order, path)
    # (a remap is an event of the device it went to: decode() took its payload's device_to)
    # which block records encode() gives back byte for byte
    bo = offs[block]
    olen = 48 + plen[block]
    cols = np.arange(64)[None, :]
    bad_parts = []
    step = 1 << 15   # rows of 64 bytes, compared a slice at a time (bounded memory)
    for a in range(0, len(bo), step):
        rows, length = encode_rows(d.events[a:a + step], None if d.seq is None else d.seq[a:a + step], 0, order)
        ol = olen[a:a + step]
        orig = np.where(cols < ol[:, None], data[np.minimum(bo[a:a + step, None] + cols, len(data) - 1)], 0)
        enc = np.where(cols < length[:, None], rows, 0)
        bad_parts.append(a + np.flatnonzero((ol != length) | (ol > 64) | (orig != enc).any(axis=1)))
    bad = np.concatenate(bad_parts) if bad_parts else np.zeros(0, np.int64)
    raw = {int(i): buf[int(bo[i]):int(bo[i] + olen[i])] for i in bad.tolist()}
    assert d.seq is not None
    return FileTrace(d.events, d.seq, notes, raw, order, len(buf))
