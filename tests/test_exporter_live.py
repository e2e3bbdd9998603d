"""ioscope exporter, live: a real exporter on a loop device, a known dd workload, /metrics parsed with
prometheus_client's parser and checked against /proc/diskstats and the workload's own counts."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from ioscope import devices
from ioscope.testbed import LoopDevice

pytestmark = pytest.mark.usefixtures("live")  # skips locally, fails in CI, when BPF cannot run

READS, WRITES = 13, 17  # primes: O_DIRECT 4 KiB I/Os by dd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def pick(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in m.items() if n == name and want <= set(ls))


@pytest.fixture
def loop() -> Iterator[LoopDevice]:
    with LoopDevice(64) as d:
        yield d


def start(port: int, *args: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "exporter", "--listen", f"127.0.0.1:{port}", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert "serving" in line, (line, p.stderr.read() if p.poll() is not None else "")
    return p


def dd(dev: str, op: str, n: int) -> None:
    if op == "write":
        cmd = ["dd", "if=/dev/zero", f"of={dev}", "bs=4k", f"count={n}", "oflag=direct"]
    else:
        cmd = ["dd", f"if={dev}", "of=/dev/null", "bs=4k", f"count={n}", "iflag=direct", "skip=100"]
    subprocess.run(cmd, check=True, capture_output=True)


def stop(p: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    p.send_signal(sig)
    t = time.monotonic()
    rc = p.wait(timeout=10)
    assert time.monotonic() - t < 2.0
    return rc


def bpf_progs() -> set[str]:
    out = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[0] for line in out.splitlines() if line[:1].isdigit()}


def test_counts_match_diskstats_and_workload(loop: LoopDevice) -> None:
    port = free_port()
    p = start(port, "-d", loop.name, "--per-process", "3")
    try:
        before = scrape(port)
        ds0 = devices.read_diskstats()[loop.name]
        dd(loop.path, "write", WRITES)
        dd(loop.path, "read", READS)
        time.sleep(0.2)
        ds1 = devices.read_diskstats()[loop.name]
        m = scrape(port)
        for op, n, field in (("read", READS, "reads"), ("write", WRITES, "writes")):
            d = getattr(ds1, field) - getattr(ds0, field)
            got = pick(m, "ioscope_disk_ios_total", disk=loop.name, op=op) - \
                pick(before, "ioscope_disk_ios_total", disk=loop.name, op=op)
            assert got == d
            q2c = pick(m, "ioscope_io_latency_seconds_count", disk=loop.name, op=op, phase="q2c") - \
                pick(before, "ioscope_io_latency_seconds_count", disk=loop.name, op=op, phase="q2c")
            assert q2c == n == d
            inf = pick(m, "ioscope_io_latency_seconds_bucket", disk=loop.name, op=op, phase="q2c", le="+Inf")
            assert inf >= n
        wrote = pick(m, "ioscope_disk_bytes_total", disk=loop.name, op="write") - \
            pick(before, "ioscope_disk_bytes_total", disk=loop.name, op="write")
        assert wrote == WRITES * 4096
        dd_bytes = pick(m, "ioscope_process_bytes_total", comm="dd")
        assert dd_bytes == (READS + WRITES) * 4096
        # losses only (every one 0 here), not agg's explanations such as split or inflight_at_start
        lost = {dict(ls)["reason"]: v for (n, ls), v in m.items() if n == "ioscope_lost_events_total"}
        assert lost and set(lost.values()) == {0.0} and not {"split", "inflight_at_start", "stale"} & set(lost), lost
        # the latency histograms come from the kernel's request stamps on this disk, and say so
        assert pick(m, "ioscope_disk_timing_info", disk=loop.name, timing="stamps") == 1
    finally:
        assert stop(p) == 0


def test_per_process_one_plus_other(loop: LoopDevice) -> None:
    port = free_port()
    p = start(port, "-d", loop.name, "--per-process", "1")
    try:
        scrape(port)  # start the interval: from here on every byte on the disk is the workload's
        dd(loop.path, "write", WRITES)    # two processes: one writes 17 blocks, one reads 13
        dd(loop.path, "read", READS)
        m = scrape(port)
        series = [(dict(ls), v) for (n, ls), v in m.items() if n == "ioscope_process_bytes_total"]
        named = [s for s in series if s[0]["comm"] != "other"]
        other = [s for s in series if s[0]["comm"] == "other"]
        assert len(named) == 1 and len(other) == 1
        assert named[0][1] == WRITES * 4096  # the top process of the interval: the writer
        assert named[0][1] + other[0][1] == (READS + WRITES) * 4096
    finally:
        assert stop(p) == 0


def test_per_cgroup_one_plus_other(loop: LoopDevice) -> None:
    """--per-cgroup 1: the reads queued from a cgroup v2 made by the test are its series (its path as
    the label); the writes from the test's own cgroup are summed as other; together, every byte."""
    import os
    from pathlib import Path

    from ioscope.agg.names import cgroup2_root

    root = cgroup2_root()
    assert root is not None, "no cgroup v2 hierarchy mounted"
    cg = root / f"ioscope-exp-{os.getpid()}"
    cg.mkdir()
    port = free_port()
    p = start(port, "-d", loop.name, "--per-cgroup", "1")
    try:
        scrape(port)
        # more bytes from inside the cgroup (the interval's top) than from outside it
        subprocess.run(["sh", "-c", f"echo $$ > {cg}/cgroup.procs && exec dd if={loop.path} of=/dev/null bs=4k "
                        f"count={3 * READS} iflag=direct skip=100 2>/dev/null"], check=True)
        dd(loop.path, "write", WRITES)
        m = scrape(port)
        series = {dict(ls)["cgroup"]: v for (n, ls), v in m.items() if n == "ioscope_cgroup_bytes_total"}
        assert series == {"/" + cg.name: 3 * READS * 4096, "other": WRITES * 4096}, series
        ios = {dict(ls)["cgroup"]: v for (n, ls), v in m.items() if n == "ioscope_cgroup_ios_total"}
        assert ios == {"/" + cg.name: 3 * READS, "other": WRITES}, ios
    finally:
        assert stop(p) == 0
        for _ in range(50):
            try:
                Path(cg).rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_stop_cleanly(loop: LoopDevice, sig: int) -> None:
    progs0 = bpf_progs()
    port = free_port()
    p = start(port, "-d", loop.name)
    assert bpf_progs() - progs0
    assert stop(p, sig) == 0
    assert bpf_progs() - progs0 == set()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_port_in_use_is_one_line_error(loop: LoopDevice) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "ioscope.cli", "exporter", "--listen", f"127.0.0.1:{port}",
                            "-d", loop.name], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "cannot listen" in r.stderr


@pytest.mark.parametrize("args, words", [
    (["-d", "nosuchdisk"], "nosuchdisk"),
    (["--listen", "localhost"], "is not ADDR:PORT"),
    (["--listen", "127.0.0.1:99999"], "is not ADDR:PORT"),
    (["--per-process", "-1"], "--per-process"),
])
def test_bad_arguments_are_one_line_errors(args: list[str], words: str) -> None:
    r = subprocess.run([sys.executable, "-m", "ioscope.cli", "exporter", *args], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
