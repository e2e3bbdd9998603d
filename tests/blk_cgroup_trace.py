"""A blktrace trace with cgroup records, made by the kernel itself: test code, not part of the ioscope package.

The kernel's ftrace blk tracer with `options/blk_cgroup` sets __BLK_TA_CGROUP on each record of a bio that has
a cgroup and puts the cgroup's id (8 bytes, native order) first in its payload; with the trace option `bin`
(and `context-info` off) trace_pipe gives those records as struct blk_io_trace, exactly as the kernel fills
them for blktrace's relay files (kernel/trace/blktrace.c: blk_trace_synthesize_old_trace), except that the
sequence number is 0 and there are no process notes. `record()` runs dd's direct 4 KiB writes on a loop disk
from two cgroups of the io controller's hierarchy and from its root, and writes what blktrace writes:
NAME.blktrace.CPU, the kernel's records (action, payload with the cgroup id, time on CLOCK_MONOTONIC) as
they came, numbered per CPU from 1, each pid's process note (its name from the tracer's saved_cmdlines)
before its first record on the CPU it first traced on. The ground truth is the workload's own counts and
the cgroup directories' inode numbers (a cgroup's id), written to NAME.json beside the files.

    flock /tmp/ioscope-live.lock .venv/bin/python tests/blk_cgroup_trace.py tests/traces cgroups
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blk_tracer import BlkTracer
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopDevice, TestCgroups

HEAD = struct.Struct("<IIQQIIIIIHH")
NOTIFY_PROCESS = (1 << 10) << 16
# dd's direct 4 KiB writes per cgroup: primes, so that no other count matches by chance
WRITES = {"a.service": 7, "b.service": 11}
ROOT_WRITES = 5


def _records(raw: bytes) -> list[tuple[tuple[Any, ...], bytes]]:
    out = []
    at = 0
    while at + 48 <= len(raw):
        h = HEAD.unpack_from(raw, at)
        out.append((h, raw[at + 48:at + 48 + h[10]]))
        at += 48 + h[10]
    if at != len(raw):
        raise ValueError(f"the tracer's binary output ends in a cut record at byte {at}")
    return out


def build(raw: bytes, comms: dict[int, str], out_dir: Path, name: str) -> dict[int, int]:
    """blktrace's per-CPU files from the tracer's binary records; returns the records per CPU."""
    per_cpu: dict[int, list[bytes]] = {}
    seq: dict[int, int] = {}
    noted: set[int] = set()
    for h, pay in _records(raw):
        magic, _s, t, sector, nbytes, action, pid, dev, cpu, err, plen = h
        recs = per_cpu.setdefault(cpu, [])
        if pid not in noted:
            noted.add(pid)
            comm = comms.get(pid, "swapper" if pid == 0 else "")
            if comm:
                recs.append(HEAD.pack(magic, 0, t, 0, 0, NOTIFY_PROCESS, pid, dev, cpu, 0, 16)
                            + comm.encode()[:15].ljust(16, b"\0"))
        seq[cpu] = seq.get(cpu, 0) + 1
        recs.append(HEAD.pack(magic, seq[cpu], t, sector, nbytes, action, pid, dev, cpu, err, plen) + pay)
    for cpu in range(max(per_cpu) + 1 if per_cpu else 0):
        (out_dir / f"{name}.blktrace.{cpu}").write_bytes(b"".join(per_cpu.get(cpu, [])))
    return {c: len(r) for c, r in per_cpu.items()}


def _saved_cmdlines(tracefs: str) -> dict[int, str]:
    out = {}
    for line in Path(tracefs, "saved_cmdlines").read_text().splitlines():
        pid, _sp, comm = line.partition(" ")
        if pid.isdigit():
            out[int(pid)] = comm
    return out


def record(out_dir: Path, name: str) -> dict[str, Any]:
    """Trace the workload with the kernel's blk tracer (blk_cgroup, bin) and write NAME.blktrace.CPU and
    NAME.json (the ground truth) in out_dir; returns the ground truth. Live: root, under the live lock."""
    io = io_cgroup_root()
    assert io is not None, "no io controller hierarchy (v1 blkio or v2 io)"
    raw_path = out_dir / f"{name}.tracer.bin"
    with LoopDevice(64, scheduler="mq-deadline") as disk:
        cg = TestCgroups(io[0], "ioscope-btcg", list(WRITES))
        try:
            ids = {f"{cg.top}/{n}": os.stat(cg.root / n).st_ino for n in WRITES}
            root_id = os.stat(io[0]).st_ino
            tracer = BlkTracer(disk.name, output=str(raw_path), cgroup=True)
            pids: dict[str, int] = {}
            with tracer:
                t = tracer.tracefs
                saved = {k: Path(t, "options", k).read_text().strip() for k in ("bin", "context-info")}
                try:
                    Path(t, "options/bin").write_text("1")
                    Path(t, "options/context-info").write_text("0")
                    seek = 0
                    jobs = [(f"{cg.top}/{n}", cg.shell(n, "{dd}"), c) for n, c in WRITES.items()]
                    jobs.append(("/", ["sh", "-c", f"echo $$ > {io[0] / 'cgroup.procs'} && exec {{dd}}"],
                                 ROOT_WRITES))
                    for path, shell, count in jobs:
                        dd = (f"dd if=/dev/zero of={disk.path} bs=4k count={count} seek={seek} oflag=direct "
                              "status=none")
                        p = subprocess.Popen([a.replace("{dd}", dd) for a in shell])
                        assert p.wait(timeout=60) == 0
                        pids[path] = p.pid
                        seek += 1024
                    time.sleep(0.5)
                    comms = _saved_cmdlines(t)
                    tracer.stop()
                finally:
                    for k, v in saved.items():
                        Path(t, "options", k).write_text(v)
            assert tracer.overruns() == 0
        finally:
            cg.remove()
    raw = raw_path.read_bytes()
    raw_path.unlink()
    recs = _records(raw)
    d = recs[0][0][7] if recs else 0
    dev = (d >> 20, d & 0xFFFFF)
    build(raw, comms, out_dir, name)
    truth = {"device": f"{dev[0]},{dev[1]}", "bytes_per_write": 4096,
             "cgroups": {p: {"id": ids[p], "writes": WRITES[p.rsplit('/', 1)[1]], "dd_pid": pids[p]} for p in ids},
             "root": {"id": root_id, "writes": ROOT_WRITES, "dd_pid": pids["/"]}}
    (out_dir / f"{name}.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


if __name__ == "__main__":
    print(json.dumps(record(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cgroups"), indent=1))
