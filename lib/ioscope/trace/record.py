"""ioscope record: every block-layer event into a capture file (blktrace's job, with BPF).

The kernel side is bpf/record.bpf.c. Recorder owns the BPF object and hands
out batches of events as EVENT arrays (one numpy view per ring-buffer batch,
no Python per event); `ioscope snoop` uses the same Recorder.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ioscope import _libbpf, cli_common, devices, outfile, system
from ioscope.errors import IoscopeError
from ioscope.loader import BPFObject
from ioscope.losses import RECURSION_MISSES, Losses
from ioscope.render import fmt_bytes
from ioscope.trace.capture import CaptureWriter, clock_pair
from ioscope.trace.events import ACTION_LETTERS, EVENT, TA_COMPLETE, TA_QUEUE, TA_SPLIT, TC_FLUSH, TC_FUA, TC_WRITE

# hook name -> (blktrace letter(s), required)
HOOKS: dict[str, tuple[str, bool]] = {
    "bio_queue": ("Q", True),
    "getrq": ("G", False),
    "rq_insert": ("I", False),
    "bio_backmerge": ("M", False),
    "bio_frontmerge": ("F", False),
    "rq_merge": ("M", False),
    "rq_issue": ("D", True),
    "rq_complete": ("C", True),
    "bio_complete": ("C", False),
    "rq_requeue": ("R", False),
    "plug": ("P", False),
    "unplug": ("U/UT", False),
    "split": ("X", False),
    "bio_remap": ("A", False),
    "rq_remap": ("A", False),
    "task_rename": ("", False),   # no event: process notes follow exec and renames at once
}

# enum rec_stat in bpf/record.h
STAT_LOST_EVENT, STAT_LOST_NOTE, STAT_PID_MAP_FULL, STAT_LOST_NEST, STAT_RING_RACE, STAT_NO_RING = range(6)
NR_STATS = 6
LEVELS = 3  # IOS_REC_LEVELS: rings per CPU (task, softirq, hardirq)
MIN_RING_SLOTS = 1024  # with an explicit --buffer
DEFAULT_MIN_RING_SLOTS = 8192  # without: at least ~400,000 events/s per ring between two polls
FAST_POLL_MS = 2  # the next poll, when a ring was more than FAST_POLL_FILL full at the last one
FAST_POLL_FILL = 0.25

DEFAULT_BUFFER = 32 << 20
POLL_MS = 20


# What the recorder did not record: Losses counters (losses.py, the one loss type), all of them losses.
STAT_LOSSES = {STAT_LOST_EVENT: "ringbuf_full_events", STAT_LOST_NOTE: "ringbuf_full_notes",
               STAT_PID_MAP_FULL: "pid_map_full", STAT_LOST_NEST: "nested_too_deep", STAT_RING_RACE: "ring_race",
               STAT_NO_RING: "cpu_without_ring"}
LOSS_EXPLAIN = {
    "ringbuf_full_events": "events, ring full: raise --buffer",
    "ringbuf_full_notes": "process notes, ring full: raise --buffer",
    "pid_map_full": "bios of the -p process not followed, map full: their request events are missing",
    "nested_too_deep": f"events of programs nested {LEVELS} deep on a CPU",
    "ring_race": "records of two programs writing one ring: please report",
    "cpu_without_ring": "events on CPUs brought online after the start, which have no ring",
    RECURSION_MISSES: "program runs the kernel skipped",
}


def record_losses(per_cpu: np.ndarray, recursion_misses: int) -> Losses:
    """rec_stats per CPU (ncpus, NR_STATS) and the kernel's recursion_misses -> Losses."""
    counters = {name: int(per_cpu[:, i].sum()) for i, name in STAT_LOSSES.items()}
    counters[RECURSION_MISSES] = recursion_misses
    return Losses(counters, frozenset(counters), LOSS_EXPLAIN)


def capture_lost(losses: Losses, per_cpu: np.ndarray) -> dict[str, Any]:
    """A capture's meta['lost'] (docs/capture-format.md): the total, every counter, and the ring-full
    counts per CPU (which CPU's ring was too small)."""
    return {"total": losses.lost, **losses.counters,
            "per_cpu": {"ringbuf_full_events": [int(x) for x in per_cpu[:, STAT_LOST_EVENT]],
                        "ringbuf_full_notes": [int(x) for x in per_cpu[:, STAT_LOST_NOTE]]}}


