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
from ioscope.capture.blktrace import EXPORT_BASE_OFFSET, BlktraceWriter, bit_dtype, record_offsets
from ioscope.capture.events import EV_NOTE_PROCESS, EVENT, FirstNames, join_events, select_events
from ioscope.capture.importer import DUMP_CPU, FileSets, file_sets
from ioscope.capture.offline import Source, open_source, wall_at


def file_stem(src: Source, dev: int) -> str:
    name = src.dev_name(dev)
    if name and "/" not in name:
        return name
    return "dev" + kdev_str(dev, "_")


def file_set_bytes(src: Source, fs: FileSets) -> dict[tuple[int, int], bytes]:
    """An import of blktrace files, given back: each file imported ((set, cpu): its bytes; a dump's cpu is
    importer.DUMP_CPU), each record as it was read (its sequence number, time, own device, payload, the
    notify records in their places); files the import read empty are empty."""
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
    notes: dict[tuple[int, int], list[tuple[int, bytes]]] = {}
    for si, cpu, fpos, _mp, rec in fs.notes:
        notes.setdefault((si, cpu), []).append((fpos, rec))
    out: dict[tuple[int, int], bytes] = {}
    for si, st in enumerate(fs.sets):
        for f in st["files"]:
            cpu = int(f["cpu"])
            mine = fs.set_of == si
            if cpu != DUMP_CPU:
                mine &= ev["cpu"] == cpu
            idx = np.flatnonzero(mine)
            pieces: list[bytes] = []
            if len(idx):
                rows, length = encode_rows(select_events(ev, idx), fs.seq[idx], 0, str(f["order"]))
                ends = np.cumsum(length)
                keep = np.arange(64)[None, :] < length[:, None]
                enc = rows[keep].tobytes()
                # the records encoding does not give back, and the notes, spliced in where they were
                raws = [g for g in fs.raw if fs.set_of[g] == si and (cpu == DUMP_CPU or int(ev["cpu"][g]) == cpu)]
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
            out[(si, cpu)] = b"".join(pieces)
    return out


def export_file_sets(src: Source, fs: FileSets, out: str, force: bool) -> tuple[int, int, list[str]]:
    """An import of blktrace files, given back in directory out: NAME.blktrace.CPU for every per-CPU file
    imported, a dump under its own name (file_set_bytes)."""
    os.makedirs(out, exist_ok=True)
    records = nbytes = 0
    written: list[str] = []
    for (si, cpu), data in file_set_bytes(src, fs).items():
        name = str(fs.sets[si]["name"])
        fn = os.path.join(out, name if cpu == DUMP_CPU else f"{name}.blktrace.{cpu}")
        with _create(fn, force) as fo:
            fo.write(data)
        written.append(fn)
        records += len(record_offsets(data, fn)[0]) if data else 0
        nbytes += len(data)
    src.close()
    return records, nbytes, written


def _native(head: bytes, order: str, time_base: int | None) -> bytes:
    """A record's 48-byte header in this host's byte order (as blkparse -d writes what it read), its time
    counted from time_base (None: as it is)."""
    h = np.frombuffer(head[:48], dtype=bit_dtype(order)).astype(bit_dtype("<"))
    if time_base is not None:
        h["time"] = np.maximum(h["time"].astype(np.int64) - time_base, 0).astype(np.uint64)
    return h.tobytes()


def export_blkparse_dump(src: Source, fs: FileSets, f: BinaryIO) -> tuple[int, int]:
    """An import of blktrace's per-CPU files as the one stream `blkparse -i NAME ... -d FILE` writes from
    them (what btt reads): every record in the order blkparse prints it, its time counted from blkparse's
    time zero (the first it prints), in this host's byte order; each notify record where blkparse reads
    it, its time as it was; the scheduler's messages where blkparse prints them. (records, bytes)."""
    from ioscope.capture.blktrace import encode_rows
    from ioscope.capture.importer import NoteOrder, time_zero
    chunks = src.chunks()
    if fs.rank is not None:
        whole = [c[(c["flags"] & EV_NOTE_PROCESS) == 0] for c in chunks]
        allev = join_events(whole) if whole else np.zeros(0, dtype=EVENT)
        allev, fs = fs.in_blkparse_order(allev)
        chunks = iter([allev])
    order = NoteOrder(fs, ("process", "timestamp", "other"))
    msgs = fs.messages()
    mi = 0
    g = 0
    base: int | None = None
    records = nbytes = 0

    def note(k: int, rebase: bool) -> bytes:
        si, cpu, _fp, _mp, rec = fs.notes[k]
        return _native(rec, fs.order(si, cpu), base if rebase else None) + rec[48:]

    for c in chunks:
        blk = c[(c["flags"] & EV_NOTE_PROCESS) == 0] if len(c) else c
        n = len(blk)
        if not n:
            continue
        if base is None:
            base = time_zero(fs, int(blk["ts"][0]))
        rows, length = encode_rows(blk, fs.seq[g:g + n], base, "<")
        recs: list[bytes] = []
        for j in range(n):
            raw = fs.raw.get(g + j)
            if raw is not None:
                si = int(fs.set_of[g + j])
                cpu = DUMP_CPU if fs.is_dump(si) else int(blk["cpu"][j])
                recs.append(_native(raw, fs.order(si, cpu), base) + raw[48:])
            else:
                recs.append(rows[j, :int(length[j])].tobytes())
        ins = [(p, 0, k) for p, k in order.positions(g, blk["cpu"])]
        while mi < len(msgs) and msgs[mi][0] < g + n:
            ins.append((msgs[mi][0], 1, msgs[mi][1]))
            mi += 1
        ins.sort(key=lambda x: (x[0], x[1]))
        out: list[bytes] = []
        at = 0
        for p, kind, k in ins:
            cut = min(max(p - g, 0), n)
            out += recs[at:cut]
            at = max(at, cut)
            out.append(note(k, kind == 1))
        out += recs[at:]
        data = b"".join(out)
        f.write(data)
        records += len(out)
        nbytes += len(data)
        g += n
    for kind, k in [(0, k) for _p, k in order.rest(g)] + [(1, k) for _p, k in msgs[mi:]]:
        data = note(k, kind == 1)
        f.write(data)
        records += 1
        nbytes += len(data)
    return records, nbytes


