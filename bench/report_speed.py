#!/usr/bin/env python3
"""ioscope report vs btt at several capture sizes and on a real recording: time and peak memory.

For each input, in one run:
1. A synthetic but realistic capture made with CaptureWriter (--sizes, in events): I/Os at a
   steady rate with about 27 in flight, random 4-64 KiB reads and writes from four processes on
   two CPUs, scattered over the disk (no two I/Os in flight overlap), 10% of them back-merged
   into the previous request, plug/unplug around bursts; every I/O is Q G I D C (merged ones Q M).
   And, with --real SECONDS, a real whole-host recording: `ioscope record` of every disk while
   fio reads and writes a tmpfs loop device (mq-deadline) at a fixed rate and the host does what
   it does (or --capture FILE, a recording made elsewhere).
2. Export it to a blktrace binary (ioscope export).
3. Run `ioscope report --json CAPTURE`, `btt -i EXPORT` and `ioscope report --json EXPORT`, one
   after the other, --repeat times (alternating); wall time and peak RSS (GNU time) of each, the
   fastest run of each kept.
4. Print the ratios (ioscope / btt; below 1 means ioscope is faster/smaller), a table of every
   input at the end, and check that btt and ioscope agree on Q2C, D2C and I2D (averages, counts).

usage: bench/report_speed.py [--sizes N,N,...] [--real SECONDS | --capture FILE] [--repeat N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base.devices import kdev
from ioscope.capture.events import (
    EVENT,
    TA_BACKMERGE,
    TA_COMPLETE,
    TA_GETRQ,
    TA_INSERT,
    TA_ISSUE,
    TA_PLUG,
    TA_QUEUE,
    TA_UNPLUG_IO,
    TC_COMPLETE,
    TC_ISSUE,
    TC_QUEUE,
    TC_READ,
    TC_WRITE,
)

DEV = kdev(7, 0)
PIDS = (4101, 4102, 4103, 4104)
COMMS = {4101: "fio", 4102: "fio", 4103: "postgres", 4104: "kworker/u4:2", 0: "swapper/0"}


EVENTS_PER_IO = 4.84  # what synth_chunks makes: Q G I D C, Q M for a merged tenth, P U every 16th


def synth_chunks(n_events: int, seed: int = 7, ios_per_chunk: int | None = None) -> Iterator[npt.NDArray[np.void]]:
    """EVENT arrays (each sorted by time) for about n_events events, in chunks of ios_per_chunk I/Os
    each; by default 100,000 (fewer for a small capture) and the last one cut to the size asked."""
    cut_last = ios_per_chunk is None  # a size asked for: the last chunk cut to it; else whole chunks
    if ios_per_chunk is None:
        ios_per_chunk = max(1000, min(100_000, int(n_events / EVENTS_PER_IO)))
    rng = np.random.default_rng(seed)
    slots = rng.permutation(1 << 22).astype(np.int64)
    t = 1_000_000_000_000
    made = 0
    while made < n_events:
        n = ios_per_chunk
        if cut_last:  # the last chunk only as large as the events still wanted
            n = max(2, min(n, math.ceil((n_events - made) / EVENTS_PER_IO)))
        gap = rng.exponential(3_700, n).astype(np.int64) + 200
        q = t + np.cumsum(gap)
        t = int(q[-1])
        size = (rng.integers(1, 17, n) * 4096).astype(np.int64)
        # random 128 KiB slots, each used once per 4 million I/Os: I/Os in flight never overlap, as on a
        # real disk (btt loses track of overlapping ones; see docs/report.md); seeks are random
        first = made // 5 % len(slots)
        sector = slots[(first + np.arange(n)) % len(slots)] * 256 + rng.integers(0, 16, n) * 8
        merged = rng.random(n) < 0.10
        merged[0] = False
        merged[1:] &= ~merged[:-1]           # a merged I/O joins the previous, unmerged one
        # a merged I/O continues the previous one's range, queued right after the previous insert
        owner = np.arange(n)
        owner[merged] -= 1
        sector[merged] = sector[owner[merged]] + size[owner[merged]] // 512
        g = q + 800 + rng.integers(0, 400, n)
        i = g + 500 + rng.integers(0, 300, n)
        q[merged] = i[owner[merged]] + 150
        m_t = q + 120
        d = i + rng.exponential(2_500, n).astype(np.int64) + 100
        d[merged] = d[owner[merged]]
        c = d + rng.lognormal(11.4, 0.5, n).astype(np.int64)
        req_bytes = size.copy()
        np.add.at(req_bytes, owner[merged], size[merged])
        write = rng.random(n) < 0.3
        write[merged] = write[owner[merged]]
        pid = np.array(PIDS)[rng.integers(0, len(PIDS), n)]
        pid[merged] = pid[owner[merged]]
        cpu = rng.integers(0, 2, n).astype(np.uint16)
        base_cat = np.where(write, TC_WRITE, TC_READ).astype(np.uint16)
        un = ~merged
        parts: list[npt.NDArray[np.void]] = []
        cols = {"pid": pid, "cpu": cpu, "cat": base_cat}
        everyone = np.ones(n, dtype=bool)
        parts.append(_events(cols, q, TA_QUEUE, sector, size, everyone, TC_QUEUE, None))
        parts.append(_events(cols, g, TA_GETRQ, sector, size, un, 0, None))
        parts.append(_events(cols, i, TA_INSERT, sector, size, un, 0, None))
        parts.append(_events(cols, m_t, TA_BACKMERGE, sector, size, merged, 0, None))
        parts.append(_events(cols, d, TA_ISSUE, sector, req_bytes, un, TC_ISSUE, None))
        parts.append(_events(cols, c, TA_COMPLETE, sector, req_bytes, un, TC_COMPLETE, np.zeros(n, dtype=np.int64)))
        # a plug/unplug pair around every 16th I/O
        pl = np.zeros(n, dtype=bool)
        pl[::16] = True
        zero = np.zeros(n, dtype=np.int64)
        pl &= un
        parts.append(_events(cols, q - 50, TA_PLUG, zero, zero, pl, 0, None))
        parts.append(_events(cols, i + 40, TA_UNPLUG_IO, zero, zero, pl, 0, None))
        parts[-1]["aux"] = 1
        allev = np.concatenate(parts)
        allev = allev[np.argsort(allev["ts"], kind="stable")]
        made += len(allev)
        yield allev


def _events(cols: dict[str, npt.NDArray[Any]], ts: npt.NDArray[np.int64], act: int, sec: npt.NDArray[np.int64],
            nb: npt.NDArray[np.int64], sel: npt.NDArray[np.bool_], extra: int,
            p: npt.NDArray[np.int64] | None) -> npt.NDArray[np.void]:
    e = np.zeros(int(sel.sum()), dtype=EVENT)
    e["ts"] = ts[sel]
    e["action"] = act
    e["sector"] = sec[sel]
    e["bytes"] = nb[sel]
    e["dev"] = DEV
    e["pid"] = (cols["pid"] if p is None else p)[sel]
    e["tgid"] = e["pid"]
    e["cpu"] = cols["cpu"][sel]
    e["category"] = cols["cat"][sel] | extra
    return e


def write_capture(path: str, n_events: int) -> int:
    from ioscope.capture.store import CaptureWriter
    meta = {"devices": {"7,0": {"name": "loop0", "major": 7, "minor": 0}}, "synthetic": True}
    w = CaptureWriter(path, meta, flush_interval=1e9, force=True)
    w.add_comms(COMMS)
    n = 0
    for chunk in synth_chunks(n_events):
        w.write(chunk)
        n += len(chunk)
    w.close()
    return n


def run_child(cmd: list[str], capture: bool, cwd: str | None = None) -> tuple[float, int, bytes, int]:
    """Wall seconds, peak RSS (KiB), stdout and exit code of cmd.

    The peak RSS comes from GNU time, a small process that forks the command:
    measured from this (large) Python process, a child's ru_maxrss would
    include the memory it inherited before exec.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-o", tf.name, "-f", "%e %M", *cmd]
        t0 = time.perf_counter()  # GNU time's %e has 10 ms steps: too coarse for the small inputs
        p = subprocess.run(full, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                           stderr=subprocess.PIPE, check=False, cwd=cwd)
        wall = time.perf_counter() - t0
        _e, rss = tf.read().split()[-2:]
    return wall, int(rss), p.stdout or b"", p.returncode


