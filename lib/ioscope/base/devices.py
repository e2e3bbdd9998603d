"""The one block-device resolver and /proc/diskstats reader of ioscope.

Every reader takes a root path (/sys, /proc) so it can run on fixture trees.
Device numbers are handled in two encodings: "major:minor" for people, and
the kernel's internal dev_t (major << 20 | minor) used by the tracepoints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ioscope.base.errors import IoscopeError

MINORBITS = 20


def kdev(major: int, minor: int) -> int:
    """The kernel's internal dev_t, as BPF programs see it."""
    return (major << MINORBITS) | minor


def kdev_split(dev: int) -> tuple[int, int]:
    return dev >> MINORBITS, dev & ((1 << MINORBITS) - 1)


def kdev_str(dev: int, sep: str = ",") -> str:
    """"major,minor" of a kernel dev_t, as blkparse and btt name devices (sep=":" as sysfs does)."""
    return f"{dev >> MINORBITS}{sep}{dev & ((1 << MINORBITS) - 1)}"


@dataclass(frozen=True)
class BlockDevice:
    name: str
    major: int
    minor: int

    @property
    def dev(self) -> int:
        return kdev(self.major, self.minor)

    @property
    def majmin(self) -> str:
        return f"{self.major}:{self.minor}"


def _read(path: Path) -> str:
    return path.read_text().strip()


def list_disks(sys_root: str = "/sys") -> list[BlockDevice]:
    """Whole disks (the entries of /sys/block), sorted by name."""
    out = []
    base = Path(sys_root) / "block"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    for name in names:
        try:
            ma, mi = _read(base / name / "dev").split(":")
        except (OSError, ValueError):
            continue
        out.append(BlockDevice(name, int(ma), int(mi)))
    return out


def is_mq(name: str, sys_root: str = "/sys") -> bool:
    """True for a blk-mq (request based) disk; bio-based ones (zram, dm, md) have no request stage."""
    return (Path(sys_root) / "block" / name / "mq").is_dir()


def completed_requests(stats: DiskStats) -> int:
    """Requests the kernel counted as completed: reads, writes, discards and flushes."""
    return stats.reads + stats.writes + stats.discards + stats.flushes


def resolve_disk(spec: str, sys_root: str = "/sys") -> BlockDevice:
    """A disk named as 'loop1', '/dev/loop1', '7:1' or '7,1'. A partition resolves to its disk."""
    disks = list_disks(sys_root)
    s = spec.strip()
    if s.startswith("/dev/"):
        s = s[len("/dev/"):]
    for sep in (":", ","):
        if sep in s:
            try:
                ma, mi = (int(x) for x in s.split(sep))
            except ValueError:
                break
            for d in disks:
                if (d.major, d.minor) == (ma, mi):
                    return d
            part = _partition_parent_by_number(ma, mi, sys_root)
            if part:
                return part
            break
    for d in disks:
        if d.name == s:
            return d
    parent = _partition_parent(s, sys_root)
    if parent:
        return parent
    known = ", ".join(d.name for d in disks) or "none found"
    raise IoscopeError(f"unknown disk '{spec}'", f"name a disk in /sys/block ({known})")


@dataclass(frozen=True)
class Partition:
    """A partition (an entry of /sys/class/block with a `partition` file) and the disk it is on."""

    name: str
    major: int
    minor: int
    disk: BlockDevice
    start_sector: int
    size_bytes: int


def list_partitions(sys_root: str = "/sys") -> list[Partition]:
    """Every partition of every whole disk, sorted by name: the one enumeration of partitions."""
    disks = {d.name: d for d in list_disks(sys_root)}
    base = Path(sys_root) / "class" / "block"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        p = base / name
        try:
            if not (p / "partition").exists():
                continue
            disk = disks.get(p.resolve().parent.name)
            if disk is None:
                continue
            ma, mi = _read(p / "dev").split(":")
            out.append(Partition(name, int(ma), int(mi), disk, int(_read(p / "start")),
                                 int(_read(p / "size")) * 512))
        except (OSError, ValueError):
            continue
    return out


def _partition_parent(name: str, sys_root: str) -> BlockDevice | None:
    return next((p.disk for p in list_partitions(sys_root) if p.name == name), None)


def _partition_parent_by_number(ma: int, mi: int, sys_root: str) -> BlockDevice | None:
    return next((p.disk for p in list_partitions(sys_root) if (p.major, p.minor) == (ma, mi)), None)


class DevNames:
    """kernel dev_t -> disk name, refreshed when an unknown number appears."""

    def __init__(self, sys_root: str = "/sys") -> None:
        self.sys_root = sys_root
        self._names: dict[int, str] = {}
        self.refresh()

    def refresh(self) -> None:
        self._names = {d.dev: d.name for d in list_disks(self.sys_root)}

    def name(self, dev: int) -> str:
        if dev not in self._names:
            self.refresh()
        if dev in self._names:
            return self._names[dev]
        ma, mi = kdev_split(dev)
        return f"{ma}:{mi}"


