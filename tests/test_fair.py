"""ioscope fair: the math (no root) and two real readers, equal and blkio-throttled (live)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import json_lines, run_ioscope
from ioscope.base.fairness import balance, jain_index, select_active
from ioscope.tools.fair.view import balance_json
from test_readsize import Traced

MB = 1 << 20


# -- unit: the fairness math ------------------------------------------------

def test_jain_equal_is_one() -> None:
    assert jain_index([5.0] * 7) == pytest.approx(1.0)


def test_jain_one_takes_all_is_one_over_n() -> None:
    assert jain_index([10.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_jain_by_hand() -> None:
    xs = [48.0, 48.0, 4.5, 4.5]
    assert jain_index(xs) == pytest.approx(sum(xs) ** 2 / (4 * sum(x * x for x in xs)))
    assert jain_index(xs) == pytest.approx(105.0 ** 2 / (4 * (2 * 48 ** 2 + 2 * 4.5 ** 2)))


def test_balance_between_cgroups() -> None:
    """-G: each cgroup's processes' bytes added up and judged against the other cgroups': three readers of
    10 MB in one service and one in another is 30 against 10, Jain 0.8, poor; a process whose cgroup is not
    known and one that moved no bytes of the op are in no sum; no cgroup read, no cgroup balance."""
    from ioscope.base.cgroups import GONE
    from ioscope.tools.fair.model import ProcRate, cgroup_balances
    from ioscope.tools.fair.view import group_lines

    mb = 10_000_000
    rates = {1: ProcRate(1, "a", read=mb, cgroup="/svc-a"), 2: ProcRate(2, "a", read=mb, cgroup="/svc-a"),
             3: ProcRate(3, "a", read=mb, cgroup="/svc-a"), 4: ProcRate(4, "b", read=mb, cgroup="/svc-b"),
             5: ProcRate(5, "gone", read=mb, cgroup=GONE), 6: ProcRate(6, "w", write=mb, cgroup="/svc-c")}
    got = cgroup_balances(rates, "app", 0.01)
    r = got["read"]
    assert r.cgroups == {"/svc-a": 3 * mb, "/svc-b": mb}
    assert r.verdict.pids == [1, 2, 3, 4]
    assert math.isclose(r.verdict.balance.jain, 0.8) and r.verdict.poor
    assert got["write"].cgroups == {"/svc-c": mb} and got["write"].verdict.balance.n == 1
    assert cgroup_balances({k: ProcRate(k, "x", read=mb) for k in (1, 2)}, "app", 0.01) == {}
    from ioscope.tools.fair.model import Group

    lines = group_lines(Group("loop0", [], {}, {}, {}, got), "app", 1.0)
    assert any(ln.strip().startswith("between cgroups, read balance over 2 cgroups (app bytes):") and "Jain 0.800"
               in ln and "POOR" in ln for ln in lines), lines
    assert "    /svc-a 28.6MiB/s, /svc-b 9.54MiB/s" in lines, lines
    assert "between cgroups, write: one active cgroup, no balance to compute" in [ln.strip() for ln in lines]


def test_balance_fields() -> None:
    b = balance([2.0, 4.0, 6.0])
    assert (b.n, b.total, b.min, b.max, b.mean) == (3, 12.0, 2.0, 6.0, 4.0)
    assert b.cv == pytest.approx(math.sqrt(8 / 3) / 4)
    assert b.max_min == pytest.approx(3.0)
    assert b.jain == pytest.approx(144 / (3 * 56))
    assert b.poor  # 0.857: max/min 3 is poor


def test_balance_poor_and_edges() -> None:
    assert balance([10.0, 1.0]).poor
    assert not balance([10.0]).poor and balance([10.0]).jain == 1.0
    assert balance([]).n == 0
    assert balance([0.0, 3.0]).max_min == math.inf
    assert balance_json(balance([0.0, 3.0]))["max_min"] is None


def test_select_active() -> None:
    assert select_active({1: 100.0, 2: 50.0, 3: 0.5}, 0.01) == {1: 100.0, 2: 50.0}
    assert select_active({1: 0.0}, 0.01) == {}


def test_groups_per_disk_model() -> None:
    """Pure model: per-disk bytes make one group per disk; a process on two disks is in both with its
    bytes on each; with no per-disk bytes (--across-disks) every process is one group."""
    from ioscope.base.devices import DiskStats
    from ioscope.base.hist import Hist
    from ioscope.base.losses import Losses
    from ioscope.engines.procio.model import DiskIO, ProcIO
    from ioscope.tools.fair.model import FairSample, build_report

    def proc(pid: int, comm: str, app: int, dev: int) -> ProcIO:
        return ProcIO(pid, comm, "read", Hist.from_values([app]), Hist.from_values([app]), Hist.from_values([dev]))

    procs = [proc(1, "a", 40 * MB + MB, 40 * MB + MB), proc(2, "b", 40 * MB, 40 * MB), proc(3, "c", 4 * MB, 4 * MB)]
    per_disk = [DiskIO(1, "read", "loop1", 40 * MB, 40 * MB, 40 * MB), DiskIO(2, "read", "loop1", 40 * MB, 40 * MB),
                DiskIO(3, "read", "loop2", 4 * MB, 4 * MB), DiskIO(1, "read", "loop2", MB, MB)]
    ds = {n: DiskStats(n, 7, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) for i, n in enumerate(("loop1", "loop2"))}
    s = FairSample(wall=0.0, seconds=1.0, procs=procs, cumulative=procs, losses=Losses(), diskstats_before=ds,
                   diskstats_after=ds, disks=[], whole_disks=["loop1", "loop2"], settings={}, per_disk=per_disk,
                   cum_per_disk=per_disk)
    r = build_report(s)
    g1, g2 = r.groups
    assert (g1.disk, g2.disk) == ("loop1", "loop2")
    assert g1.balance["read"].pids == [1, 2] and g1.balance["read"].balance.jain == pytest.approx(1.0)
    assert {row.rate.pid: row.rate.read for row in g2.rows} == {3: 4 * MB, 1: MB}
    assert [row.rate.comm for row in g2.rows] == ["c", "a"]
    assert g1.rows[0].rate.ra_bytes == 40 * MB and g1.rows[1].rate.ra_bytes == 0
    xs = [4 * MB, MB]
    assert g2.balance["read"].balance.jain == pytest.approx(sum(xs) ** 2 / (2 * sum(x * x for x in xs)))
    assert [d.name for d in r.disks] == ["loop1", "loop2"]  # every disk a process used, though they did not move
    s.per_disk = s.cum_per_disk = None
    (g,) = build_report(s).groups
    assert g.disk is None and g.balance["read"].pids == [1, 2, 3]


# -- live ------------------------------------------------------------------

@pytest.fixture
def fs2(live: None) -> Iterator[Any]:
    from ioscope.base.testbed import LoopFS

    with LoopFS(size_mb=160) as fs:
        yield fs


READER = ("import os,sys\n"
          "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
          "while os.read(fd, 32768):\n"
          "    pass\n")


def _reader(path: str, cgroup: str | None = None) -> subprocess.Popen[bytes]:
    if cgroup:
        # move into the cgroup first, then become the reader (exec keeps the pid)
        return subprocess.Popen(["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$0" -c "$1" "$2"',
                                 sys.executable, READER, path])
    return subprocess.Popen([sys.executable, "-c", READER, path])


def _run_pair(fs: Any, files: list[str], cgroup: str | None, seconds: float,
              tool: tuple[str, ...] = ("fair",)) -> tuple[dict[str, Any], list[int]]:
    from ioscope.base.testbed import drop_caches

    drop_caches()
    t = Traced(*tool, "-d", fs.name, "-j")
    try:
        a = _reader(files[0])
        b = _reader(files[1], cgroup)
        time.sleep(seconds)
        a.wait(timeout=60)
    finally:
        out, err = t.stop()
        for p in (locals().get("a"), locals().get("b")):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    docs = json_lines(out)
    assert len(docs) == 1, err
    return docs[0], [a.pid, b.pid]


def test_two_identical_readers_are_fair(fs2: Any) -> None:
    files = [fs2.make_file(f"f{i}", 40 * MB) for i in range(2)]
    doc, pids = _run_pair(fs2, files, None, 1.0)
    procs = {p["pid"]: p for p in doc["procs"]}
    assert set(pids) <= set(procs)
    for pid in pids:
        assert procs[pid]["read_bytes"] == 40 * MB
    (group,) = doc["groups"]  # one disk, one group
    assert group["disk"] == fs2.name
    bal = group["balance"]["read"]
    assert set(bal["pids"]) == set(pids)
    # the balance is over the bytes asserted equal above: Jain is 1 exactly (JSON rounds it to 6 decimals)
    assert bal["jain"] == 1.0 and not bal["poor"]


LINGER = READER + "print('done', flush=True)\nsys.stdin.read()\n"   # reads, then lives until its stdin closes


def _pair_in_cgroup(fs: Any, files: list[str], cg_dir: Path, *tool: str) -> tuple[dict[str, Any], list[int]]:
    """Two readers of a file each, the second in cg_dir, alive until the tool has stopped (a process's
    cgroup is read from /proc at the end of its interval)."""
    from ioscope.base.testbed import drop_caches

    drop_caches()
    t = Traced(*tool, "-d", fs.name, "-j")
    procs: list[subprocess.Popen[str]] = []
    try:
        procs = [subprocess.Popen(["sh", "-c", (f"echo $$ > {cg}/cgroup.procs && " if cg else "")
                                   + 'exec "$0" -c "$1" "$2"', sys.executable, LINGER, f],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for f, cg in zip(files, (None, cg_dir), strict=True)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "done\n"
    finally:
        out, err = t.stop()
        for p in procs:
            p.communicate(timeout=30)
    docs = json_lines(out)
    assert len(docs) == 1, err
    return docs[0], [p.pid for p in procs]


def test_cgroup_filter_and_column(fs2: Any, io_cgroup: tuple[Path, str]) -> None:
    """Two readers of 40 MiB, one in a cgroup of its own. fair and readsize with -G -c CGROUP: only that
    reader, its bytes exact, its cgroup named; with -G alone both, each with its own cgroup (the other
    reader's is the test's, as /proc gives it). A reader that exited before the interval ended is named by
    the cgroup the kernel saw it in at its first I/O, and -c keeps it."""
    from ioscope.base.cgroups import GONE, io_cgroup_root, process_cgroup
    cg_dir, cg = io_cgroup
    io = io_cgroup_root()
    assert io is not None
    mine = process_cgroup(os.getpid(), io[1])
    files = [fs2.make_file(f"f{i}", 40 * MB) for i in range(2)]
    doc, (out_pid, in_pid) = _pair_in_cgroup(fs2, files, cg_dir, "fair", "-G", "-c", cg)
    assert [(p["pid"], p["cgroup"], p["read_bytes"]) for p in doc["procs"]] == [(in_pid, cg, 40 * MB)]
    (group,) = doc["groups"]
    assert [p["pid"] for p in group["procs"]] == [in_pid] and group["procs"][0]["cgroup"] == cg
    doc, (out_pid, in_pid) = _pair_in_cgroup(fs2, files, cg_dir, "fair", "-G")
    got = {p["pid"]: (p["cgroup"], p["read_bytes"]) for p in doc["procs"]}
    assert got[in_pid] == (cg, 40 * MB) and got[out_pid] == (mine, 40 * MB)
    # the two cgroups judged against each other, each with its reader's 40 MiB: even
    (group,) = doc["groups"]
    between = group["cgroup_balance"]["read"]
    assert between["cgroups"] == {cg: 40 * MB, mine: 40 * MB} and between["n"] == 2, between
    # over the two equal sums above: Jain is 1 exactly (rounded to 6 decimals in JSON)
    assert between["total"] == 80 * MB and between["jain"] == 1.0 and not between["poor"]
    assert sorted(between["pids"]) == sorted([in_pid, out_pid])
    doc, (out_pid, in_pid) = _pair_in_cgroup(fs2, files, cg_dir, "readsize", "-G", "-c", cg)
    assert [(p["pid"], p["cgroup"], p["app"]["bytes"]) for p in doc["procs"]] == [(in_pid, cg, 40 * MB)]
    # readers that exit at once, before the interval ends: /proc has nothing left to say, the kernel's note of
    # each process's cgroup at its first I/O names it (never [exited], never the root it left)
    doc, (a, b) = _run_pair(fs2, files, str(cg_dir), 1.0, ("fair", "-G"))
    got = {p["pid"]: (p["cgroup"], p["read_bytes"]) for p in doc["procs"]}
    assert got[a] == (mine, 40 * MB) and got[b] == (cg, 40 * MB), got
    assert GONE not in {p["cgroup"] for p in doc["procs"]}, doc["procs"]
    doc, (a, b) = _run_pair(fs2, files, str(cg_dir), 1.0, ("fair", "-G", "-c", cg))
    assert [(p["pid"], p["cgroup"], p["read_bytes"]) for p in doc["procs"]] == [(b, cg, 40 * MB)]
    doc, (a, b) = _run_pair(fs2, files, str(cg_dir), 1.0, ("readsize", "-G", "-c", cg))
    assert [(p["pid"], p["cgroup"], p["app"]["bytes"]) for p in doc["procs"]] == [(b, cg, 40 * MB)]


def test_a_zombie_has_no_cgroup(io_cgroup: tuple[Path, str]) -> None:
    """A process that has exited and is not yet reaped: /proc/PID/cgroup says '/' (it left its cgroups),
    so process_cgroup says nothing rather than the root; alive, its own cgroup."""
    from ioscope.base.cgroups import io_cgroup_root, process_cgroup
    io = io_cgroup_root()
    assert io is not None
    cg_dir, cg = io_cgroup
    p = subprocess.Popen(["sh", "-c", f"echo $$ > {cg_dir}/cgroup.procs && read x"], stdin=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while process_cgroup(p.pid, io[1]) != cg and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_cgroup(p.pid, io[1]) == cg
        assert p.stdin is not None
        p.stdin.close()
        while Path(f"/proc/{p.pid}/stat").read_text().split(") ")[1][0] != "Z":
            time.sleep(0.01)
        lines = Path(f"/proc/{p.pid}/cgroup").read_text().splitlines()
        io_line = next(ln for ln in lines if ("blkio" in ln.split(":")[1].split(",") if io[1] == "v1 blkio"
                                              else ln.startswith("0::")))
        assert io_line.endswith(":/") and process_cgroup(p.pid, io[1]) is None, io_line
    finally:
        p.wait()


def test_cgroup_filter_errors() -> None:
    """-c was --comm's letter in fair and readsize: a command name given to it says so, in one line."""
    for tool in ("fair", "readsize"):
        p = run_ioscope(tool, "-c", "python3", "1", "1")
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        (line,) = p.stderr.strip().splitlines()
        assert "cgroup 'python3' does not exist" in line and "use --comm" in line, line