def btt_all(text: str) -> dict[str, tuple[float, int]]:
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] in ("Q2C", "D2C", "I2D", "Q2Q", "Q2G", "G2I", "Q2M", "M2D"):
            rows[parts[0].lower()] = (float(parts[2]), int(parts[4]))
    return rows


def record_real(path: str, seconds: float) -> None:
    """A real whole-host recording: every disk, while fio reads and writes a tmpfs loop device."""
    from ioscope.base.testbed import LoopDevice

    with LoopDevice(size_mb=512, scheduler="mq-deadline") as dev:
        rec = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "record", "-q", "-f", "-o", path,
                                "-w", str(seconds + 1)], stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the recorder attaches within 0.3 s
        subprocess.run(["fio", "--name=real", f"--filename={dev.path}", "--rw=randrw", "--rwmixread=70",
                        "--bssplit=4k/60:16k/25:64k/15", "--iodepth=8", "--ioengine=libaio", "--direct=1",
                        "--rate_iops=20000", f"--runtime={seconds}", "--time_based", "--size=512m",
                        "--randrepeat=0"], check=True, stdout=subprocess.DEVNULL)
        _out, err = rec.communicate(timeout=seconds + 60)
        if rec.returncode != 0:
            sys.exit(f"ioscope record failed: {err}")


