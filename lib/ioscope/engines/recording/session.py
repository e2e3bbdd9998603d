"""A recording to a capture file, with its status line and summary: the session `ioscope record` runs and
`ioscope collect` runs inside its bundle. The recorder (recorder.py) feeds a CaptureWriter (capture/store.py)
in a consumer thread (RecordSession); record() is the whole life of one recording, from the checks of its
output to the summary line, and ends cleanly on Ctrl-C, SIGTERM or SIGHUP."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ioscope.base import live, outfile
from ioscope.base.cgroups import CgroupNames
from ioscope.base.errors import IoscopeError

if TYPE_CHECKING:
    import numpy as np

    from ioscope.base import devices
    from ioscope.capture.store import CaptureWriter
    from ioscope.engines.context.throttle import HeldWatch
    from ioscope.engines.recording.recorder import Recorder


@dataclass
class RecordRequest:
    """What to record and where (record's and collect's options)."""

    output: str
    disks: list[str] = field(default_factory=list)   # as the user named them (-d)
    pid: int | None = None
    act_mask: int = 0xFFFF
    duration: float | None = None
    max_size: int | None = None
    buffer: int | None = None
    force: bool = False
    quiet: bool = False
    btf: str | None = None
    argv: list[str] = field(default_factory=list)    # the command line, kept in the capture's header


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

    def __init__(self, rec: Recorder, writer: CaptureWriter, max_size: int | None = None,
                 held: HeldWatch | None = None) -> None:
        self.rec = rec
        self.writer = writer
        self.max_size = max_size
        # the bios blk-throttle held while recording (their wait is before any event of theirs): read every
        # CHECK_EVERY_S, added up, kept in the capture's end record (report prints them)
        self.held = held
        self.held_total: dict[tuple[int, str], Any] = {}
        self.status = Status()
        self.completed: dict[int, int] = {}  # kernel dev_t -> C events recorded
        self.completed_attached: dict[int, int] = {}  # ... of them inside rec.attached_window()
        self.check: dict[str, dict[str, Any]] = {}
        self._stop = live.Flag()
        self.done = live.Flag()
        self.thread = threading.Thread(target=self._run, name="ioscope-record", daemon=False)

    def start(self) -> None:
        live.start_thread(self.thread)

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
        from ioscope.engines.context.throttle import CHECK_EVERY_S
        from ioscope.engines.recording.recorder import FAST_POLL_FILL, FAST_POLL_MS, POLL_MS

        rec, w = self.rec, self.writer
        last_lost = last_held = 0.0
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
                if self.held is not None and now - last_held >= CHECK_EVERY_S:
                    self._take_held()
                    last_held = now
                # written and handed to the writer: then only what the rings hold now and take until the
                # probes are detached comes after it (docs/record.md, --max-size)
                if self.max_size and (accepted := w.bytes_accepted()) >= self.max_size:
                    self.stop(f"--max-size reached ({accepted} bytes)")
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
                             "completions_check": self.check, **self._held_end()})
            except CaptureFull as exc:  # the file ended cleanly: the main thread says what it cost
                self.status.full = exc
            self.status.bytes = w.bytes_written() or os.path.getsize(w.path)
        except BaseException as exc:  # reported by the main thread
            self.status.error = exc
        finally:
            self.done.set()


    def _take_held(self) -> None:
        from ioscope.engines.context.throttle import merge_held

        if self.held is not None:
            self.held.tick()
            merge_held(self.held_total, self.held.read())

    def _held_end(self) -> dict[str, Any]:
        """The end record's throttle_held (held_json per disk and cgroup) and why a wait or the held bios
        could not be seen; nothing when no limit was in force."""
        from ioscope.engines.context.throttle import held_json

        if self.held is None:
            return {}
        self._take_held()
        out: dict[str, Any] = {}
        if self.held_total:
            out["throttle_held"] = [held_json(h) for h in sorted(self.held_total.values(),
                                                                 key=lambda h: (-h.held, h.disk, h.cgroup))]
        if self.held.watch is not None and self.held.watch.watching:
            if self.held.no_wait:
                out["throttle_wait_not_measured"] = self.held.no_wait
            if self.held.no_held:
                out["throttle_held_not_seen"] = self.held.no_held
        elif self.held.failed:
            out["throttle_held_not_seen"] = self.held.failed
        return out


def _fmt_count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def record(req: RecordRequest) -> int:
    """One recording, start to summary; the exit code."""
    from ioscope.base import devices, system
    from ioscope.capture.store import CaptureWriter
    from ioscope.engines.context.throttle import HeldWatch
    from ioscope.engines.recording.recorder import Recorder, RecorderOptions, capture_meta

    out = req.output
    outfile.check_output(out, req.force)
    parent = os.path.dirname(os.path.abspath(out))
    system.require_bpf_privileges("record")
    btf = system.btf_path(req.btf)
    disks = list(dict.fromkeys(devices.resolve_disk(d) for d in req.disks or []))
    rec = Recorder(RecorderOptions(disks=disks, pid=req.pid, buffer_bytes=req.buffer, btf=btf, act_mask=req.act_mask))
    held: HeldWatch | None = None
    try:
        traced_disk = _output_on_traced_disk(parent, disks)
        if traced_disk:
            print(f"ioscope record: warning: {out} is on {traced_disk}, which is being traced: writing the "
                  "capture adds I/O to the trace (write it to another disk or /dev/shm)", file=sys.stderr)
        live.warn_unavailable("record", rec.unavailable)
        meta = capture_meta(rec, req.argv)
        writer = CaptureWriter(out, meta, force=req.force, cgroup_names=CgroupNames().name)
        held = HeldWatch(lambda: disks or devices.list_disks(), [d.dev for d in disks], eager=True)
        session = RecordSession(rec, writer, max_size=req.max_size, held=held)
        return _record(session, req, disks)
    finally:
        if held is not None:
            held.close()
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


def _record(session: RecordSession, req: RecordRequest, disks: list[devices.BlockDevice]) -> int:
    from ioscope.base.fmt import fmt_bytes
    from ioscope.capture.events import ACTION_LETTERS
    from ioscope.engines.recording.recorder import completions_warnings

    where = ", ".join(d.name for d in disks) or "all disks"
    pid = f", pid {req.pid}" if req.pid else ""
    stop_how = f"for {req.duration:g}s" if req.duration else "until Ctrl-C"
    from ioscope.engines.recording.recorder import ALL_ACTIONS, mask_names

    mask = session.rec.opts.act_mask
    what = "" if mask & ALL_ACTIONS == ALL_ACTIONS else f" ({', '.join(mask_names(mask))})"
    tty = sys.stderr.isatty() and not req.quiet
    started = time.monotonic()
    deadline = started + req.duration if req.duration else None
    last_line = started
    last_events = 0
    st = session.status
    session.start()
    try:  # a stop signal sent once a script read the start line is a clean stop (as in record --ring)
        print(f"Recording block I/O events{what} on {where}{pid} to {req.output} "
              f"({session.rec.bpf.variant_summary()}) {stop_how}.", file=sys.stderr, flush=True)
        while not session.done.is_set():
            if live.wait_or_deadline(session.done, deadline):
                session.stop(f"-w {req.duration:g}s elapsed")
            now = time.monotonic()
            if not req.quiet and now - last_line >= (1.0 if tty else 10.0) and not session.done.is_set():
                rate = (st.events - last_events) / (now - last_line)
                line = (f"{now - started:7.1f}s  {st.events:>12,} events  {_fmt_count(rate):>7}/s  "
                        f"{fmt_bytes(st.bytes, prose=True):>10}  lost {st.lost}")
                sys.stderr.write(("\r" + line) if tty else (line + "\n"))
                sys.stderr.flush()
                last_line, last_events = now, st.events
    except KeyboardInterrupt:
        session.stop("interrupted")
    finally:
        live.join_uninterrupted(session.thread.join)   # the capture gets its end record
        if tty:
            sys.stderr.write("\n")
    live.raise_thread_error(st.error, "recording")
    elapsed = time.monotonic() - started
    losses = session.rec.losses()
    counts = session.writer.action_counts
    acts = ", ".join(f"{ACTION_LETTERS.get(a, str(a))} {int(n)}" for a, n in enumerate(counts) if n and a)
    nevents, nnotes = int(counts[1:].sum()), int(counts[0])
    unwritten = session.writer.unwritten  # taken from the rings, but the file system was full
    why = ([losses.describe()] if losses.lost else []) + ([f"{unwritten} did not fit in the file"] if unwritten else [])
    print(f"Recorded {nevents:,} events ({acts or 'none'}) and {nnotes} process notes in {elapsed:.1f}s "
          f"to {req.output} ({fmt_bytes(st.bytes, prose=True)}); lost {losses.lost + unwritten}"
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


__all__ = ["RecordRequest", "RecordSession", "Status", "record"]
