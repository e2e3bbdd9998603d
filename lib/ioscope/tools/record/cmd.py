"""ioscope record: every block-layer event into a capture file (blktrace's job, with BPF).

The command: the collector (trace/recorder.py: the Recorder and its BPF object) feeds a CaptureWriter
(trace/capture.py) in a consumer thread (RecordSession), with a status line and a summary. The collector
and the writer are imported when recording starts, not for --help.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from ioscope.base import outfile
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.tools import common

if TYPE_CHECKING:
    import numpy as np

    from ioscope.base import devices
    from ioscope.capture.store import CaptureWriter
    from ioscope.engines.recording.recorder import Recorder

class Status:
    """Counters shared by the consumer thread and the status line."""

    def __init__(self) -> None:
        self.events = 0  # records handed to the writer (process notes included)
        self.bytes = 0
        self.lost = 0
        self.stop_reason = ""
        self.error: BaseException | None = None
        self.full: IoscopeError | None = None  # the file system was full (the capture ended cleanly)


class RecordSession:
    """Recorder -> CaptureWriter in a consumer thread; stop() ends it cleanly."""

    def __init__(self, rec: Recorder, writer: CaptureWriter, max_size: int | None = None) -> None:
        self.rec = rec
        self.writer = writer
        self.max_size = max_size
        self.status = Status()
        self.completed: dict[int, int] = {}  # kernel dev_t -> C events recorded
        self.completed_attached: dict[int, int] = {}  # ... of them inside rec.attached_window()
        self.check: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ioscope-record", daemon=False)

    def start(self) -> None:
        self.thread.start()

    def stop(self, reason: str) -> None:
        if not self.status.stop_reason:
            self.status.stop_reason = reason
        self._stop.set()

    def _take(self, ev: np.ndarray, horizon: int) -> None:
        self.writer.write(ev, horizon)
        self.status.events += len(ev)  # records, process notes included
        self.rec.count_completions(ev, self.completed, self.completed_attached)
        self.status.bytes = self.writer.bytes_written()
        if self.writer.full:
            self.stop(f"file system full ({self.writer.full})")

    def _run(self) -> None:
        from ioscope.capture.store import CaptureFull
        from ioscope.engines.recording.recorder import FAST_POLL_FILL, FAST_POLL_MS, POLL_MS

        rec, w = self.rec, self.writer
        last_lost = 0.0
        try:
            wait = POLL_MS
            while not self._stop.is_set():
                horizon = time.monotonic_ns()
                self._take(rec.poll(wait), horizon)
                # a ring filling up fast is emptied sooner (bursts, many events on one CPU)
                wait = FAST_POLL_MS if rec.ring.fill > FAST_POLL_FILL else POLL_MS
                now = time.monotonic()
                if now - last_lost >= 1.0:
                    lost = rec.capture_lost()
                    w.set_lost(lost)
                    self.status.lost = lost["total"]
                    last_lost = now
                if self.max_size and self.status.bytes >= self.max_size:
                    self.stop(f"--max-size reached ({self.status.bytes} bytes)")
            rec.detach()
            self._take(rec.drain(), time.monotonic_ns())
            lost = rec.capture_lost()
            w.set_lost(lost)
            self.status.lost = lost["total"]
            # (no check when the action mask leaves completions out)
            self.check = rec.completions_check(self.completed, self.completed_attached) \
                if rec.records_completions else {}
            try:
                w.close(end={"stop_reason": self.status.stop_reason, "detached_mono_ns": rec.detached_ns,
                             "completions_check": self.check})
            except CaptureFull as exc:  # the file ended cleanly: the main thread says what it cost
                self.status.full = exc
            self.status.bytes = w.bytes_written() or os.path.getsize(w.path)
        except BaseException as exc:  # reported by the main thread
            self.status.error = exc
        finally:
            self.done.set()


def _fmt_count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


EXAMPLES = """\
examples:
  ioscope record -o trace.ioscope                 # every disk until Ctrl-C
  ioscope record -o trace.ioscope -d sda -w 60    # one disk for 60 seconds
  ioscope record -o trace.ioscope -d nvme0n1 -d nvme1n1 --max-size 2G
  ioscope record -o trace.ioscope -p 1234         # only I/O queued by process 1234
  ioscope record -o trace.ioscope -a issue -a complete   # only D and C events (cheaper, smaller)
  ioscope parse trace.ioscope | less              # then read it (blkparse format)
  ioscope record --ring 60s --trigger 'q2c > 500ms' -o /var/tmp/slow   # flight recorder: save the
                                                  # minute before (and 5 s after) any I/O over 500 ms
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("record", help="record every block-layer event to a capture file (like blktrace)",
                       description="Record every block-layer event (Q G I M F D C R P U X A, as blktrace) "
                                   "into a capture file for offline analysis with ioscope parse/report/export. "
                                   "Ctrl-C, SIGTERM or SIGHUP end it cleanly; a killed recorder leaves a readable "
                                   "file.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="capture file to write")
    common.add_disk_pid(p)
    p.add_argument("-a", "--act-mask", action="append", metavar="NAME",
                   help="record only events of this category, as blktrace -a (repeatable, or NAME,NAME): "
                        "queue, requeue, issue, complete (the others' programs are not attached: cheaper), "
                        "notify, or read, write, flush, sync, fs, pc, ahead, meta, discard, drv_data, fua "
                        "(kept by the events' category); default: every event")
    p.add_argument("-w", "--duration", type=common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS")
    p.add_argument("--max-size", type=common.size_type("--max-size"), metavar="SIZE",
                   help="stop when the file reaches SIZE (e.g. 500M, 2G)")
    p.add_argument("--buffer", type=common.size_type("--buffer"), metavar="SIZE",
                   help="kernel buffer memory, shared by one ring per CPU and context level (task, softirq, "
                        "hardirq), each rounded up to a power of two records; default 32M, and at least "
                        "8192 records per ring")
    outfile.add_force(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no status line, only the summary")
    fl = p.add_argument_group("flight recorder (docs/record.md): keep the last window in memory, save it when "
                                "something goes wrong; -o is then a PREFIX")
    fl.add_argument("--ring", type=_ring_type, metavar="DURATION|SIZE",
                    help="record continuously, keeping only the last DURATION (30s, 10m, 2h; at most 512M of "
                         "events) or SIZE (256M, 1G) of events, or both (10m,1G); each save writes "
                         "PREFIX-YYYYmmddTHHMMSSZ-N.ioscope")
    fl.add_argument("--trigger", action="append", metavar="COND",
                    help="save when an I/O matches COND, in agg's language, evaluated in the kernel: "
                         "'q2c > 500ms', 'd2c > 100ms where disk == \"sda\" and op == \"write\"' (repeatable); "
                         "SIGUSR1 always saves")
    fl.add_argument("--trigger-cmd", metavar="CMD",
                    help="run CMD (with sh) every --trigger-every seconds; save when it exits non-zero or hangs")
    fl.add_argument("--trigger-every", type=_duration("--trigger-every"), default=10.0, metavar="DURATION",
                    help="how often --trigger-cmd runs (default 10s)")
    fl.add_argument("--after", type=_duration("--after"), default=5.0, metavar="DURATION",
                    help="keep recording this long after a trigger before saving (default 5s)")
    fl.add_argument("--max-saves", type=common.positive_int, default=20, metavar="N",
                    help="save at most N windows in this run (default 20); later triggers are counted")
    fl.add_argument("--context", action="store_true",
                    help="save each window as an `ioscope collect` bundle: the capture and the host's context "
                         "(taken at the trigger and after the save)")
    fl.add_argument("--save-on-exit", action="store_true",
                    help="also save the window when stopped (Ctrl-C, SIGTERM, SIGHUP, -w)")
    p.set_defaults(func=run, tool="record")


def _ring_type(text: str) -> object:
    from ioscope.tools.record.flight import parse_ring
    return parse_ring(text)


def _duration(what: str) -> Any:
    def conv(text: str) -> float:
        from ioscope.tools.record.flight import parse_duration
        return parse_duration(text, what)
    return conv


def run(args: argparse.Namespace) -> int:
    from ioscope.base import devices, system
    from ioscope.capture.store import CaptureWriter
    from ioscope.engines.recording.recorder import Recorder, RecorderOptions, capture_meta
    from ioscope.tools.parse.blkparse import parse_mask

    mask = parse_mask(args.act_mask, None)  # blkparse's -a names (parse_cmd.MASKS); none: every event
    if args.ring is not None:
        from ioscope.tools.record.flight_cmd import run_ring
        return run_ring(args, mask)
    for opt, given in (("--trigger", args.trigger), ("--trigger-cmd", args.trigger_cmd),
                       ("--context", args.context), ("--save-on-exit", args.save_on_exit)):
        if given:
            raise UsageError(f"{opt} goes with --ring (the flight recorder)",
                             "e.g. ioscope record --ring 60s --trigger 'q2c > 500ms' -o /var/tmp/io")
    out = args.output
    outfile.check_output(out, args.force)
    parent = os.path.dirname(os.path.abspath(out))
    system.require_bpf_privileges("record")
    btf = system.btf_path(getattr(args, "btf", None))
    disks = list(dict.fromkeys(devices.resolve_disk(d) for d in args.disk or []))
    rec = Recorder(RecorderOptions(disks=disks, pid=args.pid, buffer_bytes=args.buffer, btf=btf, act_mask=mask))
    try:
        traced_disk = _output_on_traced_disk(parent, disks)
        if traced_disk:
            print(f"ioscope record: warning: {out} is on {traced_disk}, which is being traced: writing the "
                  "capture adds I/O to the trace (write it to another disk or /dev/shm)", file=sys.stderr)
        common.warn_unavailable("record", rec.unavailable)
        meta = capture_meta(rec, sys.argv[1:])
        writer = CaptureWriter(out, meta, force=args.force)
        session = RecordSession(rec, writer, max_size=args.max_size)
        return _record(session, args, disks)
    finally:
        rec.close()


def _output_on_traced_disk(directory: str, disks: list[devices.BlockDevice],
                           sys_root: str = "/sys") -> str | None:
    """The traced disk that holds directory, if any (None for tmpfs and other disk-less file systems)."""
    from ioscope.base import devices
    st_dev = os.stat(directory).st_dev
    spec = f"{os.major(st_dev)}:{os.minor(st_dev)}"
    try:
        disk = devices.resolve_disk(spec, sys_root)
    except IoscopeError:
        return None  # not a block device (tmpfs, overlay, nfs)
    if not disks or disk in disks:
        return disk.name
    return None


def _record(session: RecordSession, args: argparse.Namespace, disks: list[devices.BlockDevice]) -> int:
    from ioscope.base.fmt import fmt_bytes
    from ioscope.capture.events import ACTION_LETTERS
    from ioscope.engines.recording.recorder import completions_warnings

    where = ", ".join(d.name for d in disks) or "all disks"
    pid = f", pid {args.pid}" if args.pid else ""
    stop_how = f"for {args.duration:g}s" if args.duration else "until Ctrl-C"
    from ioscope.engines.recording.recorder import ALL_ACTIONS, mask_names

    mask = session.rec.opts.act_mask
    what = "" if mask & ALL_ACTIONS == ALL_ACTIONS else f" ({', '.join(mask_names(mask))})"
    print(f"Recording block I/O events{what} on {where}{pid} to {args.output} "
          f"({session.rec.bpf.variant_summary()}) {stop_how}.", file=sys.stderr, flush=True)
    tty = sys.stderr.isatty() and not args.quiet
    started = time.monotonic()
    deadline = started + args.duration if args.duration else None
    last_line = started
    last_events = 0
    st = session.status
    session.start()
    try:
        while not session.done.is_set():
            if common.wait_or_deadline(session.done, deadline):
                session.stop(f"-w {args.duration:g}s elapsed")
            now = time.monotonic()
            if not args.quiet and now - last_line >= (1.0 if tty else 10.0) and not session.done.is_set():
                rate = (st.events - last_events) / (now - last_line)
                line = (f"{now - started:7.1f}s  {st.events:>12,} events  {_fmt_count(rate):>7}/s  "
                        f"{fmt_bytes(st.bytes, prose=True):>10}  lost {st.lost}")
                sys.stderr.write(("\r" + line) if tty else (line + "\n"))
                sys.stderr.flush()
                last_line, last_events = now, st.events
    except KeyboardInterrupt:
        session.stop("interrupted")
    finally:
        common.join_uninterrupted(session.thread.join)   # the capture gets its end record
        if tty:
            sys.stderr.write("\n")
    common.raise_thread_error(st.error, "recording")
    elapsed = time.monotonic() - started
    losses = session.rec.losses()
    counts = session.writer.action_counts
    acts = ", ".join(f"{ACTION_LETTERS.get(a, str(a))} {int(n)}" for a, n in enumerate(counts) if n and a)
    nevents, nnotes = int(counts[1:].sum()), int(counts[0])
    unwritten = session.writer.unwritten  # taken from the rings, but the file system was full
    why = ([losses.describe()] if losses.lost else []) + ([f"{unwritten} did not fit in the file"] if unwritten else [])
    print(f"Recorded {nevents:,} events ({acts or 'none'}) and {nnotes} process notes in {elapsed:.1f}s "
          f"to {args.output} ({fmt_bytes(st.bytes, prose=True)}); lost {losses.lost + unwritten}"
          f"{' (' + '; '.join(why) + ')' if why else ''}; stopped: {st.stop_reason or 'end'}.",
          file=sys.stderr)
    if losses.lost:
        print("ioscope record: records were lost; a larger --buffer (e.g. --buffer 256M) or fewer disks (-d) "
              "helps", file=sys.stderr)
    for line in completions_warnings("record", session.check):
        print(line, file=sys.stderr)
    if st.full is not None:
        raise st.full  # one line: what the file holds, how many events did not fit; exit 1
    return 0


__all__ = ["RecordSession", "Status", "add_parser", "run"]
