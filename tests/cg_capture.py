"""A real capture of two services in two cgroups of the io controller's hierarchy, for the offline tools'
cgroup views (report's per-cgroup table, sql's cgroup column, parse --cgroup).

`ioscope record` on a loop disk while `dd` with direct I/O runs in each cgroup: WRITER writes
WRITES blocks of WRITE_BS, READER reads READS blocks of READ_BS (one bio and one request each: O_DIRECT,
blocks far below the disk's request size). The workload's own counts are the ground truth, and the kernel's
blk tracer with its blk_cgroup option (each event with its bio's cgroup id) for the ids."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blk_tracer import BlkTracer
from conftest import ioscope_cmd
from ioscope.base.cgroups import cgroup_id, io_cgroup_root
from ioscope.base.testbed import TestCgroups

WRITER, READER = "writer.service", "reader.service"
WRITES, WRITE_BS = 37, 64 * 1024     # primes of blocks, so that no other count matches by chance
READS, READ_BS = 53, 16 * 1024


@dataclass
class CgCapture:
    path: Path
    top: str                                  # the test's cgroup path, "/ioscope-cgview-PID"
    hierarchy: str                            # "v1 blkio" or "v2"
    expected: dict[str, tuple[int, int]]      # cgroup path -> (I/Os, bytes) the workload did
    ids: dict[str, int]                       # cgroup path -> id, read from the hierarchy while it existed
    tracer: str                               # the kernel's blk tracer's text (blk_cgroup) of the same I/O

    def cgroup(self, name: str) -> str:
        return f"{self.top}/{name}"


def record_two_cgroups(disk: Any, out: Path, writer: str = WRITER, reader: str = READER) -> CgCapture:
    """Record the workload on disk (an entered LoopDevice) into out, the writer's dd in the cgroup named
    writer, the reader's in reader (children of the test's cgroup); the cgroups are gone on return."""
    io = io_cgroup_root()
    assert io is not None, "no io controller hierarchy (v1 blkio or v2 io)"
    cg = TestCgroups(io[0], "ioscope-cgview", [writer, reader])
    try:
        ids = {f"{cg.top}/{n}": cgroup_id(f"{cg.top}/{n}") for n in (writer, reader)}
        rec = subprocess.Popen(ioscope_cmd("record", "-o", str(out), "-d", disk.name, "-q"),
                               stderr=subprocess.PIPE, text=True)
        try:
            assert rec.stderr is not None
            line = rec.stderr.readline()
            assert line.startswith("Recording block I/O events"), line
            with BlkTracer(disk.name, cgroup=True) as tracer:
                for cmd in (cg.shell(writer, f"dd if=/dev/zero of={disk.path} bs={WRITE_BS} count={WRITES} "
                                             "seek=16 oflag=direct status=none"),
                            cg.shell(reader, f"dd if={disk.path} of=/dev/null bs={READ_BS} count={READS} "
                                             "skip=4096 iflag=direct status=none")):
                    subprocess.run(cmd, check=True, timeout=60)
                tracer.stop()
        finally:
            rec.send_signal(signal.SIGINT)
            _o, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
    finally:
        cg.remove()
    return CgCapture(out, cg.top, io[1], {f"{cg.top}/{writer}": (WRITES, WRITES * WRITE_BS),
                                          f"{cg.top}/{reader}": (READS, READS * READ_BS)}, ids, tracer.text)
