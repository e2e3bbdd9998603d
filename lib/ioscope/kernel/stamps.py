"""Which disks a collector times from the kernel's own request stamps, and which with the probes.

The user-space half of bpf/stamps.bpf.h, shared by lat and agg. A blk-mq request carries the kernel's
start and issue stamps when the disk keeps I/O statistics and its queue keeps blk-stat statistics
(see kernel_stamps()); such a disk is timed by the completion program alone, one program per I/O. A
disk without them is followed by the queue and issue programs ("probes"). The choice is made per
disk at the start from sysfs (lockdown hides the queue flags themselves) and corrected within a
second when the completion program finds a request without stamps on a disk it times (tick()).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ioscope.base import devices, units

if TYPE_CHECKING:
    from ioscope.kernel.loader import BPFObject

TIMINGS = ("auto", "stamps", "probes")
# how a disk is timed: from the kernel's request stamps (the completion program alone), or by
# following each bio from its queue event (the queue, issue and completion programs)
STAMPS, PROBES = "kernel stamps", "probes"
TICK_S = 1.0  # how often tick() should run: the longest a disk without stamps goes untimed
LOSS_EXPLAIN = {
    "not_stamped": "requests that ended without the kernel's start or issue time on a disk timed from "
                   "them: not timed; such a disk moves to the probes within a second, --timing probes "
                   "uses them from the start",
}


def kernel_stamps(name: str, sys_root: str = "/sys") -> bool:
    """Does the kernel stamp this blk-mq disk's requests with their start and issue times?

    The start (start_time_ns, RQF_IO_STAT) when the disk keeps I/O statistics (queue/iostats 1);
    the issue (io_start_time_ns, RQF_STATS) when the queue keeps blk-stat statistics
    (QUEUE_FLAG_STATS), which writeback throttling turns on: queue/wbt_lat_usec is readable only
    where wbt is set up (its value may be 0: wbt off, statistics still kept), and kyber keeps them.
    """
    q = Path(sys_root) / "block" / name / "queue"
    try:
        if (q / "iostats").read_text().strip() != "1":
            return False
        if "[kyber]" in (q / "scheduler").read_text():
            return True
        int((q / "wbt_lat_usec").read_text())
    except (OSError, ValueError):
        return False
    return True


def flags_readable(btf: str | None) -> bool:
    """The request flags that say a stamp is valid are an enum BTF shows on recent kernels; older
    ones kept #defines, which a BPF program cannot read (every request would count as not stamped)."""
    from ioscope.kernel import _libbpf
    return _libbpf.has_type("rqf_flags", "enum", btf)


class StampTiming:
    """The timing of each traced disk of one BPF object (with bpf/stamps.bpf.h) and its maps.

    enabled: targ_stamps was set before load (False: the probes everywhere). mode: TIMINGS.
    """

    def __init__(self, bpf: BPFObject, names: devices.DevNames, disks: Iterable[str], mode: str, enabled: bool,
                 btf: str | None) -> None:
        self.bpf, self.names, self.mode, self.enabled = bpf, names, mode, enabled
        disks = list(disks)
        if not enabled:
            self.timing = {n: PROBES for n in disks}
            return
        readable = flags_readable(btf)
        self.timing = {n: STAMPS if mode == "stamps" or (readable and kernel_stamps(n)) else PROBES for n in disks}

    def attach(self, completion: str, probes: list[str]) -> None:
        """After load: attach the completion hook, and the probes' hooks if some disk needs them."""
        if not self.enabled:
            self.bpf.attach()
            return
        probed = [devices.resolve_disk(n).dev for n, t in self.timing.items() if t == PROBES]
        self.bpf.attach([completion, *(probes if probed else [])])
        self._probe(probed, probes)

    def _probe(self, devs: list[int], probes: list[str] | None = None) -> None:
        """Time these disks (kernel dev_t) with the probes.

        The programs are attached first and follow a disk only once it is in probe_devs, so the
        three switch together: a request in flight at that moment ends as completed_without_start
        (issued before) or with d2c only (issued after), never with a q2c and no d2c."""
        if not devs:
            return
        self.bpf.attach(probes)
        pd = self.bpf.map("probe_devs")
        for dev in devs:
            pd.update(struct.pack("=I", dev), b"\x01")
            self.timing[self.names.name(dev)] = PROBES
        self.bpf.map("probe_some").update(struct.pack("=I", 0), struct.pack("=I", 1))

    def unstamped(self) -> dict[int, int]:
        """Per disk (kernel dev_t): the requests that ended without stamps on it since the attach."""
        if not self.enabled:
            return {}
        kb, vb, n = self.bpf.map("unstamped_devs").dump()
        return dict(zip(struct.unpack(f"={n}I", kb[: 4 * n]), struct.unpack(f"={n}Q", vb[: 8 * n]))) if n else {}

    def tick(self) -> None:
        """Move the disks whose requests ended without stamps to the probes (auto only)."""
        if not self.enabled or self.mode != "auto":
            return
        devs = self.unstamped()
        self._probe(sorted(d for d in devs if self.timing.get(self.names.name(d)) != PROBES))

    @property
    def stamps_only(self) -> bool:
        """Every traced disk is timed from the stamps (the completion program alone)."""
        return stamps_only(self.timing)


def stamps_only(timing: dict[str, str]) -> bool:
    return bool(timing) and all(t == STAMPS for t in timing.values())


# what one timed I/O is under each design (base.units): a request from the kernel's stamps; a bio piece
# when followed from its queue event to its request's completion (a split piece inherits its bio's
# queue time, a bio merged into a request is timed on its own); a design not named here (agg's records
# made at queue) counts bios as queued
UNIT_OF = {STAMPS: units.REQUESTS, PROBES: units.PIECES}


def io_unit(timing: dict[str, str]) -> str | dict[str, str]:
    """What one timed I/O is under these designs (UNIT_OF), per disk when the designs differ."""
    per = {disk: UNIT_OF.get(t, units.BIOS) for disk, t in sorted(timing.items())}
    one = set(per.values())
    return one.pop() if len(one) == 1 else per or units.BIOS


def timing_summary(timing: dict[str, str]) -> str:
    """'kernel stamps: loop0, vda; probes: loop3' (each design with its disks)."""
    by: dict[str, list[str]] = {}
    for disk, design in sorted(timing.items()):
        by.setdefault(design, []).append(disk)
    return "; ".join(f"{design}: {', '.join(d)}" for design, d in sorted(by.items()))


__all__ = ["LOSS_EXPLAIN", "PROBES", "STAMPS", "TICK_S", "TIMINGS", "UNIT_OF", "StampTiming", "flags_readable",
           "io_unit", "kernel_stamps", "stamps_only", "timing_summary"]
