"""The capture file: block-layer events plus everything needed to analyse them elsewhere.

A capture is an Apache Arrow IPC *stream* (docs/capture-format.md):

- the schema message comes first; its custom metadata holds the capture's
  header (``ioscope.capture``: JSON with host, kernel, devices, clock, ...);
- then one record batch ("chunk") per flush, one column per EVENT field, each
  with custom metadata ``ioscope.chunk`` (JSON: sequence number, checksum of the
  column data, process names first seen in it, lost counts so far);
- then, when the recorder ends cleanly, an empty record batch with
  ``ioscope.end`` (end time, final lost counts) and Arrow's end-of-stream marker.

Chunks are written with one write each and never rewritten, so a recorder
killed at any moment (even by SIGKILL) leaves a file whose complete chunks can
be read; such a file has no ``ioscope.end`` and is reported as truncated.

Events are globally sorted by ``ts``: the writer sorts what it holds and keeps
back the newest ``reorder_window_ns`` of events until later ones arrived. An
event that arrives later than that window (never seen in practice: ring-buffer
records are at most microseconds out of order) is still written, and counted
in ``late_events``; only then is a capture not sorted.
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import socket
import stat
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from ioscope.base.errors import IoscopeError
from ioscope.base.fmt import comm_str
from ioscope.base.outfile import create_private
from ioscope.capture import _tracecore
from ioscope.capture.events import EV_CGROUP, EV_NOTE_PROCESS, EVENT, join_events, select_events

# pyarrow is imported when a capture is written (require_writer), not when one is read: the
# reader below decodes the Arrow IPC messages itself (one flatbuffer reader, _Flat), with numpy.
# Measured 2026-11-22 on a 1.44-million-event whole-host capture (80 MB), reading every chunk into
# EVENT arrays with checksums: this reader 0.19-0.20 s and 112 MiB peak RSS; pyarrow's stream reader
# (memory-mapped, the same arrays built from its columns) 0.16-0.19 s and 139 MiB (importing pyarrow
# alone adds 26 MiB). It also reads a capture cut short up to its last complete chunk, where pyarrow's
# reader raises. report has to fit in less memory than btt: the reader stays.
pa: Any = None
paipc: Any = None

FORMAT = "ioscope-capture"
FORMAT_VERSION = 1
KEY_HEADER = b"ioscope.capture"
KEY_HEADER_CRC = b"ioscope.capture.crc32"
KEY_CHUNK = b"ioscope.chunk"
KEY_END = b"ioscope.end"

NAMES: tuple[str, ...] = tuple(EVENT.names or ())
DTYPES: dict[str, np.dtype[Any]] = {n: EVENT[n] for n in NAMES}


DEFAULT_CHUNK_BYTES = 2 << 20
DEFAULT_FLUSH_INTERVAL = 1.0
DEFAULT_REORDER_WINDOW_NS = 20_000_000
# Space kept allocated past the end of the file (fallocate, FALLOC_FL_KEEP_SIZE) for the end record,
# so that a full file system still lets the capture end cleanly (the end record is a few KiB).
END_RESERVE_BYTES = 256 << 10
# A chunk that does not fit is written in halves, down to chunks of this many events.
MIN_SPLIT_ROWS = 1024
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_FALLOC_FL_KEEP_SIZE = 1

# Arrow's flatbuffer MessageHeader union tags
_MSG_SCHEMA = 1
_MSG_RECORD_BATCH = 3
_CONTINUATION = 0xFFFFFFFF


def require_writer() -> None:
    """Import what writing a capture needs (pyarrow: ~35 MiB of RSS, its libraries mapped). A writer calls
    it when it starts; the flight recorder too, so that its first save neither grows the process nor
    finds pyarrow missing after the incident it was kept for."""
    global pa, paipc
    if pa is not None:
        return
    try:
        import pyarrow
        import pyarrow.ipc
    except ImportError:  # pragma: no cover - pyarrow is an install requirement
        raise IoscopeError("pyarrow is not installed; ioscope captures are Apache Arrow IPC streams",
                           "install it: pip install pyarrow") from None
    pa, paipc = pyarrow, pyarrow.ipc


def _arrow_schema(meta: Mapping[str, Any]) -> Any:
    text = json.dumps(meta, sort_keys=True)
    fields = [pa.field(name, pa.from_numpy_dtype(DTYPES[name]), nullable=False) for name in NAMES]
    return pa.schema(fields, metadata={KEY_HEADER: text.encode(),
                                       KEY_HEADER_CRC: str(zlib.crc32(text.encode())).encode()})


_WEIGHTS = np.empty(0, np.uint64)


def checksum(ev: np.ndarray) -> str:
    """Fletcher-style checksum of a chunk's events: the sum of its 64-bit words, and their sum
    weighted by odd position factors, both mod 2**64 (hex). Any single changed word changes the
    first; swapped words change the second. Vectorised: ~3 ns per event, where zlib's CRC-32 takes ~30.
    """
    global _WEIGHTS
    words = np.ascontiguousarray(ev).view(np.uint64)
    if len(_WEIGHTS) < len(words):
        _WEIGHTS = np.arange(1, 2 * len(words) + 1, 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        s1 = int(words.sum(dtype=np.uint64))
        s2 = int((words * _WEIGHTS[: len(words)]).sum(dtype=np.uint64))
    return f"{s1:016x}{s2 & 0xFFFFFFFFFFFFFFFF:016x}"


def notes_to_comms(events: np.ndarray) -> dict[int, str]:
    """pid -> command name from the process notes in an EVENT array (a pid's latest note wins: the
    array may come straight from the per-CPU rings, in ring order rather than time order)."""
    sel = events[(events["action"] == 0) & ((events["flags"] & EV_NOTE_PROCESS) != 0)]
    if not len(sel):
        return {}
    sel = sel[np.argsort(sel["ts"], kind="stable")]
    raw = np.empty((len(sel), 2), dtype="<u8")
    raw[:, 0] = sel["sector"]
    raw[:, 1] = sel["aux"]
    names = raw.view("S16").ravel()
    return {int(p): comm_str(n) for p, n in zip(sel["pid"], names)}


def queue_cgroups(events: np.ndarray) -> np.ndarray:
    """The ids of the cgroups the queue events of an EVENT array name (EV_CGROUP: the recorder puts the
    cgroup a bio is charged to in its queue event's aux), each once."""
    return np.unique(events["aux"][(events["flags"] & EV_CGROUP) != 0])


class _Names:
    """Names a capture stores as it learns them (pid -> command, cgroup id -> path): each written once, with
    the next chunk, and kept pending until a chunk that holds them is in the file."""

    def __init__(self) -> None:
        self.known: dict[int, str] = {}
        self.new: dict[int, str] = {}

    def add(self, names: Mapping[int, str]) -> None:
        for k, v in names.items():
            if self.known.get(int(k)) != v:
                self.known[int(k)] = v
                self.new[int(k)] = v

    def pending(self) -> dict[str, str] | None:
        return {str(k): v for k, v in self.new.items()} if self.new else None


def clock_pair() -> dict[str, int]:
    """One (CLOCK_MONOTONIC, CLOCK_REALTIME) pair, read as close together as possible."""
    best: tuple[int, int, int] | None = None
    for _ in range(5):
        a = time.monotonic_ns()
        w = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2, w)
    assert best is not None
    return {"mono_ns": best[1], "wall_ns": best[2], "uncertainty_ns": best[0]}


