"""Acceptance: are two services treated alike? `ioscope fair -G -c SLICE` over a batch service whose cron-like
script starts short-lived workers (a shell that execs `dd`, one after the other) and a web service with one
reader, as an engineer on a host with systemd units would type it.

Each worker reads its own 16 MiB file and exits long before the interval ends: fair names each one `dd`
(its name when it did the I/O), counts its bytes exactly, and names its cgroup although /proc has nothing
left of it by then (the kernel noted the cgroup at its first I/O). Only the slice's processes are shown.
Between processes the four readers are even; between the services, batch moved three times web's bytes:
the cgroup balance says so (Jain 0.8, poor). fair stops by itself after its one interval, exit 0, and
leaves no BPF program behind.
"""

from __future__ import annotations

import subprocess

from conftest import bpf_prog_ids, drain, ioscope_cmd, json_lines, programs_left
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopFS, TestCgroups, drop_caches

MB = 1 << 20
SIZE = 16 * MB
BATCH_WORKERS = 3


def test_short_lived_workers_of_two_services(live: None) -> None:
    io = io_cgroup_root()
    assert io is not None
    cg = TestCgroups(io[0], "ioscope-fair.slice", ["batch.service", "web.service"])
    try:
        with LoopFS(size_mb=160) as fs:
            files = [fs.make_file(f"f{i}", SIZE) for i in range(BATCH_WORKERS + 1)]
            drop_caches()
            fair = subprocess.Popen(ioscope_cmd("fair", "-d", fs.name, "-G", "-c", cg.top, "-j", "4", "1"),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert fair.stderr is not None
            line = fair.stderr.readline()
            assert line.startswith("Tracing per-process throughput"), line + fair.stderr.read()
            ids = bpf_prog_ids(fair.pid)
            # the batch: one worker after the other, each a shell that execs dd; the web: one reader
            batch = "; ".join(f"sh -c 'exec dd if={f} of=/dev/null bs=64k status=none'" for f in files[:BATCH_WORKERS])
            jobs = [subprocess.Popen(cg.shell("batch.service", f'sh -c "{batch}"')),
                    subprocess.Popen(cg.shell("web.service", f"dd if={files[-1]} of=/dev/null bs=64k status=none"))]
            assert all(j.wait(timeout=60) == 0 for j in jobs)
            out, err = drain(fair)
    finally:
        cg.remove()
    assert fair.returncode == 0, err
    assert "Traceback" not in err
    (doc,) = json_lines(out)
    batch_cg, web_cg = f"{cg.top}/batch.service", f"{cg.top}/web.service"
    procs = [(p["comm"], p["cgroup"], p["read_bytes"]) for p in doc["procs"]]
    # only the slice's processes; each worker by its exec'd name, its bytes exact, its cgroup although it exited
    assert sorted(procs) == sorted([("dd", batch_cg, SIZE)] * BATCH_WORKERS + [("dd", web_cg, SIZE)]), procs
    (group,) = doc["groups"]
    assert group["disk"] == fs.name
    even = group["balance"]["read"]
    # every process read SIZE (asserted above): Jain is 1 exactly (JSON rounds it to 6 decimals)
    assert even["n"] == BATCH_WORKERS + 1 and even["jain"] == 1.0 and not even["poor"], even
    between = group["cgroup_balance"]["read"]
    assert between["cgroups"] == {batch_cg: BATCH_WORKERS * SIZE, web_cg: SIZE}, between
    assert abs(between["jain"] - 0.8) < 1e-6 and between["poor"], between
    assert not programs_left(ids)
