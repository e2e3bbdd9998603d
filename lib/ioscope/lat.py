"""ioscope lat: block I/O latency histograms (q2c, q2d, d2c), aggregated in the kernel."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ioscope import abi, cli_common, devices, system
from ioscope.hist import Hist
from ioscope.loader import BPFObject
from ioscope.render import HistView

PHASE_TITLES = {
    "q2c": "queue to completion (total)",
    "q2d": "queue to issue (scheduler and queueing)",
    "d2c": "issue to completion (device)",
}
STALE_NS = 120 * 1_000_000_000  # a bio unfinished after 2 minutes is dropped and counted
SWEEP_EVERY_S = 10
HIST_MAX_ENTRIES = 1024
HIST_MAX_ENTRIES_PER_PID = 16384


@dataclass
class LatOptions:
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    per_disk: bool = False
    per_op: bool = False
    per_pid: bool = False
    phases: tuple[str, ...] = ("q2c", "q2d", "d2c")
    btf: str | None = None


@dataclass
class LatHist:
    dev: int  # kernel dev_t, 0 = all disks
    disk: str
    op: str
    pid: int | None
    comm: str | None
    phase: str
    hist: Hist

    def to_json(self) -> dict[str, object]:
        h = self.hist
        p = h.percentiles((50, 90, 99, 99.9))
        ma, mi = devices.kdev_split(self.dev)
        return {
            "disk": self.disk, "dev": f"{ma}:{mi}" if self.dev else "all", "op": self.op,
            "pid": self.pid, "comm": self.comm, "phase": self.phase, "unit": "ns",
            "count": h.count, "sum": h.total, "min": h.min, "max": h.max,
            "p50": round(p[50], 1), "p90": round(p[90], 1), "p99": round(p[99], 1), "p999": round(p[99.9], 1),
            "buckets": [list(b) for b in h.nonzero_buckets()],
        }


@dataclass
class Losses:
    """Everything that did not make it into a histogram, plus explanations."""

    counters: dict[str, int]
    recursion_misses: int

    @property
    def lost(self) -> int:
        lost_names = [abi.STAT_NAMES[i] for i in range(abi.NR_LOST_STATS)]
        return sum(self.counters.get(n, 0) for n in lost_names) + self.recursion_misses

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in self.counters.items() if v and k in
                 {abi.STAT_NAMES[i] for i in range(abi.NR_LOST_STATS)}]
        if self.recursion_misses:
            parts.append(f"recursion_misses {self.recursion_misses}")
        return ", ".join(parts)


class LatCollector:
    """Owns the lat BPF object; read() returns the histograms since the last read."""

    def __init__(self, opts: LatOptions) -> None:
        self.opts = opts
        self.names = devices.DevNames()
        self.bpf = BPFObject("lat", btf=opts.btf)
        self._stale = 0
        self._last_stats = np.zeros(abi.NR_STATS, dtype=np.uint64)
        self._last_misses = 0
        names = [d.name for d in opts.disks] or [d.name for d in devices.list_disks()]
        self.cross_disks = [n for n in names if devices.is_mq(n)]
        self._last_kernel = self._kernel_counts()
        try:
            self._setup()
        except BaseException:
            self.bpf.close()
            raise

    def _setup(self) -> None:
        o, b = self.opts, self.bpf
        b.choose(required=["bio_queue", "rq_issue", "rq_complete"], optional=["split", "task_rename"])
        b.set_global("targ_per_disk", o.per_disk, "?")
        b.set_global("targ_per_op", o.per_op, "?")
        b.set_global("targ_per_pid", o.per_pid, "?")
        b.filter_disks(d.dev for d in o.disks)
        b.set_global("targ_tgid", o.pid or 0, "I")
        mask = sum(1 << abi.PHASES[p] for p in o.phases)
        b.set_global("targ_phases", mask, "B")
        if o.per_pid:
            # per-CPU values for thousands of keys would cost ncpus x 7.4 KiB each
            from ioscope import _libbpf
            b.set_map_type("hists", _libbpf.MAP_TYPE_HASH)
            b.set_global("targ_shared_hists", True, "?")
            b.set_max_entries("hists", HIST_MAX_ENTRIES_PER_PID)
        else:
            b.set_max_entries("hists", HIST_MAX_ENTRIES)
        b.load()
        self.hists = b.map("hists")
        self.stats = b.map("stats")
        self.inflight = b.map("inflight")
        self.comms = b.map("comms")
        b.attach()

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def read(self, reset: bool) -> list[LatHist]:
        """Histograms since the last reset; reset=True empties them atomically per key."""
        keys_b, vals_b, n = self.hists.dump(sum=False, delete=reset)
        keys = np.frombuffer(keys_b, dtype=abi.LAT_KEY, count=n)
        vals = abi.combine_percpu_hists(vals_b, n, self.hists.ncpus, per_value=abi.NR_PHASES)
        comms: dict[int, str] = {}
        if self.opts.per_pid and n:
            ck, cv, cn = self.comms.dump()
            pids = np.frombuffer(ck, dtype=np.uint32, count=cn)
            raw = np.frombuffer(cv, dtype="S16", count=cn)
            comms = {int(p): c.split(b"\0")[0].decode(errors="replace") for p, c in zip(pids, raw)}
        out = []
        for k, phases in zip(keys, vals):
            dev = int(k["dev"])
            pid = int(k["pid"]) if self.opts.per_pid else None
            for phase, h in zip(abi.PHASES, abi.hists_from_array(phases)):
                if phase not in self.opts.phases or not h.count:
                    continue
                out.append(LatHist(
                    dev=dev,
                    disk=self.names.name(dev) if dev else "all",
                    op=abi.OP_NAMES.get(int(k["op"]), "other"),
                    pid=pid,
                    comm=(comms.get(pid, "[unknown]") if pid else "[kernel]") if pid is not None else None,
                    phase=phase,
                    hist=h,
                ))
        out.sort(key=lambda x: (x.disk, x.op, x.pid or 0, list(abi.PHASES).index(x.phase)))
        return out

    def _slots(self) -> tuple[np.ndarray, np.ndarray]:
        """(slot indexes, slots) of the bios in flight in the kernel's slot table."""
        kb, vb, n = self.inflight.dump(sum=False)
        keys = np.frombuffer(kb, dtype=np.uint32, count=n)
        vals = np.frombuffer(vb, dtype=abi.BIO_SLOT, count=n)
        used = vals["bio"] != 0
        return keys[used], vals[used]

    def sweep_stale(self) -> None:
        """Free slots older than STALE_NS (I/O whose completion will never be seen)."""
        keys, vals = self._slots()
        now = time.monotonic_ns()
        ts = np.maximum(vals["q_ns"], vals["d_ns"]).astype(np.int64)
        old = keys[(ts > 0) & (now - ts > STALE_NS)]
        empty = np.zeros(1, dtype=abi.BIO_SLOT).tobytes()
        for k in old:
            self.inflight.update(k.tobytes(), empty)
        self._stale += len(old)

    def losses(self, since_last: bool) -> Losses:
        raw = self.stats.dump(sum=True)
        vals = np.frombuffer(raw[1], dtype=np.uint64, count=raw[2])
        cur = np.zeros(abi.NR_STATS, dtype=np.uint64)
        cur[: len(vals)] = vals
        misses = self.bpf.recursion_misses()
        if since_last:
            delta, dmiss = cur - self._last_stats, misses - self._last_misses
            self._last_stats, self._last_misses = cur, misses
        else:
            delta, dmiss = cur, misses
        counters = {abi.STAT_NAMES[i]: int(delta[i]) for i in abi.STAT_NAMES if i < abi.NR_STATS}
        counters["stale"] = self._stale
        counters["issued_not_completed"] = self.issued_pending()
        return Losses(counters, dmiss)

    def issued_pending(self) -> int:
        """Bios issued to the driver whose completion has not reached us (yet): a gauge.

        When no I/O is in flight any more, these are completions the kernel finished without
        running the block_rq_complete programs (see docs/lat.md, "Completions the kernel does
        not report"); together with completion_unseen they account for every such I/O.
        """
        _keys, vals = self._slots()
        return int(np.count_nonzero(vals["d_ns"]))

    def _kernel_counts(self) -> dict[str, int]:
        stats = devices.read_diskstats()
        return {n: devices.completed_requests(stats[n]) for n in self.cross_disks if n in stats}

    def kernel_in_flight(self) -> int:
        """Requests the kernel has in flight now on the traced blk-mq disks (/proc/diskstats)."""
        stats = devices.read_diskstats()
        return sum(stats[n].in_flight for n in self.cross_disks if n in stats)

    def kernel_completed(self, since_last: bool) -> dict[str, int]:
        """Requests the kernel completed on the traced blk-mq disks (from /proc/diskstats)."""
        cur = self._kernel_counts()
        delta = {n: v - self._last_kernel.get(n, v) for n, v in cur.items()}
        if since_last:
            self._last_kernel = cur
        return delta

    def close(self) -> None:
        self.bpf.close()


