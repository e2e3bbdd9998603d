#!/usr/bin/env python3
"""The exporter's soak: does anything grow while it runs for a long time under churn?

A tmpfs-backed loop device with fio at full rate (4 KiB random reads and writes, no rate limit); a churn
of short-lived processes, each a new pid under one of --names names (symlinks to dd called c0000 ...,
so each its own comm) in one of 40 cgroups, each doing 1-32 direct 4 KiB reads (so the heaviest names,
and the per-process series, keep changing); scrapers coming and going (--scrapers at a time, each a
thread that lives for 3-20 scrapes: full scrapes over a keep-alive connection, scrapes cut off with a
reset after the first 2 KiB of the answer, requests sent and the connection closed unread). The
exporter runs as contrib's unit runs it (--per-process 50 --per-cgroup 20) with --series-window 10
--series-idle 60, so that places change hands and series expire all the time. All traffic to
127.0.0.1. Every --every seconds: the exporter's RSS (VmRSS), its open descriptors (/proc/PID/fd),
the series of its exposition (a full scrape's sample lines; the process and cgroup ones), and the
full scrapes' median and 99th percentile time since the last line.

The verdict compares the last quarter's mean with the second quarter's (the first is the warm-up:
arenas, caches and the series places fill): RSS within 5%, descriptors within the scrapers' count,
series within 10% and below the bound the options set, scrape median within 50% (each bound's reason
is printed with it, and in docs/exporter.md, "Soak"). Exit 0 when flat, 1 when not.

Run as root, under the live-test lock:
    flock /tmp/ioscope-live.lock python3 bench/exporter_soak.py [--minutes 20] [--every 30]
It stops by itself; on any exit (SIGINT and SIGTERM too) the processes, the loop device, the cgroups
and the temporary directory are removed.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from exporter_memory import free_port, rss_mib  # bench/, beside this file: the memory bench's helpers
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopDevice, TestCgroups

PER_PROCESS, PER_CGROUP = 50, 20  # contrib/ioscope-exporter.service's
GROUPS = 40  # more cgroups than places: they compete for them
EXPORTER_ARGS = ["--per-process", str(PER_PROCESS), "--per-cgroup", str(PER_CGROUP), "--series-window", "10",
                 "--series-idle", "60"]
# per cgroup key: ios, bytes, and two latency histograms (q2c, d2c) of 25 series each (22 bounds, +Inf,
# sum, count); at most 2N + 1 keys per kind (N named, at most N frozen, other: docs/exporter.md, "Series");
# and the I/O wait series (io_wait_seconds, io_waits, swapin_seconds, swapins), a set of their own of at most
# 2N + 1 keys too
CGROUP_SERIES_PER_KEY = 2 + 2 * 25 + 4
PROCESS_SERIES_PER_KEY = 2 + 4
CHURN_NICE = 5  # the churn thread and the processes it starts: fio and the exporter keep their CPU share

# the verdict's bounds (why each is that size: bound_reasons())
RSS_BOUND = 0.05
SERIES_BOUND = 0.10
LATENCY_BOUND = 0.50


def bound_reasons(scrapers: int) -> dict[str, str]:
    return {
        "rss": f"+{RSS_BOUND:.0%}: glibc's and Python's allocators grow in steps of about 1 MiB (arenas), "
               "about 1.5% of the exporter's RSS; a leak of a few hundred bytes per process seen, or of 1-2 KiB "
               "per scrape, adds more than 5% over the half of the run between the two quarters",
        "fds": f"+{scrapers + 1}: at the moment of a sample each of the {scrapers} scrapers and the sampler may "
               "hold one connection; a descriptor leaked per aborted scrape or per expired series would add "
               "hundreds",
        "series": f"{SERIES_BOUND:.0%}, and never above the options' bound: the frozen series at a moment depend on "
                  "how many places changed hands in the last window (random); series that were never dropped "
                  "would grow with the names seen (thousands)",
        "latency": f"+{LATENCY_BOUND:.0%} on the median: scrape time follows the series (bounded) and the host's "
                   "load (shared, with another session's work beside it: medians of one configuration spread "
                   "150-234 ms between 30 s intervals in bench/exporter_memory.py); something walked per scrape "
                   "that grows with the processes seen would double it",
    }



def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def count_series(text: bytes) -> tuple[int, int, int]:
    """(all sample lines, those with a comm label, those with a cgroup label but no device) of an exposition."""
    total = procs = cgroups = 0
    for ln in text.splitlines():
        if not ln or ln.startswith(b"#"):
            continue
        total += 1
        if b'comm="' in ln:
            procs += 1
        elif ln.startswith(b"ioscope_cgroup_") and b'cgroup="' in ln:
            cgroups += 1
    return total, procs, cgroups


@dataclass
class Sample:
    t: float
    procs: int  # short-lived processes started so far
    rss_mib: float
    fds: int
    series: int
    process_series: int
    cgroup_series: int
    connections: int  # ioscope_http_connections in the sampler's scrape
    scrapes: int  # full scrapes since the last sample
    cut: int  # scrapes cut off or closed unread since the last sample
    failed: int
    p50_ms: float
    p99_ms: float


@dataclass
class Traffic:
    """What the scrapers did since the last take()."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    times: list[float] = field(default_factory=list)
    cut: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def take(self) -> tuple[list[float], int, int]:
        with self.lock:
            out = (self.times, self.cut, self.failed)
            self.times, self.cut, self.failed = [], 0, 0
        return out


