"""ioscope export: write a capture as blktrace version 7 binaries for blkparse and btt."""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import BinaryIO, cast

import numpy as np
import numpy.typing as npt

from ioscope.base import outfile
from ioscope.base.devices import kdev_str
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.capture.blktrace import EXPORT_BASE_OFFSET, BlktraceWriter
from ioscope.capture.events import EV_NOTE_PROCESS, EVENT, join_events, note_comm, select_events
from ioscope.capture.importer import FileSets, file_sets
from ioscope.capture.offline import Source, open_source, wall_at


def file_stem(src: Source, dev: int) -> str:
    name = src.dev_name(dev)
    if name and "/" not in name:
        return name
    return "dev" + kdev_str(dev, "_")


def export_file_sets(src: Source, fs: FileSets, out: str, force: bool) -> tuple[int, int, list[str]]:
    """An import of blktrace's per-CPU files, given back: NAME.blktrace.CPU for every file imported, each
    record as it was read (its sequence number, time, own device, payload, the notify records in their
    places); files the import read empty are written empty."""
    from ioscope.capture.blktrace import encode_rows
    parts: list[npt.NDArray[np.void]] = []
    for ev in src.chunks():
        parts.append(ev[(ev["flags"] & EV_NOTE_PROCESS) == 0])
    ev = join_events(parts) if parts else np.zeros(0, dtype=EVENT)
    if len(ev) == len(fs.seq):
        ev, fs = fs.in_blkparse_order(ev)   # each file's records in its own order again
    if len(ev) != len(fs.seq):
        raise IoscopeError(f"{src.path}: {len(ev)} block events but the import kept {len(fs.seq)} records",
                           "import the blktrace files again")
    os.makedirs(out, exist_ok=True)
    notes: dict[tuple[int, int], list[tuple[int, bytes]]] = {}
    for si, cpu, fpos, _mp, rec in fs.notes:
        notes.setdefault((si, cpu), []).append((fpos, rec))
    records = nbytes = 0
    written: list[str] = []
    for si, st in enumerate(fs.sets):
        for f in st["files"]:
            cpu = int(f["cpu"])
            idx = np.flatnonzero((fs.set_of == si) & (ev["cpu"] == cpu))
            fn = os.path.join(out, f"{st['name']}.blktrace.{cpu}")
            pieces: list[bytes] = []
            if len(idx):
                rows, length = encode_rows(select_events(ev, idx), fs.seq[idx], 0, str(f["order"]))
                ends = np.cumsum(length)
                keep = np.arange(64)[None, :] < length[:, None]
                enc = rows[keep].tobytes()
                # the records encoding does not give back, and the notes, spliced in where they were
                raws = [g for g in fs.raw if fs.set_of[g] == si and int(ev["cpu"][g]) == cpu]
                cuts = sorted([(int(np.searchsorted(idx, g)), 1, fs.raw[g]) for g in raws]
                              + [(p, 0, rec) for p, rec in notes.get((si, cpu), [])], key=lambda c: (c[0], c[1]))
                at = 0
                for pos, kind, data in cuts:
                    start = int(ends[pos - 1]) if pos else 0
                    pieces.append(enc[at:start])
                    pieces.append(data)
                    at = int(ends[pos]) if kind else start
                pieces.append(enc[at:])
            else:
                pieces = [rec for _p, rec in notes.get((si, cpu), [])]
            data = b"".join(pieces)
            with _create(fn, force) as fo:
                fo.write(data)
            written.append(fn)
            records += len(idx) + len(notes.get((si, cpu), []))
            nbytes += len(data)
    src.close()
    return records, nbytes, written


