"""Pure model of ioscope fair: one FairSample -> one FairReport. No kernel, no files, no printing."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ioscope.base.cgroups import GONE
from ioscope.base.devices import DiskStats
from ioscope.base.fairness import MIN_VERDICT_BYTES, Balance, Verdict, balance, select_active
from ioscope.base.losses import Losses
from ioscope.engines.context.throttle import HeldBios
from ioscope.engines.procio.model import DiskIO, ProcIO

BUSY_UTIL = 0.5  # a disk with I/O in flight at least half the interval is busy


@dataclass
class ProcRate:
    pid: int
    comm: str
    read: int = 0       # bytes returned by read syscalls
    dev_read: int = 0   # block read bytes queued
    write: int = 0
    dev_write: int = 0
    ra_bytes: int = 0
    reads: int = 0      # read syscalls and async read requests that returned (the read bytes' count)
    writes: int = 0
    cgroup: str = ""    # the process's cgroup (-G, -c; "" when not read)

    def metric(self, op: str, by: str) -> int:
        if op == "read":
            return self.read if by == "app" else self.dev_read
        return self.write if by == "app" else self.dev_write

    def sort_key(self) -> tuple[int, int]:
        return (-(self.read + self.write + self.dev_read + self.dev_write), self.pid)


@dataclass
class DiskState:
    name: str
    util: float                  # fraction of the interval with I/O in flight
    read_bytes: int              # /proc/diskstats
    settings: dict[str, object]  # sysfs queue settings (devices.queue_settings)
    held: list[HeldBios] = field(default_factory=list)  # bios blk-throttle held on it in the interval


@dataclass
class FairSample:
    """What the collector read at one moment."""

    wall: float                            # time.time() of the read
    seconds: float                         # the interval (monotonic clock)
    procs: list[ProcIO]                    # this interval
    cumulative: list[ProcIO]               # since the start
    losses: Losses                         # counters since the previous sample
    diskstats_before: dict[str, DiskStats]
    diskstats_after: dict[str, DiskStats]
    disks: list[str]                       # -d, or [] for the whole disks below that moved
    whole_disks: list[str]                 # every whole disk (not partitions)
    settings: dict[str, dict[str, object]]  # disk -> queue settings
    limits: dict[int, list[str]] = field(default_factory=dict)  # pid -> cgroup I/O limit lines
    per_disk: list[DiskIO] | None = None      # this interval, per process and disk (None: not collected)
    cum_per_disk: list[DiskIO] | None = None  # since the start
    across_disks: bool = False                # one group of every process, whatever disk (--across-disks)
    held: list[HeldBios] = field(default_factory=list)  # bios blk-throttle held in the interval (HeldWatch)
    held_no_wait: str = ""                    # why their wait is not measured here ("" when it is)


@dataclass
class ProcRow:
    """One process in the interval, its rates, and its totals since the start."""

    rate: ProcRate
    cum: ProcRate | None
    read_Bps: float
    dev_read_Bps: float
    write_Bps: float
    dev_write_Bps: float


@dataclass
class Poor:
    """A poor balance of one operation: whether a disk was busy, and what ioscope sees as causes."""

    busy: list[str]
    causes: list[str]


@dataclass
class CgroupBalance:
    """The balance of one operation between cgroups (-G, -c): each cgroup's processes' bytes added up."""

    verdict: Verdict           # its pids: the processes of the cgroups compared
    cgroups: dict[str, float]  # cgroup path -> its bytes of the op, for the cgroups compared


@dataclass
class Group:
    """The processes judged against each other: those that did I/O on one disk (disk: its name), or with
    --across-disks every process whatever its disk (disk None)."""

    disk: str | None
    rows: list[ProcRow]             # the bytes on this disk, the busiest first
    balance: dict[str, Verdict]     # op -> this interval
    cumulative: dict[str, Verdict]  # op -> since the start
    poor: dict[str, Poor]           # op -> verdict, for the ops whose interval balance is poor
    cgroup_balance: dict[str, CgroupBalance] = field(default_factory=dict)  # op -> between cgroups (-G, -c)


@dataclass
class FairReport:
    wall: float
    seconds: float
    by: str
    disks: list[DiskState]
    rows: list[ProcRow]             # every process, all disks together, the busiest first
    groups: list[Group]             # per disk (by name), or one group of every process (--across-disks)
    losses: Losses
    attach: str = ""
    held_no_wait: str = ""          # why the held bios' wait is not measured here ("" when it is)


def per_process(procs: list[ProcIO]) -> dict[int, ProcRate]:
    out: dict[int, ProcRate] = {}
    for p in procs:
        r = out.setdefault(p.pid, ProcRate(p.pid, p.comm, cgroup=p.cgroup))
        if p.op == "read":
            r.read += p.app_bytes
            r.dev_read += p.dev.total
            r.ra_bytes += p.ra_bytes
            r.reads += p.app_ret.count
        else:
            r.write += p.app_bytes
            r.dev_write += p.dev.total
            r.writes += p.app_ret.count
    return out


def balances(rates: dict[int, ProcRate], by: str, min_share: float,
             min_bytes: float = MIN_VERDICT_BYTES) -> dict[str, Verdict]:
    """Per op: the balance over the processes that count, and whether there was enough to judge. A process
    that moved no bytes of the op is never among them, whatever min_share (0 included)."""
    out = {}
    for op in ("read", "write"):
        moved = {pid: float(r.metric(op, by)) for pid, r in rates.items() if r.metric(op, by) > 0}
        active = select_active(moved, min_share)
        if active:
            out[op] = Verdict(op, balance(list(active.values())), sorted(active), min_bytes)
    return out


def cgroup_balances(rates: dict[int, ProcRate], by: str, min_share: float,
                    min_bytes: float = MIN_VERDICT_BYTES) -> dict[str, CgroupBalance]:
    """Per op, the balance between the cgroups whose processes moved bytes of it (their bytes added up,
    the same min_share between cgroups as between processes); empty when no process's cgroup was read.
    A process whose cgroup is not known ([exited]) is in no cgroup's sum."""
    out = {}
    for op in ("read", "write"):
        moved: dict[str, float] = {}
        pids: dict[str, list[int]] = {}
        for pid, r in rates.items():
            if r.cgroup and r.cgroup != GONE and r.metric(op, by) > 0:
                moved[r.cgroup] = moved.get(r.cgroup, 0.0) + r.metric(op, by)
                pids.setdefault(r.cgroup, []).append(pid)
        active = select_active(moved, min_share)
        if active:
            members = sorted(p for cg in active for p in pids[cg])
            out[op] = CgroupBalance(Verdict(op, balance(list(active.values())), members, min_bytes),
                                    dict(sorted(active.items(), key=lambda kv: (-kv[1], kv[0]))))
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


