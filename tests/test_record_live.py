"""ioscope record against the kernel's own blk tracer, on real loop devices (root, BPF)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import ioscope_cmd, run_ioscope, unreported_completions
from ioscope.base import devices
from ioscope.capture.events import ACTION_LETTERS, TA_COMPLETE, TA_QUEUE, TA_REMAP, TA_SPLIT, rwbs
from ioscope.capture.store import open_capture

NREADS = 1009  # direct 4 KiB reads: a prime, so that no other count matches it by chance
NWRITES_4K = 997  # buffered 4 KiB appends: merged by the block layer
NBIG = 7  # direct 1 MiB writes, split at max_sectors_kb=64


def _start_record(out: str, *args: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(ioscope_cmd("record", "-o", out, "-f", *args), stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    line = p.stderr.readline()  # printed once every program is attached
    assert line.startswith("Recording block I/O events"), line + p.stderr.read()
    return p


def _stop(p: subprocess.Popen[str], sig: int = signal.SIGINT, timeout: float = 60) -> str:
    p.send_signal(sig)
    _, err = p.communicate(timeout=timeout)
    return err


@pytest.fixture
def tmpdir_shm() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="ioscope-test-rec-", dir="/dev/shm")
    yield d
    for f in Path(d).iterdir():
        f.unlink()
    os.rmdir(d)


@pytest.fixture
def mounted(loopdev: Callable[..., Any], tmpdir_shm: str) -> Iterator[tuple[Any, str]]:
    """A loop disk (mq-deadline, max_sectors_kb 64) with two partitions, ext4 mounted on the first."""
    ld = loopdev(size_mb=300, scheduler="mq-deadline", partitions_mb=[128, 128])
    ld.set_queue("max_sectors_kb", "64")
    p1 = ld.partition(1)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", p1], check=True)
    mnt = tempfile.mkdtemp(prefix="ioscope-mnt-")
    subprocess.run(["mount", "-o", "commit=600", p1, mnt], check=True)
    try:
        yield ld, mnt
    finally:
        subprocess.run(["umount", mnt], check=False)
        os.rmdir(mnt)


def _quiesce() -> None:
    subprocess.run(["sync"], check=True)
    time.sleep(1.0)


def _workload(ld: Any, mnt: str) -> None:
    from ioscope.base.testbed import run_fio
    with open(f"{mnt}/f", "wb") as f:
        for _ in range(NWRITES_4K):
            f.write(b"x" * 4096)
        os.fsync(f.fileno())
    p2 = ld.partition(2)
    run_fio(p2, rw="write", bs="1M", number_ios=NBIG, size="64M", iodepth=2)
    job = run_fio(p2, rw="randread", bs="4k", number_ios=NREADS, size="64M", iodepth=8)
    assert job["read"]["total_ios"] == NREADS
    subprocess.run(["sync"], check=True)
    time.sleep(0.3)


def _letters(ev: np.ndarray) -> collections.Counter[str]:
    acts, counts = np.unique(ev["action"], return_counts=True)
    return collections.Counter({ACTION_LETTERS[int(a)]: int(c) for a, c in zip(acts, counts)})


def _subsequence(mine: list[Any], theirs: list[Any], same: Callable[[Any, Any], bool]) -> bool:
    """Whether mine is theirs with some items left out (in the same order), items compared by same()."""
    it = iter(theirs)
    return all(any(same(m, t) for t in it) for m in mine)


def test_record_matches_kernel_blk_tracer(mounted: tuple[Any, str], tmpdir_shm: str) -> None:
    from blk_tracer import BlkTracer, parse_blk_tracer
    ld, mnt = mounted
    dev = ld.device
    out = f"{tmpdir_shm}/cmp.ioscope"
    _quiesce()
    with BlkTracer(ld.name) as bt:
        rec = _start_record(out, "-d", ld.name, "-q")
        _workload(ld, mnt)
        err = _stop(rec)
        bt.stop()
        assert bt.overruns() == 0, "the reference (ftrace blk tracer) dropped events"
    assert rec.returncode == 0, err
    assert "lost 0" in err, err
    cap = open_capture(out)
    assert not cap.truncated and cap.meta["lost"]["total"] == 0 and cap.end is not None
    # compare what both saw: from the recorder's last attach to its first detach (both CLOCK_MONOTONIC);
    # I/O outside it (another process's global sync, say) is seen by the blk tracer alone
    lo, hi = cap.meta["attached_mono_ns"], cap.end["detached_mono_ns"]
    ref = [r for r in parse_blk_tracer(bt.text, f"{dev.major},{dev.minor}") if lo <= r["ts"] * 1e9 <= hi]
    allev = cap.read_all()
    assert bool((np.diff(allev["ts"].astype(np.int64)) >= 0).all()), "capture not sorted by time"
    allev = allev[(allev["ts"] >= lo) & (allev["ts"] <= hi)]
    ev = allev[allev["action"] != 0]
    assert (ev["dev"] == dev.dev).all()
    # every action the kernel traced, and as many times; C less the completions that ran no BPF program
    # (the blk tracer still sees them), as many as the capture's completions check reports
    missing = unreported_completions(out, dev.major, dev.minor)
    mine = _letters(ev)
    theirs = collections.Counter(r["action"] for r in ref)
    assert {k: n for k, n in mine.items() if k != "C"} == {k: n for k, n in theirs.items() if k != "C"}
    assert mine["C"] == theirs["C"] - missing, (mine["C"], theirs["C"], missing)
    # the workload shows up: reads, merges, splits, remaps, plugs, inserts
    for letter in ("Q", "G", "I", "D", "C", "M", "X", "A", "P", "U"):
        assert mine[letter] > 0, letter
    assert mine["Q"] >= NREADS + NBIG
    # Q and C (and X, A): the same sectors, sizes and RWBS, in the same order on each CPU; the C events
    # the blk tracer saw, but for the missing ones (if any) left out
    def same(m: tuple[int, int, str], t: tuple[int | None, int, str]) -> bool:
        # the blk tracer prints no sector for data-less events other than C
        return (m[0] if t[0] is not None else None, *m[1:]) == t

    for code in (TA_QUEUE, TA_COMPLETE, TA_SPLIT, TA_REMAP):
        letter = ACTION_LETTERS[code]
        for cpu in sorted({r["cpu"] for r in ref} | {int(c) for c in ev["cpu"]}):
            theirs_seq = [(r["sector"], r["nsec"] or 0, r["rwbs"]) for r in ref
                          if r["action"] == letter and r["cpu"] == cpu]
            e = ev[(ev["action"] == code) & (ev["cpu"] == cpu)]
            size = e["aux"] if code == TA_SPLIT else e["bytes"] // 512
            mine_seq = [(int(s), int(n), rwbs(int(c), int(b))) for s, n, c, b in
                        zip(e["sector"], size, e["category"], e["bytes"])]
            if code == TA_COMPLETE and missing:
                assert len(theirs_seq) - missing <= len(mine_seq) <= len(theirs_seq), (letter, cpu, missing)
                assert _subsequence(mine_seq, theirs_seq, same), (letter, cpu, missing)
                continue
            assert len(mine_seq) == len(theirs_seq), (letter, cpu)
            assert all(same(m, t) for m, t in zip(mine_seq, theirs_seq)), (letter, cpu)
    # remaps name the partition they came from
    parts = {devices.kdev(int(k.split(",")[0]), int(k.split(",")[1])) for k in cap.meta["partitions"]}
    remaps = ev[ev["action"] == TA_REMAP]
    assert set(remaps["aux_dev"].tolist()) <= parts and len(parts) >= 2
    # every pid has a name, and Q's process is the one the kernel printed
    assert set(ev["pid"].tolist()) <= set(cap.comms)
    q_ref = [r["tail"].rsplit("[", 1)[1].rstrip("]") for r in ref if r["action"] == "Q"]
    q_mine = [cap.comms[int(p)] for p in ev[ev["action"] == TA_QUEUE]["pid"]]
    assert sorted(q_mine) == sorted(q_ref)
    assert cap.meta["devices"][f"{dev.major},{dev.minor}"]["scheduler"] == "mq-deadline"
    assert cap.meta["devices"][f"{dev.major},{dev.minor}"]["max_sectors_kb"] == 64
    cap.close()


def test_record_raw_tp_variant_counts(loopdev: Callable[..., Any], tmpdir_shm: str) -> None:
    """The raw_tp programs (kernels without tp_btf) record the same I/O as the disk counts."""
    from ioscope.base.testbed import run_fio
    ld = loopdev(size_mb=64, scheduler="none")
    before = ld.diskstats()
    out = f"{tmpdir_shm}/raw.ioscope"
    p = subprocess.Popen(ioscope_cmd("record", "-o", out, "-d", ld.name, "-q"), stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "IOSCOPE_ATTACH": "raw_tp"})
    assert p.stderr is not None
    line = p.stderr.readline()
    assert "(raw_tp)" in line, line
    run_fio(ld.path, rw="randread", bs="8k", number_ios=NREADS, size="32M", iodepth=4)
    err = _stop(p)
    assert p.returncode == 0, err
    after = ld.diskstats()
    with open_capture(out) as cap:
        ev = cap.read_all()
        assert set(cap.meta["tracepoints"].values()) == {"raw_tp"}
    c = ev[ev["action"] == TA_COMPLETE]
    # every completion recorded, or the gap reported in the capture (exact when none)
    missing = unreported_completions(out, ld.device.major, ld.device.minor)
    assert len(c) + missing == after.reads - before.reads == NREADS
    assert (c["bytes"] == 8192).all()
    assert len(ev[ev["action"] == TA_QUEUE]) == NREADS


def test_record_pid_filter(loopdev: Callable[..., Any], tmpdir_shm: str) -> None:
    """-p: only the I/O queued by that process, including its completions in other contexts."""
    ld = loopdev(size_mb=64, scheduler="mq-deadline")
    reader = (
        "import os, sys, mmap\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)\n"
        "buf = mmap.mmap(-1, 4096)\n"
        "n = int(sys.argv[2]); sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "for i in range(n):\n"
        "    os.preadv(fd, [buf], ((i * 7919) % 16000) * 4096)\n"
    )
    n_traced, n_other = 211, 307
    traced = subprocess.Popen([sys.executable, "-c", reader, ld.path, str(n_traced)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", reader, ld.path, str(n_other)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        for proc in (traced, other):
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        out = f"{tmpdir_shm}/pid.ioscope"
        rec = _start_record(out, "-d", ld.name, "-p", str(traced.pid), "-q")
        for proc in (traced, other):
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        assert traced.wait(60) == 0 and other.wait(60) == 0
        err = _stop(rec)
        assert rec.returncode == 0, err
    finally:
        for proc in (traced, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with open_capture(out) as cap:
        ev = cap.read_all()
        assert cap.meta["filters"]["pid"] == traced.pid
    ev = ev[ev["action"] != 0]
    q = ev[ev["action"] == TA_QUEUE]
    c = ev[ev["action"] == TA_COMPLETE]
    assert len(q) == n_traced and (q["tgid"] == traced.pid).all()
    # completions run in other contexts, matched through the request's bios. Exact, whatever the kernel
    # did: the completions check compares the whole disk (both readers) with the traced process's C
    # events, so it cannot tell a completion that ran no BPF program from one the filter failed to match
    assert len(c) == n_traced
    assert sorted(c["sector"].tolist()) == sorted(q["sector"].tolist())


def test_record_sigkill_leaves_readable_prefix(loopdev: Callable[..., Any], tmpdir_shm: str) -> None:
    from ioscope.base.testbed import run_fio
    ld = loopdev(size_mb=128, scheduler="none")
    out = f"{tmpdir_shm}/killed.ioscope"
    rec = _start_record(out, "-d", ld.name, "-q")
    fio = subprocess.Popen(["fio", "--name=k", f"--filename={ld.path}", "--rw=randread", "--bs=4k",
                            "--iodepth=16", "--ioengine=libaio", "--direct=1", "--time_based", "--runtime=4",
                            "--output-format=terse", "--thread"], stdout=subprocess.DEVNULL)
    time.sleep(2.5)
    rec.kill()
    rec.wait()
    fio.wait()
    assert rec.returncode == -signal.SIGKILL
    with open_capture(out) as cap:
        assert cap.truncated and cap.truncation and "byte offset" in cap.truncation
        assert cap.nchunks >= 1
        ev = cap.read_all()
        assert len(ev) == cap.nevents > 1000
        assert bool((np.diff(ev["ts"].astype(np.int64)) >= 0).all())
        assert set(ev[ev["action"] != 0]["pid"].tolist()) <= set(cap.comms)
    # the kernel detached the dead recorder's programs: the device works untraced
    job = run_fio(ld.path, rw="randread", bs="4k", number_ios=101, size="64M")
    assert job["read"]["total_ios"] == 101
    # the checker reports the truncation but reads the prefix
    p = subprocess.run([sys.executable, "-m", "ioscope.capture.store", out], capture_output=True, text=True)
    assert p.returncode == 0 and "byte offset" in p.stderr and "Traceback" not in p.stderr


def test_record_sigterm_duration_and_max_size(loopdev: Callable[..., Any], tmpdir_shm: str) -> None:
    from ioscope.base.testbed import run_fio
    ld = loopdev(size_mb=128, scheduler="none")
    # SIGTERM: a clean end (end record, lost counts)
    out = f"{tmpdir_shm}/term.ioscope"
    rec = _start_record(out, "-d", ld.name, "-q")
    run_fio(ld.path, rw="randread", bs="4k", number_ios=NREADS, size="64M", iodepth=4)
    err = _stop(rec, signal.SIGTERM)
    assert rec.returncode == 0, err
    with open_capture(out) as cap:
        assert not cap.truncated and cap.meta["end"] and "lost" in cap.meta
        assert int(np.count_nonzero(cap.read_all()["action"] == TA_QUEUE)) == NREADS
        assert cap.end is not None
        check = cap.end["completions_check"][f"{ld.device.major},{ld.device.minor}"]
        assert check["name"] == ld.name and check["kernel"] == NREADS
    # every completion recorded, or the gap reported in the capture (exact when none)
    missing = unreported_completions(out, ld.device.major, ld.device.minor)
    assert check["recorded"] == NREADS - missing
    # -w: stops by itself
    t0 = time.monotonic()
    p = run_ioscope("record", "-o", f"{tmpdir_shm}/w.ioscope", "-d", ld.name, "-w", "1.5", "-q")
    assert p.returncode == 0 and "stopped: -w 1.5s elapsed" in p.stderr, p.stderr
    assert 1.5 <= time.monotonic() - t0 < 20
    # --max-size: stops when the file is that large
    out = f"{tmpdir_shm}/max.ioscope"
    rec = _start_record(out, "-d", ld.name, "-q", "--max-size", "3M", "--buffer", "2M")
    fio = subprocess.Popen(["fio", "--name=m", f"--filename={ld.path}", "--rw=randread", "--bs=4k",
                            "--iodepth=16", "--ioengine=libaio", "--direct=1", "--time_based", "--runtime=30",
                            "--output-format=terse", "--thread"], stdout=subprocess.DEVNULL)
    try:
        _, err = rec.communicate(timeout=30)
    finally:
        fio.kill()  # --thread: the job is a thread of this process, not a child that would outlive it
        fio.wait()
    assert rec.returncode == 0 and "--max-size reached" in err, err
    size = os.path.getsize(out)
    with open_capture(out) as cap:
        assert not cap.truncated
        rings = cap.meta["rings"]
    # past the limit: at most what the rings held when it was reached and what they took until the detach
    # (docs/record.md); 13.9 MB with the default 32M buffer once, on 2 CPUs
    ring_bytes = rings["count"] * rings["slots"] * rings["slot_bytes"]
    assert 3 << 20 <= size < (3 << 20) + 2 * ring_bytes + (256 << 10), (size, ring_bytes)


def test_record_counts_what_a_small_buffer_loses(loopdev: Callable[..., Any], tmpdir_shm: str) -> None:
    """Rings far too small for the rate: events are dropped, and every drop is counted and said."""
    from ioscope.base.testbed import run_fio
    ld = loopdev(size_mb=128, scheduler="none")
    out = f"{tmpdir_shm}/small.ioscope"
    before = ld.diskstats()
    rec = _start_record(out, "-d", ld.name, "-q", "--buffer", "64K")  # 1024 slots per ring
    job = run_fio(ld.path, rw="randread", bs="4k", iodepth=32, runtime=2, size="100M")
    err = _stop(rec, signal.SIGTERM)
    kernel = ld.diskstats().reads - before.reads
    assert rec.returncode == 0, err
    ios = int(job["read"]["total_ios"])
    assert kernel == ios
    with open_capture(out) as cap:
        lost = cap.meta["lost"]
        ev = cap.read_all()
    dropped = lost["ringbuf_full_events"]
    assert dropped > 0 and lost["total"] >= dropped and lost["ring_race"] == 0
    assert sum(lost["per_cpu"]["ringbuf_full_events"]) == dropped
    assert f"lost {lost['total']} (" in err and "ring full: raise --buffer" in err and "larger --buffer" in err
    completed = int(np.count_nonzero(ev["action"] == TA_COMPLETE))
    queued = int(np.count_nonzero(ev["action"] == TA_QUEUE))
    # what is in the file happened; what is not was counted (a dropped event may be of any kind)
    assert completed <= kernel and queued <= ios
    assert completed + dropped >= kernel - 2 and queued + dropped >= ios


@pytest.mark.parametrize("args, msg", [
    (["-d", "nosuchdisk0"], "unknown disk 'nosuchdisk0'"),
    (["--buffer", "lots"], "--buffer must be a size"),
    (["-w", "-3"], "positive"),
])
def test_record_bad_arguments(args: list[str], msg: str, tmpdir_shm: str, live: None) -> None:
    p = run_ioscope("record", "-o", f"{tmpdir_shm}/x.ioscope", *args)
    assert p.returncode != 0
    assert msg in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_record_refuses_to_overwrite(tmpdir_shm: str) -> None:
    out = f"{tmpdir_shm}/exists.ioscope"
    Path(out).write_text("precious")
    p = run_ioscope("record", "-o", out)
    assert p.returncode == 1 and "exists" in p.stderr and "-f" in p.stderr
    assert Path(out).read_text() == "precious"
    p = run_ioscope("record", "-o", "/nonexistent-dir/x.ioscope")
    assert p.returncode == 1 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_record_disk_filter_keeps_only_the_disks_given(loopdev: Callable[..., Any], tmpdir_shm: str) -> None:
    """-d is the one in-kernel filter of every tool (bpf/devfilter.bpf.h): two disks given, a third busy
    beside them, and the capture holds exactly the two given disks' I/O."""
    a, b, other = (loopdev(size_mb=32, scheduler="none") for _ in range(3))
    counts = {a.name: 13, b.name: 29, other.name: 31}  # primes: direct 4 KiB reads
    out = f"{tmpdir_shm}/two.ioscope"
    rec = _start_record(out, "-d", a.name, "-d", b.name, "-q")
    for ld in (a, b, other):
        subprocess.run(["dd", f"if={ld.path}", "of=/dev/null", "bs=4k", f"count={counts[ld.name]}",
                        "iflag=direct", "status=none"], check=True, timeout=60)
    err = _stop(rec)
    assert rec.returncode == 0, err
    with open_capture(out) as cap:
        ev = cap.read_all()
    c = ev[ev["action"] == TA_COMPLETE]
    got = collections.Counter(int(d) for d in c["dev"])
    # each disk's completions, less those its completions check reports missing (exact when none)
    want = {ld.device.dev: counts[ld.name] - unreported_completions(out, ld.device.major, ld.device.minor)
            for ld in (a, b)}
    assert dict(got) == want, (got, want)