def compare(name: str, cap: str, work: str, repeat: int) -> tuple[str, int, tuple[float, int], tuple[float, int],
                                                                  tuple[float, int]]:
    """Export cap, run report (on both inputs) and btt alternately; print and return the fastest of each."""
    bin_ = cap + ".blktrace"
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    info = subprocess.run([sys.executable, "-m", "ioscope.capture.store", cap], capture_output=True,
                          text=True, check=True).stdout
    n = int(json.loads(info)["events"])
    print(f"== {name}: {n:,} events, {os.path.getsize(cap) / 1e6:.1f} MB")
    w, rss, _o, rc = run_child([*ioscope, "export", cap, "--format", "blktrace", "-o", bin_, "-f"], False)
    assert rc == 0, "export failed"
    print(f"export: {os.path.getsize(bin_) / 1e6:.1f} MB blktrace in {w:.2f} s (peak RSS {rss / 1024:.0f} MiB)")
    runs: dict[str, list[tuple[float, int]]] = {"cap": [], "exp": [], "btt": []}
    out_io = out_iob = b""
    for _ in range(max(1, repeat)):   # alternated, so that a busy moment hits all three alike
        w, rss, out_io, rc = run_child([*ioscope, "report", "--json", cap], True)
        assert rc == 0, "ioscope report failed"
        runs["cap"].append((w, rss))
        w, rss, _out, rc = run_child(["btt", "-i", bin_, "-o", os.path.join(work, "btt")], False, cwd=work)
        assert rc == 0, "btt failed"
        runs["btt"].append((w, rss))
        # the same analysis reading the blktrace export (ioscope's blktrace reader instead of the
        # capture reader): the same input as btt
        w, rss, out_iob, rc = run_child([*ioscope, "report", "--json", bin_], True)
        assert rc == 0, "ioscope report on the blktrace export failed"
        runs["exp"].append((w, rss))
    assert json.loads(out_iob)["phases"]["q2c"]["n"] == json.loads(out_io)["phases"]["q2c"]["n"]
    best = {k: (min(x[0] for x in v), min(x[1] for x in v)) for k, v in runs.items()}
    print(f"all runs (s): capture {[round(x[0], 3) for x in runs['cap']]}, export "
          f"{[round(x[0], 3) for x in runs['exp']]}, btt {[round(x[0], 3) for x in runs['btt']]}")
    ours = json.loads(out_io)["phases"]
    with open(os.path.join(work, "btt.avg")) as f:
        theirs = btt_all(f.read())
    for ph in ("q2c", "d2c", "i2d"):
        if ph not in theirs:
            continue
        a, nb = theirs[ph]
        same = f"{ours[ph]['avg']:.9f}" == f"{a:.9f}" and ours[ph]["n"] == nb
        print(f"  {ph.upper()}: ioscope avg {ours[ph]['avg']:.9f} n {ours[ph]['n']}, "
              f"btt avg {a:.9f} n {nb} -> {'equal' if same else 'DIFFERENT'}")
    (w_io, rss_io), (w_iob, rss_iob), (w_bt, rss_bt) = (best[k] for k in ("cap", "exp", "btt"))
    print(f"ioscope report CAPTURE : {w_io:7.3f} s, peak RSS {rss_io / 1024:7.1f} MiB")
    print(f"ioscope report EXPORT  : {w_iob:7.3f} s, peak RSS {rss_iob / 1024:7.1f} MiB")
    print(f"btt -i EXPORT          : {w_bt:7.3f} s, peak RSS {rss_bt / 1024:7.1f} MiB")
    print(f"time ratio (ioscope/btt):   capture {w_io / w_bt:.2f}, export {w_iob / w_bt:.2f}")
    print(f"memory ratio (ioscope/btt): capture {rss_io / rss_bt:.2f}, export {rss_iob / rss_bt:.2f}")
    os.unlink(bin_)
    return name, n, best["cap"], best["exp"], best["btt"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000,10000000",
                    help="synthetic captures of about these many events (default 100000,1000000,10000000)")
    ap.add_argument("--real", type=float, metavar="SECONDS", default=0,
                    help="also record the whole host for SECONDS while fio runs on a tmpfs loop device")
    ap.add_argument("--capture", metavar="FILE", help="also a recording made elsewhere")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--repeat", type=int, default=3,
                    help="run each analysis this many times, alternating, and keep the fastest (default 3)")
    ap.add_argument("--events", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--generate", metavar="CAPTURE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        write_capture(args.generate, args.events)
        return 0
    if not os.path.exists("/usr/bin/time"):
        sys.exit("GNU time (/usr/bin/time) is needed to measure peak memory: apt install time")
    if shutil.which("btt") is None:
        sys.exit("btt not found (apt install blktrace)")
    work = args.dir or tempfile.mkdtemp(prefix="ioscope-bench-")
    os.makedirs(work, exist_ok=True)
    results = []
    try:
        inputs: list[tuple[str, str]] = []
        for size in (int(x) for x in args.sizes.split(",") if x):
            cap = os.path.join(work, f"synth{size}.ioscope")
            # made in a child process, so that this one stays small
            subprocess.run([sys.executable, __file__, "--generate", cap, "--events", str(size)], check=True)
            inputs.append(("synthetic", cap))
        if args.real:
            cap = os.path.join(work, "real.ioscope")
            record_real(cap, args.real)
            inputs.append((f"real, whole host, {args.real:g} s", cap))
        if args.capture:
            inputs.append(("real: " + os.path.basename(args.capture), args.capture))
        for name, cap in inputs:
            results.append(compare(name, cap, work, args.repeat))
        print("\ninput                          events   report s   MiB    btt s    MiB  time ratio  mem ratio"
              "  (export: time, mem)")
        for name, n, (w_io, r_io), (w_iob, r_iob), (w_bt, r_bt) in results:
            print(f"{name:26s} {n:>11,} {w_io:9.3f} {r_io / 1024:6.1f} {w_bt:8.3f} {r_bt / 1024:6.1f} "
                  f"{w_io / w_bt:11.2f} {r_io / r_bt:10.2f}  ({w_iob / w_bt:.2f}, {r_iob / r_bt:.2f})")
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
