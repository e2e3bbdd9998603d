"""ioscope collect's command line: `ioscope record` plus the host's context at its start and end, in
one bundle (bundle.py), optionally redacted (redact.py); `--list CASE` shows what a bundle holds."""

from __future__ import annotations

import argparse
import os
import sys

from ioscope import cli_common, outfile

EXAMPLES = """\
examples:
  ioscope collect -o case.ioscope -w 60                     # a minute of every disk, and the host's context
  ioscope collect -o case.ioscope -d sda -w 30 --redact hostnames,addresses,comms,paths,users
  ioscope collect --list case.ioscope                       # what the bundle holds
  ioscope report case.ioscope                               # every reader opens a bundle directly
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("collect", help="record plus the host's context (devices, settings, mounts, cgroups, "
                                       "network) in one bundle for a support case",
                       description="Record like `ioscope record` and snapshot the host at the start and the end "
                                   "(kernel, CPUs and memory, the block device tree with queue settings, "
                                   "/proc/diskstats, mounts, vm.dirty_*, I/O pressure, cgroup I/O limits, "
                                   "network interfaces and their counters) into one file, created 0600. "
                                   "--redact replaces host names, addresses, process names, paths or user names "
                                   "everywhere in it by stable pseudonyms. docs/collect.md lists every item.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", metavar="CASE", help="the bundle to write")
    p.add_argument("--list", metavar="CASE", help="list what a bundle holds, and stop")
    cli_common.add_disk_pid(p)
    p.add_argument("-w", "--duration", type=cli_common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS (default: at Ctrl-C)")
    p.add_argument("--redact", metavar="WHAT,...", default="",
                   help="replace these in every file of the bundle: hostnames, addresses, comms, paths, users")
    outfile.add_force(p)
    p.set_defaults(func=run, tool="collect")


def _list(path: str) -> int:
    from ioscope.collect.bundle import read_json_members
    from ioscope.fmt import fmt_bytes

    docs, listing = read_json_members(path)
    man = docs.get("manifest.json") or {}
    print(f"{path}: {man.get('format', '?')} version {man.get('version', '?')}, written by ioscope "
          f"{man.get('ioscope_version', '?')}: {man.get('command', '?')}")
    red = man.get("redacted") or {}
    print("redacted: " + (", ".join(f"{k} ({v} names)" for k, v in red.items()) if red else "nothing"))
    for name, size in listing:
        print(f"  {name:<22} {fmt_bytes(size):>10}")
    missing = [m for m in man.get("members", []) if m not in {n for n, _ in listing}]
    if missing:
        print(f"missing: {', '.join(missing)} (the bundle was cut short)")
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    from ioscope.errors import UsageError

    if args.list:
        return _list(args.list)
    if not args.output:
        raise UsageError("collect needs -o CASE (the bundle to write), or --list CASE")
    from ioscope import __version__, system
    from ioscope.cli import build_parser
    from ioscope.collect import bundle, context
    from ioscope.collect.redact import Redactor, parse_classes

    classes = parse_classes(args.redact) if args.redact else ()
    out = os.path.abspath(args.output)
    outfile.check_output(out, args.force)
    system.require_bpf_privileges("collect")
    command = " ".join(["ioscope", *sys.argv[1:]]) if sys.argv[1:2] == ["collect"] else "ioscope collect"
    work = f"{out}.part-{os.getpid()}"
    raw, clean = f"{work}.capture", f"{work}.redacted"
    rec_argv = ["record", "-o", raw, *(["-w", str(args.duration)] if args.duration else []),
                *[a for d in (args.disk or []) for a in ("-d", d)], *(["-p", str(args.pid)] if args.pid else [])]
    try:
        start = context.snapshot(command)
        rargs = build_parser(["record"]).parse_args(rec_argv)
        rc = int(rargs.func(rargs))
        end = context.snapshot(command)
        manifest = {"ioscope_version": __version__, "command": command, "recorder_exit": rc}
        capture = raw
        if classes:
            red = Redactor(classes)
            red.learn_context(start)
            red.learn_context(end)
            red.learn_paths([out, os.path.dirname(out), raw, args.output])
            from ioscope.trace.capture import open_capture
            with open_capture(raw) as cap:
                red.learn_comms(cap.comms.values())
            rewrite_capture(raw, clean, red)
            capture = clean
            start, end = red.context(start), red.context(end)
            manifest["command"] = red.text(command)
            manifest["redacted"] = red.summary()
        bundle.write(out, capture, start, end, manifest, args.force)
    finally:
        for f in (raw, clean):
            if os.path.exists(f):
                os.unlink(f)
    from ioscope.fmt import fmt_bytes
    print(f"Collected {args.output} ({fmt_bytes(os.path.getsize(out))}): the capture and the host's context at "
          f"its start and end" + (f"; redacted: {', '.join(classes)}" if classes else ""), file=sys.stderr)
    return rc


def rewrite_capture(src: str, dst: str, red: object) -> None:
    """The capture again, with its header, end record and process names redacted."""
    import numpy as np

    from ioscope.collect.redact import Redactor
    from ioscope.trace.capture import CaptureWriter, open_capture
    from ioscope.trace.events import EV_NOTE_PROCESS, note_comm

    assert isinstance(red, Redactor)
    with open_capture(src) as cap:
        meta = red.redact_json(dict(cap.meta))
        end = red.redact_json(dict(cap.end or {}))
        if isinstance(end.get("comms"), dict):
            end["comms"] = {k: red.comm(v) for k, v in end["comms"].items()}
        w = CaptureWriter(dst, meta, force=True)
        try:
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
