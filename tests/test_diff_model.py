"""ioscope diff's model on summaries made by hand: pairing of disks, ratios, setting changes, balance."""

from __future__ import annotations

import pytest

from ioscope.base.rate import BASIS
from ioscope.tools.diff.model import diff, pair_disks
from ioscope.tools.diff.summary import CaptureSummary, DiskStats, OpStats
from ioscope.tools.diff.view import renderables, to_json


def _cap(path: str, dur: float, **disks: DiskStats) -> CaptureSummary:
    """A capture active for dur seconds in a recording a second longer: rates are per active second."""
    return CaptureSummary(path, "h", dur + 1.0, dict(disks), active_s=dur)


def _disk(reads: int, nbytes: int, ra: int, procs: dict[str, int], p99: float = 1000.0) -> DiskStats:
    return DiskStats({"read": OpStats(reads, nbytes, {"p50": 10.0, "p99": p99, "p999": p99}, {"p99": p99 / 2})},
                     procs, {"read_ahead_kb": ra, "scheduler": "none", "nr_requests": 256})


def test_rates_ratios_and_changes() -> None:
    a = _cap("a", 2.0, loop0=_disk(1000, 100_000_000, 128, {"dd": 50, "cat": 50}))
    b = _cap("b", 4.0, loop0=_disk(250, 100_000_000, 4096, {"dd": 90, "cat": 10}, p99=4000.0))
    b.disks["loop0"].settings["scheduler"] = "mq-deadline"
    r = diff(a, b)
    (op,) = r.ops
    m = {x.name: x for x in op.metrics}
    assert (m["I/Os"].before, m["I/Os"].after, m["I/Os"].ratio) == (1000, 250, 0.25)
    assert m["MB/s"].before == pytest.approx(50.0) and m["MB/s"].after == pytest.approx(25.0)
    assert m["MB/s"].ratio == pytest.approx(0.5) and m["IOPS"].ratio == pytest.approx(0.125)
    assert m["q2c p99"].ratio == pytest.approx(4.0) and m["d2c p99"].after == 2000.0
    assert m["d2c p50"].before is None and m["d2c p50"].ratio is None   # not in the summary: shown as '-'
    changes = {c.setting: (c.before, c.after, c.direction, c.ratio) for c in r.changes}
    assert changes == {"read_ahead_kb": (128, 4096, "up", 32.0), "scheduler": ("none", "mq-deadline", "changed", None)}
    (bal,) = r.balance
    assert bal.before == pytest.approx(1.0) and bal.after == pytest.approx(100 ** 2 / (2 * (90 ** 2 + 10 ** 2)))
    doc = to_json(r)
    assert doc["ops"][0]["metrics"]["MB/s"]["ratio"] == pytest.approx(0.5)
    assert {c["setting"]: c["direction"] for c in doc["changes"]} == {"read_ahead_kb": "up", "scheduler": "changed"}
    assert len(list(renderables(r))) == 4   # header, settings, one op table, balance
    # the rates say what they are per: the active span, not the recording (3 s and 5 s here)
    assert doc["rates"] == BASIS and (doc["before"]["active_s"], doc["after"]["duration_s"]) == (2.0, 5.0)
    header = str(next(iter(renderables(r))))
    assert f"MB/s and IOPS: {BASIS} (2.00 s before, 4.00 s after)" in header


def test_disks_pair_by_name_or_alone() -> None:
    one, other = {"loop0": DiskStats()}, {"loop3": DiskStats()}
    assert pair_disks(one, other) == [("loop0 -> loop3", "loop0", "loop3")]
    two = {"sda": DiskStats(), "sdb": DiskStats()}
    assert pair_disks(two, {"sdb": DiskStats(), "sdc": DiskStats()}) == [
        ("sda", "sda", None), ("sdb", "sdb", "sdb"), ("sdc", None, "sdc")]
    r = diff(_cap("a", 1.0, **two), _cap("b", 1.0, sdb=DiskStats(), sdc=DiskStats()))
    assert (r.only_before, r.only_after) == (["sda"], ["sdc"])


