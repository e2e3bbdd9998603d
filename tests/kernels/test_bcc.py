"""bcc's tools beside ioscope's on the same workload, where bcc can run (issue 19, item 5).

bcc compiles its programs on the traced host against the kernel's headers: on this project's 6.18 VM
there are none (and kprobes are off), so bcc runs only in the kernel matrix's Debian 6.1 guest, whose
linux-headers scripts/kernels.py fetches (BCC_KERNEL_SOURCE). Each test starts a bcc tool and the
ioscope tool that answers the same question, runs one known workload under both, stops both with
SIGINT and compares: counts exactly, histograms bucket by bucket within what two programs taking their
own timestamps of the same I/O can differ by. Where bcc cannot run here, the test says why (n/a).
Not in the default matrix (bcc compiles each tool under emulation for minutes): run it with
`scripts/kernels.py run 6.1 -- tests/kernels/test_bcc.py`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import json_lines
from kernels.test_matrix import READS, WRITES, Tool, dd, settle, workload

BCC_START = 900.0  # seconds: bcc compiles its program with clang first (minutes under emulation)
NA = "n/a on this kernel:"


def _headers() -> str | None:
    src = os.environ.get("BCC_KERNEL_SOURCE")
    if src and Path(src, "include").is_dir():
        return src
    build = Path("/lib/modules", os.uname().release, "build")
    return str(build) if (build / "include").is_dir() else None


class Bcc:
    """A bcc tool in the background (stdout to a file), stopped with SIGINT like a user's Ctrl-C."""

    def __init__(self, tmp: Path, *cmd: str, ready: str) -> None:
        if shutil.which(cmd[0]) is None:
            pytest.fail(f"{cmd[0]} is not installed (scripts/bootstrap.sh --test installs bpfcc-tools)")
        if not _headers():
            pytest.skip(f"{NA} no kernel headers for bcc to compile against (none on this kernel)")
        self.out, self.err = tmp / f"{cmd[0]}.out", tmp / f"{cmd[0]}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + BCC_START
        while ready not in self.out.read_text():
            if self.proc.poll() is not None:
                pytest.skip(f"{NA} bcc's {cmd[0]} does not run here: {self._why()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"{cmd[0]} did not start in {BCC_START:.0f} s: {self._why()}")
            time.sleep(0.2)

    def _why(self) -> str:
        lines = [x for x in self.err.read_text().splitlines() if x.strip()]
        errors = [x for x in lines if "error:" in x]  # clang's first error says why a compile failed
        return "; ".join(errors[:2] + lines[-1:]) if lines else "no message"

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        return self.out.read_text()


def log2_slots(buckets: list[list[float]]) -> dict[int, int]:
    """lat's buckets (lo_ns, hi_ns, count) in bcc's log2 microsecond slots (a bucket by its middle)."""
    out: dict[int, int] = {}
    for lo, hi, n in buckets:
        us = int((lo + hi) / 2 / 1000)
        slot = us.bit_length() - 1 if us > 1 else 0
        out[slot] = out.get(slot, 0) + int(n)
    return out


def bcc_hist(text: str) -> dict[int, int]:
    """bcc's histogram ('  lo -> hi  : count |***|') as slot -> count (slot 0: 0 -> 1)."""
    out: dict[int, int] = {}
    for lo, _hi, n in re.findall(r"^\s*(\d+)\s*->\s*(\d+)\s*:\s*(\d+)", text, re.M):
        if int(n):
            out[int(lo).bit_length() - 1 if int(lo) else 0] = int(n)
    return out


def overlap(a: dict[int, int], b: dict[int, int]) -> int:
    return sum(min(a.get(k, 0), b.get(k, 0)) for k in set(a) | set(b))


def test_biolatency_and_lat(disk: Any, tmp_path: Path) -> None:
    bcc = Bcc(tmp_path, "biolatency-bpfcc", "-d", disk.name, ready="Tracing")
    lat = Tool(tmp_path, "lat", "-d", disk.name, "-j", "-O")
    workload(disk.path)
    settle()
    text = bcc.stop()
    out, _ = lat.stop()
    docs = json_lines(out)
    got = bcc_hist(text)
    ours: dict[int, int] = {}
    for d in docs:
        for h in d["hists"]:
            if h["phase"] == "d2c":
                for k, v in log2_slots(h["buckets"]).items():
                    ours[k] = ours.get(k, 0) + v
    assert sum(got.values()) == READS + WRITES, text
    assert sum(ours.values()) == READS + WRITES
    # the same I/Os timed by two programs, each with its own clock reads: nearly every one in the
    # same power-of-two bucket (a few near a bucket's edge may fall on either side)
    assert overlap(got, ours) >= 0.9 * (READS + WRITES), (got, ours)


def test_biosnoop_and_snoop(disk: Any, tmp_path: Path) -> None:
    bcc = Bcc(tmp_path, "biosnoop-bpfcc", "-d", disk.name, ready="TIME(s)")
    snoop = Tool(tmp_path, "snoop", "-d", disk.name, "-j")
    rpid, wpid = workload(disk.path)
    settle()
    text = bcc.stop()
    out, _ = snoop.stop()
    # TIME(s) COMM PID DISK T SECTOR BYTES LAT(ms)
    rows = [x.split() for x in text.splitlines()[1:] if len(x.split()) >= 8]
    bcc_io = {(int(r[2]), r[4], int(r[5])) for r in rows if r[3] == disk.name}
    ours = {(x["pid"], x["op"][0], x["sector"]) for x in json_lines(out) if x["pid"] in (rpid, wpid)}
    assert len([r for r in rows if r[3] == disk.name]) == READS + WRITES, text[-2000:]
    assert bcc_io == ours


def test_biotop_and_top(disk: Any, tmp_path: Path) -> None:
    bcc = Bcc(tmp_path, "biotop-bpfcc", "-C", "-r", "200", "1", ready="PID")
    top = Tool(tmp_path, "top", "-j", "-d", disk.name, ready="json")
    rpid, wpid = workload(disk.path)
    settle()
    text = bcc.stop()
    out, _ = top.stop(signal.SIGTERM)
    # PID COMM D MAJ MIN DISK I/O Kbytes AVGms, one table per second: sum a pid's rows on the disk
    bcc_ios: dict[int, int] = {}
    for r in (x.split() for x in text.splitlines()):
        if len(r) >= 9 and r[0].isdigit() and r[5] == disk.name:
            bcc_ios[int(r[0])] = bcc_ios.get(int(r[0]), 0) + int(r[6])
    docs = json_lines(out)
    ours = {pid: sum(p["ios"] for d in docs for p in d["procs"] if p["pid"] == pid) for pid in (rpid, wpid)}
    assert (bcc_ios.get(rpid, 0), bcc_ios.get(wpid, 0)) == (READS, WRITES), text[-2000:]
    assert ours == {rpid: READS, wpid: WRITES}


def test_bcc_readahead_and_readahead(fs: tuple[Any, Path], tmp_path: Path) -> None:
    dev, mnt = fs  # an 8 MiB file "a" on ext4, its pages dropped from the cache
    bcc = Bcc(tmp_path, "readahead-bpfcc", ready="Tracing")
    ra = Tool(tmp_path, "readahead", "-d", dev.name, "-j")
    dd(f"if={mnt / 'a'}", "of=/dev/null", "bs=64k")
    settle()
    text = bcc.stop()
    out, _ = ra.stop()
    doc = json_lines(out)[-1]
    pages = (8 << 20) // 4096
    f = next(x for x in doc["files"] if x["comm"] == "dd")
    assert f["used"] == pages
    m = re.search(r"Read-ahead unused pages:\s*(\d+)", text)
    assert m, text
    used_bcc = sum(bcc_hist(text).values())
    # bcc counts pages allocated inside the readahead function and used when marked accessed, for
    # every file on every disk; ioscope's used pages of dd's file are a part of what bcc saw
    assert used_bcc >= f["used"] * 0.5, (text, f)
