"""ioscope agg --bpftrace: a real bpftrace program on block tracepoints during a known workload on a loop
device, its maps rendered by agg; against bpftrace's own JSON of the same program run beside it, and the
workload's own count. Needs root, BPF and bpftrace (fails in CI otherwise)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from conftest import ioscope_cmd, run_ioscope
from ioscope.agg.bpftrace import STARTED, map_names, wrap

READS = 211  # direct 4 KiB reads by dd: a prime


def _program(dev: int) -> str:
    return (f"tracepoint:block:block_rq_complete /args->dev == {dev}/ {{ @ios[args->rwbs] = count(); "
            f"@sectors = hist(args->nr_sector); @lin = lhist(args->nr_sector, 0, 32, 4); }}")


def _reference(prog: str) -> subprocess.Popen[str]:
    """bpftrace itself running prog, with a BEGIN block that prints STARTED: bpftrace prints its
    attached_probes line before attaching, BEGIN runs after (a reference that missed the workload
    on a loaded machine printed no map at all)."""
    return subprocess.Popen(["bpftrace", "-f", "json", "-e", f'{prog}\nBEGIN {{ printf("{STARTED}\\n"); }}'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _started(p: subprocess.Popen[str], what: str) -> None:
    """Wait until p has attached: agg says 'Tracing' on stderr, the reference bpftrace prints STARTED."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        stream = p.stderr if what == "agg" else p.stdout
        assert stream is not None
        line = stream.readline()
        if not line:
            break
        if (what == "agg" and line.startswith("Tracing")) or (what != "agg" and STARTED in line):
            return
    p.kill()
    raise AssertionError(f"{what} did not start: {p.communicate()}")