def base_meta() -> dict[str, Any]:
    """The header fields every capture has; the recorder adds devices, tracepoints, filters."""
    from ioscope import __version__
    u = os.uname()
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tool": "ioscope", "tool_version": __version__,
        "host": socket.gethostname(), "kernel": u.release, "kernel_version": u.version, "machine": u.machine,
        "ncpus": os.cpu_count() or 1, "clock": clock_pair(), "byte_order": sys.byteorder,
    }


class CaptureFull(IoscopeError):
    """The capture's file system (or quota) was full: the file holds its complete chunks and ends
    cleanly, the events that did not fit were counted (CaptureWriter.unwritten)."""


class _FileFull(Exception):
    """One write did not fit; nothing of it is left in the file."""


class _Staging:
    """The Arrow stream writer's sink: it collects one message's bytes, which the writer then puts in
    the file with one write of its own (so that a write that does not fit can be taken back whole)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.pos = 0
        self.closed = False

    def write(self, b: Any) -> int:
        n = len(memoryview(b).cast("B"))
        self.data += b
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


_libc: Any = None


def _fallocate_keep_size(fd: int, offset: int, length: int) -> int:
    """fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length): 0, or the errno (EOPNOTSUPP where the file
    system or file type has no fallocate)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        _libc.fallocate.restype = ctypes.c_int
    if _libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return 0
    return ctypes.get_errno() or errno.EIO