@pytest.fixture
def blkio_cgroup(live: None) -> Iterator[str]:
    base = "/sys/fs/cgroup/blkio"
    if not os.path.isfile(f"{base}/blkio.throttle.read_bps_device"):
        base = "/sys/fs/cgroup/unified"
        if not os.path.isfile(f"{base}/cgroup.controllers"):
            pytest.fail("no blkio (v1) or unified (v2) cgroup hierarchy to throttle a reader")
    path = f"{base}/ioscope-fair-{os.getpid()}"
    os.mkdir(path)
    try:
        yield path
    finally:
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def test_throttled_reader_is_flagged(fs2: Any, blkio_cgroup: str) -> None:
    files = [fs2.make_file(f"f{i}", 40 * MB) for i in range(2)]
    limit = 4 * MB
    majmin = fs2.loop.device.majmin
    if blkio_cgroup.startswith("/sys/fs/cgroup/blkio"):
        with open(f"{blkio_cgroup}/blkio.throttle.read_bps_device", "w") as f:
            f.write(f"{majmin} {limit}")
    else:
        with open(f"{blkio_cgroup}/io.max", "w") as f:
            f.write(f"{majmin} rbps={limit}")
    doc, pids = _run_pair(fs2, files, blkio_cgroup, 2.0)
    procs = {p["pid"]: p for p in doc["procs"]}
    fast, slow = procs[pids[0]], procs[pids[1]]
    assert fast["read_bytes"] == 40 * MB
    # the throttle passes 4 MiB/s over the ~2 s run: about 8 MiB, under half the file
    assert 0 < slow["read_bytes"] < 20 * MB
    # bios the throttle held back are queued later by a kernel thread: still the slow reader's
    assert slow["dev_read_bytes"] >= slow["read_bytes"] // 2
    assert not [p for p in doc["procs"] if p["comm"].startswith("kworker") and p["dev_read_bytes"]]
    (group,) = doc["groups"]
    assert group["disk"] == fs2.name
    bal = group["balance"]["read"]
    assert set(bal["pids"]) == set(pids)
    xs = [procs[p]["read_bytes"] for p in bal["pids"]]
    by_hand = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
    assert bal["jain"] == pytest.approx(by_hand, abs=1e-6)
    assert bal["poor"] is True
    causes = group["poor"]["read"]["causes"]
    assert any("throttled" in c and str(pids[1]) in c for c in causes), causes


