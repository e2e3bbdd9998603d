"""Pure model of ioscope readsize: one ReadsizeSample -> one ReadsizeReport. No kernel, no files."""

from __future__ import annotations

from dataclasses import dataclass

from ioscope.base.hist import Hist
from ioscope.base.losses import Losses


@dataclass
class ProcIO:
    """One process, one direction (read or write), over an interval."""

    pid: int
    comm: str
    op: str
    app_req: Hist    # sizes asked for (read/write syscalls, libaio and io_uring requests)
    app_ret: Hist    # sizes returned
    dev: Hist        # bios queued by the process
    app_errors: int = 0
    app_short: int = 0
    ra_count: int = 0
    ra_bytes: int = 0
    cgroup: str = ""  # the process's cgroup (-G, -c; "" when not read)

    @property
    def app_bytes(self) -> int:
        """Bytes the syscalls returned to the application."""
        return self.app_ret.total

    @property
    def amplification(self) -> float | None:
        """Device bytes per application byte (None when the application got nothing)."""
        return self.dev.total / self.app_bytes if self.app_bytes else None

    @property
    def size_ratio(self) -> float | None:
        """Average device request size over average application request size."""
        if not self.dev.count or not self.app_req.count or not self.app_req.mean:
            return None
        return self.dev.mean / self.app_req.mean

    def merge(self, other: ProcIO) -> ProcIO:
        return ProcIO(self.pid, other.comm or self.comm, self.op, self.app_req.merge(other.app_req),
                      self.app_ret.merge(other.app_ret), self.dev.merge(other.dev),
                      self.app_errors + other.app_errors, self.app_short + other.app_short,
                      self.ra_count + other.ra_count, self.ra_bytes + other.ra_bytes, other.cgroup or self.cgroup)

    def sort_key(self) -> tuple[str, int, int]:
        return (self.op, -(self.dev.total + self.app_bytes), self.pid)


@dataclass
class DiskIO:
    """One process, one direction, one disk over an interval: the bytes fair groups by disk."""

    pid: int
    op: str
    disk: str
    app_bytes: int = 0  # returned by syscalls and async requests on files of this disk
    dev_bytes: int = 0  # bios the process queued on it
    ra_bytes: int = 0   # of which readahead
    app_count: int = 0  # the syscalls and async requests that returned app_bytes

    def merge(self, other: DiskIO) -> DiskIO:
        return DiskIO(self.pid, self.op, self.disk, self.app_bytes + other.app_bytes,
                      self.dev_bytes + other.dev_bytes, self.ra_bytes + other.ra_bytes,
                      self.app_count + other.app_count)


@dataclass
class DevRequests:
    """Requests issued to the driver on one disk in one direction (after merging and splitting)."""

    disk: str
    op: str
    sizes: Hist
    max_sectors_kb: object = None  # the disk's queue setting that caps them (sysfs), "?" if unknown


@dataclass
class ReadsizeSample:
    """What the collector read at one moment."""

    wall: float               # time.time() of the read
    started: float            # wall time the interval began
    procs: list[ProcIO]
    requests: list[DevRequests]
    losses: Losses            # counters since the previous sample


@dataclass
class ReadsizeReport:
    wall: float
    interval_s: float
    procs: list[ProcIO]          # busiest first within each direction
    requests: list[DevRequests]  # by disk, then direction
    losses: Losses
    attach: str = ""


def merge_procs(acc: dict[tuple[int, str], ProcIO], procs: list[ProcIO]) -> None:
    """Add an interval's per-process values into running totals keyed by (pid, op)."""
    for p in procs:
        key = (p.pid, p.op)
        acc[key] = acc[key].merge(p) if key in acc else p


def build_report(s: ReadsizeSample, attach: str = "") -> ReadsizeReport:
    return ReadsizeReport(
        wall=s.wall, interval_s=s.wall - s.started,
        procs=sorted(s.procs, key=ProcIO.sort_key),
        requests=sorted(s.requests, key=lambda r: (r.disk, r.op)),
        losses=Losses(dict(s.losses.counters), s.losses.loss_names, s.losses.explain),
        attach=attach,
    )


__all__ = ["DevRequests", "DiskIO", "ProcIO", "ReadsizeReport", "ReadsizeSample", "build_report", "merge_procs"]