def _full(port: int, rng: random.Random, traffic: Traffic, stop: threading.Event, n: int) -> None:
    """n full scrapes over one keep-alive connection, as Prometheus scrapes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for _ in range(n):
            if stop.is_set():
                return
            t = time.perf_counter()
            try:
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                body = r.read()
                ok = r.status == 200 and body.startswith(b"# HELP")
            except (OSError, http.client.HTTPException) as e:
                ok = False
                conn.close()
                with traffic.lock:
                    traffic.errors.append(repr(e))
            with traffic.lock:
                if ok:
                    traffic.times.append(time.perf_counter() - t)
                else:
                    traffic.failed += 1
            stop.wait(rng.uniform(0.2, 1.0))
    finally:
        conn.close()


def _cut(port: int, rng: random.Random, traffic: Traffic, stop: threading.Event, n: int) -> None:
    """n scrapes given up: after the first 2 KiB of the answer with a reset (SO_LINGER 0), or with the request
    sent and nothing read (a plain close)."""
    for _ in range(n):
        if stop.is_set():
            return
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                if rng.random() < 0.5:
                    s.recv(2048)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with traffic.lock:
                traffic.cut += 1
        except OSError as e:
            with traffic.lock:
                traffic.failed += 1
                traffic.errors.append(repr(e))
        stop.wait(rng.uniform(0.2, 1.0))


def scrapers(port: int, count: int, traffic: Traffic, stop: threading.Event, seed: int) -> None:
    """Keep count scrapers going, each a thread of 3-20 scrapes of one kind; a new one when one ends."""
    rng = random.Random(seed)
    alive: list[threading.Thread] = []
    while not stop.is_set():
        alive = [t for t in alive if t.is_alive()]
        while len(alive) < count:
            kind: Callable[..., None] = _full if rng.random() < 0.6 else _cut
            t = threading.Thread(target=kind, args=(port, random.Random(rng.random()), traffic, stop,
                                                    rng.randint(3, 20)), daemon=True)
            t.start()
            alive.append(t)
        stop.wait(0.2)
    for t in alive:
        t.join(timeout=35)


def churn(dev: str, bindir: Path, names: int, cg: TestCgroups, rate: float, stop: threading.Event,
          spawned: list[int], seed: int) -> None:
    """Short-lived processes, one after another, at most rate a second: each a new pid, a random name of
    bindir (its comm), a random cgroup, 1-32 direct 4 KiB reads at a random place."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), CHURN_NICE)  # this thread and its children
    rng = random.Random(seed)
    gap = 1.0 / rate
    nxt = time.monotonic()
    while not stop.is_set():
        # half the processes under a few names (a heavy tail: those the places are fought over), half under
        # any of the names (thousands of comms seen: the names without a place, and the expiry, at work)
        i = min(int(rng.paretovariate(0.7)) - 1, names - 1) if rng.random() < 0.5 else rng.randrange(names)
        count = rng.randint(1, 32)
        subprocess.run(cg.shell(f"g{rng.randrange(GROUPS):02d}", f"{bindir}/c{i:04d} if={dev} of=/dev/null bs=4k "
                                f"count={count} iflag=direct skip={rng.randrange(60000)} status=none"),
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spawned[0] += 1
        nxt += gap
        delay = nxt - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        else:
            nxt = time.monotonic()


def scrape_text(port: int) -> bytes:
    return bytes(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read())


def wait_serving(p: subprocess.Popen[str], timeout: float = 120) -> str:
    """The exporter's first line ("serving ..."), or an error with its stderr."""
    assert p.stdout is not None
    line = p.stdout.readline()
    if "serving" not in line:
        p.wait(timeout=timeout)
        raise RuntimeError(f"the exporter did not start: {line!r} {p.stderr.read() if p.stderr else ''}")
    return line


def series_bound(base: int) -> int:
    """The most sample lines the exposition can have: what does not depend on processes and cgroups
    (measured before any traffic, less its own process and cgroup series), and at most 2N + 1 keys per kind."""
    return base + PROCESS_SERIES_PER_KEY * (2 * PER_PROCESS + 1) + CGROUP_SERIES_PER_KEY * (2 * PER_CGROUP + 1)


@dataclass
class Result:
    samples: list[Sample]
    base_fds: int
    base_series: int
    bound: int
    exit_status: int
    stderr: str
    fio_status: int
    fio_iops: float
    errors: list[str]
    disk: str  # the loop device it ran on, and the top of its cgroups (both removed by then)
    cgroup_dir: Path


def soak(minutes: float, every: float, scraper_count: int = 4, names: int = 2000, rate: float = 25.0,
         out: TextIO = sys.stdout, seed: int = 1) -> Result:
    """The soak itself (bench and tests/test_exporter_soak.py): everything made is removed on every exit."""
    io = io_cgroup_root()
    assert io is not None, "no cgroup hierarchy with the io controller"
    tmp = Path(tempfile.mkdtemp(prefix="ioscope-soak-"))
    procs: list[subprocess.Popen[Any]] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()
    spawned = [0]
    traffic = Traffic()
    samples: list[Sample] = []
    cg: TestCgroups | None = None
    exporter: subprocess.Popen[str] | None = None
    errfile: TextIO | None = None
    exit_status, stderr, fio_status, fio_iops = -1, "", -1, 0.0
    # put back at the end: soak() also runs inside the test suite's process (tests/test_exporter_soak.py),
    # where a SIGTERM left ignored was inherited by every program started after it
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        dd = shutil.which("dd") or "/bin/dd"
        for i in range(names):
            (tmp / f"c{i:04d}").symlink_to(dd)  # exec through the link: its name is the process's comm
        cg = TestCgroups(io[0], "ioscope-soak", [f"g{g:02d}" for g in range(GROUPS)])
        with LoopDevice(size_mb=256) as dev:
            port = free_port()
            errfile = open(tmp / "exporter.stderr", "w+")  # a file: a pipe nobody reads for 20 minutes could fill
            exporter = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "exporter", "-d", dev.name, "--listen",
                                         f"127.0.0.1:{port}", *EXPORTER_ARGS], stdout=subprocess.PIPE,
                                        stderr=errfile, text=True)
            procs.append(exporter)
            try:
                wait_serving(exporter)
            except RuntimeError as e:
                errfile.seek(0)
                raise RuntimeError(f"{e} {errfile.read()}") from None
            first = scrape_text(port)
            total, p_series, c_series = count_series(first)
            base_series = total - p_series - c_series
            bound = series_bound(base_series)
            base_fds = open_fds(exporter.pid)
            fio_out = open(tmp / "fio.terse", "w+")
            fio = subprocess.Popen(["fio", "--name=soak", f"--filename={dev.path}", "--rw=randrw", "--bs=4k",
                                    "--iodepth=16", "--ioengine=libaio", "--direct=1", "--time_based",
                                    f"--runtime={int(minutes * 60 + 120)}", "--randrepeat=0", "--norandommap",
                                    "--output-format=terse"],
                                   stdout=fio_out, stderr=subprocess.DEVNULL)
            procs.append(fio)
            threads = [threading.Thread(target=churn, args=(dev.path, tmp, names, cg, rate, stop, spawned, seed)),
                       threading.Thread(target=scrapers, args=(port, scraper_count, traffic, stop, seed))]
            for th in threads:
                th.start()
            print(f"exporter pid {exporter.pid} on {dev.name}, port {port}: {base_fds} descriptors, {total} series "
                  f"before any traffic; series bound {bound}", file=out, flush=True)
            print(f"{'t (s)':>6} {'procs':>7} {'RSS MiB':>8} {'fds':>5} {'series':>7} {'proc':>5} {'cgrp':>5} "
                  f"{'conns':>5} {'scrapes':>7} {'cut':>5} {'failed':>6} {'p50 ms':>7} {'p99 ms':>7}", file=out,
                  flush=True)
            t0 = time.monotonic()
            for k in range(1, max(1, round(minutes * 60 / every)) + 1):
                stop.wait(max(0.0, t0 + k * every - time.monotonic()))
                if exporter.poll() is not None or fio.poll() is not None:
                    raise RuntimeError(f"exporter {exporter.returncode}, fio {fio.returncode}: ended early")
                rss, fds = rss_mib(exporter.pid), open_fds(exporter.pid)
                text = scrape_text(port)
                total, p_series, c_series = count_series(text)
                conns = next((int(float(ln.split()[-1])) for ln in text.splitlines()
                              if ln.startswith(b"ioscope_http_connections ")), -1)
                ts, cut, failed = traffic.take()
                ts.sort()
                s = Sample(t=time.monotonic() - t0, procs=spawned[0], rss_mib=rss, fds=fds, series=total,
                           process_series=p_series, cgroup_series=c_series, connections=conns, scrapes=len(ts),
                           cut=cut, failed=failed,
                           p50_ms=statistics.median(ts) * 1000 if ts else float("nan"),
                           p99_ms=ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1000 if ts else float("nan"))
                samples.append(s)
                print(f"{s.t:>6.0f} {s.procs:>7} {s.rss_mib:>8.1f} {s.fds:>5} {s.series:>7} {s.process_series:>5} "
                      f"{s.cgroup_series:>5} {s.connections:>5} {s.scrapes:>7} {s.cut:>5} {s.failed:>6} "
                      f"{s.p50_ms:>7.1f} {s.p99_ms:>7.1f}", file=out, flush=True)
            _quiet_stop_signals()  # the stop below is not cut short by a second Ctrl-C
            stop.set()
            for th in threads:
                th.join(timeout=60)
            exporter.send_signal(signal.SIGTERM)
            exit_status = exporter.wait(timeout=30)
            errfile.seek(0)
            stderr = errfile.read()
            fio.send_signal(signal.SIGTERM)  # fio's time_based run is longer than the soak: stopped here
            fio_status = fio.wait(timeout=30)
            fio_out.seek(0)
            terse = fio_out.read().split(";")
            fio_out.close()
            if len(terse) > 48:  # terse version 3: read IOPS field 8, write IOPS field 49
                fio_iops = float(terse[7]) + float(terse[48])
        return Result(samples, base_fds, base_series, bound, exit_status, stderr, fio_status, fio_iops,
                      traffic.errors, dev.name, cg.root)
    finally:
        _quiet_stop_signals()
        stop.set()
        for th in threads:
            th.join(timeout=60)
        for p in procs:  # on an early exit: the exporter first stopped as systemd would, fio after it
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if errfile is not None:
            errfile.close()
        if cg is not None:
            cg.remove()
        shutil.rmtree(tmp, ignore_errors=True)
        for sig, h in handlers.items():
            if h is not None:
                signal.signal(sig, h)