@pytest.fixture
def fs_small(live: None) -> Iterator[Any]:
    from ioscope.base.testbed import LoopFS

    with LoopFS(size_mb=32) as fs:
        yield fs


def _run_two_disks(fs_a: Any, fs_b: Any, files: list[str], *opts: str) -> tuple[dict[str, Any], list[int]]:
    """Three readers to the end of their files (two on fs_a, one on fs_b); one report for the whole run."""
    from ioscope.base.testbed import drop_caches

    drop_caches()
    t = Traced("fair", "-d", fs_a.name, "-d", fs_b.name, "-j", *opts)
    try:
        readers = [_reader(f) for f in files]
        for r in readers:
            assert r.wait(timeout=60) == 0
        time.sleep(0.2)
    finally:
        out, err = t.stop()
    docs = json_lines(out)
    assert len(docs) == 1, err
    return docs[0], [r.pid for r in readers]


def test_processes_are_judged_per_disk(fs2: Any, fs_small: Any) -> None:
    """Issue 16: fair compared processes on different disks. Two readers of 40 MiB on one disk and one of
    4 MiB on another: per disk, the first two are balanced (Jain > 0.99) and the lone one has no balance;
    with --across-disks the three are one group, poor by Jain over 40, 40 and 4 MiB (0.73)."""
    files = [fs2.make_file("a0", 40 * MB), fs2.make_file("a1", 40 * MB), fs_small.make_file("b0", 4 * MB)]
    doc, pids = _run_two_disks(fs2, fs_small, files)
    groups = {g["disk"]: g for g in doc["groups"]}
    assert set(groups) == {fs2.name, fs_small.name}
    a, b = groups[fs2.name], groups[fs_small.name]
    assert {p["pid"]: p["read_bytes"] for p in a["procs"] if p["pid"] in pids} == {pids[0]: 40 * MB,
                                                                                   pids[1]: 40 * MB}
    assert {p["pid"]: p["read_bytes"] for p in b["procs"] if p["pid"] in pids} == {pids[2]: 4 * MB}
    assert sorted(a["balance"]["read"]["pids"]) == sorted(pids[:2])
    assert a["balance"]["read"]["jain"] == 1.0 and not a["balance"]["read"]["poor"]  # the equal bytes above
    assert b["balance"]["read"]["pids"] == [pids[2]] and b["balance"]["read"]["n"] == 1
    # the device bytes of each group are on its own disk: the disk's read sectors bound them
    assert sum(p["dev_read_bytes"] for p in b["procs"]) >= 4 * MB

    doc, pids = _run_two_disks(fs2, fs_small, files, "--across-disks")
    (g,) = doc["groups"]
    assert g["disk"] is None
    bal = g["balance"]["read"]
    assert set(pids) <= set(bal["pids"])
    # Jain of the bytes of the processes judged (the three readers, and any other process that read enough
    # in the interval), as JSON rounds it
    got = {p["pid"]: p["read_bytes"] for p in g["procs"]}
    xs = [got[pid] for pid in bal["pids"]]
    assert [got[pid] for pid in pids] == [40 * MB, 40 * MB, 4 * MB]
    assert bal["jain"] == round(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)), 6) and bal["poor"]


