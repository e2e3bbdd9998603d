"""Acceptance: services in cgroups on one disk, one of them under a write limit, watched with `ioscope lat
-G` and `ioscope top -G -c` as an engineer on a container host would type them.

Three cgroups in the io controller's hierarchy, named as systemd and Docker name theirs: a
`postgresql.service` doing 8 KiB random reads, a `docker-<id>.scope` doing 4 KiB random reads, and a
`backup.service` writing 64 KiB blocks under a write IOPS limit (v1 `blkio.throttle.write_iops_device`,
or v2 `io.max`). `lat -G -m 12 1` (text) and `top -G -c TOP -b 12 1` (batch text, only the services'
cgroups) run over the same workload. Each service's histogram counts exactly its fio's reads; the
container is named by its short id; the backup's held bios are as many as the kernel's own blk tracer
shows the throttle's kworker queued, and both tools say that their wait is not in q2c, how long it was and
that the backup's fio submitted them; snoop says so too, on stderr. Both exit 0 by themselves and leave no
BPF program behind; the cgroups are removed.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from typing import Any

from blk_tracer import BlkTracer, throttle_released
from conftest import assert_counted, bpf_prog_ids, drain, ioscope_cmd, programs_left, text_losses
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import TestCgroups

CONTAINER = "docker-" + "3f9c2e61b0d84a7c95e1f2a6b7c8d9e0" * 2 + ".scope"
PG_READS, APP_READS, BACKUP_WRITES = 1201, 401, 131
LIMIT_IOPS = 40
_Q2C = re.compile(r"^q2c: .*\[cgroup (\S+)(?: \[(\w+) (\w+)\])?\]$")
_N = re.compile(r"^n=(\d+) ")
_HELD = re.compile(r"^blk-throttle held (\d+) bios? of cgroup (\S+) on (\S+): (?:their|its) wait is not in q2c")


def _fio(cg: TestCgroups, group: str, args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cg.shell(group, f"fio --name=svc --direct=1 --randrepeat=0 --norandommap {args}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_services_in_cgroups_and_a_throttled_backup(loopdev: Any) -> None:
    disk = loopdev(size_mb=512)
    io = io_cgroup_root()
    assert io is not None
    cg = TestCgroups(io[0], "ioscope-acc.slice", ["postgresql.service", "backup.service", CONTAINER])
    v1 = io[1] == "v1 blkio"
    limit = cg.root / "backup.service" / ("blkio.throttle.write_iops_device" if v1 else "io.max")
    tools: list[subprocess.Popen[str]] = []
    try:
        limit.write_text(f"{disk.device.majmin} {LIMIT_IOPS}\n" if v1 else f"{disk.device.majmin} wiops={LIMIT_IOPS}\n")
        lat = subprocess.Popen(ioscope_cmd("lat", "-d", disk.name, "-G", "-m", "12", "1"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        top = subprocess.Popen(ioscope_cmd("top", "-d", disk.name, "-G", "-c", cg.top, "-b", "12", "1"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # snoop -G -c: a line per I/O of the services' cgroups, each with its cgroup (Ctrl-C ends it)
        snoop = subprocess.Popen(ioscope_cmd("snoop", "-d", disk.name, "-G", "-c", cg.top), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        tools += [lat, top, snoop]
        assert lat.stderr is not None and snoop.stderr is not None
        assert lat.stderr.readline().startswith("Tracing block I/O latency"), "lat did not start"
        assert snoop.stderr.readline().startswith("Tracing block I/O"), "snoop did not start"
        ids = bpf_prog_ids(lat.pid) | bpf_prog_ids(top.pid)
        time.sleep(2.5)  # the tools look for limits every 2 s, and attach the throttle's programs at the first
        with BlkTracer(disk.name) as tracer:
            jobs = [_fio(cg, "postgresql.service", f"--filename={disk.path} --rw=randread --bs=8k --size=256m "
                                                   f"--ioengine=psync --rate_iops=600 --number_ios={PG_READS}"),
                    _fio(cg, CONTAINER, f"--filename={disk.path} --rw=randread --bs=4k --size=256m "
                                        f"--ioengine=psync --rate_iops=200 --number_ios={APP_READS}"),
                    _fio(cg, "backup.service", f"--filename={disk.path} --rw=write --bs=64k --offset=256m --size=128m "
                                               f"--ioengine=libaio --iodepth=8 --number_ios={BACKUP_WRITES}")]
            assert all(j.wait(timeout=120) == 0 for j in jobs)
            time.sleep(0.5)
        truth = throttle_released(tracer.text, disk.device.majmin.replace(":", ","))
        snoop.send_signal(signal.SIGINT)
        outs: dict[str, tuple[str, str]] = {"snoop": drain(snoop)}   # with what readline() buffered
        assert snoop.returncode == 0, outs["snoop"][1]

        def finish(name: str, p: subprocess.Popen[str]) -> None:
            outs[name] = drain(p)

        waits = [threading.Thread(target=finish, args=(n, p)) for n, p in (("lat", lat), ("top", top))]
        for t in waits:
            t.start()
        for t in waits:
            t.join()
        assert lat.returncode == 0 and top.returncode == 0, (outs["lat"][1], outs["top"][1])
    finally:
        for p in tools:
            if p.poll() is None:
                p.kill()
                p.wait()
        limit.write_text(f"{disk.device.majmin} 0\n" if v1 else f"{disk.device.majmin} wiops=max\n")
        cg.remove()
    lat_out, top_out = outs["lat"][0], outs["top"][0]
    assert "Traceback" not in outs["lat"][1] + outs["top"][1]
    # lat: each service's q2c n= (requests: random reads merge with nothing), the container by its id
    counts: dict[str, int] = {}
    tags: dict[str, str] = {}
    name = None
    for line in lat_out.splitlines():
        m = _Q2C.match(line)
        if m:
            name = m.group(1)
            if m.group(2):
                tags[name] = f"{m.group(2)} {m.group(3)}"
            continue
        n = _N.match(line)
        if n and name:
            counts[name] = counts.get(name, 0) + int(n.group(1))
        name = None
    _, unseen = text_losses(lat_out)
    assert_counted(counts[f"{cg.top}/postgresql.service"], PG_READS, unseen)
    assert_counted(counts[f"{cg.top}/{CONTAINER}"], APP_READS, unseen)
    assert tags[f"{cg.top}/{CONTAINER}"] == "docker 3f9c2e61b0d8"
    # the backup's writes: the throttle held some (one in ~two at this rate), both tools count them exactly
    assert 0 < truth <= BACKUP_WRITES * 16, truth  # 64 KiB writes may reach the throttle as several bios
    for out in (lat_out, top_out):
        held = [(int(m.group(1)), m.group(2)) for m in map(_HELD.match, out.splitlines()) if m]
        assert held == [(truth, f"{cg.top}/backup.service")], (held, truth, out[-2000:])
        # each held bio's wait measured (fentry, or its submit note under lockdown), credited to the backup's fio
        line = next(ln for ln in out.splitlines() if _HELD.match(ln))
        assert re.search(rf"\(submitted by fio pid \d+: {truth}\); waited \(measured for {truth}, ", line), line
    # top: the cgroup view's rows, the backup's HELD column
    rows = {ln.split()[0]: ln.split() for ln in top_out.splitlines() if ln.startswith(f" {cg.top}/")}
    head = next(ln.split() for ln in top_out.splitlines() if ln.startswith(" CGROUP"))
    held_at = head.index("HELD") - len(head)   # counted from the row's end (every column has a value)
    assert rows[f"{cg.top}/backup.service"][held_at] == str(truth), (head, rows)
    assert f"{cg.top}/postgresql.service" in rows and "[docker 3f9c2e61b0d8]" in top_out, top_out[-3000:]
    # top -c TOP: only the services' cgroups, none outside the filter (the root's I/O is not shown)
    table = top_out[top_out.index(" CGROUP "):top_out.index("    PID ")]
    assert all(ln.startswith((f" {cg.top}/", " …")) for ln in table.splitlines()[1:] if ln.strip()), table
    # snoop -G -c TOP: each service's reads a line each with its cgroup, the container named, nothing else
    lines = outs["snoop"][0].splitlines()
    assert lines[0].split()[-1] == "CGROUP"
    by_cg: dict[str, int] = {}
    for ln in lines[1:]:
        cgpath = ln.split()[9]
        assert cgpath.startswith(f"{cg.top}/"), ln
        by_cg[cgpath] = by_cg.get(cgpath, 0) + 1
    m = re.search(r"completions were seen: ([\d,]+) (?:was|were) not", outs["snoop"][1])
    s_unseen = int(m.group(1).replace(",", "")) if m else 0
    assert_counted(by_cg[f"{cg.top}/postgresql.service"], PG_READS, s_unseen)
    assert_counted(by_cg[f"{cg.top}/{CONTAINER}"], APP_READS, s_unseen)
    assert f"{cg.top}/backup.service" in by_cg and "[docker 3f9c2e61b0d8]" in outs["snoop"][0]
    # the limit, in force when snoop started, is said once on stderr: the held wait is in no line; then what the
    # throttle held, as it goes: every held bio counted once, credited to the backup's fio, its wait measured
    notes = [ln for ln in outs["snoop"][1].splitlines() if ln.startswith("ioscope snoop: note: ")]
    limit_notes = [ln for ln in notes if "throttling limit in force" in ln]
    assert len(limit_notes) == 1 and f"cgroup {cg.top}/backup.service" in limit_notes[0], notes
    assert "write_iops=" in limit_notes[0], limit_notes
    held_notes = [_HELD.match(ln.removeprefix("ioscope snoop: note: ")) for ln in notes if ln not in limit_notes]
    assert all(m and m.group(2) == f"{cg.top}/backup.service" for m in held_notes), notes
    assert sum(int(m.group(1)) for m in held_notes if m) == truth, (notes, truth)
    assert all(re.search(r"\(submitted by fio pid \d+: \d+\); waited \(measured for \d+, ", ln)
               for ln in notes if ln not in limit_notes), notes
    time.sleep(0.1)
    assert not programs_left(ids)