def export_blktrace(path: str, out: str, per_cpu: bool = False, force: bool = False,
                    src: Source | None = None) -> tuple[int, int, list[str]]:
    """Write the capture at path as one blktrace dump (or per-CPU files in directory out).

    Files are created private (0600); an existing one is refused unless force. src: the
    capture already opened (it is closed here). Returns (records, bytes, files written).
    """
    if src is None:
        src = open_source(path)
    fs = file_sets(src) if src.kind == "capture" else None
    if fs is not None:   # an import: the files it was made from
        if per_cpu:
            return export_file_sets(src, fs, out, force)
        with _create(out, force) as fo:
            if fs.dumps_only and len(fs.sets) == 1:   # a dump: itself
                data = next(iter(file_set_bytes(src, fs).values()), b"")
                fo.write(data)
                src.close()
                return (len(record_offsets(data, out)[0]) if data else 0), len(data), [out]
            records, nbytes = export_blkparse_dump(src, fs, fo)
        src.close()
        return records, nbytes, [out]
    files: dict[tuple[int, int], tuple[BinaryIO, BlktraceWriter]] = {}
    dump: tuple[BinaryIO, BlktraceWriter] | None = None
    written: list[str] = []
    names = FirstNames(src.comms)   # each pid's name, as every file of the export gives it
    # the capture's cgroups: a `cgroup <id> <path>` message note before the first Q of each (once per export)
    cgroups = dict(src.cgroups) if src.cgroups else None
    cg_noted: set[int] = set()
    # a capture imported from blktrace files keeps their times: they are written as they are
    imported = src.meta.get("source") == "blktrace"
    try:
        if per_cpu:
            os.makedirs(out, exist_ok=True)
        for chunk in src.chunks():
            if not len(chunk):
                continue
            names.chunk(chunk)
            # a chunk may hold only process notes (a recording started before the workload): the
            # trace's time zero is taken at the first block event, as parse and report take it
            notes = (chunk["flags"] & EV_NOTE_PROCESS) != 0
            if notes.any():   # the names are in `names`; the capture's notes are not written as they are
                chunk = chunk[~notes]
                if not len(chunk):
                    continue
            if dump is None and not per_cpu:
                f = _create(out, force)
                written.append(out)
                base = 0 if imported else int(chunk["ts"][0]) - EXPORT_BASE_OFFSET
                dump = (f, BlktraceWriter(f, base, wall_at(src, base), names=names, cgroups=cgroups,
                                          cg_noted=cg_noted))
            if dump is not None:
                dump[1].write(chunk)
                continue
            if not files:
                files_base = 0 if imported else int(chunk["ts"][0]) - EXPORT_BASE_OFFSET
            keys = (chunk["dev"].astype(np.uint64) << np.uint64(16)) | chunk["cpu"].astype(np.uint64)
            for k in np.unique(keys).tolist():
                dev, cpu = k >> 16, k & 0xFFFF
                if (dev, cpu) not in files:
                    fn = os.path.join(out, f"{file_stem(src, dev)}.blktrace.{cpu}")
                    f = _create(fn, force)
                    written.append(fn)
                    files[(dev, cpu)] = (f, BlktraceWriter(f, files_base, wall_at(src, files_base), names=names,
                                                         cgroups=cgroups, cg_noted=cg_noted))
                files[(dev, cpu)][1].write(chunk[keys == k])
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
