"""`ioscope record --ring`: the flight recorder's command (flight.py does the work): checks, the
start line, the status line, SIGUSR1, and the summary."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ioscope.base import live
from ioscope.base.errors import IoscopeError, UsageError


def _mem_available(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_args(args: argparse.Namespace) -> None:
    """What is wrong with the options, before anything is attached (UsageError / IoscopeError)."""
    from ioscope.base.fmt import fmt_bytes
    if args.max_size is not None:
        raise UsageError("--max-size goes with a plain recording; with --ring, give the size to --ring",
                         "e.g. --ring 256M or --ring 10m,1G")
    prefix = args.output
    parent = prefix if prefix.endswith("/") else os.path.dirname(os.path.abspath(prefix))
    if not os.path.isdir(parent):
        raise IoscopeError(f"-o {prefix}: directory {parent} does not exist",
                           "with --ring, -o is the prefix of the saved files: e.g. -o /var/tmp/io")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise IoscopeError(f"-o {prefix}: cannot write in {parent}", "choose a directory you can write to")
    avail = _mem_available()
    if avail is not None and args.ring.memory > avail // 2:
        raise UsageError(f"--ring {args.ring.text}: {fmt_bytes(args.ring.memory, prose=True)} of events is more than "
                         f"half of this host's available memory ({fmt_bytes(avail, prose=True)})",
                         "give a smaller size (--ring 10m,256M)")


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


EARLY_USR1: list[str] = []   # SIGUSR1s that came before the session existed


def hold_early_usr1() -> Any:
    """From now on a SIGUSR1 is kept for the session (its default action would kill the recorder): called by
    cli.main as soon as it sees --ring, before the tool's modules are imported and its programs loaded."""
    return signal.signal(signal.SIGUSR1, lambda _s, _f: EARLY_USR1.append("SIGUSR1"))


def run_ring(args: argparse.Namespace, mask: int) -> int:
    old_usr1 = hold_early_usr1()
    try:
        return _run_ring(args, mask, EARLY_USR1)
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)


def _run_ring(args: argparse.Namespace, mask: int, early: list[str]) -> int:
    from ioscope.base import devices, system
    from ioscope.engines.aggregate.collector import programs
    from ioscope.engines.recording.recorder import Recorder, RecorderOptions, capture_meta
    from ioscope.tools.record.flight import (
        BaselineWatch,
        CommandTrigger,
        FlightSession,
        KernelTriggers,
        PressureTrigger,
        parse_baseline,
        parse_triggers,
    )

    check_args(args)
    exprs = parse_triggers(args.trigger or [])   # a bad condition: one line, exit 2, nothing attached
    progs = programs(exprs)                      # names in conditions (disks, cgroups) resolved here too
    specs = [parse_baseline(t) for t in args.trigger_baseline or []]
    baseline = BaselineWatch(specs, args.baseline) if specs else None
    # a cgroup's pressure file: found (or one line) before anything is loaded
    pressure_paths = [(spec, pressure_path(spec)) for spec in args.trigger_pressure or []]
    system.require_bpf_privileges("record")
    btf = system.btf_path(getattr(args, "btf", None))
    disks = list(dict.fromkeys(devices.resolve_disk(d) for d in args.disk or []))
    rec = Recorder(RecorderOptions(disks=disks, pid=args.pid, buffer_bytes=args.buffer, btf=btf, act_mask=mask))
    trig: KernelTriggers | None = None
    cmd: CommandTrigger | None = None
    pressure: list[PressureTrigger] = []
    try:
        live.warn_unavailable("record", rec.unavailable)
        if exprs or baseline is not None:
            trig = KernelTriggers(exprs, disks, args.pid, btf, progs, baseline)
        command = " ".join(["ioscope", *sys.argv[1:]])
        session = FlightSession(rec, args.ring, prefix=args.output, meta=capture_meta(rec, sys.argv[1:]),
                                after_s=args.after, triggers=trig, max_saves=args.max_saves,
                                context=args.context, save_on_exit=args.save_on_exit, command=command)
        signal.signal(signal.SIGUSR1, lambda _s, _f: session.request("SIGUSR1", "signal"))
        for why in early:
            session.request(why, "signal")
        if args.trigger_cmd:
            cmd = CommandTrigger(args.trigger_cmd, args.trigger_every, session.request)
        for spec, path in pressure_paths:   # the kernel refusing one: one line, before recording starts
            pressure.append(PressureTrigger(spec, session.request, path))
        return _fly(session, args, disks, cmd, pressure, baseline)
    finally:
        for p in pressure:
            p.stop()
        if cmd is not None:
            cmd.stop()
        if trig is not None:
            trig.close()
        rec.close()


# --until-trigger: the status when a window was saved (1 is an error, 2 bad usage, 130 and up a signal's)
EXIT_TRIGGERED = 3


def pressure_path(spec: Any) -> str:
    """The pressure file of a --trigger-pressure: the host's, or its cgroup's (one line when there is none)."""
    from ioscope.base import psi
    from ioscope.base.cgroups import cgroup2_root
    try:
        return psi.trigger_path(spec, cgroup2_root())
    except ValueError as exc:
        raise IoscopeError(f"--trigger-pressure {spec.describe()!r}: {exc}") from None


