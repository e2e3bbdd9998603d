"""Live: process names follow exec and renames in every tool (tp_btf and the raw_tp fallback).

On ext4 on a tmpfs-backed loop device, shell workers (`sh -c '...'`) read a cold file as the shell
and then `exec dd` doing a known number of direct 4 KiB reads or writes; one worker execs a buffered
dd at once (renamed before any tool saw its I/O); a Python worker renames itself with
prctl(PR_SET_NAME) between two phases of direct reads. lat, top, readsize, readahead, fair, record
and snoop run at the same time. Ground truth: dd's own record and byte counts, the worker's own
counts, and /proc/diskstats.

About 1 in 20,000 completions runs no BPF program on this kernel (docs/lat.md, "Completions no BPF
program saw"). Counts made at completion are exact when the tool reported no such miss, and fall short
of the truth by at most what it reported otherwise (conftest.assert_counted): lat's completion_unseen,
snoop's and record's completions check.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    assert_counted,
    bpf_prog_ids,
    ioscope_cmd,
    json_lines,
    run_ioscope,
    unreported_bound,
    unreported_completions,
)
from top_live_util import top_past

BS = 4096
DD_READS = 101        # direct reads of each reading dd
DD_WRITES = 37        # direct writes of the writing dd
BUF_BYTES = 2 << 20   # the buffered dd's file
PHASE1 = 13           # the Python worker's direct reads before its rename
PHASE2 = 29           # and after
RENAMED = "renamed-wrk"
READERS = 2

# $1 pid file, $2 a cold file the shell reads itself, then dd's arguments
SHELL_THEN_DD = 'echo $$ > "$1"; read -r x < "$2"; shift 2; exec dd "$@"'
DD_AT_ONCE = 'echo $$ > "$1"; shift; exec dd "$@"'

RENAMER = """\
import ctypes, mmap, os, sys
path, n1, n2, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(os.getpid(), open("/proc/self/comm").read().strip(), flush=True)
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
for i in range(n1):
    assert os.preadv(fd, [buf], i * 4096) == 4096
assert ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(new.encode()), 0, 0, 0) == 0  # PR_SET_NAME
for i in range(n1, n1 + n2):
    assert os.preadv(fd, [buf], i * 4096) == 4096
