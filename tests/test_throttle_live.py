"""Live tests of I/O under a cgroup throttle limit (issue 21 item 4): fio writes in a cgroup limited to
2000 write IOPS on a loop device. The throttle holds bios before the block layer's queue event and a
kworker queues many of them: record, report and fair say a limit was in force; agg charges the
writes to the cgroup the block layer charges (the bio's blkg), not to the kworker's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_counted, assert_lost_only_unseen, drain, ioscope_cmd, run_ioscope
from test_agg_live import agg_running
from test_flight_live import Flight

IOPS = 2000
WRITES = 2003   # 4 KiB direct random writes by fio in the limited cgroup: a prime, about a second at 2000/s


class Throttled:
    """A cgroup with a write IOPS limit on one disk: v1 blkio.throttle where the io controller is on the
    v1 hierarchy (this host), else v2 io.max."""

    def __init__(self, majmin: str, iops: int = IOPS) -> None:
        self.majmin = majmin
        name = f"ioscope-thr-{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/blkio")
        if (v1 / "blkio.throttle.write_iops_device").exists():
            self.path, self.hierarchy = v1 / name, "v1 blkio"
            self.path.mkdir()
            (self.path / "blkio.throttle.write_iops_device").write_text(f"{majmin} {iops}\n")
        else:
            root = Path("/sys/fs/cgroup")
            if "io" not in (root / "cgroup.subtree_control").read_text().split():
                pytest.fail("no blkio v1 hierarchy and no io controller enabled in cgroup v2: cannot throttle")
            self.path, self.hierarchy = root / name, "v2 io"
            self.path.mkdir()
            (self.path / "io.max").write_text(f"{majmin} wiops={iops}\n")
        self.cgroup = "/" + name

    def fio(self, filename: str, nios: int) -> dict[str, Any]:
        """fio's random direct writes inside the cgroup; its JSON report's first job."""
        fio = ["fio", "--name=thr", f"--filename={filename}", "--rw=randwrite", "--bs=4k", "--direct=1",
               "--ioengine=libaio", "--iodepth=16", f"--number_ios={nios}", "--size=48M", "--randrepeat=0",
               "--norandommap", "--output-format=json"]
        out = subprocess.run(["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh", *fio],
                             capture_output=True, text=True, check=True).stdout
        job: dict[str, Any] = json.loads(out[out.index("{"):])["jobs"][0]
        return job

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """argv run inside the cgroup, to its end (so the cgroup is empty again when it returns)."""
        return subprocess.run(["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh", *argv],
                              capture_output=True, text=True, check=True)

    def remove(self) -> None:
        self.path.rmdir()


@pytest.fixture
def throttled(loopdev: Callable[..., Any]) -> Iterator[tuple[Any, Throttled]]:
    ld = loopdev(size_mb=64)
    t = Throttled(ld.device.majmin)
    try:
        yield ld, t
    finally:
        t.remove()


def test_record_report_fair_say_a_limit_is_in_force(throttled: tuple[Any, Throttled], tmp_path: Path) -> None:
    ld, t = throttled
    cap = tmp_path / "thr.ioscope"
    rec = subprocess.Popen(ioscope_cmd("record", "-o", str(cap), "-d", ld.name, "-q"), stderr=subprocess.PIPE,
                           text=True)
    assert rec.stderr is not None
    line = rec.stderr.readline()
    assert line.startswith("Recording block I/O events"), line + rec.stderr.read()
    try:
        job = t.fio(ld.path, WRITES)
    finally:
        rec.send_signal(signal.SIGINT)
        _out, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert job["write"]["total_ios"] == WRITES
    # the limit held fio back: WRITES at no more than IOPS a second (the first ones pass at once)
    assert job["job_runtime"] >= 1000 * (WRITES - 2 * IOPS // 10) / IOPS / 1.05
    want = [{"cgroup": t.cgroup, "hierarchy": t.hierarchy, "dev": t.majmin, "disk": ld.name,
             "limits": {"write_iops": IOPS}}]
    p = run_ioscope("report", "--json", str(cap), check=True)
    doc = json.loads(p.stdout)
    assert doc["capture"]["io_limits"] == [{**w, "read_at": ["the recording's start"]} for w in want]
    note = f"I/O throttling limit in force: {ld.name} ({t.majmin}): cgroup {t.cgroup} ({t.hierarchy}) write_iops={IOPS}"
    assert note in doc["capture"]["io_limits_note"]
    said = [ln for ln in p.stderr.splitlines() if "throttling" in ln]
    assert said == [f"ioscope report: note: {doc['capture']['io_limits_note']}"]
    text = run_ioscope("report", str(cap), check=True)
    assert note in text.stderr

    # fair: the disk's line, in JSON and text; another disk's limits are not this one's
    f = run_ioscope("fair", "-d", ld.name, "-j", "0.5", "1", check=True)
    disk = next(json.loads(ln) for ln in f.stdout.splitlines() if ln.startswith("{"))["devices"][0]
    assert disk["disk"] == ld.name and disk["io_limits"] == want
    ft = run_ioscope("fair", "-d", ld.name, "0.5", "1", check=True)
    assert note in ft.stdout
    # snoop: one note on stderr, at its start, naming the limit; its lines' QUE(ms) holds no held wait
    sn = run_ioscope("snoop", "-d", ld.name, "-w", "0.5", check=True)
    said = [ln for ln in sn.stderr.splitlines() if "throttling" in ln]
    assert len(said) == 1 and note in said[0] and said[0].startswith("ioscope snoop: note: "), sn.stderr


SLOW_IOPS = 4
DD_WRITES = 7   # 64 KiB O_DIRECT writes by dd: at 4 IOPS about 1.75 s


def dd_writes(path: str, n: int) -> list[str]:
    return ["dd", "if=/dev/zero", f"of={path}", "bs=64k", f"count={n}", "oflag=direct", "status=none"]


def test_report_and_diff_agree_on_a_limit_set_while_the_flight_recorder_ran(
        loopdev: Callable[..., Any], tmp_path: Path) -> None:
    """Issue 24 finding 4: the flight recorder (--context) ran before a write limit was set; its second
    window's bundle holds the limit in its contexts (taken at the trigger and after the save) but not in
    the capture's header (read when the recorder started). report on that bundle names the limit (text
    and JSON), diff of the two windows shows it added on the disk, both from iolimits.recorded()."""
    import time

    from ioscope.capture.store import open_capture

    ld = loopdev(size_mb=64)
    f = Flight(tmp_path / "w", "30s", "-d", ld.name, "--context")
    t: Throttled | None = None
    try:
        subprocess.run(dd_writes(ld.path, DD_WRITES), check=True)
        f.send(signal.SIGUSR1)
        (before,) = f.saves(1)
        t = Throttled(ld.device.majmin, iops=SLOW_IOPS)
        t0 = time.monotonic()
        t.run(dd_writes(ld.path, DD_WRITES))
        took = time.monotonic() - t0
        f.send(signal.SIGUSR1)
        after = f.saves(2)[1]
        assert f.stop() == 0
    finally:
        f.kill()
        if t is not None:
            t.remove()   # dd has ended: the cgroup is empty
    # the limit held dd: at SLOW_IOPS (< 10: no initial budget) every write waits its turn
    assert took >= (DD_WRITES - 1) / SLOW_IOPS, took
    w1, w2 = before[1], after[1]
    with open_capture(w2) as cap:
        assert cap.meta["io_limits"] == []   # the header: read when the recorder started, before the limit
    want = [{"cgroup": t.cgroup, "hierarchy": t.hierarchy, "dev": t.majmin, "disk": ld.name,
             "limits": {"write_iops": SLOW_IOPS},
             "read_at": ["the bundle's start context", "the bundle's end context"]}]
    note = (f"I/O throttling limit in force: {ld.name} ({t.majmin}): cgroup {t.cgroup} ({t.hierarchy}) "
            f"write_iops={SLOW_IOPS} (in the bundle's start context, the bundle's end context)")
    doc = json.loads(run_ioscope("report", "--json", w2, check=True).stdout)
    assert doc["capture"]["io_limits"] == want
    assert note in doc["capture"]["io_limits_note"]
    text = run_ioscope("report", w2, check=True)
    assert f"ioscope report: note: {doc['capture']['io_limits_note']}" in text.stderr.splitlines()
    first = run_ioscope("report", "--json", w1, check=True)
    assert json.loads(first.stdout)["capture"]["io_limits"] == [] and "throttling" not in first.stderr
    # diff: the limit added on the disk (JSON and text), the same figures report named
    changes = json.loads(run_ioscope("diff", "-j", w1, w2, check=True).stdout)["changes"]
    setting = f"throttle {t.cgroup} ({t.hierarchy}) write_iops"
    limited = [c for c in changes if c["setting"].startswith("throttle ")]
    assert limited == [{"disk": ld.name, "setting": setting, "before": None, "after": SLOW_IOPS,
                        "direction": "added", "ratio": None}], changes
    dtext = run_ioscope("diff", w1, w2, check=True).stdout
    assert any(ln.split() == [ld.name, *setting.split(), "-", str(SLOW_IOPS), "added"]
               for ln in dtext.splitlines()), dtext


def test_agg_charges_throttled_writes_to_their_cgroup(throttled: tuple[Any, Throttled]) -> None:
    """Every write fio made in the limited cgroup is keyed by that cgroup (the bio's blkg), also those
    the throttle's kworker queued; `comm` stays the queueing task, so the kworkers keep their share;
    -c on the cgroup counts them all."""
    ld, t = throttled
    for filtered in (False, True):
        extra = ["-c", t.cgroup] if filtered else []
        with agg_running("-d", ld.name, "-e", "count() by cgroup", "-e", "count() by comm", *extra) as run:
            job = t.fio(ld.path, WRITES)
        assert run.returncode == 0, run.stderr
        assert job["write"]["total_ios"] == WRITES
        doc = run.doc
        unseen = assert_lost_only_unseen(doc["lost"], doc["lost_detail"], WRITES)
        by_cg = {r["keys"]["cgroup"]: r["count"] for r in run.rows("count() by cgroup")}
        assert set(by_cg) == {t.cgroup}, by_cg   # none on the root cgroup, none on another
        assert_counted(by_cg[t.cgroup], WRITES, unseen)
        by_comm = {r["keys"]["comm"]: r["count"] for r in run.rows("count() by comm")}
        kworkers = sum(n for c, n in by_comm.items() if c.startswith("kworker"))
        assert set(by_comm) - {"fio"} == {c for c in by_comm if c.startswith("kworker")}, by_comm
        # fio queued iodepth-deep bursts beyond the limit: the throttle's kworker queued some of them
        assert 0 < kworkers < WRITES and by_comm.get("fio", 0) + kworkers == by_cg[t.cgroup], by_comm


NOTE_IOPS = 20   # the write limit while lat measures the held bios' waits from their submit notes
NOTE_WRITES = 41


@pytest.mark.parametrize("engine", ["libaio", "io_uring"])
def test_lat_measures_each_held_wait_and_names_the_submitter(loopdev: Callable[..., Any], tmp_path: Path,
                                                             engine: str) -> None:
    """fio's 4 KiB direct writes (libaio, io_uring: slab-allocated bios) in a cgroup limited to 20 write IOPS,
    under lat -G. The throttle's kworker queues them; lat counts the bios it held exactly as the kernel's
    blk tracer does, measures each one's wait from its submit note (tracepoints only: this host refuses
    fentry) and credits them to fio, not to the kworker. Each note is taken after fio began the I/O, so the
    waits add up to no more than fio's own latencies of its writes, and, held at 20 a second, to most of
    them."""
    from blk_tracer import BlkTracer, throttle_released

    ld = loopdev(size_mb=64)
    t = Throttled(ld.device.majmin, iops=NOTE_IOPS)
    lat = subprocess.Popen(ioscope_cmd("lat", "-d", ld.name, "-G", "-j"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert lat.stderr is not None
        line = lat.stderr.readline()
        assert line.startswith("Tracing"), line + lat.stderr.read()
        time.sleep(2.5)  # lat reads the limits every 2 s and attaches the throttle's programs on the first
        with BlkTracer(ld.name) as tracer:
            fio = ["fio", "--name=notes", f"--filename={ld.path}", "--rw=randwrite", "--bs=4k", "--direct=1",
                   f"--ioengine={engine}", "--iodepth=4", f"--number_ios={NOTE_WRITES}", "--size=48M",
                   "--randrepeat=0", "--norandommap", "--output-format=json"]
            out = t.run(fio).stdout
            time.sleep(0.5)
        job = json.loads(out[out.index("{"):])["jobs"][0]
    finally:
        lat.send_signal(signal.SIGINT)
        stdout, err = drain(lat)
        t.remove()
    assert lat.returncode == 0, err
    assert "Traceback" not in err
    truth = throttle_released(tracer.text, ld.device.majmin.replace(":", ","))
    assert job["write"]["total_ios"] == NOTE_WRITES
    assert truth >= NOTE_WRITES // 2, truth  # 20 a second, 4 at a time: most of them wait their turn
    held = [h for ln in stdout.splitlines() if ln.startswith("{") for h in json.loads(ln)["throttle"]["held"]]
    assert {h["cgroup"] for h in held} == {t.cgroup}, held
    assert sum(h["held"] for h in held) == truth, (held, truth)
    assert sum(h["wait_measured"] for h in held) == truth, held
    assert {h["wait_from"] for h in held} == {"submit notes"}, held
    assert {s["comm"] for h in held for s in h["submitters"]} == {"fio"}, held
    assert sum(s["held"] for h in held for s in h["submitters"]) == truth, held
    waited = sum(h["wait_sum"] for h in held)
    fio_lat = job["write"]["lat_ns"]["mean"] * job["write"]["total_ios"]
    assert 0.5 * fio_lat <= waited <= fio_lat, (waited, fio_lat)


def _held_dd(t: Throttled, ld: Any) -> tuple[int, float]:
    """dd's NOTE_WRITES direct 4 KiB writes from t's cgroup while the kernel's blk tracer watches: (the bios
    blk-throttle held, by the tracer; dd's own time for its writes, s)."""
    import re

    from blk_tracer import BlkTracer, throttle_released

    with BlkTracer(ld.name) as tracer:
        dd = t.run(["dd", "if=/dev/zero", f"of={ld.path}", "bs=4k", f"count={NOTE_WRITES}", "oflag=direct"])
        time.sleep(0.5)
    m = re.search(r"copied, ([0-9.]+) s", dd.stderr)
    assert m, dd.stderr
    return throttle_released(tracer.text, ld.device.majmin.replace(":", ",")), float(m.group(1))