@dataclass(frozen=True)
class DiskStats:
    """One line of /proc/diskstats (Documentation/admin-guide/iostats.rst)."""

    name: str
    major: int
    minor: int
    reads: int
    reads_merged: int
    sectors_read: int
    read_ms: int
    writes: int
    writes_merged: int
    sectors_written: int
    write_ms: int
    in_flight: int
    io_ms: int
    weighted_ms: int
    discards: int = 0
    discards_merged: int = 0
    sectors_discarded: int = 0
    discard_ms: int = 0
    flushes: int = 0
    flush_ms: int = 0


def read_diskstats(proc_root: str = "/proc") -> dict[str, DiskStats]:
    out = {}
    with open(Path(proc_root) / "diskstats") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 14:
                continue
            nums = [int(x) for x in parts[3:]]
            out[parts[2]] = DiskStats(parts[2], int(parts[0]), int(parts[1]), *nums[:17])
    return out


def queue_settings(name: str, sys_root: str = "/sys") -> dict[str, object]:
    """The settings that shape a disk's I/O, as found in sysfs (missing ones are left out)."""
    base = Path(sys_root) / "block" / name
    out: dict[str, object] = {}
    for key in ("nr_requests", "read_ahead_kb", "max_sectors_kb", "rotational", "logical_block_size"):
        try:
            out[key] = int(_read(base / "queue" / key))
        except (OSError, ValueError):
            pass
    try:
        sched = _read(base / "queue" / "scheduler")
        cur = [w[1:-1] for w in sched.split() if w.startswith("[")]
        out["scheduler"] = cur[0] if cur else sched
    except OSError:
        pass
    try:
        out["size_bytes"] = int(_read(base / "size")) * 512
    except (OSError, ValueError):
        pass
    try:  # "write back" (a volatile cache: flushes and FUA matter) or "write through"
        out["write_cache"] = _read(base / "queue" / "write_cache")
    except OSError:
        pass
    try:
        out["fua"] = int(_read(base / "queue" / "fua"))
    except (OSError, ValueError):
        pass
    return out


def stack_meta(sys_root: str = "/sys") -> dict[str, dict[str, Any]]:
    """Devices made of other devices: every disk with `slaves/` in sysfs (dm, md) and every btrfs file
    system on two or more devices; {name: {"kind": "dm"|"md"|"stacked"|"btrfs", "label", "members"}}.
    Captures store it (meta["stacks"]); report shows each stack with its members."""
    out: dict[str, dict[str, Any]] = {}
    root = Path(sys_root)
    for d in list_disks(sys_root):
        base = root / "block" / d.name
        slaves = sorted(p.name for p in (base / "slaves").iterdir()) if (base / "slaves").is_dir() else []
        if not slaves:
            continue
        kind = "dm" if (base / "dm").is_dir() else "md" if (base / "md").is_dir() else "stacked"
        label = ""
        try:
            label = _read(base / "dm" / "name") if kind == "dm" else ""
        except OSError:
            pass
        out[d.name] = {"kind": kind, "label": label, "members": slaves}
    fs_root = root / "fs" / "btrfs"
    for fs in sorted(fs_root.iterdir()) if fs_root.is_dir() else []:
        if not (fs / "devices").is_dir():
            continue
        members = sorted(p.name for p in (fs / "devices").iterdir())
        if len(members) < 2:
            continue
        try:
            label = _read(fs / "label")
        except OSError:
            label = ""
        out[f"btrfs:{fs.name}"] = {"kind": "btrfs", "label": label, "members": members}
    return out


# -- devices as captures store them (meta["devices"], meta["partitions"]; docs/capture-format.md) --

def device_meta(disks: list[BlockDevice] | None = None, sys_root: str = "/sys") -> dict[str, Any]:
    """{"maj,min": {name, major, minor, size_bytes, scheduler, ...}} of the disks given, or of every disk."""
    return {kdev_str(d.dev): {"name": d.name, "major": d.major, "minor": d.minor, **queue_settings(d.name, sys_root)}
            for d in disks or list_disks(sys_root)}


def partition_meta(sys_root: str = "/sys") -> dict[str, dict[str, Any]]:
    """{"maj,min": {name, major, minor, disk: "maj,min", start_sector, size_bytes}} of every partition."""
    return {f"{p.major},{p.minor}": {"name": p.name, "major": p.major, "minor": p.minor, "disk": kdev_str(p.disk.dev),
                                     "start_sector": p.start_sector, "size_bytes": p.size_bytes}
            for p in list_partitions(sys_root)}