"""

TOOLS = {
    "lat": ["lat", "-P", "-j"],
    "top": ["top", "--batch", "-j", "1"],
    "readsize": ["readsize", "--writes", "-j"],
    "readahead": ["readahead", "-j"],
    "fair": ["fair", "-j"],
    "snoop": ["snoop", "-j"],
}


@dataclass
class Worker:
    pid: int
    op: str                 # "read" or "write"
    records: int            # dd's own "N+0 records in/out"
    nbytes: int             # dd's bytes copied


@dataclass
class Run:
    attach: str
    outputs: dict[str, tuple[str, str]]
    dd: list[Worker]        # shell, then dd doing direct I/O
    buffered: Worker        # exec'd dd at once, buffered reads
    renamer: int
    old_name: str
    capture: Path
    disk_reads: int         # /proc/diskstats over the workload
    disk_writes: int


def _dd_counts(err: str, op: str) -> tuple[int, int]:
    m = re.search(rf"^(\d+)\+0 records {'in' if op == 'read' else 'out'}$", err, re.M)
    b = re.search(r"^(\d+) bytes", err, re.M)
    assert m and b, err
    return int(m.group(1)), int(b.group(1))


def _wait_started(errs: dict[str, Path], procs: dict[str, subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 60
    for name, path in errs.items():
        # each tool writes its start line once attached; top --batch writes nothing before its first interval
        while not (bpf_prog_ids(procs[name].pid) if name == "top" else path.read_text()):
            assert procs[name].poll() is None, (name, path.read_text())
            assert time.monotonic() < deadline, name
            time.sleep(0.1)


@pytest.fixture(scope="module", params=["tp_btf", "raw_tp"])
def run(request: pytest.FixtureRequest, live: None) -> Iterator[Run]:
    from ioscope.base.testbed import LoopDevice

    attach = request.param
    env = {**os.environ, "IOSCOPE_ATTACH": attach} if attach == "raw_tp" else dict(os.environ)
    with LoopDevice(size_mb=96) as ld, tempfile.TemporaryDirectory(prefix="ioscope-comm-", dir="/dev/shm") as tmp:
        d = Path(tmp)
        mnt = d / "mnt"
        mnt.mkdir()
        subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", ld.path], check=True)
        subprocess.run(["mount", ld.path, str(mnt)], check=True)
        try:
            files = {"data": 2 << 20, "wr": DD_WRITES * BS, "buf": BUF_BYTES, "py": (PHASE1 + PHASE2) * BS}
            files.update({f"cold{i}": 64 << 10 for i in range(READERS + 1)})
            for name, size in files.items():
                (mnt / name).write_bytes(os.urandom(size - 1) + b"\n")
            os.sync()
            for name in files:   # data pages out of the cache; the inodes (and extents) stay in it
                fd = os.open(mnt / name, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
            cap = d / "case.ioscope"
            errs = {name: d / f"{name}.err" for name in [*TOOLS, "record"]}
            cmds = {name: ioscope_cmd(*args, "-d", ld.name) for name, args in TOOLS.items()}
            cmds["record"] = ioscope_cmd("record", "-d", ld.name, "-o", str(cap))
            procs = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errs[name].open("w"), text=True,
                                            env=env) for name, cmd in cmds.items()}
            top_lines = ""
            try:
                _wait_started(errs, procs)
                time.sleep(1.5)     # top's first interval, past its start
                before = ld.diskstats()
                workers = []
                for i in range(READERS + 1):
                    op = "read" if i < READERS else "write"
                    args = ([f"if={mnt}/data", "of=/dev/null", f"count={DD_READS}", f"skip={i * 128}",
                             "iflag=direct"] if op == "read" else
                            ["if=/dev/zero", f"of={mnt}/wr", f"count={DD_WRITES}", "oflag=direct", "conv=notrunc"])
                    p = subprocess.run(["sh", "-c", SHELL_THEN_DD, "sh", str(d / f"w{i}"), str(mnt / f"cold{i}"),
                                        "bs=4k", *args], capture_output=True, text=True, check=True)
                    workers.append(Worker(int((d / f"w{i}").read_text()), op, *_dd_counts(p.stderr, op)))
                p = subprocess.run(["sh", "-c", DD_AT_ONCE, "sh", str(d / "wb"), f"if={mnt}/buf", "of=/dev/null",
                                    "bs=64k"], capture_output=True, text=True, check=True)
                buffered = Worker(int((d / "wb").read_text()), "read", *_dd_counts(p.stderr, "read"))
                p = subprocess.run([sys.executable, "-c", RENAMER, str(mnt / "py"), str(PHASE1), str(PHASE2), RENAMED],
                                   capture_output=True, text=True, check=True)
                rpid, old_name = p.stdout.split()
                after = ld.diskstats()
                # top (without a count: no report at SIGINT) must have closed an interval over the workload:
                # its reports are read until one ends after the workload did (a fixed 2.2 s missed it beside
                # a CPU hog and two emulated kernels: top printed no row of the first dd)
                top_lines = top_past(procs["top"], time.time())
            finally:
                for pr in procs.values():
                    pr.send_signal(signal.SIGINT)
                outputs = {}
                for name, pr in procs.items():
                    out, _ = pr.communicate(timeout=60)
                    outputs[name] = ((top_lines if name == "top" else "") + out, errs[name].read_text())
            for name, pr in procs.items():
                assert pr.returncode == 0, (name, outputs[name][1])
                assert "Traceback" not in outputs[name][1], outputs[name][1]
            yield Run(attach, outputs, workers, buffered, int(rpid), old_name, cap,
                      after.reads - before.reads, after.writes - before.writes)
        finally:
            subprocess.run(["umount", str(mnt)], check=False)


def _docs(run: Run, tool: str) -> list[dict[str, Any]]:
    docs = json_lines(run.outputs[tool][0])
    assert docs, run.outputs[tool][1]
    return docs


def test_ground_truth(run: Run) -> None:
    """The workload did what it says: dd's own counts, the disk's."""
    for w in run.dd:
        want = DD_READS if w.op == "read" else DD_WRITES
        assert (w.records, w.nbytes) == (want, want * BS)
    assert run.buffered.nbytes == BUF_BYTES
    assert run.disk_reads >= READERS * DD_READS + PHASE1 + PHASE2
    assert run.disk_writes >= DD_WRITES
    assert run.old_name != RENAMED


def _lat(run: Run) -> tuple[dict[int, dict[str, Any]], int]:
    """lat -P's q2c histograms by process, and the completions on the disk it reported as run by no BPF
    program (completion_unseen: a bio whose address came back, or still waiting at its final report)."""
    (doc,) = _docs(run, "lat")
    q2c = {h["pid"]: h for h in doc["hists"] if h["phase"] == "q2c" and h["pid"] is not None}
    unseen = int(doc["lost_detail"]["completion_unseen"])
    assert unseen <= unreported_bound(run.disk_reads + run.disk_writes), doc["lost_detail"]
    return q2c, unseen


def _snoop_unseen(err: str) -> int:
    """Completions snoop says the disk made while it traced and no BPF program saw: the number its
    completions check warns of on stderr (docs/record.md, 'Completions check'), 0 without a warning."""
    return sum(int(n.replace(",", "")) for n in
               re.findall(r"^ioscope snoop: warning: .* completions were seen: ([\d,]+) (?:was|were) not ", err, re.M))


def test_lat(run: Run) -> None:
    q2c, unseen = _lat(run)
    for w in run.dd:
        # the shell's own reads and dd's, all in one process named dd: more than dd's, but for what lat
        # reported as unseen
        assert q2c[w.pid]["comm"] == "dd" and q2c[w.pid]["count"] + unseen > w.records, (q2c.get(w.pid), unseen)
    assert q2c[run.buffered.pid]["comm"] == "dd"
    assert q2c[run.renamer]["comm"] == RENAMED
    assert_counted(q2c[run.renamer]["count"], PHASE1 + PHASE2, unseen)
    # one miss is one I/O of one process: the gaps together are within what lat reported
    assert (sum(q2c[w.pid]["count"] for w in run.dd) + q2c[run.renamer]["count"] + unseen
            >= sum(w.records + 1 for w in run.dd) + PHASE1 + PHASE2), (q2c, unseen)
    assert not [h for h in q2c.values() if h["comm"] == "sh"]
    assert sum(h["count"] for h in q2c.values()) <= run.disk_reads + run.disk_writes + 64


def test_top(run: Run) -> None:
    procs = [p for doc in _docs(run, "top") for p in doc["procs"]]
    # top's `-j 1` run without a count never makes a final report: a bio still waiting at its end is not
    # counted as unseen. lat ran beside it on the same workload, and a completion that runs no BPF
    # program runs none of any tool: lat's count and its report of such misses stand for top's.
    lat_q2c, unseen = _lat(run)
    for w in [*run.dd, run.buffered]:
        mine = [p for p in procs if p["pid"] == w.pid]
        assert {p["comm"] for p in mine} == {"dd"}, mine
        assert sum(p["ios"] for p in mine) + unseen > w.records if w in run.dd else True, (mine, unseen)
    mine = [p for p in procs if p["pid"] == run.renamer]
    ios = sum(p["ios"] for p in mine)
    assert {p["comm"] for p in mine} == {RENAMED}, mine
    # one 4 KiB direct read is one bio and one request: top (bios) and lat (q2c) count the same I/Os,
    # the ones whose completion ran the programs
    assert ios == lat_q2c[run.renamer]["count"], (mine, lat_q2c.get(run.renamer))
    assert_counted(ios, PHASE1 + PHASE2, unseen)
    # the gaps together are within what lat reported (a miss is one I/O of one process)
    assert (sum(p["ios"] for p in procs if p["pid"] in {w.pid for w in run.dd}) + ios + unseen
            >= sum(w.records + 1 for w in run.dd) + PHASE1 + PHASE2), (procs, unseen)


def test_readsize_and_fair(run: Run) -> None:
    (doc,) = _docs(run, "readsize")
    procs = {(p["pid"], p["op"]): p for p in doc["procs"]}
    for w in run.dd:
        p = procs[(w.pid, w.op)]
        assert p["comm"] == "dd", p
        # the direct I/O dd did, each one a syscall and one block I/O of 4 KiB
        assert p["app"]["count"] >= w.records and p["dev"]["count"] >= w.records, p
        if w.op == "write":   # its shell read too: that value was created as "sh" and renamed
            assert procs[(w.pid, "read")]["comm"] == "dd"
    assert procs[(run.buffered.pid, "read")]["comm"] == "dd"
    p = procs[(run.renamer, "read")]
    assert p["comm"] == RENAMED and p["dev"]["count"] == PHASE1 + PHASE2, p
    assert not [p for p in procs.values() if p["comm"] == "sh"]
    (doc,) = _docs(run, "fair")
    names = {p["pid"]: p for p in doc["procs"]}
    for w in [*run.dd, run.buffered]:
        assert names[w.pid]["comm"] == "dd", names[w.pid]
    assert names[run.buffered.pid]["read_bytes"] >= BUF_BYTES
    assert names[run.renamer]["comm"] == RENAMED


def test_readahead(run: Run) -> None:
    docs = _docs(run, "readahead")
    files = [f for f in docs[-1]["files"]]
    by_pid: dict[int, set[str]] = {}
    for f in files:
        by_pid.setdefault(f["pid"], set()).add(f["comm"])
    # the shell's read of its cold file was read ahead as "sh": the process is dd now
    for w in run.dd:
        assert by_pid.get(w.pid) == {"dd"}, files
    assert by_pid.get(run.buffered.pid) == {"dd"}, files
    assert not [f for f in files if f["comm"] == "sh"]


def _parse_queued(run: Run) -> dict[tuple[int, str], int]:
    p = run_ioscope("parse", "--names", "ioscope", str(run.capture), check=True)   # each I/O under its name then
    queued: dict[tuple[int, str], int] = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) > 6 and f[5] == "Q":
            key = (int(f[4]), f[-1].strip("[]"))
            queued[key] = queued.get(key, 0) + 1
    return queued


def _parse_ios(run: Run) -> dict[tuple[int, str], int]:
    """I/Os by (pid, name) as btt (and report) count them: each queued bio, and each piece a split (X) cut
    off one (the buffered dd's readahead bios are larger than the loop disk's max_sectors_kb)."""
    p = run_ioscope("parse", "--names", "ioscope", str(run.capture), check=True)   # each I/O under its name then
    ios: dict[tuple[int, str], int] = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) > 6 and f[5] in ("Q", "X"):
            key = (int(f[4]), f[-1].strip("[]"))
            ios[key] = ios.get(key, 0) + 1
    return ios


def test_record_parse(run: Run) -> None:
    queued = _parse_queued(run)
    for w in run.dd:
        assert queued.get((w.pid, "dd")) == w.records, queued   # every dd I/O, named dd from the first
        assert queued.get((w.pid, "sh"), 0) >= 1, queued         # the shell's own read, named sh
    assert queued.get((run.buffered.pid, "sh")) is None
    assert queued.get((run.renamer, run.old_name)) == PHASE1, queued
    assert queued.get((run.renamer, RENAMED)) == PHASE2, queued


def _record_missing(run: Run) -> int:
    """Completions the kernel made on the disk while recording that never reached the recorder, as the
    capture's completions check reports them (checked against its C events by conftest)."""
    from ioscope.capture.store import open_capture

    with open_capture(run.capture) as cap:
        assert cap.end is not None
        disks = [tuple(int(x) for x in key.split(",")) for key in cap.end["completions_check"]]
    return sum(unreported_completions(str(run.capture), major, minor) for major, minor in disks)


