"""ioscope import: blktrace binaries into an ioscope capture (so parse and report work on them)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

import numpy as np

from ioscope import outfile
from ioscope.devices import kdev_split, kdev_str
from ioscope.errors import IoscopeError, UsageError
from ioscope.trace import blktrace
from ioscope.trace.events import EV_NOTE_PROCESS

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
        named = len(fs) > 1 or bool(PER_CPU.match(fs[0]))
        for d in blktrace.read_merged(fs):
            stamps.extend(d.timestamps)
            if len(d.events):
                max_cpu = max(max_cpu, int(d.events["cpu"].max()))
                for dev in np.unique(d.events["dev"]).tolist():
                    devs.setdefault(int(dev), name if named else "")
    return devs, stamps, max_cpu


def import_blktrace(inputs: list[str], out: str) -> dict[str, Any]:
    """Write a capture at out from blktrace files; returns a summary.

    Every file is checked first (a corrupt or cut file is reported with its
    byte offset before anything is written); the capture is written to
    OUT.part and renamed when complete.
    """
    from ioscope.trace.capture import CaptureWriter
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
    try:
        for d in blktrace.read_merged(files):
            if d.comms:
                comms.update(d.comms)
                w.add_comms(d.comms)
            if len(d.events):
                n_events += int(((d.events["flags"] & EV_NOTE_PROCESS) == 0).sum())
                w.write(d.events)
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