# -- async I/O (issue 24, finding 6): libaio and io_uring are counted, and only processes that did I/O
# on a disk are balanced --------------------------------------------------------------------------------

BYSTANDER = ("import sys,time\n"
             "end = time.time() + float(sys.argv[2])\n"
             "open(sys.argv[1], 'rb').read()\n"
             "print('ready', flush=True)\n"
             "while time.time() < end:\n"
             "    open(sys.argv[1], 'rb').read()\n"
             "    time.sleep(0.01)\n")


def _fio(path: str, engine: str, rw: str, bs: str, ios: int) -> subprocess.Popen[str]:
    """fio with its I/O threads in its own process (--thread: one pid to compare), its report as JSON."""
    return subprocess.Popen(["fio", "--name=fair", f"--filename={path}", f"--ioengine={engine}", "--direct=1",
                             f"--rw={rw}", f"--bs={bs}", "--iodepth=8", f"--number_ios={ios}", "--size=24m",
                             "--thread", "--randrepeat=0", "--norandommap", "--output-format=json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fio_job(p: subprocess.Popen[str]) -> dict[str, Any]:
    import json

    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    job: dict[str, Any] = json.loads(out[out.index("{"):])["jobs"][0]
    return job


def _fair_with_fio(fair_args: list[str], files: list[str], runs: list[tuple[str, str, str, int]]
                   ) -> tuple[dict[str, Any], list[int], dict[int, dict[str, Any]], int]:
    """fair (JSON, stopped with SIGINT: one report of the whole run) while a process reads a tmpfs file all
    along and one fio per (engine, rw, bs, ios) runs on each file: (report, fio pids, their jobs, tmpfs pid).
    The tmpfs reader is started, and has read once, before fair: python's start reads its modules from the
    root disk, I/O on a disk that would rightly put it in that disk's group."""
    shm = f"/dev/shm/ioscope-fair-{os.getpid()}"
    with open(shm, "wb") as f:
        f.write(os.urandom(256 * 1024))
    by = subprocess.Popen([sys.executable, "-c", BYSTANDER, shm, "60"], stdout=subprocess.PIPE, text=True)
    t: Traced | None = None
    try:
        assert by.stdout is not None and by.stdout.readline() == "ready\n"
        t = Traced("fair", "-j", *fair_args)
        fios = [_fio(path, *run) for path, run in zip(files, runs)]
        jobs = {p.pid: _fio_job(p) for p in fios}
        time.sleep(0.3)
    finally:
        out, err = t.stop() if t is not None else ("", "")
        by.kill()
        by.wait()
        os.unlink(shm)
    docs = json_lines(out)
    assert len(docs) == 1, err
    return docs[0], [p.pid for p in fios], jobs, by.pid


def _as_fio(row: dict[str, Any]) -> tuple[int, int, int, int]:
    return row["reads"], row["read_bytes"], row["writes"], row["write_bytes"]


def _fio_counts(job: dict[str, Any]) -> tuple[int, int, int, int]:
    return job["read"]["total_ios"], job["read"]["io_bytes"], job["write"]["total_ios"], job["write"]["io_bytes"]


@pytest.mark.parametrize("engine", ["libaio", "io_uring"])
def test_async_io_counted_and_only_disk_io_balanced(fs2: Any, engine: str) -> None:
    """Two fio processes (engine libaio or io_uring, O_DIRECT, QD8) on one loop disk, fair on every disk:
    in the disk's group, fair's reads, writes and bytes per process equal fio's own (--output-format=json);
    before, libaio counted 0. A process's row in the table of processes counts its reads on every file
    (fio's also those of /proc, /sys and the ELF headers the dynamic loader reads from the root disk: at
    least fio's). A third process reads a file on tmpfs all along (no disk): it is in the table of
    processes, never in a group or a balance, and no group is made for tmpfs. The read balance is Jain's
    index over exactly the two fio processes, by hand from fio's bytes; the write balance over the one
    that wrote."""
    from ioscope.base.testbed import have_fio

    assert have_fio(), "fio is installed by scripts/bootstrap.sh"
    files = [fs2.make_file(f"f{i}", 24 * MB) for i in range(2)]
    doc, (a, b), jobs, by = _fair_with_fio([], files, [(engine, "randrw", "4k", 3000),
                                                        (engine, "randread", "16k", 1000)])
    assert doc["lost"] == 0, doc["lost_detail"]
    assert doc["io_unit"]["read and write bytes"] == "syscalls"
    procs = {p["pid"]: p for p in doc["procs"]}
    groups = {g["disk"]: g for g in doc["groups"]}
    assert ":" not in "".join(groups), list(groups)  # no group for tmpfs (major:minor)
    g = groups[fs2.name]
    on_disk = {p["pid"]: p for p in g["procs"]}
    # besides fio, only kernel threads of the filesystem (ext4lazyinit reads block bitmaps up to 5 s after
    # the mount, jbd2): bios, no reads or writes of their own
    assert set(jobs) <= set(on_disk), (g["procs"], by)
    assert all(_as_fio(p) == (0, 0, 0, 0) for pid, p in on_disk.items() if pid not in jobs), g["procs"]
    for pid, job in jobs.items():
        p = on_disk[pid]
        assert _as_fio(p) == _fio_counts(job), (p, engine)
        # O_DIRECT: one bio per request, the same bytes
        assert (p["dev_read_bytes"], p["dev_write_bytes"]) == (p["read_bytes"], p["write_bytes"])
        assert all(x >= y for x, y in zip(_as_fio(procs[pid]), _as_fio(p))), (procs[pid], p)
    assert jobs[a]["write"]["total_ios"] > 0 and jobs[b]["write"]["total_ios"] == 0
    assert procs[by]["read_bytes"] > 0  # seen, on a filesystem with no disk
    for bal in (g["balance"], g["cumulative_balance"]):
        assert bal["read"]["pids"] == sorted(jobs)
        xs = [jobs[pid]["read"]["io_bytes"] for pid in sorted(jobs)]
        assert bal["read"]["jain"] == pytest.approx(sum(xs) ** 2 / (2 * sum(x * x for x in xs)), abs=1e-6)
        assert bal["write"]["pids"] == [a] and bal["write"]["n"] == 1
    assert all(by not in {p["pid"] for p in gr["procs"]} for gr in doc["groups"])
    assert all(by not in v["pids"] for gr in doc["groups"] for v in gr["balance"].values())


def test_across_disks_balances_only_disk_io(fs2: Any, fs_small: Any) -> None:
    """--across-disks judges every process against every other whatever its disk, but only I/O on disks,
    and never a process that moved no bytes of an operation, even with --min-share 0. fio randread on one
    loop disk, fio randwrite on another. With -d on both disks: each fio's row is its bytes as fio counts
    them, the reader is not in the write balance nor the writer in the read balance. On every disk: the
    process reading a tmpfs file all along is in no balance, every process balanced moved bytes of the op
    (each fio reads its libraries' ELF headers from the root disk: the writer may be in the read balance
    there, by those bytes), and the reader, which wrote nothing, is not in the write balance."""
    files = [fs2.make_file("f0", 24 * MB), fs_small.make_file("f1", 24 * MB)]
    runs = [("libaio", "randread", "4k", 2000), ("libaio", "randwrite", "4k", 1000)]
    doc, (a, b), jobs, by = _fair_with_fio(["-d", fs2.name, "-d", fs_small.name, "--across-disks",
                                            "--min-share", "0"], files, runs)
    (g,) = doc["groups"]
    assert g["disk"] is None
    assert g["balance"]["read"]["pids"] == [a] and g["balance"]["write"]["pids"] == [b]
    rows = {p["pid"]: p for p in g["procs"]}
    assert set(jobs) <= set(rows)   # and the filesystems' kernel threads, with bios only
    assert all(_as_fio(p) == (0, 0, 0, 0) for pid, p in rows.items() if pid not in jobs), g["procs"]
    for pid, job in jobs.items():
        assert _as_fio(rows[pid]) == _fio_counts(job), rows[pid]

    doc, (a, b), jobs, by = _fair_with_fio(["--across-disks", "--min-share", "0"], files, runs)
    (g,) = doc["groups"]
    assert g["disk"] is None
    rows = {p["pid"]: p for p in g["procs"]}
    assert by not in rows and all(by not in v["pids"] for v in g["balance"].values())
    assert a in g["balance"]["read"]["pids"] and a not in g["balance"]["write"]["pids"]
    assert b in g["balance"]["write"]["pids"]
    assert rows[a]["read_bytes"] >= jobs[a]["read"]["io_bytes"] and rows[a]["write_bytes"] == 0
    assert rows[b]["write_bytes"] == jobs[b]["write"]["io_bytes"]
    for op in ("read", "write"):   # every process balanced moved bytes of the op on a disk
        assert all(rows[pid][f"{op}_bytes"] > 0 for pid in g["balance"][op]["pids"])


def test_only_disk_io_is_balanced_model() -> None:
    """Pure model: a process whose bytes are on a filesystem with no disk (tmpfs, 0:45) is in the table
    but in no group; one that only wrote is not in the read balance, even with min_share 0; --across-disks
    sums a process's bytes over disks only."""
    from ioscope.base.devices import DiskStats
    from ioscope.base.hist import Hist
    from ioscope.base.losses import Losses
    from ioscope.engines.procio.model import DiskIO, ProcIO
    from ioscope.tools.fair.model import FairSample, build_report

    def proc(pid: int, op: str, app: int) -> ProcIO:
        return ProcIO(pid, f"p{pid}", op, Hist.from_values([app]), Hist.from_values([app]), Hist.from_values([]))

    procs = [proc(1, "read", 8 * MB), proc(2, "read", 2 * MB), proc(3, "write", 4 * MB), proc(4, "read", 9 * MB)]
    per_disk = [DiskIO(1, "read", "loop1", 8 * MB, app_count=8), DiskIO(2, "read", "loop1", 2 * MB, app_count=2),
                DiskIO(3, "write", "loop1", 4 * MB, app_count=1), DiskIO(4, "read", "0:45", 9 * MB, app_count=9)]
    ds = {"loop1": DiskStats("loop1", 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}
    s = FairSample(wall=0.0, seconds=1.0, procs=procs, cumulative=procs, losses=Losses(), diskstats_before=ds,
                   diskstats_after=ds, disks=[], whole_disks=["loop1"], settings={}, per_disk=per_disk,
                   cum_per_disk=per_disk)
    r = build_report(s, min_share=0.0)
    assert {row.rate.pid for row in r.rows} == {1, 2, 3, 4}   # the table: every process
    (g,) = r.groups
    assert g.disk == "loop1"
    assert g.balance["read"].pids == [1, 2] and g.balance["write"].pids == [3]
    assert {row.rate.pid: row.rate.reads for row in g.rows} == {1: 8, 2: 2, 3: 0}
    s.across_disks = True
    (g,) = build_report(s, min_share=0.0).groups
    assert g.disk is None and g.balance["read"].pids == [1, 2] and g.balance["write"].pids == [3]