def test_record_report_per_process(run: Run) -> None:
    doc = run_ioscope("report", "-j", str(run.capture), check=True).stdout
    procs = json.loads(doc)["processes"]
    queued = _parse_ios(run)
    missing = _record_missing(run)

    def q2c_n(name: str) -> int:
        return int(procs[name]["phases"]["q2c"]["n"]) if name in procs else 0

    dd_ios = sum(n for (_pid, c), n in queued.items() if c == "dd")
    sh_ios = sum(n for (_pid, c), n in queued.items() if c == "sh")
    assert dd_ios >= sum(w.records for w in run.dd)
    # every queued I/O timed to its completion, but for completions the capture says it did not get
    assert_counted(q2c_n("dd"), dd_ios, missing)
    assert_counted(q2c_n("sh"), sh_ios, missing)
    assert_counted(q2c_n(RENAMED), PHASE2, missing)
    assert_counted(q2c_n(run.old_name.split("/")[0]), PHASE1, missing)
    assert_counted(q2c_n("dd") + q2c_n("sh") + q2c_n(RENAMED) + q2c_n(run.old_name.split("/")[0]),
                   dd_ios + sh_ios + PHASE2 + PHASE1, missing)


def test_snoop(run: Run) -> None:
    lines = _docs(run, "snoop")
    # a line per completion: exact, but for the completions snoop warns no BPF program saw, and those
    # allowed once in all (a miss is one I/O of one process)
    unseen = _snoop_unseen(run.outputs["snoop"][1])
    gap = 0
    for w in run.dd:
        mine = [x for x in lines if x["pid"] == w.pid]
        n = len([x for x in mine if x["comm"] == "dd"])
        assert_counted(n, w.records, unseen)
        gap += w.records - n
        if not [x for x in mine if x["comm"] == "sh"]:   # the shell's own read: one I/O at least
            gap += 1
            assert gap <= unseen, mine[:3]
    mine = [x for x in lines if x["pid"] == run.renamer]
    n2, n1 = (len([x for x in mine if x["comm"] == c]) for c in (RENAMED, run.old_name))
    assert_counted(n2, PHASE2, unseen)
    assert_counted(n1, PHASE1, unseen)
    gap += PHASE2 - n2 + PHASE1 - n1
    assert gap <= unseen, (gap, unseen)
