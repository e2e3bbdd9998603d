"""Pure model of ioscope readahead: one RaSample -> one RaReport. No kernel, no files, no printing."""

from __future__ import annotations

from dataclasses import dataclass, field

from ioscope.base.hist import Hist
from ioscope.base.losses import Losses
from ioscope.engines.procio import abi

PAGE = 4096
FATES = ("pages", "used", "wasted", "cached", "untracked")


@dataclass
class RaFile:
    """Readahead on one file by one process (cumulative since the start)."""

    pid: int
    comm: str
    dev: int
    ino: int
    decisions: dict[str, int]
    window_pages: dict[str, int]
    max_ra_pages: int
    max_window: int
    pages: int
    used: int
    wasted: int
    cached: int
    untracked: int
    path: str | None = None

    @property
    def efficiency(self) -> float | None:
        return self.used / self.pages if self.pages else None

    def sort_key(self) -> tuple[int, int, int, int]:
        return (-self.pages, self.pid, self.dev, self.ino)


@dataclass
class DevInfo:
    """What sysfs says of a file system's device (None for anonymous devices: btrfs, overlay, tmpfs)."""

    disk: str | None
    read_ahead_kb: int | None


@dataclass
class RaSample:
    """What the collector read at one moment: totals since the start."""

    wall: float
    started: float
    files: list[RaFile]
    hists: list[Hist]            # indexed by abi.RA_H_*
    losses: Losses               # since the start
    devices: dict[int, DevInfo]  # dev_t -> sysfs
    missing: list[str] = field(default_factory=list)  # what this kernel's missing tracepoints cost
    functions: dict[str, str] = field(default_factory=dict)  # hook -> kernel function (fentry) instead
    range_max: int = 4096  # pages of one read range checked for use


@dataclass
class DeviceRow:
    """Per file system device: read_ahead_kb from sysfs next to the limit and windows the kernel used."""

    dev: int
    disk: str | None
    read_ahead_kb: int | None
    max_ra_pages_seen: int
    largest_window_pages: int

    @property
    def ra_kb_used(self) -> int:
        return self.max_ra_pages_seen * PAGE // 1024

    @property
    def largest_window_kb(self) -> int:
        return self.largest_window_pages * PAGE // 1024


@dataclass
class Windows:
    """The windows of one kind of decision (sync, async, other), in pages."""

    size: Hist
    async_size: Hist
    ra_pages: Hist


@dataclass
class RaReport:
    wall: float
    elapsed_s: float
    files: list[RaFile]             # the most pages read ahead first
    devices: list[DeviceRow]
    decisions: dict[str, int]       # kind -> count
    windows: dict[str, Windows]     # kind -> window histograms
    req_count: Hist
    age: Hist                       # ns from being read ahead to first use
    age_pcts: dict[float, float]    # 50, 90, 99 -> ns
    totals: dict[str, int]          # FATES -> pages
    losses: Losses
    missing: list[str]
    attach: str = ""
    functions: dict[str, str] = field(default_factory=dict)
    range_max: int = 4096

    @property
    def efficiency(self) -> float | None:
        """Of the pages read ahead, the share that was read."""
        return self.totals["used"] / self.totals["pages"] if self.totals["pages"] else None

    @property
    def settled_efficiency(self) -> float | None:
        """Of the pages whose fate is known (used or wasted), the share that was read."""
        settled = self.totals["used"] + self.totals["wasted"]
        return self.totals["used"] / settled if settled else None

    @property
    def truncated_reads(self) -> int:
        return self.losses.counters.get("read_range_truncated", 0)


def device_rows(files: list[RaFile], info: dict[int, DevInfo]) -> list[DeviceRow]:
    by_dev: dict[int, list[RaFile]] = {}
    for f in files:
        by_dev.setdefault(f.dev, []).append(f)
    out = []
    for dev, fs in sorted(by_dev.items()):
        i = info.get(dev, DevInfo(None, None))
        out.append(DeviceRow(dev, i.disk, i.read_ahead_kb, max(f.max_ra_pages for f in fs),
                             max(f.max_window for f in fs)))
    return out


def build_report(s: RaSample, attach: str = "") -> RaReport:
    def window(kind: int, what: int) -> Hist:
        return s.hists[kind * abi.RA_H_PER_KIND + what]

    age = s.hists[abi.RA_H_AGE]
    return RaReport(
        wall=s.wall, elapsed_s=s.wall - s.started,
        files=sorted(s.files, key=RaFile.sort_key),
        devices=device_rows(s.files, s.devices),
        decisions={name: sum(f.decisions[name] for f in s.files) for name in abi.RA_KIND_NAMES.values()},
        windows={name: Windows(window(kind, abi.RA_H_SIZE), window(kind, abi.RA_H_ASYNC),
                               window(kind, abi.RA_H_RA_PAGES))
                 for kind, name in abi.RA_KIND_NAMES.items()},
        req_count=s.hists[abi.RA_H_REQ], age=age,
        age_pcts=age.percentiles((50, 90, 99)) if age.count else {},
        totals={k: sum(int(getattr(f, k)) for f in s.files) for k in FATES},
        losses=Losses(dict(s.losses.counters), s.losses.loss_names, s.losses.explain),
        missing=list(s.missing), attach=attach, functions=dict(s.functions), range_max=s.range_max,
    )


__all__ = ["FATES", "PAGE", "DevInfo", "DeviceRow", "RaFile", "RaReport", "RaSample", "Windows", "build_report",
           "device_rows"]
