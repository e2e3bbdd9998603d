"""ioscope fair: per-process throughput and how evenly it is shared (Jain's index), with likely causes."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ioscope import cli_common, devices, system
from ioscope.cli_common import run_intervals
from ioscope.ra.collect import ProcIO, ReadsizeCollector, ReadsizeOptions, merge_procs
from ioscope.ra.fairness import MIN_VERDICT_BYTES, POOR_JAIN, Balance, Verdict, balance, select_active
from ioscope.render import fmt_bytes

BUSY_UTIL = 0.5  # a disk with I/O in flight at least half the interval is busy

EXAMPLES = """\
examples:
  ioscope fair -d sdb 1            # per-process throughput on sdb and its balance, every second
  ioscope fair -d sdb --by dev 5   # balance of block I/O bytes instead of bytes returned to the readers
  ioscope fair -j 10 6             # JSON lines, six 10 s intervals
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fair", help="per-process throughput and its balance (Jain's index), with likely causes",
                       description="Per-process throughput each interval and cumulatively: bytes returned by "
                                   "read/write syscalls on files and block devices, and block I/O bytes queued "
                                   "by the process. Then the balance across processes: min, max, mean, "
                                   "coefficient of variation, max/min and Jain's fairness index, flagged when "
                                   "poor, with the device settings and the likely causes ioscope can see.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_common.add_disk_pid(p)
    p.add_argument("-c", "--comm", help="only processes with this command name")
    p.add_argument("--by", choices=("app", "dev"), default="app",
                   help="bytes the balance is computed on: app = returned by the syscalls (default), "
                        "dev = block I/O queued by the process")
    p.add_argument("--min-share", type=float, default=0.01,
                   help="ignore processes below this fraction of the busiest one (default 0.01)")
    p.add_argument("--min-bytes", type=cli_common.size_type("--min-bytes"), default=MIN_VERDICT_BYTES, metavar="SIZE",
                   help="judge the balance of an operation only when the processes compared moved at least "
                        "SIZE bytes of it in the interval (default 1M; k, M, G suffixes)")
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per interval")
    cli_common.add_interval_count(p)
    p.set_defaults(func=run, tool="fair")


@dataclass
class ProcRate:
    pid: int
    comm: str
    read: int = 0       # bytes returned by read syscalls
    dev_read: int = 0   # block read bytes queued
    write: int = 0
    dev_write: int = 0
    ra_bytes: int = 0

    def metric(self, op: str, by: str) -> int:
        if op == "read":
            return self.read if by == "app" else self.dev_read
        return self.write if by == "app" else self.dev_write


def per_process(procs: list[ProcIO]) -> dict[int, ProcRate]:
    out: dict[int, ProcRate] = {}
    for p in procs:
        r = out.setdefault(p.pid, ProcRate(p.pid, p.comm))
        if p.op == "read":
            r.read += p.app_bytes
            r.dev_read += p.dev.total
            r.ra_bytes += p.ra_bytes
        else:
            r.write += p.app_bytes
            r.dev_write += p.dev.total
    return out


def balances(rates: dict[int, ProcRate], by: str, min_share: float,
             min_bytes: float = MIN_VERDICT_BYTES) -> dict[str, Verdict]:
    """Per op: the balance over the processes that count, and whether there was enough to judge."""
    out = {}
    for op in ("read", "write"):
        active = select_active({pid: float(r.metric(op, by)) for pid, r in rates.items()}, min_share)
        if active:
            out[op] = Verdict(op, balance(list(active.values())), sorted(active), min_bytes)
    return out


def limit_applies(op: str, limit: str) -> str | None:
    """The part of a cgroup limit line (as blkio_limits() returns it) that throttles op, or None.

    cgroup v1 files name their direction (read_bps_device, write_iops_device); a v2 io.max line
    holds both (rbps=... wbps=... riops=... wiops=...), where 'max' means no limit."""
    words = limit.split()
    if len(words) < 3:
        return None
    kind = words[2]
    if kind != "io.max":
        return limit if kind.startswith(op) else None
    keys = ("rbps=", "riops=") if op == "read" else ("wbps=", "wiops=")
    kept = [w for w in words[4:] if w.startswith(keys) and not w.endswith("=max")]
    return " ".join([*words[:4], *kept]) if kept else None


def blkio_limits(pid: int, proc_root: str = "/proc", cg_root: str = "/sys/fs/cgroup") -> list[str]:
    """Block I/O throttling that applies to a process (cgroup v1 blkio, cgroup v2 io.max)."""
    out: list[str] = []
    try:
        lines = Path(proc_root, str(pid), "cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        rel = path.lstrip("/")
        if "blkio" in ctrls.split(",") and rel:
            for f in ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                      "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"):
                try:
                    for v in Path(cg_root, "blkio", rel, f).read_text().split("\n"):
                        if v.strip():
                            out.append(f"cgroup {path} {f.split('.')[-1]} {v.strip()}")
                except OSError:
                    pass
        if ctrls == "" and rel:
            for base in (Path(cg_root, "unified"), Path(cg_root)):
                try:
                    for v in (base / rel / "io.max").read_text().splitlines():
                        if v.strip():
                            out.append(f"cgroup {path} io.max {v.strip()}")
                    break
                except OSError:
                    continue
    return out


@dataclass
class DiskState:
    name: str
    util: float
    read_bytes: int
    settings: dict[str, object]

    def to_json(self) -> dict[str, object]:
        return {"disk": self.name, "util": round(self.util, 4), "read_bytes": self.read_bytes, **self.settings}


def disk_states(before: dict[str, devices.DiskStats], after: dict[str, devices.DiskStats], names: list[str],
                seconds: float) -> list[DiskState]:
    out = []
    for name in names:
        if name not in before or name not in after:
            continue
        b, a = before[name], after[name]
        util = (a.io_ms - b.io_ms) / (seconds * 1000) if seconds > 0 else 0.0
        out.append(DiskState(name, min(util, 1.0), (a.sectors_read - b.sectors_read) * 512,
                             devices.queue_settings(name)))
    return out


def likely_causes(rates: dict[int, ProcRate], bal: Balance, pids: list[int], disks: list[DiskState],
                  op: str, by: str) -> list[str]:
    causes: list[str] = []
    total_dev = sum(r.dev_read if op == "read" else r.dev_write for r in rates.values())
    if total_dev:
        top = max(rates.values(), key=lambda r: r.dev_read if op == "read" else r.dev_write)
        share = (top.dev_read if op == "read" else top.dev_write) / total_dev
        if len(pids) >= 2 and share >= max(0.5, 2.0 / len(pids)):
            causes.append(f"one process holds the queue: pid {top.pid} ({top.comm}) queued {share:.0%} of the "
                          f"device {op} bytes")
    if op == "read":
        dev_read = sum(r.dev_read for r in rates.values())
        ra = sum(r.ra_bytes for r in rates.values())
        app_read = sum(rates[p].read for p in pids)
        dev_counted = sum(rates[p].dev_read for p in pids)
        if app_read and dev_counted > 1.5 * app_read and ra >= 0.5 * dev_read:
            causes.append(f"the device read {dev_counted / app_read:.1f}x what these processes got, nearly all of "
                          "it readahead: pages read ahead are evicted before use (too large a window for "
                          "the memory and the number of streams); see ioscope readahead for wasted pages")
        for d in disks:
            ra_kb = d.settings.get("read_ahead_kb")
            nr = d.settings.get("nr_requests")
            mx = d.settings.get("max_sectors_kb")
            if not isinstance(ra_kb, int) or not isinstance(nr, int) or not isinstance(mx, int):
                continue
            want = ra_kb * len(pids)
            room = nr * mx
            if dev_read and ra / dev_read >= 0.5 and want > room:
                causes.append(f"readahead window per stream against concurrency: {len(pids)} streams x "
                              f"read_ahead_kb={ra_kb} = {want // 1024} MiB of readahead, more than {d.name}'s "
                              f"queue holds (nr_requests={nr} x max_sectors_kb={mx} = {room // 1024} MiB); "
                              "streams whose window is queued run ahead while the others wait: lower read_ahead_kb")
    for pid in pids:
        for lim in blkio_limits(pid):
            applies = limit_applies(op, lim)
            if applies:
                causes.append(f"pid {pid} ({rates[pid].comm}) is throttled: {applies}")
    busy = [d for d in disks if d.util >= BUSY_UTIL]
    if not busy and disks:
        causes.append("the device was not busy (" + ", ".join(f"{d.name} {d.util:.0%}" for d in disks) +
                      "): the slower processes are limited elsewhere (throttling, CPU, their own pace)")
    return causes


def run(args: argparse.Namespace) -> int:
    system.require_bpf_privileges("fair")
    btf = system.btf_path(args.btf)
    if not 0 <= args.min_share < 1:
        from ioscope.errors import UsageError
        raise UsageError(f"--min-share must be in [0, 1), not {args.min_share}")
    disks = [devices.resolve_disk(d) for d in args.disk or []]
    opts = ReadsizeOptions(disks=disks, pid=args.pid, comm=args.comm, writes=True, btf=btf)
    collector = ReadsizeCollector(opts)
    attach = collector.bpf.variant_summary()
    cumulative: dict[tuple[int, str], ProcIO] = {}
    state = _State(devices.read_diskstats(), time.monotonic(), time.monotonic())

    def emit(started: float, reset: bool, final: bool) -> None:
        now_wall, now = time.time(), time.monotonic()
        procs = collector.read(reset=reset)
        lost, counters = collector.losses(since_last=True)
        stats = devices.read_diskstats()
        t0 = state.t0 if reset else state.start
        seconds = now - t0
        if reset:
            merge_procs(cumulative, procs)
            cum = list(cumulative.values())
        else:
            cum = procs
        names = [d.name for d in disks] or _active_disks(state.stats, stats)
        dstates = disk_states(state.stats, stats, names, seconds)
        state.stats, state.t0 = stats, now
        rates = per_process(procs)
        cum_rates = per_process(cum)
        bal = balances(rates, args.by, args.min_share, args.min_bytes)
        cum_bal = balances(cum_rates, args.by, args.min_share, args.min_bytes)
        verdicts = {}
        for op, v in bal.items():
            if v.poor:
                verdicts[op] = likely_causes(rates, v.balance, v.pids, dstates, op, args.by)
        if lost:
            print(f"ioscope fair: lost {lost} values ({counters})", file=sys.stderr)
        if args.json:
            doc = {
                "time": cli_common.iso_time(now_wall), "interval_s": round(seconds, 6), "by": args.by,
                "lost": lost, "lost_detail": counters, "attach": attach,
                "devices": [d.to_json() for d in dstates],
                "procs": [_proc_json(r, cum_rates.get(r.pid), seconds) for r in _sorted(rates)],
                "balance": {op: v.to_json() for op, v in bal.items()},
                "cumulative_balance": {op: v.to_json() for op, v in cum_bal.items()},
                "poor": {op: {"busy": any(d.util >= BUSY_UTIL for d in dstates), "causes": c}
                         for op, c in verdicts.items()},
            }
            print(json.dumps(doc), flush=True)
            return
        out = cli_common.console()
        for line in render_text(rates, cum_rates, bal, cum_bal, verdicts, dstates, seconds, args.by, lost,
                                cli_common.iso_time(now_wall)):
            out.print(line, highlight=False)
        out.print()

    where = ", ".join(d.name for d in disks) or "all disks"
    try:
        return run_intervals("fair", f"per-process throughput on {where} ({attach})", args.interval, args.count,
                             emit, collector.unavailable)
    finally:
        collector.close()


@dataclass
class _State:
    stats: dict[str, devices.DiskStats]
    t0: float
    start: float


def _active_disks(before: dict[str, devices.DiskStats], after: dict[str, devices.DiskStats]) -> list[str]:
    whole = {d.name for d in devices.list_disks()}
    return [n for n in sorted(after) if n in whole and n in before and
            (after[n].sectors_read, after[n].sectors_written, after[n].io_ms) !=
            (before[n].sectors_read, before[n].sectors_written, before[n].io_ms)]


def _sorted(rates: dict[int, ProcRate]) -> list[ProcRate]:
    return sorted(rates.values(), key=lambda r: (-(r.read + r.write + r.dev_read + r.dev_write), r.pid))


def _proc_json(r: ProcRate, cum: ProcRate | None, seconds: float) -> dict[str, object]:
    def rate(b: int) -> float:
        return round(b / seconds, 1) if seconds > 0 else 0.0

    doc: dict[str, object] = {
        "pid": r.pid, "comm": r.comm, "read_bytes": r.read, "dev_read_bytes": r.dev_read,
        "write_bytes": r.write, "dev_write_bytes": r.dev_write, "ra_bytes": r.ra_bytes,
        "read_Bps": rate(r.read), "dev_read_Bps": rate(r.dev_read),
        "write_Bps": rate(r.write), "dev_write_Bps": rate(r.dev_write),
    }
    if cum is not None:
        doc.update({"cum_read_bytes": cum.read, "cum_dev_read_bytes": cum.dev_read, "cum_write_bytes": cum.write,
                    "cum_dev_write_bytes": cum.dev_write})
    return doc


def _bal_line(v: Verdict, by: str, seconds: float, label: str) -> str:
    b, op = v.balance, v.op
    if b.n < 2:
        return f"{label} {op}: one active process, no balance to compute"
    def per_s(x: float) -> str:
        return fmt_bytes(x / seconds) + "B/s" if seconds > 0 else fmt_bytes(x) + "B"

    mm = "inf" if b.max_min == float("inf") else f"{b.max_min:.2f}"
    if not v.enough:
        flag = (f"  too little {op} I/O to judge ({fmt_bytes(b.total)}B, under --min-bytes "
                f"{fmt_bytes(v.min_bytes)}B)")
    else:
        flag = f"  POOR (Jain < {POOR_JAIN})" if v.poor else ""
    return (f"{label} {op} balance over {b.n} processes ({by} bytes): min {per_s(b.min)} max {per_s(b.max)} "
            f"mean {per_s(b.mean)} cv {b.cv:.2f} max/min {mm} Jain {b.jain:.3f}{flag}")


def render_text(rates: dict[int, ProcRate], cum_rates: dict[int, ProcRate],
                bal: dict[str, Verdict], cum_bal: dict[str, Verdict],
                verdicts: dict[str, list[str]], disks: list[DiskState], seconds: float, by: str, lost: int,
                when: str) -> list[str]:
    out = [f"{when}  interval {seconds:.3f}s  lost {lost}"]
    for d in disks:
        s = d.settings
        out.append(f"{d.name}: busy {d.util:.0%}  read_ahead_kb={s.get('read_ahead_kb')} "
                   f"scheduler={s.get('scheduler')} nr_requests={s.get('nr_requests')} "
                   f"max_sectors_kb={s.get('max_sectors_kb')}")
    if not rates:
        out.append("no file I/O or block I/O in this interval")
        return out
    sec = seconds if seconds > 0 else 1.0
    out.append(f"{'PID':>7} {'COMM':<16} {'READ/s':>8} {'DEVRD/s':>8} {'WRITE/s':>8} {'DEVWR/s':>8} "
               f"{'CUM_READ':>9} {'CUM_DEVRD':>9}")
    for r in _sorted(rates):
        c = cum_rates.get(r.pid, r)
        out.append(f"{r.pid:>7} {r.comm[:16]:<16} {fmt_bytes(r.read / sec):>8} {fmt_bytes(r.dev_read / sec):>8} "
                   f"{fmt_bytes(r.write / sec):>8} {fmt_bytes(r.dev_write / sec):>8} "
                   f"{fmt_bytes(c.read):>9} {fmt_bytes(c.dev_read):>9}")
    for op, v in bal.items():
        out.append(_bal_line(v, by, seconds, "interval"))
        busy = [d for d in disks if d.util >= BUSY_UTIL]
        if op in verdicts:
            if busy:
                out.append(f"  poor balance while {', '.join(d.name for d in busy)} "
                           f"{'was' if len(busy) == 1 else 'were'} busy; likely causes:")
            else:
                out.append("  likely causes:")
            out += [f"  - {c}" for c in verdicts[op]] or ["  - none ioscope can see"]
    if cum_bal is not bal:
        for v in cum_bal.values():
            out.append(_bal_line(v, by, 0, "cumulative"))
    return out


__all__ = ["add_parser", "balances", "blkio_limits", "likely_causes", "limit_applies", "per_process", "render_text",
           "run"]