def _stop_now(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _quiet_stop_signals() -> None:
    """From here on SIGINT and SIGTERM change nothing: the clean-up runs to its end."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def quarter_means(samples: list[Sample], minutes: float, attr: str) -> tuple[float, float]:
    """The means of attr over the second and the last quarter of the run (by time)."""
    span = minutes * 60
    q2 = [getattr(s, attr) for s in samples if span / 4 < s.t <= span / 2 + 1]
    q4 = [getattr(s, attr) for s in samples if s.t > 3 * span / 4]
    return statistics.fmean(q2) if q2 else float("nan"), statistics.fmean(q4) if q4 else float("nan")


def verdict(r: Result, minutes: float, scraper_count: int) -> list[tuple[str, float, float, str, bool]]:
    """(what, second quarter's mean, last quarter's mean, the bound, within it) for each measure."""
    rows = []
    rss2, rss4 = quarter_means(r.samples, minutes, "rss_mib")
    rows.append(("RSS MiB", rss2, rss4, f"<= +{RSS_BOUND:.0%}", rss4 <= rss2 * (1 + RSS_BOUND)))
    fd2, fd4 = quarter_means(r.samples, minutes, "fds")
    rows.append(("fds", fd2, fd4, f"<= +{scraper_count + 1}", fd4 <= fd2 + scraper_count + 1))
    se2, se4 = quarter_means(r.samples, minutes, "series")
    rows.append(("series", se2, se4, f"+-{SERIES_BOUND:.0%}, <= {r.bound}",
                 abs(se4 - se2) <= se2 * SERIES_BOUND and max(s.series for s in r.samples) <= r.bound))
    la2, la4 = quarter_means(r.samples, minutes, "p50_ms")
    rows.append(("scrape p50 ms", la2, la4, f"<= +{LATENCY_BOUND:.0%}", la4 <= la2 * (1 + LATENCY_BOUND)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20.0, help="how long (default 20)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between two samples (default 30)")
    ap.add_argument("--scrapers", type=int, default=4, help="scrapers at a time (default 4)")
    ap.add_argument("--names", type=int, default=2000, help="process names of the churn (default 2000)")
    ap.add_argument("--rate", type=float, default=25.0, help="short-lived processes a second, at most (default 25)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/exporter_soak.py: run as root (BPF, loop devices, cgroups)", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _stop_now)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        r = soak(args.minutes, args.every, args.scrapers, args.names, args.rate)
    except KeyboardInterrupt:
        print("bench/exporter_soak.py: interrupted; everything it made is removed", file=sys.stderr)
        return 130
    s = r.samples
    scrapes, cut, failed = sum(x.scrapes for x in s), sum(x.cut for x in s), sum(x.failed for x in s)
    err = f", stderr {r.stderr.strip()!r}" if r.stderr.strip() else ""
    print(f"\n{started}, {args.minutes:g} min: {s[-1].procs:,} short-lived processes ({args.names} names, {GROUPS} "
          f"cgroups, nice {CHURN_NICE}), {scrapes:,} full scrapes, {cut:,} cut off, {failed} failed; exporter "
          f"{' '.join(EXPORTER_ARGS)}; fio {r.fio_iops:,.0f} IOPS; exit {r.exit_status}{err}")
    print(f"{'':<14}{'Q2 mean':>9}{'Q4 mean':>9}  {'bound':<16}flat")
    rows = verdict(r, args.minutes, args.scrapers)
    for what, a, b, bound, ok in rows:
        print(f"{what:<14}{a:>9.1f}{b:>9.1f}  {bound:<16}{'yes' if ok else 'NO'}")
    for what, why in bound_reasons(args.scrapers).items():
        print(f"  {what}: {why}")
    rss2, _ = quarter_means(s, args.minutes, "rss_mib")
    p2, p4 = quarter_means(s, args.minutes, "procs")
    # the middles of the two quarters are half the run apart: the scrapes of the run's second half
    between = max(1, sum(x.scrapes + x.cut for x in s if x.t > args.minutes * 60 / 2 + 1))
    leak = RSS_BOUND * rss2 * 2**20
    print(f"  the RSS bound is {leak / 2**20:.1f} MiB: {leak / max(1.0, p4 - p2):,.0f} bytes per process started, or "
          f"{leak / between:,.0f} per scrape, between the two quarters' middles")
    flat = all(ok for *_, ok in rows) and r.exit_status == 0 and not r.stderr.strip()
    print("verdict: " + ("flat" if flat else "NOT flat"))
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
