"""The slot table as user space reads it (kernel/inflight.py), on a fake map: the stale sweep keeps a
slot whose disk the kernel still has requests in flight on, and the oldest I/O in flight per disk."""

from __future__ import annotations

import numpy as np

from ioscope.base import devices
from ioscope.kernel import abi
from ioscope.kernel.inflight import OVER_NS, OldestIO, OldestWatch, SlotTable, oldest_in_flight

S = 1_000_000_000
LOOP3 = devices.kdev(7, 3)
LOOP4 = devices.kdev(7, 4)


class FakeMap:
    """An array map of BIO_SLOT values, dumped and updated as the C extension does."""

    def __init__(self, n: int = 64) -> None:
        self.vals = np.zeros(n, dtype=abi.BIO_SLOT)
        self.dumps = 0

    def dump(self, sum: bool = True, delete: bool = False) -> tuple[bytes, bytes, int]:
        self.dumps += 1
        return np.arange(len(self.vals), dtype=np.uint32).tobytes(), self.vals.tobytes(), len(self.vals)

    def update(self, key: bytes, value: bytes) -> None:
        self.vals[np.frombuffer(key, dtype=np.uint32)[0]] = np.frombuffer(value, dtype=abi.BIO_SLOT)[0]

    def put(self, i: int, bio: int, q_ns: int, d_ns: int, tgid: int, dev: int) -> None:
        self.vals[i] = (bio, q_ns, d_ns, tgid, dev)


def stats(done: int = 0, **in_flight: int) -> dict[str, devices.DiskStats]:
    """/proc/diskstats of loop disks with these requests in flight, each having completed `done` reads."""
    out = {}
    for name, n in in_flight.items():
        minor = int(name.removeprefix("loop"))
        out[name] = devices.DiskStats(name, 7, minor, done, *([0] * 7), n, 0, 0)
    return out


def test_sweep_keeps_an_old_slot_while_its_disk_has_requests_in_flight() -> None:
    import time
    now = time.monotonic_ns()
    m = FakeMap()
    m.put(1, 0xA, now - 10 * S, now - 10 * S, 4242, LOOP3)   # hung on loop3: the kernel has 1 in flight
    m.put(2, 0xB, now - 10 * S, now - 10 * S, 4243, LOOP4)   # loop4 idle: its completion was missed
    m.put(3, 0xC, now - 1 * S, now - 1 * S, 4244, LOOP4)     # young: never swept
    disk = stats(loop3=1, loop4=0)
    t = SlotTable(m, stale_ns=5 * S, diskstats=lambda: disk)
    t.sweep_stale()
    assert set(m.vals["bio"][m.vals["bio"] != 0].tolist()) == {0xA, 0xC}
    assert (t.take_stale(), t.kept) == (1, 1)
    disk = stats(loop3=0, loop4=0)   # the disk went idle without its completion in view: freed
    t.sweep_stale()
    assert set(m.vals["bio"][m.vals["bio"] != 0].tolist()) == {0xC}
    assert (t.take_stale(), t.kept) == (1, 0)


