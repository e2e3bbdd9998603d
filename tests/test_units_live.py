"""Every tool says what its I/O counts count (issue 24 delivery 5, base/units.py), and counts it: O_DIRECT
writes (and reads) of 512 KiB on a loop disk whose max_sectors_kb is set to 64, so that each bio is split
into 8 requests and bios != requests. Ground truth: bios = dd's own count of its I/Os (one bio per
O_DIRECT block), requests = the /proc/diskstats delta of the disk (no merges: checked), pieces = the
requests here (each split piece is one request when nothing merges)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from conftest import ioscope_cmd, json_lines, run_ioscope
from ioscope.base import units

NIOS = 7          # dd's blocks: 7 bios
BLOCK_KB = 512    # each split into BLOCK_KB / MAX_KB requests
MAX_KB = 64


@dataclass
class Running:
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    docs: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def running(*args: str) -> Iterator[Running]:
    """`ioscope ARGS` from its "Tracing" line to a SIGINT; its JSON lines in .docs."""
    run = Running()
    proc = subprocess.Popen(ioscope_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    try:
        if not first.startswith("Tracing"):
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"ioscope {args[0]} did not start: {first}{err}{out}")
        yield run
        time.sleep(0.3)   # the last completions reach the maps
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        run.stdout, err = proc.communicate(timeout=60)
        run.stderr, run.returncode = first + err, proc.returncode
    assert run.returncode == 0, run.stderr
    run.docs = json_lines(run.stdout)


@dataclass
class Truth:
    bios: int
    requests: int

    def of(self, unit: str) -> int:
        # PIECES: bios after split, before merge; nothing merges here (checked), so one per request
        return {units.BIOS: self.bios, units.PIECES: self.requests, units.REQUESTS: self.requests}[unit]


def split_io(dev: Any, op: str = "write") -> Truth:
    """dd's NIOS direct I/Os of BLOCK_KB; the disk's requests for them from /proc/diskstats."""
    before = dev.diskstats()
    io = ([f"if={dev.path}", "of=/dev/null", "iflag=direct"] if op == "read"
          else ["if=/dev/zero", f"of={dev.path}", "oflag=direct"])
    p = subprocess.run(["dd", *io, f"bs={BLOCK_KB}k", f"count={NIOS}"], capture_output=True, text=True, check=True)
    assert p.stderr.startswith(f"{NIOS}+0 records in\n{NIOS}+0 records out"), p.stderr   # dd's own count
    after = dev.diskstats()
    if op == "read":
        done, merged = after.reads - before.reads, after.reads_merged - before.reads_merged
    else:
        done, merged = after.writes - before.writes, after.writes_merged - before.writes_merged
    # the truth is the kernel's count (done); the split at MAX_KB is its least: a disk whose max_segments
    # binds before max_sectors_kb (a buffer's pages not contiguous) cuts a bio into more pieces
    assert merged == 0 and done >= NIOS * BLOCK_KB // MAX_KB, (done, merged)
    return Truth(NIOS, done)


def split_disk(loopdev: Any) -> Any:
    dev = loopdev(size_mb=64)
    dev.set_queue("max_sectors_kb", str(MAX_KB))
    return dev


def test_agg_counts_requests_from_the_stamps_and_bios_at_queue(loopdev: Any) -> None:
    dev = split_disk(loopdev)
    for expr, unit in (("count() by disk", units.REQUESTS), ("count() by comm", units.BIOS)):
        with running("agg", "-d", dev.name, "-e", expr, "-j") as run:
            truth = split_io(dev)
        (doc,) = run.docs
        assert doc["io_unit"] == unit, (expr, doc["timing"])
        rows = doc["aggs"][0]["rows"]
        got = rows[0]["count"] if expr.endswith("disk") else sum(r["count"] for r in rows if r["keys"]["comm"] == "dd")
        assert got == truth.of(unit), (expr, got, truth)


def test_lat_counts_requests_or_pieces(loopdev: Any) -> None:
    dev = split_disk(loopdev)
    for extra, want in (((), units.REQUESTS), (("--timing", "probes"), {"d2c": units.REQUESTS,
                                                                          "q2c q2d": units.PIECES})):
        with running("lat", "-d", dev.name, "-j", *extra) as run:
            truth = split_io(dev)
        (doc,) = run.docs
        assert doc["io_unit"] == want, doc["timing"]
        counts = {h["phase"]: h["count"] for h in doc["hists"]}
        q_unit = want if isinstance(want, str) else want["q2c q2d"]
        assert counts["d2c"] == truth.requests and counts["q2c"] == truth.of(q_unit), (counts, truth)


def test_snoop_prints_a_line_per_request(loopdev: Any) -> None:
    dev = split_disk(loopdev)
    with running("snoop", "-d", dev.name, "-j") as run:
        truth = split_io(dev)
    assert units.says(units.REQUESTS) in run.stderr.splitlines()[0]
    lines = [d for d in run.docs if d["op"].startswith("W")]
    assert {d["io_unit"] for d in lines} == {units.REQUESTS}
    assert len(lines) == truth.of(units.REQUESTS)


def test_readsize_counts_syscalls_bios_and_requests(loopdev: Any) -> None:
    dev = split_disk(loopdev)
    with running("readsize", "-d", dev.name, "-j") as run:
        truth = split_io(dev, "read")
    assert units.says({"app": units.SYSCALLS, "dev": units.BIOS, "requests": units.REQUESTS}) in run.stderr
    (doc,) = run.docs
    assert doc["io_unit"] == {"app": units.SYSCALLS, "dev": units.BIOS, "requests": units.REQUESTS}
    (dd,) = [p for p in doc["procs"] if p["comm"] == "dd" and p["op"] == "read"]
    assert dd["app"]["count"] == NIOS   # dd's read system calls: one a block
    assert dd["dev"]["count"] == truth.of(units.BIOS)
    (req,) = [r for r in doc["requests"] if r["disk"] == dev.name and r["op"] == "read"]
    assert req["count"] == truth.of(units.REQUESTS)


def test_top_devices_count_requests_processes_pieces(loopdev: Any) -> None:
    dev = split_disk(loopdev)
    proc = subprocess.Popen(ioscope_cmd("top", "-b", "-j", "1", "6"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()   # one refresh out: tracing
        assert first.startswith("{"), first + proc.stderr.read() if proc.stderr else ""
        truth = split_io(dev)
        out, _err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    docs = [json.loads(first), *json_lines(out)]
    assert {json.dumps(d["io_unit"]) for d in docs} == {json.dumps({"devices": units.REQUESTS,
                                                                    "processes": units.PIECES})}
    w = sum(round(d2["w_s"] * d["interval_s"]) for d in docs for d2 in d["devices"] if d2["disk"] == dev.name)
    assert w == truth.of(units.REQUESTS)
    dd = sum(p["ios"] for d in docs for p in d["procs"] if p["disk"] == dev.name and p["comm"] == "dd")
    assert dd == truth.of(units.PIECES), (dd, truth)


def test_report_counts(loopdev: Any, tmp_path: Any) -> None:
    dev = split_disk(loopdev)
    cap = str(tmp_path / "u.ioscope")
    rec = subprocess.Popen(ioscope_cmd("record", "-o", cap, "-d", dev.name, "-q"), stderr=subprocess.PIPE, text=True)
    assert rec.stderr is not None
    line = rec.stderr.readline()
    assert line.startswith("Recording block I/O events"), line
    try:
        truth = split_io(dev)
    finally:
        rec.send_signal(signal.SIGINT)
        rec.communicate(timeout=60)
    doc = json.loads(run_ioscope("report", "--json", cap, check=True).stdout)
    unit = {phase: u for k, u in doc["io_unit"].items() for phase in k.split()}
    phases = doc["devices"][f"{dev.device.major},{dev.device.minor}"]["phases"]
    assert phases["d2c"]["n"] == truth.of(unit["d2c"])
    assert phases["q2c"]["n"] == truth.of(unit["q2c"]), (phases["q2c"]["n"], truth, unit)
    text = run_ioscope("report", cap, check=True).stdout
    assert f"N {units.says(doc['io_unit'])}" in text.splitlines()   # under "Latency percentiles (ioscope)"