def active_disks(before: dict[str, DiskStats], after: dict[str, DiskStats], whole: Iterable[str]) -> list[str]:
    """The whole disks whose counters moved between the two readings."""
    w = set(whole)
    return [n for n in sorted(after) if n in w and n in before and
            (after[n].sectors_read, after[n].sectors_written, after[n].io_ms) !=
            (before[n].sectors_read, before[n].sectors_written, before[n].io_ms)]


def disk_states(before: dict[str, DiskStats], after: dict[str, DiskStats], names: list[str],
                seconds: float, settings: dict[str, dict[str, object]]) -> list[DiskState]:
    out = []
    for name in names:
        if name not in before or name not in after:
            continue
        b, a = before[name], after[name]
        util = (a.io_ms - b.io_ms) / (seconds * 1000) if seconds > 0 else 0.0
        out.append(DiskState(name, min(util, 1.0), (a.sectors_read - b.sectors_read) * 512,
                             settings.get(name, {})))
    return out


def likely_causes(rates: dict[int, ProcRate], bal: Balance, pids: list[int], disks: list[DiskState],
                  op: str, by: str, limits: dict[int, list[str]] | None = None) -> list[str]:
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
        for lim in (limits or {}).get(pid, []):
            applies = limit_applies(op, lim)
            if applies:
                causes.append(f"pid {pid} ({rates[pid].comm}) is throttled: {applies}")
    busy = [d for d in disks if d.util >= BUSY_UTIL]
    if not busy and disks:
        causes.append("the device was not busy (" + ", ".join(f"{d.name} {d.util:.0%}" for d in disks) +
                      "): the slower processes are limited elsewhere (throttling, CPU, their own pace)")
    return causes