def test_oldest_per_disk_age_process_issue_and_count() -> None:
    now = 1000 * S
    v = np.zeros(6, dtype=abi.BIO_SLOT)
    v[0] = (1, now - 12 * S, now - 12 * S + 5, 4242, LOOP3)   # the oldest on loop3, issued
    v[1] = (2, now - 3 * S, 0, 4243, LOOP3)                   # over 1 s, not issued yet
    v[2] = (3, now - S // 2, 0, 4244, LOOP3)                  # under 1 s: not counted
    v[3] = (4, 0, now - 2 * S, 0, LOOP4)                      # queued before tracing: from its issue
    v[4] = (5, now - 50 * S, 1, 99, LOOP4)                    # from before loop4 was last idle: not in flight
    v[5] = (6, now - 7 * S, 1, 77, devices.kdev(7, 5))        # a disk not asked about
    got = oldest_in_flight(v, now, {LOOP3: 0, LOOP4: now - 40 * S}, issue_known=True)
    assert set(got) == {LOOP3, LOOP4}
    assert (got[LOOP3].age_ns, got[LOOP3].tgid, got[LOOP3].issued, got[LOOP3].over) == (12 * S, 4242, True, 2)
    assert (got[LOOP4].age_ns, got[LOOP4].tgid, got[LOOP4].issued, got[LOOP4].over) == (2 * S, 0, True, 1)
    # top: d_ns is SLOT_ENDS_IN_RQ, not an issue: it cannot tell
    top = oldest_in_flight(v, now, {LOOP3: 0}, issue_known=False)
    assert top[LOOP3].issued is None and top[LOOP3].age_ns == 12 * S
    assert oldest_in_flight(v, now, {LOOP3: 0}, issue_known=True, over_ns=20 * S) == {}


def test_watch_reads_the_table_only_when_a_disk_has_been_busy_long_enough() -> None:
    clock = [100 * S]
    m = FakeMap()
    m.put(0, 0xA, 100 * S - S // 2, 1, 4242, LOOP3)
    w = OldestWatch(SlotTable(m), issue_known=False, clock=lambda: clock[0])
    assert w.read(stats(loop3=1)) == {} and m.dumps == 0           # busy since this reading only
    clock[0] += S // 2
    assert w.read(stats(loop3=1)) == {} and m.dumps == 0           # busy for 0.5 s: nothing can be 1 s old
    clock[0] += S // 2
    got = w.read(stats(loop3=1))
    assert m.dumps == 1 and got[LOOP3].age_ns == 1500 * S // 1000 and got[LOOP3].tgid == 4242
    clock[0] += S // 4                                              # within READ_EVERY_NS: the last reading
    assert w.read(stats(loop3=1))[LOOP3].age_ns == 1500 * S // 1000 and m.dumps == 1
    clock[0] += S
    assert w.read(stats(loop3=1))[LOOP3].age_ns == 2750 * S // 1000 and m.dumps == 2
    assert w.reads == 2 and w.cpu_s >= 0
    clock[0] += S // 4
    assert w.read(stats(loop3=0)) == {} and m.dumps == 2           # it completed: the disk is idle
    m.vals[0]["bio"] = 0xA                                          # a slot whose completion was missed
    clock[0] += 2 * S
    w.read(stats(loop3=1))
    clock[0] += 2 * S
    # the slot was queued before the disk was last idle: not the I/O in flight; /proc/diskstats says the disk
    # has had a request in flight and completed none for 2 s, since the first reading that saw it (not 4 s,
    # since the idle reading before it: the request may have been issued at any moment in between)
    assert w.read(stats(loop3=1)) == {LOOP3: OldestIO(LOOP3, 2 * S, 0, True, 1, known=False)}
    assert OVER_NS == S


def test_a_disk_that_completes_nothing_with_requests_in_flight_is_stalled() -> None:
    """/proc/diskstats alone (no table: a disk timed from the kernel's stamps, or a bio queued before the
    tool): requests in flight and the completed count unchanged for OVER_NS is a stall, counted from the
    watch's first reading; a completion or an idle reading ends it."""
    clock = [100 * S]
    w = OldestWatch(None, issue_known=True, clock=lambda: clock[0])
    assert w.read(stats(loop3=2)) == {}                       # the first reading: the stall counts from here
    clock[0] += 3 * S // 2
    assert w.read(stats(loop3=2)) == {LOOP3: OldestIO(LOOP3, 3 * S // 2, 0, True, 2, known=False)}
    clock[0] += S
    assert w.read(stats(loop3=2, done=1)) == {}               # one completed: requests move
    clock[0] += S // 2
    assert w.read(stats(loop3=2, done=1)) == {}               # 0.5 s without a completion: not yet
    clock[0] += S
    assert w.read(stats(loop3=0, done=1)) == {}               # idle
    assert w.current == {}


def test_top_snapshot_names_the_disk_and_the_process() -> None:
    from ioscope.kernel.inflight import OldestIO
    from ioscope.tools.top.model import Sample, build_snapshot
    ds = stats(loop3=1, loop4=1)
    prev = Sample(1.0, 1.0, ds)
    cur = Sample(2.0, 2.0, ds, oldest={LOOP3: OldestIO(LOOP3, 12_345_000_000, 4242, None, 3),
                                       LOOP4: OldestIO(LOOP4, 999_999_999, 7, None, 0)})
    names = {LOOP3: "loop3", LOOP4: "loop4"}
    snap = build_snapshot(prev, cur, host="h", kernel="k", disks=["loop3", "loop4"], name_of=names.__getitem__,
                          comm_of={4242: "dd", 7: "x"}.__getitem__)
    assert [(r.disk, round(r.age_s, 3), r.pid, r.comm, r.issued, r.over_1s) for r in snap.in_flight] == [
        ("loop3", 12.345, 4242, "dd", None, 3)]   # loop4's is under 1 s
    assert build_snapshot(prev, cur, host="h", kernel="k", disks=["loop4"], name_of=names.__getitem__,
                          comm_of=str).in_flight == []
