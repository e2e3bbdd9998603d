"""ioscope fileslower on a real kernel: O_DIRECT 8 KiB writes, each followed by fdatasync, on ext4 on a loop
device, in a cgroup whose writes blk-throttle limits, against the workload's own timing of each call."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import PY
from fileslower_util import WORKLOAD, calls_of, run_beside
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopFS, TestCgroups
from iowait_util import limited

N = 53        # pwrite64 + fdatasync pairs: a prime
IOPS = 100    # the cgroup's write IOPS on the disk
SLACK_NS = 1_000_000  # the most the workload's timing (Python around the call) may exceed the tool's


def io_root() -> Path:
    io = io_cgroup_root()
    assert io is not None
    return io[0]


def check_calls(got: list[dict[str, Any]], timings: list[list[Any]], held: bool) -> None:
    """Every call of the workload, once, in order, each as long as the workload timed it (never longer, at
    most SLACK_NS shorter, and the time the workload's thread waited for a CPU around the call: the tool's
    clock reads are inside the workload's), its parts adding up to it. Its
    bios: each pwrite64 one 8 KiB write bio, done before it returned, unless blk-throttle held it (held:
    its kworker queues it later, outside the calling thread: not counted, docs/fileslower.md); each
    fdatasync no data bio."""
    assert [r["call"] for r in got] == [t[0] for t in timings]
    assert len(got) == 2 * N
    for r, (call, t0, t1, ret, run_delay) in zip(got, timings):
        lat_ns = round(r["lat_ms"] * 1e6)
        assert 0 <= (t1 - t0) - lat_ns <= SLACK_NS + run_delay, (r, t1 - t0, run_delay)
        assert r["bytes"] == ret and r["error"] == 0
        assert r["comm"].startswith("python"), r
        parts = r["oncpu_ms"] + r["iowait_ms"] + r["runq_ms"] + r["other_blocked_ms"]
        assert abs(parts - r["lat_ms"]) < 1e-5, r  # (each rounded to the ns in JSON)
        assert 0 <= r["iowait_ms"] <= r["lat_ms"]
        if call == "pwrite64":
            # an O_DIRECT write waits for its bio, unless the bio completed before the writer went to sleep (the
            # loop device's worker on another CPU: 2 of 9 runs had one such write), never when it was held
            assert r["iowaits"] >= 1 or (not held and r["bios_done"] == 1 and r["iowait_ms"] == 0), r
            if held and r["write_bios"] == 0:
                assert r["write_bytes"] == 0 and r["bios_done"] == 0, r
                continue
            assert (r["write_bios"], r["write_bytes"], r["read_bios"], r["bios_done"]) == (1, 8192, 0, 1), r
            assert 0 < r["device_ms"] <= r["lat_ms"], r
        else:
            assert (r["write_bytes"], r["read_bytes"]) == (0, 0), r


@pytest.mark.parametrize("attach", [None, "raw_tp"])
def test_fsync_writes(live: None, attach: str | None) -> None:
    """The calls of the workload in a cgroup (-c) without a limit: their times, bios and bytes exactly."""
    with LoopFS(256) as fs:
        path = fs.make_file("wal.log", N * 8192)
        cg = TestCgroups(io_root(), "ioscope-fileslower", ["svc"])
        try:
            cmd = cg.shell("svc", f"{PY} -c '{WORKLOAD}' {path} {N}")
            lines, timings, err, rc = run_beside(cmd, ["-m", "0", "-c", f"{cg.top}/svc", "-d", fs.name],
                                                 env={"IOSCOPE_ATTACH": attach} if attach else None)
        finally:
            cg.remove()
    assert rc == 0, err
    check_calls(calls_of(lines, path), timings, held=False)
    assert "lost" not in err, err


def test_fsync_writes_in_a_throttled_cgroup(live: None) -> None:
    """The same in a cgroup limited to IOPS writes a second: the writes blocked in I/O waits as long as the
    limit holds them at least, each within its call."""
    with LoopFS(256) as fs:
        path = fs.make_file("wal.log", N * 8192)
        with limited(fs.loop.device.majmin, "w", IOPS) as cg:
            cmd = cg.shell("svc", f"{PY} -c '{WORKLOAD}' {path} {N}")
            lines, timings, err, rc = run_beside(cmd, ["-m", "0", "-c", f"{cg.top}/svc", "-d", fs.name])
    assert rc == 0, err
    got = calls_of(lines, path)
    check_calls(got, timings, held=True)
    writes = [r for r in got if r["call"] == "pwrite64"]
    # blk-throttle let at most IOPS writes a second through: N writes took (N - burst) / IOPS at least, held
    # in I/O waits (the first few may pass at once: half of it at least)
    held_s = sum(r["iowait_ms"] for r in writes) / 1e3
    assert held_s >= 0.5 * N / IOPS, held_s
    assert "lost" not in err, err


# PATH: an ia32 lseek(fd, 0, SEEK_SET) through int $0x80 (ia32's number 19 is x86_64's readv), then a
# readv, a pread64 and an fsync of a 64-bit task; prints them as run_beside's timings ([[call, 0, 0, ret]]).
COMPAT_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char a[512], b[512]; struct iovec iov = { a, sizeof(a) }; long l;
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) { perror(argv[1]); return 1; }
    /* fd in rdi too, where x86_64's readv has it: taken for a readv, this call would be one on the file */
    __asm__ volatile("int $0x80" : "=a"(l) : "a"(19L), "b"((long)fd), "c"(0L), "d"(0L), "D"((long)fd) : "memory");
    long r = readv(fd, &iov, 1), p = pread(fd, b, sizeof(b), 512), s = fsync(fd);
    printf("[[\"ia32 lseek\", 0, 0, %ld], [\"readv\", 0, 0, %ld], [\"pread64\", 0, 0, %ld], "
           "[\"fsync\", 0, 0, %ld]]\n", l, r, p, s);
    return 0;
}
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="an ia32 call made with int $0x80")
def test_calls_by_number(live: None, tmp_path: Path) -> None:
    """The raw syscall hooks keep the calls of --calls by number: readv and pread64 shown, fsync (not asked
    for) not; a 32-bit call whose number is x86_64's readv (ia32's lseek) is not taken for one."""
    exe = tmp_path / "compat"
    (tmp_path / "compat.c").write_text(COMPAT_C)
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(tmp_path / "compat.c")], check=True)
    with LoopFS(64) as fs:
        path = fs.make_file("data", 8192)
        lines, done, err, rc = run_beside([str(exe), str(path)], ["-m", "0", "-d", fs.name, "--calls",
                                                                   "readv,pread64"])
    assert rc == 0, err
    if done[0][3] != 0:
        pytest.skip(f"no ia32 system calls on this kernel (int $0x80 returned {done[0][3]})")
    assert [c[3] for c in done[1:]] == [512, 512, 0], done
    got = calls_of(lines, path)
    assert [(r["call"], r["bytes"]) for r in got] == [("readv", 512), ("pread64", 512)], got


# PATH N: N threads each make one pread64 of PATH and wait; the tids on a line, then, after a line on stdin,
# the threads end and so does the process.
THREADS = r"""
import json, os, sys, threading
fd, n = os.open(sys.argv[1], os.O_RDONLY), int(sys.argv[2])
go, tids, ready = threading.Event(), [], threading.Barrier(n + 1)
def work():
    os.pread(fd, 512, 0)
    tids.append(threading.get_native_id())
    ready.wait()
    go.wait()