# -- command line ---------------------------------------------------------

EXAMPLES = """\
examples:
  ioscope lat                  # q2c/q2d/d2c histograms for all disks until Ctrl-C
  ioscope lat 1 10             # print every second, 10 times
  ioscope lat -d loop0 -F      # one disk, one histogram per operation
  ioscope lat -D -m            # per disk, values in milliseconds
  ioscope lat -P -p 1234       # only I/O queued by process 1234, per process
  ioscope lat --phase d2c -j 5 # device time only, JSON lines every 5 s
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lat", help="block I/O latency histograms: q2c, q2d, d2c",
                       description="Block I/O latency histograms aggregated in the kernel: q2c (bio queued to "
                                   "completion), q2d (queued to issue: scheduler and queueing) and d2c "
                                   "(issue to completion: the device).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_common.add_disk_pid(p)
    p.add_argument("-D", "--disks", action="store_true", help="one histogram per disk")
    p.add_argument("-F", "--flags", action="store_true", help="one histogram per operation (read, write, ...)")
    p.add_argument("-P", "--pids", action="store_true", help="one histogram per submitting process")
    p.add_argument("-m", "--milliseconds", action="store_true", help="print values in milliseconds")
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per interval")
    p.add_argument("--phase", default="q2c,q2d,d2c", type=cli_common.phases_type,
                   help="phases to measure, comma separated (default: q2c,q2d,d2c)")
    p.add_argument("--fine", action="store_true", help="show every log-linear bucket, not powers of two")
    cli_common.add_interval_count(p)
    p.set_defaults(func=run, tool="lat")


def run(args: argparse.Namespace) -> int:
    system.require_bpf_privileges("lat")
    btf = system.btf_path(args.btf)
    opts = LatOptions(
        disks=[devices.resolve_disk(d) for d in args.disk or []],
        pid=args.pid, per_disk=args.disks, per_op=args.flags, per_pid=args.pids,
        phases=tuple(args.phase), btf=btf,
    )
    collector = LatCollector(opts)
    try:
        return _loop(collector, args)
    finally:
        collector.close()


def _emit(collector: LatCollector, args: argparse.Namespace, started: float, reset: bool) -> None:
    now = time.time()
    hists = collector.read(reset=reset)
    losses = collector.losses(since_last=True)
    kernel = collector.kernel_completed(since_last=reset)
    # bios issued and still waiting for a completion, beyond what the kernel has in flight:
    # completions the kernel finished without running our programs (docs/lat.md)
    pending = losses.counters["issued_not_completed"]
    unreported = max(0, pending - collector.kernel_in_flight()) if pending and args.pid is None else 0
    if not reset and unreported:  # the final report: nothing more can arrive, they are lost
        losses.counters["completion_unseen"] += unreported
        losses.counters["issued_not_completed"] -= unreported
    if losses.lost:
        print(f"ioscope lat: lost {losses.lost} values ({losses.describe()})", file=sys.stderr)
    timed = sum(h.hist.count for h in hists if h.phase == "d2c")
    if args.json:
        doc = {
            "time": cli_common.iso_time(now), "interval_s": round(now - started, 6), "lost": losses.lost,
            "lost_detail": {k: v for k, v in losses.counters.items()} | {"recursion_misses": losses.recursion_misses},
            "attach": collector.bpf.variant_summary(),
            "kernel_completed": kernel,
            "completions_unreported": unreported,
            "hists": [h.to_json() for h in hists],
        }
        print(json.dumps(doc), flush=True)
        return
    unit = "ms" if args.milliseconds else None
    out = cli_common.console()
    out.print(f"[dim]{cli_common.iso_time(now)}  interval {now - started:.3f}s  lost {losses.lost}[/dim]",
              highlight=False)
    if not hists:
        out.print("no block I/O completed on the traced disks", highlight=False)
    for h in hists:
        title = f"{h.phase}: {PHASE_TITLES[h.phase]}"
        tags = []
        if args.disks:
            tags.append(f"disk {h.disk}")
        if args.flags:
            tags.append(f"op {h.op}")
        if args.pids:
            tags.append(f"pid {h.pid} ({h.comm})")
        if tags:
            title += "  [" + ", ".join(tags) + "]"
        out.print(HistView(title, h.hist, fine=args.fine, unit=unit))
        out.print()
    if "d2c" in args.phase and args.pid is None and kernel:
        out.print(f"[dim]cross-check: the kernel completed {sum(kernel.values())} requests on "
                  f"{', '.join(kernel)}; ioscope timed {timed} (d2c)[/dim]", highlight=False)
    if unreported:
        out.print(f"[yellow]{unreported} issued requests completed without the kernel reporting the completion "
                  f"to BPF programs: not timed, counted as lost (see docs/lat.md)[/yellow]", highlight=False)
    inflight = losses.counters.get("inflight_at_start", 0)
    if inflight:
        out.print(f"[dim]{inflight} requests were queued before tracing started: counted in d2c only[/dim]",
                  highlight=False)


def _loop(collector: LatCollector, args: argparse.Namespace) -> int:
    where = ", ".join(d.name for d in collector.opts.disks) or "all disks"

    def emit(start: float, reset: bool, final: bool) -> None:
        _emit(collector, args, start, reset)

    return cli_common.run_intervals("lat", f"block I/O latency on {where} ({collector.bpf.variant_summary()})",
                                    args.interval, args.count, emit, collector.unavailable,
                                    tick=collector.sweep_stale, tick_every=SWEEP_EVERY_S)


def main(argv: Sequence[str] | None = None) -> int:
    from ioscope.cli import main as cli_main
    return cli_main(["lat", *(argv if argv is not None else sys.argv[1:])])


__all__ = ["LatCollector", "LatHist", "LatOptions", "add_parser", "main", "run"]