def test_fair_says_what_the_throttle_held(loopdev: Callable[..., Any]) -> None:
    """fair over dd's direct writes in a cgroup limited to 20 write IOPS: under the disk's limit line, the bios
    blk-throttle held in the interval (as many as the kernel's blk tracer shows its kworker queued), credited
    to dd, each one's wait measured (submit notes: this host refuses fentry) and adding up to most of dd's own
    time; in JSON the disk's throttle_held."""
    ld = loopdev(size_mb=64)
    t = Throttled(ld.device.majmin, iops=NOTE_IOPS)
    fair = subprocess.Popen(ioscope_cmd("fair", "-d", ld.name, "-j", "6", "1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert fair.stderr is not None
        line = fair.stderr.readline()
        assert line.startswith("Tracing per-process throughput"), line + fair.stderr.read()
        truth, dd_s = _held_dd(t, ld)
        stdout, err = drain(fair)
    finally:
        if fair.poll() is None:
            fair.kill()
            fair.wait()
        t.remove()
    assert fair.returncode == 0, err
    assert truth >= NOTE_WRITES // 4, truth
    (doc,) = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]
    (disk,) = [d for d in doc["devices"] if d["disk"] == ld.name]
    (held,) = disk["throttle_held"]
    assert (held["cgroup"], held["held"], held["wait_measured"]) == (t.cgroup, truth, truth), held
    assert [(s["comm"], s["held"]) for s in held["submitters"]] == [("dd", truth)], held
    assert 0.5 * dd_s <= held["wait_sum"] / 1e9 <= dd_s, (held, dd_s)


def test_record_keeps_what_the_throttle_held_and_report_says_it(loopdev: Callable[..., Any], tmp_path: Path) -> None:
    """record while dd's direct writes wait in blk-throttle (a cgroup limited to 20 write IOPS): the capture's
    end record keeps the bios it held, as many as the kernel's blk tracer shows its kworker queued, credited to
    dd, each one's wait measured and adding up to most of dd's own time; report says so (JSON and stderr)."""
    ld = loopdev(size_mb=64)
    t = Throttled(ld.device.majmin, iops=NOTE_IOPS)
    cap = tmp_path / "held.ioscope"
    rec = subprocess.Popen(ioscope_cmd("record", "-o", str(cap), "-d", ld.name, "-q"), stderr=subprocess.PIPE,
                           text=True)
    try:
        assert rec.stderr is not None
        line = rec.stderr.readline()
        assert line.startswith("Recording block I/O events"), line + rec.stderr.read()
        truth, dd_s = _held_dd(t, ld)
    finally:
        rec.send_signal(signal.SIGINT)
        _out, err = drain(rec)
        t.remove()
    assert rec.returncode == 0, err
    assert truth >= NOTE_WRITES // 4, truth
    p = run_ioscope("report", "--json", str(cap), check=True)
    (held,) = json.loads(p.stdout)["capture"]["throttle_held"]
    assert (held["cgroup"], held["disk"], held["held"], held["wait_measured"]) == (t.cgroup, ld.name, truth, truth)
    assert [(s["comm"], s["held"]) for s in held["submitters"]] == [("dd", truth)], held
    assert 0.5 * dd_s <= held["wait_sum"] / 1e9 <= dd_s, (held, dd_s)
    said = [ln for ln in p.stderr.splitlines() if "blk-throttle held" in ln]
    want = (f"ioscope report: note: blk-throttle held {truth} bios of cgroup {t.cgroup} on {ld.name}: their wait is "
            "not in q2c (submitted by dd")
    assert len(said) == 1 and said[0].startswith(want), said