def test_bundle_context_settings_are_compared() -> None:
    from ioscope.tools.diff.summary import context_settings

    ctx = {"vm": {"dirty_ratio": 20, "swappiness": {"absent": "x: no such file"}},
           "cgroups": {"v1_blkio": {"mount": "/sys/fs/cgroup/blkio",
                                    "limits": {"/db": {"blkio.throttle.read_bps_device": "8:0 1048576"}}},
                       "v2_io": {"absent": "no cgroup v2 hierarchy mounted"}},
           "multipath": {"paths": ["sdb 8:16 active ready running service-time"], "maps": []},
           "block_devices": {"sda": {"queue": {"scheduler": "none", "schedulers_available": ["none", "bfq"]}}}}
    host, queues = context_settings(ctx)
    # the cgroup limits are compared per disk, as report names them (throttle_settings)
    assert host == {"vm.dirty_ratio": 20, "multipath path sdb": "8:16 active ready running service-time"}
    assert queues == {"sda": {"scheduler": "none", "schedulers_available": ["none", "bfq"]}}
    a = CaptureSummary("a", "h", 1.0, {}, host)
    b = CaptureSummary("b", "h", 1.0, {}, {**host, "vm.dirty_ratio": 40,
                                          "multipath path sdb": "8:16 active ready running round-robin"})
    changes = {c.setting: (c.disk, c.direction, c.ratio) for c in diff(a, b).changes}
    assert changes == {"vm.dirty_ratio": ("host", "up", 2.0), "multipath path sdb": ("host", "changed", None)}


def test_throttle_limits_are_settings_of_their_disk() -> None:
    """The limits iolimits.recorded() finds (report's note) are settings of the disk they limit: a limit
    set between two recordings is `added` on that disk, and a value read twice shows both."""
    from ioscope.tools.diff.summary import throttle_settings

    lim = [{"cgroup": "/batch", "hierarchy": "v1 blkio", "dev": "7:3", "disk": "loop3",
            "limits": {"write_iops": 4, "read_bps": 1048576}, "read_at": ["the bundle's start context"]},
           {"cgroup": "/batch", "hierarchy": "v1 blkio", "dev": "7:3", "disk": "loop3",
            "limits": {"write_iops": 8}, "read_at": ["the bundle's end context"]}]
    got = throttle_settings(lim)
    assert got == {"loop3": {"throttle /batch (v1 blkio) write_iops": "4, 8",
                             "throttle /batch (v1 blkio) read_bps": 1048576}}
    assert throttle_settings(None) == {} and throttle_settings([]) == {}
    a = CaptureSummary("a", "h", 1.0, {"loop3": DiskStats()})
    b = CaptureSummary("b", "h", 1.0, {"loop3": DiskStats(settings=throttle_settings(lim[:1])["loop3"])})
    changes = {c.setting: (c.disk, c.before, c.after, c.direction) for c in diff(a, b).changes}
    assert changes == {"throttle /batch (v1 blkio) write_iops": ("loop3", None, 4, "added"),
                       "throttle /batch (v1 blkio) read_bps": ("loop3", None, 1048576, "added")}


def test_stacked_members_shares() -> None:
    """A btrfs mirror that took all the reads before and none after: each member's share of the bytes."""
    st = {"btrfs:u1": {"kind": "btrfs", "label": "data", "members": ["loop1", "loop2"]}}

    def cap(b1: int, b2: int) -> CaptureSummary:
        return CaptureSummary("c", "h", 1.0, {"loop1": DiskStats({"read": OpStats(1, b1)}),
                                              "loop2": DiskStats({"read": OpStats(1, b2)})}, {}, st)
    r = diff(cap(300, 0), cap(100, 300))
    assert [(m.stack, m.member, m.before, m.after) for m in r.members] == [
        ("btrfs data", "loop1", 1.0, 0.25), ("btrfs data", "loop2", 0.0, 0.75)]
    assert to_json(r)["members"][1] == {"stack": "btrfs data", "member": "loop2", "before": 0.0, "after": 0.75}