ts = [threading.Thread(target=work) for _ in range(n)]
for t in ts:
    t.start()
ready.wait()
print(json.dumps(tids), flush=True)
sys.stdin.readline()
go.set()
for t in ts:
    t.join()
"""


def test_thread_entries_go(live: None, tmp_path: Path) -> None:
    """A thread's entry in the map calls stays between its calls (no map update and delete per call) and
    goes when the thread exits (sched_process_exit): there while 64 threads that made a pread64 live, gone
    once they have exited."""
    import json
    import struct

    from ioscope.tools.fileslower.collector import FileSlowerCollector, FileSlowerOptions

    def entries(col: FileSlowerCollector) -> set[int]:
        kb, _vb, n = col.bpf.map("calls").dump(sum=False)
        return set(struct.unpack(f"={n}I", kb[: 4 * n]))

    data = tmp_path / "data"
    data.write_bytes(b"x" * 4096)
    col = FileSlowerCollector(FileSlowerOptions(calls=("pread64",)))
    try:
        work = subprocess.Popen([sys.executable, "-c", THREADS, str(data), "64"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert work.stdout is not None and work.stdin is not None
        tids = set(json.loads(work.stdout.readline()))
        assert len(tids) == 64
        alive = entries(col)
        work.stdin.write("\n")
        work.stdin.flush()
        assert work.wait(timeout=60) == 0
        after = entries(col)
    finally:
        col.close()
    assert tids <= alive, len(tids - alive)
    assert not tids & after, len(tids & after)
