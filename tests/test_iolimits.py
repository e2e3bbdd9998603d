"""iolimits: the throttle limits on given disks, from cgroup trees laid out as the kernel shows them
(a v1 blkio and a v2 hierarchy in a temporary directory, named by a mounts file)."""

from __future__ import annotations

from pathlib import Path

from ioscope.base.devices import BlockDevice
from ioscope.engines.context import iolimits


def test_limits_on_the_given_disks_only(tmp_path: Path) -> None:
    v1, v2 = tmp_path / "blkio", tmp_path / "unified"
    (v1 / "a" / "b").mkdir(parents=True)
    (v2 / "web").mkdir(parents=True)
    (v2 / "idle").mkdir()
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mounts").write_text(f"cgroup {v1} cgroup rw,nosuid,blkio 0 0\n"
                                              f"cgroup2 {v2} cgroup2 rw 0 0\n")
    (v1 / "blkio.throttle.write_iops_device").write_text("")                       # root: none
    (v1 / "a" / "blkio.throttle.write_iops_device").write_text("7:1 2000\n8:0 50\n")
    (v1 / "a" / "blkio.throttle.read_bps_device").write_text("7:1 4194304\n")
    (v1 / "a" / "b" / "blkio.weight").write_text("300\n")                          # a weight, not a limit
    (v2 / "web" / "io.max").write_text("7:1 rbps=max wbps=1048576 riops=max wiops=max\n")
    (v2 / "idle" / "io.max").write_text("7:1 rbps=max wbps=max riops=max wiops=max\n")  # all max: none
    got = iolimits.in_force([BlockDevice("loop1", 7, 1)], proc_root=str(tmp_path))
    assert got == [
        {"cgroup": "/a", "hierarchy": "v1 blkio", "dev": "7:1", "disk": "loop1",
         "limits": {"write_iops": 2000, "read_bps": 4194304}},
        {"cgroup": "/web", "hierarchy": "v2 io", "dev": "7:1", "disk": "loop1", "limits": {"write_bps": 1048576}},
    ]
    assert iolimits.in_force([BlockDevice("loop2", 7, 2)], proc_root=str(tmp_path)) == []
    line = iolimits.describe(got)
    assert line is not None and line.startswith(
        "I/O throttling limit in force: loop1 (7:1): cgroup /a (v1 blkio) read_bps=4194304 write_iops=2000; "
        "loop1 (7:1): cgroup /web (v2 io) write_bps=1048576 -- ")
    assert iolimits.describe([]) is None and iolimits.describe(None) is None
    assert iolimits.describe({"absent": "x"}) is None


def test_recorded_limits_of_a_bundle_are_its_contexts_too() -> None:
    """A limit set after the flight recorder started is not in the capture's header but in the bundle's
    context taken at the trigger: recorded() (what report and diff both show) has it, on the traced
    disks only, with where it was read; a limit in both places is one entry."""
    meta = {"devices": {"7,3": {"name": "loop3", "major": 7, "minor": 3}},
            "io_limits": [{"cgroup": "/old", "hierarchy": "v1 blkio", "dev": "7:3", "disk": "loop3",
                           "limits": {"read_bps": 1048576}}]}

    def ctx(**lims: dict[str, str]) -> dict[str, object]:
        return {"cgroups": {"v1_blkio": {"mount": "/sys/fs/cgroup/blkio", "limits": dict(lims)},
                            "v2_io": {"absent": "no cgroup v2 hierarchy mounted"}}}

    start = ctx(**{"/batch": {"blkio.throttle.write_iops_device": "7:3 4\n8:0 9"},
                   "/old": {"blkio.throttle.read_bps_device": "7:3 1048576"}})
    end = ctx(**{"/batch": {"blkio.throttle.write_iops_device": "7:3 4"}})
    got = iolimits.recorded("x.ioscope", meta, {"context-start.json": start, "context-end.json": end})
    assert got == [
        {"cgroup": "/old", "hierarchy": "v1 blkio", "dev": "7:3", "disk": "loop3", "limits": {"read_bps": 1048576},
         "read_at": ["the recording's start", "the bundle's start context"]},
        {"cgroup": "/batch", "hierarchy": "v1 blkio", "dev": "7:3", "disk": "loop3", "limits": {"write_iops": 4},
         "read_at": ["the bundle's start context", "the bundle's end context"]}]
    line = iolimits.describe(got)
    assert line is not None and "loop3 (7:3): cgroup /batch (v1 blkio) write_iops=4 (in the bundle's start context, " \
        "the bundle's end context)" in line
    # a plain capture: its header's list as it is (None: made before record stored limits)
    assert iolimits.recorded("x.ioscope", {**meta, "io_limits": []}, {}) == []
    assert iolimits.recorded("x.ioscope", {"devices": meta["devices"]}, {}) is None
    # a context whose cgroups could not be read says nothing (not "none")
    assert iolimits.recorded("x.ioscope", {"devices": meta["devices"]},
                             {"context-start.json": {"cgroups": {"absent": "x"}}}) is None