class CaptureWriter:
    """Appends EVENT arrays to a capture file in chunks; see the module doc.

    A full file system (ENOSPC, EDQUOT, EFBIG) does not cost what was written: the chunk that does
    not fit is taken back (the file is cut back to its last complete chunk), written in halves while
    they fit, and from then on events are counted (unwritten, unwritten_actions), not written; close()
    writes the end record into the space kept for it (END_RESERVE_BYTES) and raises CaptureFull.
    """

    def __init__(self, path: str, meta: Mapping[str, Any], *, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 flush_interval: float = DEFAULT_FLUSH_INTERVAL,
                 reorder_window_ns: int = DEFAULT_REORDER_WINDOW_NS, force: bool = False,
                 cgroup_names: Callable[[int], str] | None = None) -> None:
        """cgroup_names: cgroup id -> path, for the cgroups the queue events name (the recorder's, reading the
        host's hierarchy while the cgroups exist); without it only names given to add_cgroups are stored."""
        require_writer()
        self.path = path
        self.meta: dict[str, Any] = {**base_meta(), **meta, "format": FORMAT, "format_version": FORMAT_VERSION}
        self.meta.setdefault("start", clock_pair())
        self.chunk_rows = max(1, chunk_bytes // EVENT.itemsize)
        self.flush_interval = flush_interval
        self.window = reorder_window_ns
        self.schema = _arrow_schema(self.meta)
        self._types = [f.type for f in self.schema]
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self._held: np.ndarray = np.empty(0, EVENT)  # sorted, not yet written (newer than the window)
        self._max_ts = 0
        self._last_written_ts = 0
        self._last_flush = time.monotonic()
        self._comms = _Names()
        self._cgroups = _Names()
        self._cgroup_names = cgroup_names
        self._lost: dict[str, Any] | None = None
        self._lost_dirty = False
        self.events_written = 0
        self.action_counts = np.zeros(32, dtype=np.int64)  # records written per action code (0: notes)
        self.chunks_written = 0
        self.late_events = 0
        self.closed = False
        self.full: str | None = None  # why the file system refused a write (then nothing more is written)
        self.unwritten = 0  # events not written because the file system was full
        self.unwritten_actions = np.zeros(32, dtype=np.int64)
        self._ended = False  # the end record is in the file
        # events name processes, disks and the host: the file is private (0600), and an existing
        # file is refused unless force
        self._fd = create_private(path, force)
        self._pos = 0  # bytes in the file: every one of them part of a complete Arrow message
        self._regular = stat.S_ISREG(os.fstat(self._fd).st_mode)
        self._reserve = self._regular  # fallocate works here (until it says EOPNOTSUPP)
        # every message is staged and then written with one os.write (unbuffered: every chunk reaches the
        # kernel when written, so a SIGKILL loses none of it)
        self._stage = _Staging()
        self._sink = pa.PythonFile(self._stage, mode="w")
        try:
            self._writer = paipc.new_stream(self._sink, self.schema)
            self._emit(self._stage.take())
            # the schema (with the header) and an empty first chunk go out at once: a recorder killed
            # before its first events leaves a capture that says what it was, not an empty file
            self._write_chunk(np.empty(0, EVENT))
        except _FileFull as exc:
            os.close(self._fd)
            os.unlink(path)
            raise IoscopeError(f"cannot write capture file {path}: {exc}", "free some space or write it "
                               "to another file system") from None
        except BaseException:
            os.close(self._fd)
            raise

    # -- input ------------------------------------------------------------

    def write(self, events: np.ndarray, horizon_ns: int = 0) -> None:
        """Queue events for writing; writes full chunks, and everything when a flush is due.

        horizon_ns: a CLOCK_MONOTONIC time before which the caller has handed over
        every event (e.g. taken just before polling the ring buffer); it lets
        the writer release held-back events when the event rate is low.
        """
        if self.closed:
            raise ValueError("capture writer is closed")
        if events.dtype != EVENT:
            raise TypeError(f"events must have the EVENT dtype, not {events.dtype}")
        if self.full:
            self._count_unwritten(events)
            return
        if len(events):
            comms = notes_to_comms(events) if (events["action"] == 0).any() else {}
            if comms:
                self.add_comms(comms)
            if self._cgroup_names is not None:
                namer = self._cgroup_names
                self.add_cgroups({cg: namer(cg) for cg in queue_cgroups(events).tolist()
                                  if cg not in self._cgroups.known})
            self._pending.append(events)
            self._pending_rows += len(events)
            self._max_ts = max(self._max_ts, int(events["ts"].max()))
        self._max_ts = max(self._max_ts, horizon_ns)
        if self._pending_rows + len(self._held) >= 2 * self.chunk_rows or self.flush_due():
            self.flush()

    def flush_due(self) -> bool:
        return time.monotonic() - self._last_flush >= self.flush_interval

    def add_comms(self, comms: Mapping[int, str]) -> None:
        self._comms.add(comms)

    def add_cgroups(self, cgroups: Mapping[int, str]) -> None:
        """cgroup id -> path (relative to the io controller's hierarchy), for readers' cgroup names."""
        self._cgroups.add(cgroups)

    def set_lost(self, lost: Mapping[str, Any]) -> None:
        """Loss counters so far (stored with the next chunk and at close)."""
        new = dict(lost)
        if new != self._lost:
            self._lost = new
            self._lost_dirty = True

    # -- output -----------------------------------------------------------

    def _merge_pending(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Held and pending events as one array, and the order that sorts them by time (None: sorted)."""
        parts = [self._held, *self._pending] if len(self._held) else self._pending
        self._pending = []
        self._pending_rows = 0
        if not parts:
            return np.empty(0, EVENT), None
        allev = join_events(parts)
        ts = allev["ts"]
        if len(ts) > 1 and not bool((ts[1:] >= ts[:-1]).all()):
            return allev, np.argsort(ts, kind="stable")
        return allev, None

    def flush(self, final: bool = False) -> None:
        """Write every event older than the reorder window (all of them when final)."""
        if self.full:
            return
        allev, order = self._merge_pending()
        ts = allev["ts"] if order is None else allev["ts"][order]
        if final or self.window <= 0:
            cut = len(allev)
        else:
            cut = int(np.searchsorted(ts, np.uint64(max(0, self._max_ts - self.window)), side="right"))
        if cut < len(allev):
            self._held = select_events(allev, slice(cut, None) if order is None else order[cut:])
        else:
            self._held = np.empty(0, EVENT)
        if cut:
            first = int(ts[0])
            if first < self._last_written_ts:
                self.late_events += int(np.count_nonzero(ts[:cut] < self._last_written_ts))
            self._last_written_ts = max(self._last_written_ts, int(ts[cut - 1]))
        for i in range(0, cut, self.chunk_rows):
            j = min(cut, i + self.chunk_rows)
            idx = order[i:j] if order is not None else np.arange(i, j)
            done = self._write_rows(allev, idx)
            if done < len(idx):
                # the file system is full: this chunk's rest, the later ones and what is held are counted
                rest = order[i + done:] if order is not None else np.arange(i + done, len(allev))
                self._count_unwritten(select_events(allev, rest))
                self._held = np.empty(0, EVENT)
                break
        else:
            if not cut and (self._comms.new or self._cgroups.new or self._lost_dirty) and self.flush_due():
                try:
                    self._write_chunk(allev[:0])  # names and loss counts reach the file even when idle
                except _FileFull as exc:
                    self._set_full(exc)
                    self._count_unwritten(self._held)
                    self._held = np.empty(0, EVENT)
        self._last_flush = time.monotonic()

    def _write_rows(self, allev: np.ndarray, idx: np.ndarray) -> int:
        """Write allev[idx] as one chunk or, when it does not fit, in halves (each in halves if it does not
        fit, ...) down to MIN_SPLIT_ROWS; the number of rows written (a prefix of idx: fewer than all when
        the file system is full, which then is set)."""
        try:
            self._write_chunk(allev, idx)
            return len(idx)
        except _FileFull as exc:
            if len(idx) <= MIN_SPLIT_ROWS:
                self._set_full(exc)
                return 0
        half = len(idx) // 2
        done = self._write_rows(allev, idx[:half])
        return done if done < half else half + self._write_rows(allev, idx[half:])

    def _set_full(self, exc: BaseException) -> None:
        self.full = str(exc)

    def _count_unwritten(self, ev: np.ndarray) -> None:
        if len(ev):
            self.unwritten += len(ev)
            self.unwritten_actions += np.bincount(ev["action"].astype(np.int64) & 31, minlength=32)[:32]

    def _emit(self, data: bytes) -> None:
        """Append one whole Arrow message to the file, or nothing of it (_FileFull when it does not fit)."""
        fd, pos = self._fd, self._pos
        if self._reserve:
            err = _fallocate_keep_size(fd, pos, len(data) + END_RESERVE_BYTES)
            if err in _FULL_ERRNOS:
                # a failed fallocate may give back the space kept before: keep what the end record needs
                _fallocate_keep_size(fd, pos, END_RESERVE_BYTES)
                raise _FileFull(os.strerror(err))
            if err:
                self._reserve = False  # no fallocate here (EOPNOTSUPP): writes alone
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                done += os.write(fd, view[done:])
        except OSError as exc:
            if done and self._regular:
                try:
                    os.ftruncate(fd, pos)  # take back the part of the message that was written
                    os.lseek(fd, pos, os.SEEK_SET)
                except OSError:
                    pass
            if exc.errno in _FULL_ERRNOS:
                raise _FileFull(exc.strerror or os.strerror(exc.errno or 0)) from None
            raise IoscopeError(f"cannot write capture file {self.path}: {exc.strerror}") from None
        self._pos = pos + len(view)

    def _names_into(self, info: dict[str, Any]) -> None:
        for key, names in (("comms", self._comms), ("cgroups", self._cgroups)):
            new = names.pending()
            if new:
                info[key] = new

    def _names_written(self, info: Mapping[str, Any]) -> None:
        for key, names in (("comms", self._comms), ("cgroups", self._cgroups)):
            if key in info:
                names.new = {}

    def _write_chunk(self, ev: np.ndarray, order: np.ndarray | None = None) -> None:
        """One record batch: the rows of ev (those at order's indices, in that order, if given).
        _FileFull when it does not fit (nothing of it is in the file then, and nothing is counted)."""
        cols, s1, s2, counts = _tracecore.pack_events(np.ascontiguousarray(ev).view(np.uint8),
                                                      None if order is None else order.astype(np.int64, copy=False))
        rows = len(cols[0]) // 8
        info: dict[str, Any] = {"seq": self.chunks_written, "rows": rows, "sum64": f"{s1:016x}{s2:016x}"}
        arrays = [pa.Array.from_buffers(self._types[k], rows, [None, pa.py_buffer(c)]) for k, c in enumerate(cols)]
        if rows:
            ts = np.frombuffer(cols[0], dtype=np.uint64)
            info["first_ts"] = int(ts[0])
            info["last_ts"] = int(ts[-1])
        self._names_into(info)
        if self._lost_dirty and self._lost is not None:
            info["lost"] = self._lost
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        try:
            self._writer.write_batch(batch, custom_metadata={KEY_CHUNK: json.dumps(info).encode()})
        except (OSError, pa.ArrowException) as exc:
            raise IoscopeError(f"cannot write capture file {self.path}: {exc}") from None
        self._emit(self._stage.take())
        self._names_written(info)
        if "lost" in info:
            self._lost_dirty = False
        self.chunks_written += 1
        self.events_written += rows
        self.action_counts[:32] += np.frombuffer(counts, dtype=np.uint64).astype(np.int64)

    def bytes_written(self) -> int:
        return self._pos

    def bytes_accepted(self) -> int:
        """The file's size once the events handed over so far are written: what is written, and what is
        pending or held back (the reorder window) at their size in the file (record --max-size)."""
        return self._pos + (self._pending_rows + len(self._held)) * EVENT.itemsize

    def unwritten_by_action(self) -> dict[str, int]:
        """Events not written (file system full) per blktrace letter ("note": process notes)."""
        from ioscope.capture.events import ACTION_LETTERS
        return {(ACTION_LETTERS.get(a, str(a)) if a else "note"): int(n)
                for a, n in enumerate(self.unwritten_actions) if n}

    def full_error(self) -> CaptureFull:
        """The one line that says what a full file system cost: what the file holds, what it lacks."""
        ends = "ends cleanly" if self._ended else "no end record (it did not fit)"
        return CaptureFull(f"{self.path}: {self.full}: the capture holds the {self.events_written:,} events of its "
                           f"{self.chunks_written} complete chunks and {ends}; {self.unwritten:,} events "
                           "recorded after them were lost",
                           "free some space or record to another file system (or with --max-size)")

    def close(self, end: Mapping[str, Any] | None = None) -> None:
        """Write what is held, the end record (end time, lost counts) and the end-of-stream marker.

        When the file system was full: CaptureFull (an IoscopeError) after the file was ended."""
        if self.closed:
            return
        try:
            self.flush(final=True)
            info: dict[str, Any] = {
                "end": clock_pair(), "events": self.events_written, "chunks": self.chunks_written,
                "late_events": self.late_events,
            }
            lost = dict(self._lost) if self._lost is not None else None
            if self.full:
                # the events that did not fit are losses like any other: in the total readers show
                lost = lost if lost is not None else {"total": 0}
                lost["total"] = int(lost.get("total", 0)) + self.unwritten
                lost["file_system_full"] = self.unwritten
                info["file_system_full"] = {"error": self.full, "unwritten_events": self.unwritten,
                                            "unwritten_by_action": self.unwritten_by_action()}
            if lost is not None:
                info["lost"] = lost
            self._names_into(info)
            self._names_written(info)
            info.update(end or {})
            empty = pa.RecordBatch.from_arrays([pa.array(np.empty(0, DTYPES[n])) for n in NAMES],
                                               schema=self.schema)
            self._writer.write_batch(empty, custom_metadata={KEY_END: json.dumps(info).encode()})
            self._writer.close()
            self._emit(self._stage.take())  # the end record and the end-of-stream marker, in one write
            self._ended = True
        except _FileFull as exc:
            # not even the end record fits (the space kept for it was taken): the file ends with its last
            # complete chunk, which every reader reads (as a capture that was cut short)
            self._set_full(exc)
        except (OSError, pa.ArrowException) as exc:
            raise IoscopeError(f"cannot write capture file {self.path}: {exc}") from None
        finally:
            self.closed = True
            self._sink.close()
            if self._regular:
                try:
                    os.ftruncate(self._fd, self._pos)  # give back the space kept past the end
                except OSError:
                    pass
            os.close(self._fd)
        if self.full:
            raise self.full_error()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


# -- reading --------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


class _Flat:
    """Bounds-checked reading of the flatbuffers Arrow's IPC messages are made of.

    Every read stays inside [lo, hi) (one message's metadata); anything outside
    raises ValueError, so a damaged file gives an error, never garbage.
    """

    def __init__(self, buf: Any, lo: int, hi: int) -> None:
        self.buf, self.lo, self.hi = buf, lo, hi

    def _get(self, fmt: str, off: int) -> int:
        if off < self.lo or off + struct.calcsize(fmt) > self.hi:
            raise ValueError("offset outside the message")
        return int(struct.unpack_from(fmt, self.buf, off)[0])

    def root(self) -> int:
        return self.lo + self._get("<I", self.lo)

    def _field(self, t: int, i: int) -> int:
        """Absolute position of table t's field i, or 0 when the field is absent."""
        vt = t - self._get("<i", t)
        vsize = self._get("<H", vt)
        if 4 + 2 * i + 2 > vsize:
            return 0
        fo = self._get("<H", vt + 4 + 2 * i)
        return t + fo if fo else 0

    def scalar(self, t: int, i: int, fmt: str, default: int = 0) -> int:
        f = self._field(t, i)
        return self._get(fmt, f) if f else default

    def ref(self, t: int, i: int) -> int:
        """Position of the table, vector or string field i of table t refers to (0: absent)."""
        f = self._field(t, i)
        return f + self._get("<I", f) if f else 0

    def vector(self, v: int, elem: int) -> tuple[int, int]:
        """(position of the first element, count) of the vector at v."""
        n = self._get("<I", v)
        if v + 4 + n * elem > self.hi:
            raise ValueError("vector outside the message")
        return v + 4, n

    def tables(self, t: int, i: int) -> list[int]:
        v = self.ref(t, i)
        if not v:
            return []
        first, n = self.vector(v, 4)
        return [first + 4 * k + self._get("<I", first + 4 * k) for k in range(n)]

    def string(self, at: int) -> bytes:
        first, n = self.vector(at, 1)
        return bytes(self.buf[first:first + n])

    def key_values(self, t: int, i: int) -> dict[bytes, bytes]:
        out = {}
        for kv in self.tables(t, i):
            k, v = self.ref(kv, 0), self.ref(kv, 1)
            if k:
                out[self.string(k)] = self.string(v) if v else b""
        return out


# Arrow's Message, Schema, Field, Int and RecordBatch tables: field numbers
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER, _MESSAGE_BODY_LENGTH, _MESSAGE_METADATA = 1, 2, 3, 4
_SCHEMA_ENDIANNESS, _SCHEMA_FIELDS, _SCHEMA_METADATA = 0, 1, 2
_FIELD_NAME, _FIELD_TYPE_TYPE, _FIELD_TYPE, _FIELD_DICTIONARY, _FIELD_CHILDREN = 0, 2, 3, 4, 5
_TYPE_INT = 2
_BATCH_LENGTH, _BATCH_NODES, _BATCH_BUFFERS, _BATCH_COMPRESSION = 0, 1, 2, 3


def _message_info(buf: Any, m: int, length: int) -> tuple[int, int]:
    """(header type, body length) of the Arrow Message flatbuffer at buf[m:m+length]."""
    fb = _Flat(buf, m, m + length)
    try:
        t = fb.root()
        return fb.scalar(t, _MESSAGE_HEADER_TYPE, "<B"), fb.scalar(t, _MESSAGE_BODY_LENGTH, "<q")
    except (ValueError, struct.error):
        raise ValueError("malformed message header") from None


def _message(buf: Any, off: int, total: int) -> tuple[_Flat, int, int, dict[bytes, bytes]]:
    """(reader, header table, body start, custom metadata) of the IPC message at off (framing checked)."""
    length = int(struct.unpack_from("<i", buf, off + 4)[0])
    fb = _Flat(buf, off + 8, off + 8 + length)
    m = fb.root()
    header = fb.ref(m, _MESSAGE_HEADER)
    if not header:
        raise ValueError("message without a header")
    return fb, header, off + 8 + length, fb.key_values(m, _MESSAGE_METADATA)




class Capture:
    """An opened capture: header, process names and its chunks (see open_capture)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.truncated = False
        self.truncation: str | None = None  # one-line description when truncated
        self.comms: dict[int, str] = {}
        self.cgroups: dict[int, str] = {}   # cgroup id -> path, for the ids queue events carry (EV_CGROUP)
        self.meta: dict[str, Any] = {}
        self.end: dict[str, Any] | None = None
        self._spans: list[tuple[int, int]] = []  # (offset, length) of each record batch message
        self._chunk_info: list[dict[str, Any]] = []
        self._schema_end = 0
        self._mm: mmap.mmap | None = None
        self._buf: Any = None
        # per chunk: its column data as (absolute offset, rows) in the file, one per EVENT field
        self._columns: list[tuple[int, list[int]]] = []
        try:
            st = os.stat(path)
        except OSError as exc:
            raise IoscopeError(f"cannot open capture {path}: {exc.strerror}") from None
        if not os.path.isfile(path):
            raise IoscopeError(f"{path} is not a regular file; give a capture written by ioscope record")
        try:
            self.size = st.st_size
            if self.size == 0:
                raise IoscopeError(f"{path}: empty file (0 bytes) at byte offset 0, not an ioscope capture")
            from ioscope.capture.bundle import extract_capture, is_bundle
            if is_bundle(path):  # an `ioscope collect` bundle: its capture member, in a file of its own
                inner = extract_capture(path)
                try:
                    self.size = os.path.getsize(inner)
                    if self.size == 0:
                        raise IoscopeError(f"{path}: the bundle's capture is empty (0 bytes)")
                    with open(inner, "rb") as f:
                        self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                finally:
                    os.unlink(inner)   # the mapping keeps its pages; nothing is left behind
            else:
                with open(path, "rb") as f:
                    self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._buf = self._mm
            self._scan()
        except BaseException:
            self.close()
            raise

    def _err(self, offset: int, what: str) -> IoscopeError:
        return IoscopeError(f"{self.path}: {what} at byte offset {offset}")

    def _scan(self) -> None:
        buf, size = self._buf, self.size
        off = 0
        first = True
        while True:
            if off + 8 > size:
                if first:
                    raise self._err(off, f"not an ioscope capture (only {size} bytes)")
                if off != size:
                    self._set_truncated(off, "ends in the middle of a chunk header")
                break
            cont, length = struct.unpack_from("<Ii", buf, off)
            if cont != _CONTINUATION or length < 0 or (length & 7):
                if first:
                    raise self._err(off, "not an ioscope capture (no Apache Arrow IPC stream)")
                raise self._err(off, "corrupt capture (bad chunk marker)")
            if length == 0:  # end of stream
                off += 8
                break
            if off + 8 + length > size:
                if first:
                    raise self._err(off, "truncated capture header")
                self._set_truncated(off, "ends in the middle of a chunk")
                break
            try:
                htype, body = _message_info(buf, off + 8, length)
            except ValueError:
                raise self._err(off, "corrupt capture (malformed chunk header)") from None
            if body < 0 or (body & 7):
                raise self._err(off, "corrupt capture (bad chunk length)")
            total = 8 + length + body
            if first:
                if htype != _MSG_SCHEMA:
                    raise self._err(off, "not an ioscope capture (the Arrow stream does not start with a schema)")
                self._read_schema(off, total)
                self._schema_end = off + total
                first = False
            else:
                if htype != _MSG_RECORD_BATCH:
                    raise self._err(off, f"corrupt capture (unexpected Arrow message type {htype})")
                if off + total > size:
                    self._set_truncated(off, "ends in the middle of a chunk")
                    break
                self._spans.append((off, total))
            off += total
        if off < size and not self.truncated:
            raise self._err(off, f"corrupt capture ({size - off} bytes after the end of the stream)")
        self._read_chunk_meta()

    def _set_truncated(self, off: int, what: str) -> None:
        self.truncated = True
        nchunks = len(self._chunk_info) if self._chunk_info else len(self._spans)
        self.truncation = (f"{self.path} was cut short: it {what} at byte offset {off}; its {nchunks} complete "
                           "chunks are read; events after the last one, and the end of I/Os in flight then, "
                           "are not in the file")

    def _read_schema(self, off: int, total: int) -> None:
        try:
            fb, schema, _body, _md = _message(self._buf, off, total)
            if fb.scalar(schema, _SCHEMA_ENDIANNESS, "<h") != 0:
                raise self._err(off, "not an ioscope capture (a big-endian Arrow stream)")
            have: list[tuple[bytes, int, int, int]] = []
            for f in fb.tables(schema, _SCHEMA_FIELDS):
                name = fb.ref(f, _FIELD_NAME)
                ty = fb.ref(f, _FIELD_TYPE)
                plain = not fb.ref(f, _FIELD_DICTIONARY) and not fb.tables(f, _FIELD_CHILDREN)
                kind = fb.scalar(f, _FIELD_TYPE_TYPE, "<B") if plain else -1
                have.append((fb.string(name) if name else b"", kind,
                             fb.scalar(ty, 0, "<i") if ty and kind == _TYPE_INT else 0,
                             fb.scalar(ty, 1, "<B") if ty and kind == _TYPE_INT else 0))
            md = fb.key_values(schema, _SCHEMA_METADATA)
        except (ValueError, struct.error) as exc:
            raise self._err(off, f"corrupt capture header ({_first_line(exc)})") from None
        if KEY_HEADER not in md:
            raise self._err(off, "not an ioscope capture (an Arrow stream without the ioscope.capture header)")
        raw = md[KEY_HEADER]
        if KEY_HEADER_CRC in md and md[KEY_HEADER_CRC] != str(zlib.crc32(raw)).encode():
            raise self._err(off, "corrupt capture header (checksum mismatch)")
        try:
            meta = json.loads(raw)
        except ValueError:
            raise self._err(off, "corrupt capture header (bad JSON)") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise self._err(off, "not an ioscope capture (unknown format in header)")
        version = meta.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise self._err(off, f"capture format version {version} is newer than this ioscope reads "
                                 f"({FORMAT_VERSION}); upgrade ioscope")
        want = [(n.encode(), _TYPE_INT, 8 * DTYPES[n].itemsize, int(DTYPES[n].kind == "i")) for n in NAMES]
        if have != want:
            raise self._err(off, "not an ioscope capture (its columns differ from the event schema)")
        self.meta = meta

    def _batch(self, off: int, total: int) -> tuple[int, list[int], dict[bytes, bytes]]:
        """(rows, absolute offset of each column's data, custom metadata) of the record batch at off."""
        try:
            fb, rb, body, md = _message(self._buf, off, total)
            rows = fb.scalar(rb, _BATCH_LENGTH, "<q")
            if fb.ref(rb, _BATCH_COMPRESSION):
                raise ValueError("compressed record batch")
            nodes, nn = fb.vector(fb.ref(rb, _BATCH_NODES) or -1, 16)
            bufs, nb = fb.vector(fb.ref(rb, _BATCH_BUFFERS) or -1, 16)
            if nn != len(NAMES) or nb != 2 * len(NAMES) or not 0 <= rows < 1 << 40:
                raise ValueError("record batch does not match the event schema")
            body_len = off + total - body
            cols = []
            for i, name in enumerate(NAMES):
                length, nulls = struct.unpack_from("<qq", self._buf, nodes + 16 * i)
                pos, size = struct.unpack_from("<qq", self._buf, bufs + 32 * i + 16)
                if length != rows or nulls != 0:
                    raise ValueError(f"column {name}: {length} rows, {nulls} nulls in a batch of {rows}")
                if pos < 0 or size < rows * DTYPES[name].itemsize or pos + size > body_len:
                    raise ValueError(f"column {name}: data outside the chunk")
                cols.append(body + pos)
        except (ValueError, struct.error) as exc:
            raise self._err(off, f"corrupt chunk ({_first_line(exc)})") from None
        return rows, cols, md

    def _read_chunk_meta(self) -> None:
        infos: list[dict[str, Any]] = []
        data_spans: list[tuple[int, int]] = []
        columns: list[tuple[int, list[int]]] = []
        for off, total in self._spans:
            rows, cols, md = self._batch(off, total)
            if self.end is not None:
                raise self._err(off, "corrupt capture (a chunk after the end record)")
            if KEY_END in md:
                end = _json(md[KEY_END])
                if end is None:
                    raise self._err(off, "corrupt end record")
                self.end = end
                self._absorb(off, end)
                continue
            info = _json(md.get(KEY_CHUNK, b""))
            if info is None:
                raise self._err(off, "corrupt chunk (no valid ioscope.chunk metadata)")
            if info.get("rows") != rows or not isinstance(info.get("sum64"), str):
                raise self._err(off, "corrupt chunk metadata (row count or checksum)")
            self._absorb(off, info)
            infos.append(info)
            data_spans.append((off, total))
            columns.append((rows, cols))
        self._chunk_info = infos
        self._columns = columns
        self._spans = data_spans
        if self.end is None and not self.truncated:
            # every chunk is complete but the end record is missing: the writer
            # was stopped between two chunks
            self._set_truncated(self.size, "ends without its end record (the recorder did not finish)")
        self.meta["truncated"] = self.truncated
        full = self.end.get("file_system_full") if self.end is not None else None
        if isinstance(full, dict) and not self.truncated:
            # ended cleanly, but early: its file system was full (CaptureWriter)
            self.meta["file_system_full"] = full
            self.truncation = (f"{self.path} was cut short: its file system was full ({full.get('error')}); it holds "
                               f"its {len(infos)} complete chunks and ends cleanly; "
                               f"{int(full.get('unwritten_events', 0)):,} events recorded after them, and the end "
                               "of I/Os in flight then, are not in the file")
        if self.end is not None:
            self.meta["end"] = self.end.get("end")
            self.meta["late_events"] = self.end.get("late_events", 0)
            for k in ("throttle_held", "throttle_wait_not_measured", "throttle_held_not_seen"):
                if k in self.end:   # what blk-throttle held while recording (engines/recording/session.py)
                    self.meta[k] = self.end[k]
        self.meta["chunks"] = len(self._spans)
        self.meta["events"] = sum(int(i["rows"]) for i in infos)

    def _absorb(self, off: int, info: dict[str, Any]) -> None:
        comms = info.get("comms", {})
        cgroups = info.get("cgroups", {})
        lost = info.get("lost")
        if not isinstance(comms, dict) or not isinstance(cgroups, dict) or (lost is not None
                                                                           and not isinstance(lost, dict)):
            raise self._err(off, "corrupt chunk metadata")
        for names, into, what in ((comms, self.comms, "process names"), (cgroups, self.cgroups, "cgroup names")):
            for k, v in names.items():
                try:
                    into[int(k)] = str(v)
                except ValueError:
                    raise self._err(off, f"corrupt chunk metadata ({what})") from None
        if lost is not None:
            self.meta["lost"] = lost

    @property
    def nchunks(self) -> int:
        return len(self._spans)

    @property
    def nevents(self) -> int:
        return int(self.meta.get("events", 0))

    @property
    def chunk_infos(self) -> list[dict[str, Any]]:
        """Each chunk's metadata in file order (rows, first_ts, last_ts, the loss counters so far:
        capture-format.md), as the file holds it."""
        return list(self._chunk_info)

    def iter_chunks(self) -> Iterator[np.ndarray]:
        """EVENT arrays in file order (globally sorted by ts, see the module doc); checksums verified."""
        for (off, _total), (n, cols), info in zip(self._spans, self._columns, self._chunk_info):
            ev = np.empty(n, EVENT)
            if n:
                for name, pos in zip(NAMES, cols):
                    ev[name] = np.frombuffer(self._buf, DTYPES[name], n, pos)
            if checksum(ev) != info.get("sum64"):
                raise self._err(off, "corrupt chunk (checksum mismatch)")
            if n and int(ev["ts"].max()) >> 63:   # the readers' times are signed nanoseconds (292 years)
                raise self._err(off, "corrupt chunk (an event time of 2^63 ns or more)")
            yield ev

    def read_all(self) -> np.ndarray:
        parts = list(self.iter_chunks())
        return np.concatenate(parts) if parts else np.empty(0, EVENT)

    def drop_read_pages(self) -> None:
        """Let go of the file pages read so far (they stay in the page cache, not in this process).

        The reader maps the whole file; pages it has read would stay resident, and count in
        RSS, until the file is closed, so a capture larger than memory would cost its size.
        They are clean file pages: MADV_DONTNEED unmaps them and a later access faults them
        back in. Streaming readers call this every few chunks.
        """
        if self._mm is not None and self.size:
            try:
                self._mm.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError, AttributeError):   # best effort (no madvise: pages stay)
                return

    def close(self) -> None:
        self._buf = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:   # a caller still holds a view of it: unmapped when that goes
                pass
            self._mm = None

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def open_capture(path: str | os.PathLike[str]) -> Capture:
    """Open and check a capture; IoscopeError (naming the file and byte offset) when it is not readable.

    A capture whose recorder did not finish (killed, disk full) opens with
    .truncated = True and .truncation saying where it ends; its complete
    chunks are readable.
    """
    return Capture(os.fspath(path))


def main(argv: list[str] | None = None) -> int:
    """python -m ioscope.capture.store FILE...: check captures and print their header as JSON."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stderr.write("usage: python -m ioscope.capture.store CAPTURE...\n")
        return 2
    rc = 0
    for p in args:
        try:
            with open_capture(p) as cap:
                n = 0
                for ev in cap.iter_chunks():
                    n += len(ev)
                doc = {"file": str(Path(p)), "events": n, "chunks": cap.nchunks, "truncated": cap.truncated,
                       "processes": len(cap.comms), "meta": cap.meta}
                print(json.dumps(doc, indent=1, sort_keys=True))
                if cap.truncated:
                    sys.stderr.write(f"warning: {cap.truncation}\n")
        except IoscopeError as exc:
            sys.stderr.write(f"error: {exc}\n")
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