def _fly(session: Any, args: argparse.Namespace, disks: list[Any], cmd: Any, pressure: Sequence[Any] = (),
         baseline: Any = None) -> int:
    from ioscope.base.fmt import fmt_bytes
    from ioscope.engines.recording.recorder import ALL_ACTIONS, mask_names
    from ioscope.tools.record.flight import FlightSession

    assert isinstance(session, FlightSession)
    where = ", ".join(d.name for d in disks) or "all disks"
    pid = f", pid {args.pid}" if args.pid else ""
    mask = session.rec.opts.act_mask
    what = "" if mask & ALL_ACTIONS == ALL_ACTIONS else f" ({', '.join(mask_names(mask))})"
    on = [repr(t) for t in args.trigger or []] + [f"SIGUSR1 (kill -USR1 {os.getpid()})"]
    if args.trigger_cmd:
        on.append(f"--trigger-cmd failing (every {args.trigger_every:g} s)")
    for p in pressure:
        on.append(f"I/O pressure {p.spec.describe()}")
    if baseline is not None:
        on += [f"'{s.text}' (usual: the {args.baseline:g} s before)" for s in baseline.specs]
    stop_how = f"for {args.duration:g}s" if args.duration else "until Ctrl-C"
    tty = sys.stderr.isatty() and not args.quiet
    started = time.monotonic()
    deadline = started + args.duration if args.duration else None
    last_line = started
    session.start()
    if cmd is not None:
        cmd.start()
    for p in pressure:
        p.start()
    ring = session.ring
    try:
        # the start line inside the try: a stop signal sent once a script has read it is always a clean stop
        # (sent between the line and the loop, it once ended the recorder with 130 in CI)
        print(f"Flight recorder: keeping {session.spec.describe()} of block I/O events{what} on {where}{pid} in "
              f"memory ({session.rec.bpf.variant_summary()}) {stop_how}; saving {args.after:g} s after a trigger "
              f"to {args.output}-*.ioscope on: {', '.join(on)}.", file=sys.stderr, flush=True)
        while not session.done.is_set():
            if live.wait_or_deadline(session.done, deadline):
                session.stop(f"-w {args.duration:g}s elapsed")
            if args.until_trigger and session.saved.is_set():
                session.stop("--until-trigger: a window was saved")
            now = time.monotonic()
            if not args.quiet and now - last_line >= (1.0 if tty else 60.0) and not session.done.is_set():
                oldest = ring.oldest_ts()
                held = (time.monotonic_ns() - oldest) / 1e9 if oldest else 0.0
                line = (f"{now - started:7.1f}s  ring {held:6.1f} s  {fmt_bytes(ring.bytes, prose=True):>10}  "
                        f"{ring.events_seen:>12,} events seen  saves {len(session.saves)}  "
                        f"lost {int(ring.lost.get('total', 0))}")
                sys.stderr.write(("\r" + line) if tty else (line + "\n"))
                sys.stderr.flush()
                last_line = now
    except KeyboardInterrupt:
        session.stop("interrupted")
    finally:
        live.join_uninterrupted(session.join)   # a save being written is finished
        if tty:
            sys.stderr.write("\n")
    live.raise_thread_error(session.error, "flight recorder")
    elapsed = time.monotonic() - started
    oldest = ring.oldest_ts()
    held = (time.monotonic_ns() - oldest) / 1e9 if oldest else 0.0
    lost = int(ring.lost.get("total", 0))
    extra = []
    if session.not_saved:
        extra.append(f"{session.not_saved} trigger{'s' if session.not_saved != 1 else ''} not saved "
                     f"(--max-saves {session.max_saves})")
    if ring.squeezed_out and session.spec.window_s:
        extra.append(f"the memory bound ({fmt_bytes(session.spec.memory, prose=True)}) held the ring to less than "
                     f"{session.spec.window_s:g} s at times: give --ring {session.spec.window_s:g}s,SIZE")
    if cmd is not None:
        extra.append(f"--trigger-cmd ran {cmd.runs} times, failed {cmd.failures}")
    for p in pressure:
        of = f" ({p.spec.describe()})" if len(pressure) > 1 or p.spec.cgroup is not None else ""
        extra.append(f"the I/O pressure trigger{of} fired {p.fired} time{'s' if p.fired != 1 else ''}")
    kt = session.kernel_triggers
    if kt is not None and kt.in_flight.exprs:
        w = kt.in_flight.watch
        extra.append(f"watching the I/Os in flight took {kt.in_flight.cpu_s:.2f} s of CPU ({w.reads} read"
                     f"{'s' if w.reads != 1 else ''} of the slot table)")
    if baseline is not None:
        extra.append(f"the baseline trigger fired {baseline.fired} time{'s' if baseline.fired != 1 else ''}")
    saves = len(session.saves)
    print(f"Flight recorder ran {elapsed:.1f}s: {ring.events_seen:,} events seen, the ring held the last {held:.1f} s "
          f"({fmt_bytes(ring.bytes, prose=True)}) at the end; {saves} window{'s' if saves != 1 else ''} saved; lost "
          f"{lost}; stopped: {session.stop_reason or 'end'}." + (f" {_sentence('; '.join(extra))}." if extra else ""),
          file=sys.stderr)
    if lost:
        print("ioscope record: records were lost; a larger --buffer (e.g. --buffer 256M) or fewer disks (-d) helps",
              file=sys.stderr)
    failed = [j for j in session.saves if j.error]
    if failed:
        return 1
    return EXIT_TRIGGERED if args.until_trigger and session.saves else 0


__all__ = ["check_args", "run_ring"]
