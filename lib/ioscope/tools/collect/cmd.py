"""ioscope collect's command line: `ioscope record` plus the host's context at its start and end, in
one bundle (bundle.py), optionally redacted (redact.py); `--list CASE` shows what a bundle holds."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ioscope.base import outfile
from ioscope.tools import common

if TYPE_CHECKING:
    from ioscope.engines.recording.session import RecordRequest

EXAMPLES = """\
examples:
  ioscope collect -o case.ioscope -w 60                     # a minute of every disk, and the host's context
  ioscope collect -o case.ioscope -d sda -w 30 --redact hostnames,addresses,comms,paths,users,serials
  ioscope collect --list case.ioscope                       # what the bundle holds
  ioscope report case.ioscope                               # every reader opens a bundle directly
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("collect", help="record plus the host's context (devices, settings, mounts, cgroups, "
                                       "network) in one bundle for a support case",
                       description="Record like `ioscope record` and snapshot the host at the start and the end "
                                   "(kernel, CPUs and memory, the block device tree with queue settings and each "
                                   "device's model, firmware, serial and timeouts, lsblk, blkid, fstab, dm, md, "
                                   "LVM and NVMe health where installed, the kernel log, /proc/diskstats, mounts, "
                                   "vm.dirty_*, I/O pressure, cgroup I/O limits, network interfaces and their "
                                   "counters) into one file, created 0600; the capture is compressed as it is "
                                   "recorded. --redact replaces host names, addresses, process and cgroup names, "
                                   "paths, user names or serials everywhere in it by stable pseudonyms. "
                                   "docs/collect.md lists every item.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", metavar="CASE", help="the bundle to write")
    p.add_argument("--list", metavar="CASE", help="list what a bundle holds, and stop")
    common.add_disk_pid(p)
    p.add_argument("-w", "--duration", type=common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS (default: at Ctrl-C)")
    p.add_argument("--redact", metavar="WHAT,...", default="",
                   help="replace these in every file of the bundle: hostnames, addresses, comms (process and "
                        "cgroup names; kernel threads' are kept), paths, users, serials (device serials, WWNs, "
                        "UUIDs)")
    outfile.add_force(p)
    p.set_defaults(func=run, tool="collect")


def _list(path: str) -> int:
    from ioscope.base.errors import IoscopeError
    from ioscope.base.fmt import fmt_bytes
    from ioscope.capture.bundle import read_bundle

    if not os.path.isfile(path):
        raise IoscopeError(f"cannot open bundle {path}: " + ("no such file" if not os.path.exists(path)
                                                            else "not a regular file"))
    res = read_bundle(path)
    man = res.docs.get("manifest.json")
    if isinstance(man, dict):
        print(f"{path}: {man.get('format', '?')} version {man.get('version', '?')}, written by ioscope "
              f"{man.get('ioscope_version', '?')} on {man.get('host', '?')} at {man.get('started', '?')}: "
              f"{man.get('command', '?')}")
        red = man.get("redacted") or {}
        print("redacted: " + (", ".join(f"{k} ({v} names)" for k, v in red.items()) if red else "nothing"))
    else:
        print(f"{path}: no readable manifest (what the bundle should hold and who wrote it are not known)")
    for m in res.members:
        state = m.problem or ("intact" if m.intact else "read (no checksum to check it against)")
        print(f"  {m.name:<22} {fmt_bytes(m.size):>10}  {state}")
    names = {m.name for m in res.members}
    for n in res.expected:
        if n not in names:
            print(f"  {n:<22} {'':>10}  missing")
    end = res.docs.get("context-end.json")
    col = end.get("collect") if isinstance(end, dict) else None
    if isinstance(col, dict) and col.get("capture_lost_bytes"):
        print(f"capture: {fmt_bytes(int(col.get('capture_bytes') or 0))} kept, "
              f"{fmt_bytes(int(col['capture_lost_bytes']))} lost when it was written ({col.get('capture_lost')})")
    note = res.note()
    if note:
        print(f"ioscope collect: {note}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    from ioscope.base.errors import UsageError

    if args.list:
        return _list(args.list)
    if not args.output:
        raise UsageError("collect needs -o CASE (the bundle to write), or --list CASE")
    from ioscope.base import system
    from ioscope.engines.context import context
    from ioscope.engines.context.redact import parse_classes

    classes = parse_classes(args.redact) if args.redact else ()
    out = os.path.abspath(args.output)
    outfile.check_output(out, args.force)
    from ioscope.base.devices import resolve_disk
    for d in args.disk or []:
        resolve_disk(d)   # a disk that is not there is refused before anything is written
    system.require_bpf_privileges("collect")
    command = " ".join(["ioscope", *sys.argv[1:]]) if sys.argv[1:2] == ["collect"] else "ioscope collect"
    from ioscope.engines.recording.session import RecordRequest

    rec = RecordRequest(output="", disks=args.disk or [], pid=args.pid, duration=args.duration or None,
                        btf=getattr(args, "btf", None), argv=sys.argv[1:])
    now = time.time()
    start = context.snapshot(command)
    if classes:
        return _collect_redacted(args, out, command, classes, rec, now, start)
    return _collect_streamed(args, out, command, rec, now, start)


def _record(req: RecordRequest) -> tuple[int, BaseException | None]:
    from ioscope.engines.recording.session import record

    try:
        return record(req), None
    except Exception as exc:   # the bundle is finished with what it has, then the error is raised
        return 1, exc


def _collect_streamed(args: argparse.Namespace, out: str, command: str, rec: RecordRequest, now: float,
                      start: dict[str, object]) -> int:
    """The capture streams from the recorder through a named pipe into the bundle, compressed as it
    comes: the bundle's file system needs room for the compressed capture only."""
    from ioscope.engines.context import context
    from ioscope.engines.context.bundling import begin_bundle, finish_bundle, host_name, manifest, piped_into

    w = begin_bundle(out, args.force, now, manifest(command, host_name(start), now, None), start)
    with piped_into(w) as fifo:
        rc, error = _record(replace(rec, output=fifo, force=True))
    return finish_bundle(w, out, command, context.snapshot(command), rc, (), error)


def _collect_redacted(args: argparse.Namespace, out: str, command: str, classes: tuple[str, ...],
                      rec: RecordRequest, now: float, start: dict[str, object]) -> int:
    """Recorded to a private file in the temporary directory ($TMPDIR, else /tmp: the process names in
    it are rewritten once every name is known, which needs the whole capture), then redacted through
    a pipe into the bundle (compressed as it comes)."""
    import shutil
    import tempfile

    from ioscope.base.errors import IoscopeError
    from ioscope.engines.context import context
    from ioscope.engines.context.bundling import begin_bundle, finish_bundle, host_name, manifest, piped_into
    from ioscope.engines.context.redact import Redactor, kernel_thread_table, kernel_threads

    kept: set[str] = set()
    tmpd = tempfile.mkdtemp(prefix="ioscope-collect-")
    raw = os.path.join(tmpd, "capture.ioscope")
    try:
        kthreads = kernel_thread_table()
        rc, error = _record(replace(rec, output=raw))
        end = context.snapshot(command)
        red = Redactor(classes)
        red.learn_context(start)
        red.learn_context(end)
        red.learn_paths([out, os.path.dirname(out), tmpd, raw, args.output])
        from ioscope.capture.store import open_capture
        comms: dict[int, str] = {}
        if os.path.exists(raw) and os.path.getsize(raw) > 0:
            with open_capture(raw) as cap:
                comms = dict(cap.comms)
        kept = kernel_threads(comms, kthreads, kernel_thread_table())
        red.learn_comms(comms.values(), keep=kept)
        rstart, rend = red.context(start), red.context(end)
        man = manifest(red.text(command), host_name(rstart), now, red.summary())
        if "comms" in classes:
            man["kernel_threads_kept"] = sorted(kept)
        w = begin_bundle(out, args.force, now, man, rstart)
        if comms or (os.path.exists(raw) and os.path.getsize(raw) > 0):
            try:
                with piped_into(w) as fifo:
                    rewrite_capture(raw, fifo, red)
            except IoscopeError as exc:   # the bundle is finished with what it has, then this is said
                error = error or exc
        return finish_bundle(w, out, command, rend, rc, classes, error)
    finally:
        shutil.rmtree(tmpd, ignore_errors=True)


def rewrite_capture(src: str, dst: str, red: object) -> None:
    """The capture again, with its header, end record and process names redacted."""
    import numpy as np

    from ioscope.capture.events import EV_NOTE_PROCESS, note_comm
    from ioscope.capture.store import CaptureWriter, open_capture
    from ioscope.engines.context.redact import Redactor

    assert isinstance(red, Redactor)
    with open_capture(src) as cap:
        meta = red.redact_json(dict(cap.meta))
        end = red.redact_json(dict(cap.end or {}))
        if isinstance(end.get("comms"), dict):
            end["comms"] = {k: red.comm(v) for k, v in end["comms"].items()}
        w = CaptureWriter(dst, meta, force=True)
        try:
            # cgroup paths name services, containers and hosts' units: redacted like the context's text
            w.add_cgroups({k: red.text(v) for k, v in cap.cgroups.items()})
            for ev in cap.iter_chunks():
                notes = np.nonzero((ev["action"] == 0) & ((ev["flags"] & EV_NOTE_PROCESS) != 0))[0]
                if len(notes):
                    ev = ev.copy()
                    for i in notes:
                        name = note_comm(ev[i])
                        new = red.comm(name)
                        if new != name:
                            b = new.encode()[:15].ljust(16, b"\0")
                            ev["sector"][i], ev["aux"][i] = np.frombuffer(b, dtype="<u8")
                w.write(ev)
        finally:
            w.close(end={k: v for k, v in end.items() if k not in ("events", "chunks", "late_events")})