def test_maps_match_bpftrace_and_the_workload(live: None, loopdev: Callable[..., Any]) -> None:
    dev = loopdev(size_mb=64, scheduler="none")
    prog = _program(dev.device.dev)
    agg = subprocess.Popen(ioscope_cmd("agg", "--bpftrace", prog, "-j"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    ref = _reference(prog)
    try:
        _started(agg, "agg")
        _started(ref, "bpftrace")
        before = dev.diskstats()
        subprocess.run(["dd", f"if={dev.path}", "of=/dev/null", "bs=4k", f"count={READS}", "iflag=direct",
                        "status=none"], check=True, timeout=60)
        time.sleep(0.3)
        after = dev.diskstats()
    finally:
        for p in (agg, ref):
            p.send_signal(signal.SIGINT)
        out, err = agg.communicate(timeout=60)
        ref_out, _ = ref.communicate(timeout=60)
    assert agg.returncode == 0, err
    assert after.reads - before.reads == READS
    docs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert len(docs) == 1  # no interval: one report, printed when stopped
    tables = {a["expr"]: a["rows"] for a in docs[0]["aggs"]}
    assert docs[0]["lost"] == 0
    # bpftrace's own output of the same program, printed at its exit
    theirs: dict[str, Any] = {}
    for ln in ref_out.splitlines():
        if ln.startswith("{"):
            d = json.loads(ln)
            if d["type"] in ("map", "hist"):
                theirs.update(d["data"])
    ios = {r["keys"]["key"]: r["value"] for r in tables["@ios"]}
    assert ios == theirs["@ios"]
    assert sum(n for k, n in ios.items() if k.startswith("R")) == READS
    (sectors,) = tables["@sectors"]
    assert sectors["keys"] == {}
    ref_buckets = [(b["min"], b["max"] + 1, b["count"]) for b in theirs["@sectors"] if b["count"]]
    assert [tuple(b) for b in sectors["buckets"] if b[2]] == ref_buckets
    assert sum(b[2] for b in sectors["buckets"]) == READS
    assert ref_buckets == [(8, 16, READS)]  # every read is 8 sectors
    assert sectors["p50"] == pytest.approx(12.0, abs=4)  # inside [8, 16)
    (lin,) = tables["@lin"]
    assert [tuple(b) for b in lin["buckets"] if b[2]] == [(8, 12, READS)]


def test_intervals_count_and_sigint(live: None, loopdev: Callable[..., Any]) -> None:
    """With an interval: one JSON object per interval, cleared each time; SIGINT prints the last one."""
    dev = loopdev(size_mb=64, scheduler="none")
    agg = subprocess.Popen(ioscope_cmd("agg", "--bpftrace", _program(dev.device.dev), "-j", "1"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _started(agg, "agg")
        subprocess.run(["dd", f"if={dev.path}", "of=/dev/null", "bs=4k", f"count={READS}", "iflag=direct",
                        "status=none"], check=True, timeout=60)
        time.sleep(2.5)
    finally:
        agg.send_signal(signal.SIGINT)
        out, err = agg.communicate(timeout=60)
    assert agg.returncode == 0, err
    docs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert len(docs) >= 3, out  # two full intervals and the last, partial one
    total = 0
    for d in docs:
        for a in d["aggs"]:
            if a["expr"] == "@ios":
                total += sum(r["value"] for r in a["rows"] if r["keys"]["key"].startswith("R"))
    assert total == READS, out  # cleared every interval: each read counted once
    assert all(0.9 < d["interval_s"] < 1.2 for d in docs[1:-1])


def test_count_stops_bpftrace(live: None) -> None:
    p = run_ioscope("agg", "--bpftrace", "interval:ms:100 { @ticks = count(); }", "-j", "0.5", "2", timeout=60)
    assert p.returncode == 0, p.stderr
    docs = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert len(docs) == 2
    ticks = [a["rows"][0]["value"] for d in docs for a in d["aggs"] if a["expr"] == "@ticks"]
    assert len(ticks) == 2 and all(4 <= t <= 6 for t in ticks), ticks
    left = subprocess.run(["pgrep", "-f", "interval:ms:100 { @ticks"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "bpftrace still running"


@pytest.mark.parametrize(("args", "needle"), [
    (["--bpftrace", "tracepoint:block:block_rq_complete { @x = count( }"], "syntax error"),
    (["--bpftrace", "tracepoint:block:nosuch { @x = count(); }"], "tracepoint not found"),
    (["--bpftrace", "BEGIN { printf(\"hi\"); }"], "no maps"),
    (["--bpftrace", "BEGIN { @x = 1; }", "-e", "count() by comm"], "no -e"),
    (["--bpftrace-file", "/nonexistent/prog.bt"], "cannot read --bpftrace-file"),
])
def test_bad_programs_get_one_line(live: None, args: list[str], needle: str) -> None:
    p = run_ioscope("agg", *args, "1", "1", timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_map_names_and_wrap() -> None:
    prog = '// @commented\nkprobe:x { @a[comm] = count(); @ = sum(1); printf("@not_a_map"); @b_2 = hist(1); }'
    assert map_names(prog) == ["@a", "@", "@b_2"]
    w = wrap(prog, ["@a", "@"], 2.5, cumulative=False)
    assert "interval:ms:2500 { print(@a); print(@); clear(@a); clear(@);" in w
    assert "clear" not in wrap(prog, ["@a"], 1, cumulative=True).split("interval:ms:1000")[1]
    # the start mark: in a BEGIN of ours, or in the program's own (bpftrace allows one)
    assert wrap(prog, ["@a"], None, cumulative=False) == f'{prog}\nBEGIN {{ printf("{STARTED}\\n"); }}\n'
    own = 'BEGIN { @t = nsecs; } kprobe:x { @a = count(); }'
    assert wrap(own, ["@t", "@a"], None, cumulative=False).startswith(f'BEGIN {{ printf("{STARTED}\\n"); ')
    assert wrap(own, ["@t", "@a"], None, cumulative=False).count("BEGIN") == 1