def per_disk_rates(rows: list[DiskIO], comms: dict[int, str],
                   cgroups: dict[int, str] | None = None) -> dict[str, dict[int, ProcRate]]:
    """disk -> pid -> the process's bytes on that disk."""
    out: dict[str, dict[int, ProcRate]] = {}
    cg = cgroups or {}
    for d in rows:
        r = out.setdefault(d.disk, {}).setdefault(d.pid, ProcRate(d.pid, comms.get(d.pid, "?"),
                                                                  cgroup=cg.get(d.pid, "")))
        if d.op == "read":
            r.read += d.app_bytes
            r.dev_read += d.dev_bytes
            r.ra_bytes += d.ra_bytes
            r.reads += d.app_count
        else:
            r.write += d.app_bytes
            r.dev_write += d.dev_bytes
            r.writes += d.app_count
    return out


def build_report(s: FairSample, by: str = "app", min_share: float = 0.01, min_bytes: float = MIN_VERDICT_BYTES,
                 attach: str = "") -> FairReport:
    rates = per_process(s.procs)
    cum = per_process(s.cumulative)
    # only I/O on disks is judged: bytes of files on proc, sysfs, tmpfs and the like (a filesystem with no
    # disk, named by its major:minor) are in the table of processes, never in a balance
    on_disks = None if s.per_disk is None else [d for d in s.per_disk if d.disk in s.whole_disks]
    cum_on_disks = [d for d in s.cum_per_disk or [] if d.disk in s.whole_disks]
    if on_disks is None or s.across_disks:
        names = s.disks or active_disks(s.diskstats_before, s.diskstats_after, s.whole_disks)
    else:  # the disks named, or that moved, and every disk a process did I/O on
        names = sorted(set(s.disks or active_disks(s.diskstats_before, s.diskstats_after, s.whole_disks))
                       | {d.disk for d in on_disks})
    disks = disk_states(s.diskstats_before, s.diskstats_after, names, s.seconds, s.settings)
    for d in disks:
        d.held = [h for h in s.held if h.disk == d.name]

    def per_s(b: int) -> float:
        return b / s.seconds if s.seconds > 0 else 0.0

    def table(rs: dict[int, ProcRate], cs: dict[int, ProcRate]) -> list[ProcRow]:
        return [ProcRow(r, cs.get(r.pid), per_s(r.read), per_s(r.dev_read), per_s(r.write), per_s(r.dev_write))
                for r in sorted(rs.values(), key=ProcRate.sort_key)]

    def group(disk: str | None, rs: dict[int, ProcRate], cs: dict[int, ProcRate], states: list[DiskState]) -> Group:
        bal = balances(rs, by, min_share, min_bytes)
        busy = [d.name for d in states if d.util >= BUSY_UTIL]
        poor = {op: Poor(busy, likely_causes(rs, v.balance, v.pids, states, op, by, s.limits))
                for op, v in bal.items() if v.poor}
        return Group(disk, table(rs, cs), bal, balances(cs, by, min_share, min_bytes), poor,
                     cgroup_balances(rs, by, min_share, min_bytes))

    comms = {p.pid: p.comm for p in [*s.cumulative, *s.procs]}
    cgroups = {p.pid: p.cgroup for p in [*s.cumulative, *s.procs] if p.cgroup}
    if on_disks is None:  # no bytes per disk: every process's bytes
        groups = [group(None, rates, cum, disks)]
    elif s.across_disks:  # every process against every other, with its bytes on all disks together
        def summed(rows: list[DiskIO]) -> dict[int, ProcRate]:
            return per_disk_rates([DiskIO(d.pid, d.op, "", d.app_bytes, d.dev_bytes, d.ra_bytes, d.app_count)
                                   for d in rows], comms, cgroups).get("", {})
        groups = [group(None, summed(on_disks), summed(cum_on_disks), disks)]
    else:
        now, since = per_disk_rates(on_disks, comms, cgroups), per_disk_rates(cum_on_disks, comms, cgroups)
        groups = [group(name, now.get(name, {}), since.get(name, {}), [d for d in disks if d.name == name])
                  for name in sorted(set(now) | set(since))]
    return FairReport(wall=s.wall, seconds=s.seconds, by=by, disks=disks, rows=table(rates, cum), groups=groups,
                      losses=Losses(dict(s.losses.counters), s.losses.loss_names, s.losses.explain), attach=attach,
                      held_no_wait=s.held_no_wait)


__all__ = ["BUSY_UTIL", "CgroupBalance", "DiskState", "FairReport", "FairSample", "Group", "Poor", "ProcRate",
           "ProcRow", "active_disks", "balances", "build_report", "cgroup_balances", "disk_states", "likely_causes",
           "limit_applies", "per_disk_rates", "per_process"]