def export_blktrace(path: str, out: str, per_cpu: bool = False, force: bool = False,
                    src: Source | None = None) -> tuple[int, int, list[str]]:
    """Write the capture at path as one blktrace dump (or per-CPU files in directory out).

    Files are created private (0600); an existing one is refused unless force. src: the
    capture already opened (it is closed here). Returns (records, bytes, files written).
    """
    if src is None:
        src = open_source(path)
    if per_cpu and src.kind == "capture":
        fs = file_sets(src)
        if fs is not None:
            return export_file_sets(src, fs, out, force)
    files: dict[tuple[int, int], tuple[BinaryIO, BlktraceWriter]] = {}
    dump: tuple[BinaryIO, BlktraceWriter] | None = None
    written: list[str] = []
    try:
        if per_cpu:
            os.makedirs(out, exist_ok=True)
        for chunk in src.chunks():
            if not len(chunk):
                continue
            # a chunk may hold only process notes (a recording started before the workload): the
            # trace's time zero is taken at the first block event, as parse and report take it
            if dump is None or per_cpu:
                notes = (chunk["flags"] & EV_NOTE_PROCESS) != 0
                if notes.any():   # process notes name pids for every file; they belong to no disk
                    for e in chunk[notes]:
                        src.comms.setdefault(int(e["pid"]), note_comm(e))
                    chunk = chunk[~notes]
                    if not len(chunk):
                        continue
            if dump is None and not per_cpu:
                f = _create(out, force)
                written.append(out)
                base = int(chunk["ts"][0]) - EXPORT_BASE_OFFSET
                dump = (f, BlktraceWriter(f, base, wall_at(src, base), dict(src.comms)))
            if dump is not None:
                dump[1].comms.update(src.comms)
                dump[1].write(chunk)
                continue
            if not files:
                files_base = int(chunk["ts"][0]) - EXPORT_BASE_OFFSET
            keys = (chunk["dev"].astype(np.uint64) << np.uint64(16)) | chunk["cpu"].astype(np.uint64)
            for k in np.unique(keys).tolist():
                dev, cpu = k >> 16, k & 0xFFFF
                if (dev, cpu) not in files:
                    fn = os.path.join(out, f"{file_stem(src, dev)}.blktrace.{cpu}")
                    f = _create(fn, force)
                    written.append(fn)
                    files[(dev, cpu)] = (f, BlktraceWriter(f, files_base, wall_at(src, files_base), dict(src.comms)))
                w = files[(dev, cpu)][1]
                w.comms.update(src.comms)
                w.write(chunk[keys == k])
        if dump is None and not per_cpu:  # no block event: an empty stream, as blktrace leaves for an idle disk
            dump = (_create(out, force), BlktraceWriter(io.BytesIO(), 0))
            written.append(out)
        writers = [dump[1]] if dump is not None else [w for _f, w in files.values()]
        return sum(w.records for w in writers), sum(w.bytes_written for w in writers), written
    finally:
        if dump is not None:
            dump[0].close()
        for f, _w in files.values():
            f.close()
        src.close()


def _create(path: str, force: bool) -> BinaryIO:
    return cast(BinaryIO, outfile.open_private(path, "wb", force=force))


def run(args: argparse.Namespace) -> int:
    if not args.per_cpu and os.path.isdir(args.output):
        raise UsageError(f"{args.output} is a directory", "give a file name, or use --per-cpu")
    if not args.per_cpu:
        outfile.check_output(args.output, args.force)
    elif not args.force and os.path.isdir(args.output):
        old = sorted(n for n in os.listdir(args.output) if ".blktrace." in n)
        if old:   # the names depend on the capture's disks and CPUs: refuse any earlier export's files
            raise outfile.exists_error(os.path.join(args.output, old[0]))
    src = open_source(args.capture)
    truncation = src.truncation
    records, nbytes, files = export_blktrace(args.capture, args.output, args.per_cpu, args.force, src)
    sys.stderr.write(f"ioscope export: {records} blktrace records, {nbytes} bytes in {len(files)} file(s)\n")
    if not records:
        what = "no file was" if args.per_cpu else "the dump is empty, as blktrace leaves it for an idle disk; it was"
        sys.stderr.write(f"ioscope export: note: {args.capture} holds no block events: {what} written\n")
    if truncation:
        sys.stderr.write(f"ioscope export: note: {truncation}\n")
    return 0
