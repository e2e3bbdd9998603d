"""ioscope's pairing engine (C: capture/tracecore/bios.c), which every pairing of block events in user space goes
through: agg -r and snoop here (EVENT chunks in time order in, one BIOREC per completed bio out), report's
ioscope view and its per-I/O table (sql, Parquet, pages) through btt.Btt, which reads the stage times each
event sets. The rules are the kernel agg object's (bpf/agg.bpf.c over bpf/rqpath.bpf.h), so that a
question asked live and of a capture of the same I/O gets the same answer:

- a Q starts a bio (its thread, process, CPU, the cgroup it names (EV_CGROUP); the seek from the end of
  the previous Q on the disk); a Q of the same range while the bio is not yet issued is a split's
  remainder queued again and keeps the first queue time; an X (split) cuts the bio in two at the new
  sector, both pieces keeping the Q's details and queue time (each piece an I/O, as report's ioscope
  view counts them);
- G, S, I and M (getting a request, sleeping for one, inserting it, merging into one) go to the bio queued at
  their sector and not yet issued, else to an issued one that has not had that event; R (requeue) to the
  issued one;
- a D issues every bio in flight inside its range, walked as a request's chain from its sector (only the
  first issue counts: a requeued request issued again keeps its first, as the kernel object does); the
  request's in-flight count is the disk's requests issued and not completed before it;
- a C ends the bios of its request (of its direction: a read and a write of one sector can be in flight at
  once), each one record, the newest issued at each sector (one whose completion was missed stays behind);
  the first (BR_FIRST) carries the request's d2c; a bio-less flush request (D and C of 0 bytes, FLUSH) is
  one BR_FLUSH record with its issue time only;
- on a disk with a write-back cache (set_machine), a write with PREFLUSH (or FUA, when the disk has no FUA)
  goes through the flush sequence: its data's C is a step, and the write ends with the 0-byte C at its
  sector; an empty PREFLUSH write (fsync's) is a 0-byte bio timed from when it became a request (its G);
- a C (or D) of I/O queued before the events began is a BR_UNPAIRED record (no queue time; its issue time
  when the D was seen), counted in `unpaired`.

btt's rules (one I/O per start sector, X ignored) are report's other view: engines/pairing/btt.py, which also
says what report adds to these rules (culling, remaps, data-less events left out).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ioscope.capture import _tracecore

BIOREC = np.dtype([("c", "<u8"), ("q", "<u8"), ("d", "<u8"), ("sector", "<u8"), ("seek", "<i8"),
                   ("dev", "<u4"), ("bytes", "<u4"), ("c_bytes", "<u4"), ("pid", "<u4"), ("tgid", "<u4"),
                   ("inflight", "<i4"), ("cpu", "<u2"), ("category", "<u2"), ("error", "<u2"), ("flags", "<u2"),
                   ("cgroup", "<u8")])
assert BIOREC.itemsize == _tracecore.BIOREC_SIZE
NO_TIME = np.uint64(2**64 - 1)
BR_FIRST, BR_FLUSH, BR_UNPAIRED = 1, 2, 4


class Bios:
    """machines: the disks with a write-back cache (kernel dev_t -> the disk has FUA), from the capture's
    device table (engines.recording.recorder.flush_machines)."""

    def __init__(self, machines: dict[int, bool] | None = None) -> None:
        self.core = _tracecore.Bios()
        for dev, fua in (machines or {}).items():
            self.core.set_machine(dev, fua)

    def feed(self, ev: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
        """The records of the bios the events (in time order) complete, in completion order."""
        if not len(ev):
            return np.zeros(0, BIOREC)
        return np.frombuffer(self.core.feed(np.ascontiguousarray(ev)), dtype=BIOREC)

    def expire(self, before_ns: int) -> int:
        """Forget the bios queued before before_ns (merged into another request, or completion lost)."""
        return int(self.core.expire(max(before_ns, 0)))

    @property
    def unpaired(self) -> int:
        return int(self.core.unpaired)

    @property
    def last_ts(self) -> int:
        return int(self.core.last_ts)

    def in_flight(self) -> int:
        return int(self.core.in_flight())

    def requests(self, dev: int) -> int:
        return int(self.core.requests(dev))