@dataclass
class RecorderOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    buffer_bytes: int | None = None  # None: DEFAULT_BUFFER, and never fewer than DEFAULT_MIN_RING_SLOTS per ring
    btf: str | None = None
    hooks: list[str] | None = None  # None: every hook in HOOKS
    stop_at: int = 0  # bench/record_overhead.py only: programs stop early (see targ_stop_at in record.bpf.c)


def ring_slots(buffer_bytes: int | None, nrings: int) -> int:
    """Slots per ring: buffer_bytes shared by nrings rings, rounded up to a power of two. Without
    an explicit size, DEFAULT_BUFFER, but at least DEFAULT_MIN_RING_SLOTS per ring (hosts with many
    CPUs get more memory: 1.3 MiB per CPU at the least)."""
    least = MIN_RING_SLOTS if buffer_bytes is not None else DEFAULT_MIN_RING_SLOTS
    size = buffer_bytes if buffer_bytes is not None else DEFAULT_BUFFER
    n = max(least, size // (nrings * EVENT.itemsize))
    return 1 << (n - 1).bit_length()


class Recorder:
    """The record BPF object, loaded and attached; poll() returns EVENT arrays."""

    def __init__(self, opts: RecorderOptions) -> None:
        self.opts = opts
        # rings for the CPUs present now (a VM may declare many more possible CPUs than it has)
        self.ring_cpus = min(system.present_cpus(), _libbpf.num_possible_cpus())
        self.nrings = self.ring_cpus * LEVELS
        self.ring_slots = ring_slots(opts.buffer_bytes, self.nrings)
        self.ring_bytes = self.nrings * self.ring_slots * EVENT.itemsize
        self.bpf = BPFObject("record", btf=opts.btf)
        self.detached = False
        try:
            self._setup()
        except BaseException:
            self.bpf.close()
            raise

    def _setup(self) -> None:
        b, o = self.bpf, self.opts
        wanted = o.hooks if o.hooks is not None else list(HOOKS)
        b.choose(required=[h for h in wanted if HOOKS[h][1]], optional=[h for h in wanted if not HOOKS[h][1]])
        b.filter_disks(d.dev for d in o.disks)
        b.set_global("targ_tgid", o.pid or 0, "I")
        b.set_global("targ_ring_slots", self.ring_slots, "I")
        b.set_global("targ_ring_cpus", self.ring_cpus, "I")
        b.set_global("targ_stop_at", o.stop_at, "I")
        b.set_max_entries("rec_ring", self.nrings * self.ring_slots)
        b.set_max_entries("rec_pos", self.nrings)
        b.load()
        self.ring = b.obj.slot_rings("rec_ring", "rec_pos", self.nrings, self.ring_slots)
        self.stats = b.map("rec_stats")
        self.completions_before = _completions(o.disks)
        self.flush_machines = flush_machines(device_meta(o.disks or None))
        b.attach()
        self.attached_ns = time.monotonic_ns()  # every program runs from here on
        self.detached_ns = 0
        self.completions_after: dict[int, int] = {}

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def tracepoints(self) -> dict[str, str]:
        """tracepoint -> attach variant (tp_btf, raw_tp) for every attached hook."""
        return {h.tracepoint: h.chosen for h in self.bpf.hooks.values() if h.chosen}

    def poll(self, timeout_ms: int) -> np.ndarray:
        """Every event waiting in the rings, after sleeping timeout_ms (0: no wait), in ring order:
        time-ordered within a ring (one CPU and context level), not across rings."""
        raw = self.ring.poll(timeout_ms)
        n = len(raw) // EVENT.itemsize
        return np.frombuffer(raw, dtype=EVENT, count=n)

    def counters(self) -> np.ndarray:
        """rec_stats per CPU: shape (ncpus, NR_STATS)."""
        keys, vals, n = self.stats.dump(sum=False)  # one batched read of every index
        per = np.frombuffer(vals, dtype=np.uint64, count=n * self.stats.ncpus).reshape(n, self.stats.ncpus)
        out = np.zeros((self.stats.ncpus, NR_STATS), dtype=np.uint64)
        idx = np.frombuffer(keys, dtype=np.uint32, count=n)
        keep = idx < NR_STATS
        out[:, idx[keep]] = per[keep].T
        return out

    def losses(self) -> Losses:
        """Everything not recorded since the start."""
        return record_losses(self.counters(), self.bpf.recursion_misses())

    def capture_lost(self) -> dict[str, Any]:
        """The losses as the capture stores them (meta['lost'])."""
        c = self.counters()
        return capture_lost(record_losses(c, self.bpf.recursion_misses()), c)

    def detach(self) -> None:
        if not self.detached:
            self.detached_ns = time.monotonic_ns()  # every program ran until here
            self.bpf.detach()
            self.completions_after = _completions(self.opts.disks)
            self.detached = True

    def completions_check(self, recorded: dict[int, int]) -> dict[str, dict[str, Any]]:
        """Per disk: I/Os the kernel completed (/proc/diskstats) while recording vs. C events recorded."""
        out: dict[str, dict[str, Any]] = {}
        names = devices.DevNames()
        for dev, after in self.completions_after.items():
            kernel = after - self.completions_before.get(dev, after)
            if kernel <= 0 and not recorded.get(dev):
                continue
            ma, mi = devices.kdev_split(dev)
            out[f"{ma},{mi}"] = {"name": names.name(dev), "kernel": kernel, "recorded": int(recorded.get(dev, 0))}
        return out

    def drain(self) -> np.ndarray:
        """Everything left in the rings (after detach(): the last events)."""
        parts = []
        while True:
            ev = self.poll(0)
            if not len(ev):
                break
            parts.append(ev)
        return np.concatenate(parts) if parts else np.empty(0, EVENT)

    def close(self) -> None:
        self.bpf.close()


def _add_per_dev(devs: np.ndarray, into: dict[int, int]) -> None:
    if not len(devs):
        return
    if bool((devs == devs[0]).all()):  # one disk: no sort
        into[int(devs[0])] = into.get(int(devs[0]), 0) + len(devs)
        return
    uniq, n = np.unique(devs, return_counts=True)
    for d, k in zip(uniq.tolist(), n.tolist()):
        into[d] = into.get(d, 0) + k


def flush_machines(devs: dict[str, Any]) -> dict[int, bool]:
    """kernel dev_t -> whether the disk supports FUA, for the disks with a volatile write cache,
    from device metadata as captures store it (device_meta()).

    Only on those does the block layer run writes with PREFLUSH (or FUA, when the disk lacks
    it) through its flush sequence (see count_completions)."""
    out = {}
    for d in devs.values():
        if d.get("write_cache") == "write back":
            out[devices.kdev(int(d["major"]), int(d["minor"]))] = bool(d.get("fua", 0))
    return out


def count_completions(ev: np.ndarray, into: dict[int, int], flush_machines: dict[int, bool] | None = None) -> None:
    """Add to into (kernel dev_t -> count) the completions of ev as /proc/diskstats counts them,
    for Recorder.completions_check().

    Every C event is one completion, but one: on a disk with a volatile write cache, a write with
    data and PREFLUSH (or FUA, if the disk has no FUA) goes through the block layer's flush
    sequence, which completes its data (a C with bytes, not yet counted by the kernel) and later
    ends the original request (a C of 0 bytes, counted once, as a write). So one C per such
    request is not a completion of the kernel's: per bio queued (Q) and per extra piece it was
    split into (X), the flags and data being those of the request. A flush request (C of a
    data-less flush) is counted by the kernel as a flush."""
    act = ev["action"]
    _add_per_dev(ev["dev"][act == TA_COMPLETE], into)
    if not flush_machines or not len(ev):
        return
    cat = ev["category"]
    cand = (((act == TA_QUEUE) | (act == TA_SPLIT)) & (ev["bytes"] > 0) & ((cat & TC_WRITE) != 0)
            & ((cat & (TC_FLUSH | TC_FUA)) != 0))
    if not cand.any():
        return
    devs, preflush = ev["dev"][cand], (cat[cand] & TC_FLUSH) != 0
    for d in np.unique(devs).tolist():
        has_fua = flush_machines.get(d)
        if has_fua is not None:
            mine = devs == d
            into[d] = into.get(d, 0) - int(np.count_nonzero(mine if not has_fua else mine & preflush))


def completions_warnings(tool: str, check: dict[str, dict[str, Any]]) -> list[str]:
    """One line per disk whose completions (/proc/diskstats) outnumber the C events seen."""
    return [f"ioscope {tool}: warning: {c['name']} ({dev}) completed {c['kernel']:,} I/Os while tracing "
            f"(/proc/diskstats) but {c['recorded']:,} completions were seen: {c['kernel'] - c['recorded']:,} "
            f"were not (see 'Completions check' in docs/record.md)"
            for dev, c in check.items() if c["recorded"] < c["kernel"]]


def _completions(disks: list[devices.BlockDevice]) -> dict[int, int]:
    """kernel dev_t -> I/Os completed so far (reads + writes + discards + flushes, /proc/diskstats)."""
    want = {d.dev for d in disks} or {d.dev for d in devices.list_disks()}  # whole disks, not partitions
    out = {}
    try:
        stats = devices.read_diskstats()
    except OSError:
        return {}
    for st in stats.values():
        dev = devices.kdev(st.major, st.minor)
        if dev in want:
            out[dev] = st.reads + st.writes + st.discards + st.flushes
    return out


# -- capture metadata -----------------------------------------------------


def _partitions(sys_root: str = "/sys") -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    base = Path(sys_root) / "class" / "block"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        p = base / name
        try:
            if not (p / "partition").exists():
                continue
            ma, mi = (p / "dev").read_text().strip().split(":")
            disk = p.resolve().parent.name
            dma, dmi = (Path(sys_root) / "block" / disk / "dev").read_text().strip().split(":")
            out[f"{ma},{mi}"] = {
                "name": name, "major": int(ma), "minor": int(mi), "disk": f"{dma},{dmi}",
                "start_sector": int((p / "start").read_text()), "size_bytes": int((p / "size").read_text()) * 512,
            }
        except (OSError, ValueError):
            continue
    return out


def device_meta(disks: list[devices.BlockDevice] | None = None, sys_root: str = "/sys") -> dict[str, Any]:
    """Devices as stored in captures: {"maj,min": {name, major, minor, size_bytes, scheduler, ...}}."""
    out: dict[str, Any] = {}
    for d in disks or devices.list_disks(sys_root):
        out[f"{d.major},{d.minor}"] = {"name": d.name, "major": d.major, "minor": d.minor,
                                       **devices.queue_settings(d.name, sys_root)}
    return out


def capture_meta(rec: Recorder, argv: Sequence[str] | None = None) -> dict[str, Any]:
    o = rec.opts
    return {
        "devices": device_meta(o.disks or None),
        "partitions": _partitions(),
        "tracepoints": rec.tracepoints(),
        "attach": rec.bpf.variant_summary(),
        "unavailable": list(rec.unavailable),
        "filters": {"disks": [d.name for d in o.disks], "pid": o.pid},
        "attached_mono_ns": rec.attached_ns,
        "ring_buffer_bytes": rec.ring_bytes,
        "rings": {"count": rec.nrings, "cpus": rec.ring_cpus, "per_cpu": LEVELS, "slots": rec.ring_slots,
                  "slot_bytes": EVENT.itemsize},
        "command": " ".join(["ioscope", *(argv or [])]),
    }


# -- the record command ---------------------------------------------------


class Status:
    """Counters shared by the consumer thread and the status line."""

    def __init__(self) -> None:
        self.events = 0  # records handed to the writer (process notes included)
        self.bytes = 0
        self.lost = 0
        self.stop_reason = ""
        self.error: BaseException | None = None


class RecordSession:
    """Recorder -> CaptureWriter in a consumer thread; stop() ends it cleanly."""

    def __init__(self, rec: Recorder, writer: CaptureWriter, max_size: int | None = None) -> None:
        self.rec = rec
        self.writer = writer
        self.max_size = max_size
        self.status = Status()
        self.completed: dict[int, int] = {}  # kernel dev_t -> C events recorded
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
        count_completions(ev, self.completed, self.rec.flush_machines)
        self.status.bytes = self.writer.bytes_written()

    def _run(self) -> None:
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
            self.check = rec.completions_check(self.completed)
            w.close(end={"stop_reason": self.status.stop_reason, "detached_mono_ns": rec.detached_ns,
                         "completions_check": self.check})
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
  ioscope parse trace.ioscope | less              # then read it (blkparse format)
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("record", help="record every block-layer event to a capture file (like blktrace)",
                       description="Record every block-layer event (Q G I M F D C R P U X A, as blktrace) "
                                   "into a capture file for offline analysis with ioscope parse/report/export. "
                                   "Ctrl-C, SIGTERM or SIGHUP end it cleanly; a killed recorder leaves a readable "
                                   "file.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="capture file to write")
    cli_common.add_disk_pid(p)
    p.add_argument("-w", "--duration", type=cli_common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS")
    p.add_argument("--max-size", type=cli_common.size_type("--max-size"), metavar="SIZE",
                   help="stop when the file reaches SIZE (e.g. 500M, 2G)")
    p.add_argument("--buffer", type=cli_common.size_type("--buffer"), metavar="SIZE",
                   help="kernel buffer memory, shared by one ring per CPU and context level (task, softirq, "
                        "hardirq), each rounded up to a power of two records; default 32M, and at least "
                        "8192 records per ring")
    outfile.add_force(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no status line, only the summary")
    p.set_defaults(func=run, tool="record")


def run(args: argparse.Namespace) -> int:
    out = args.output
    outfile.check_output(out, args.force)
    parent = os.path.dirname(os.path.abspath(out))
    system.require_bpf_privileges("record")
    btf = system.btf_path(getattr(args, "btf", None))
    disks = list(dict.fromkeys(devices.resolve_disk(d) for d in args.disk or []))
    rec = Recorder(RecorderOptions(disks=disks, pid=args.pid, buffer_bytes=args.buffer, btf=btf))
    try:
        traced_disk = _output_on_traced_disk(parent, disks)
        if traced_disk:
            print(f"ioscope record: warning: {out} is on {traced_disk}, which is being traced: writing the "
                  "capture adds I/O to the trace (write it to another disk or /dev/shm)", file=sys.stderr)
        for what in rec.unavailable:
            print(f"ioscope record: {what}; recording without it", file=sys.stderr)
        meta = capture_meta(rec, sys.argv[1:])
        writer = CaptureWriter(out, meta, force=args.force)
        session = RecordSession(rec, writer, max_size=args.max_size)
        return _record(session, args, disks)
    finally:
        rec.close()


def _output_on_traced_disk(directory: str, disks: list[devices.BlockDevice],
                           sys_root: str = "/sys") -> str | None:
    """The traced disk that holds directory, if any (None for tmpfs and other disk-less file systems)."""
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
    where = ", ".join(d.name for d in disks) or "all disks"
    pid = f", pid {args.pid}" if args.pid else ""
    stop_how = f"for {args.duration:g}s" if args.duration else "until Ctrl-C"
    print(f"Recording block I/O events on {where}{pid} to {args.output} "
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
            timeout = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            session.done.wait(timeout)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                session.stop(f"-w {args.duration:g}s elapsed")
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
        # a second Ctrl-C must not leave the capture without its end record
        while True:
            try:
                session.thread.join()
                break
            except KeyboardInterrupt:
                continue
        if tty:
            sys.stderr.write("\n")
    if st.error is not None:
        if isinstance(st.error, IoscopeError):
            raise st.error
        raise IoscopeError(f"recording failed: {st.error}") from st.error
    elapsed = time.monotonic() - started
    losses = session.rec.losses()
    counts = session.writer.action_counts
    acts = ", ".join(f"{ACTION_LETTERS.get(a, str(a))} {int(n)}" for a, n in enumerate(counts) if n and a)
    nevents, nnotes = int(counts[1:].sum()), int(counts[0])
    print(f"Recorded {nevents:,} events ({acts or 'none'}) and {nnotes} process notes in {elapsed:.1f}s "
          f"to {args.output} ({fmt_bytes(st.bytes, prose=True)}); lost {losses.lost}"
          f"{' (' + losses.describe() + ')' if losses.lost else ''}; stopped: {st.stop_reason or 'end'}.",
          file=sys.stderr)
    if losses.lost:
        print("ioscope record: records were lost; a larger --buffer (e.g. --buffer 256M) or fewer disks (-d) "
              "helps", file=sys.stderr)
    for line in completions_warnings("record", session.check):
        print(line, file=sys.stderr)
    return 0



__all__ = ["HOOKS", "LOSS_EXPLAIN", "Recorder", "RecorderOptions", "add_parser", "capture_lost", "capture_meta",
           "clock_pair", "device_meta", "record_losses", "run"]
