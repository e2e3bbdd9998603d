"""Acceptance: the drill-down of seed 001 with ioscope agg, the way a user does it.

A disk is busier than it should be. The user asks which process (`count() by comm,disk`, printed
every second and cleared, as DTrace's `printa(@); clear(@)`), sees an outlier, then asks the next
question of the same I/O: how big and how slow (`sum(bytes) by comm,op`, `quantize(d2c) by comm`),
and only the big ones (`where bytes >= 64k`). Each run is started in the background by a script and
stopped with kill -INT, as scripts stop bpftrace; it must exit 0, print the interval it was in, and
the numbers it prints (text, not JSON) must be the workload's.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import assert_counted, bpf_prog_ids, programs_left, text_losses, unreported_bound

NOISY = 467    # 16 KiB direct writes by the outlier: a prime
QUIET = 29     # 4 KiB direct reads by a well-behaved process


def _script_run(tmp: Path, args: list[str], workload: list[list[str]], settle: float = 1.3) -> tuple[str, str]:
    """sh: `ioscope agg ARGS > out 2> err &`, the workload, then kill -INT; returns (out, err)."""
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ioscope.cli", "agg", *args])
    work = "\n".join(" ".join(shlex.quote(a) for a in w) + " 2>/dev/null" for w in workload)
    script = (f"{cmd} > {tmp}/out 2> {tmp}/err &\n"
              f"pid=$!\n"
              f"until grep -q Tracing {tmp}/err 2>/dev/null; do sleep 0.05; done\n"
              f"echo $pid > {tmp}/pid\n"
              f"{work}\n"
              f"sleep {settle}\n"
              f"kill -INT $pid\n"
              f"wait $pid\n"
              f"echo $? > {tmp}/rc\n")
    p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    progs: set[int] = set()
    while time.monotonic() < deadline and not progs:
        if (tmp / "pid").exists() and (tmp / "pid").read_text().strip():
            progs = bpf_prog_ids(int((tmp / "pid").read_text()))
        time.sleep(0.02)
    assert p.wait(timeout=60) == 0
    assert (tmp / "rc").read_text().strip() == "0", (tmp / "err").read_text()
    err = (tmp / "err").read_text()
    assert "Traceback" not in err, err
    time.sleep(0.3)  # the kernel frees programs after an RCU grace period
    assert progs and not programs_left(progs), "agg left BPF programs loaded"
    return (tmp / "out").read_text(), err


def _table(out: str, expr: str, ncols: int) -> dict[tuple[str, ...], str]:
    """Sum over every interval printed of the rows of one expression's table: keys -> value text
    (the last interval's when the value is not a count)."""
    rows: dict[tuple[str, ...], str] = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != expr:
            continue
        for row in lines[i + 2:]:
            parts = row.split()
            if len(parts) != ncols:
                break
            key = tuple(parts[:-1])
            if parts[-1].isdigit() and key in rows and rows[key].isdigit():
                rows[key] = str(int(rows[key]) + int(parts[-1]))
            else:
                rows[key] = parts[-1]
    return rows


def test_drill_down(loopdev: Any, tmp_path: Path) -> None:
    dev = loopdev(size_mb=64)
    noisy = tmp_path / "noisy"
    noisy.symlink_to("/bin/dd")
    workload = [[str(noisy), "if=/dev/zero", f"of={dev.path}", "bs=16k", f"count={NOISY}", "oflag=direct"],
                ["dd", f"if={dev.path}", "of=/dev/null", "bs=4k", f"count={QUIET}", "iflag=direct"]]

    # 1. which process? every second, cleared each time; Ctrl-C prints the interval it was in
    (tmp_path / "1").mkdir()
    out, err = _script_run(tmp_path / "1", ["-d", dev.name, "-e", "count() by comm,disk", "1"], workload)
    assert f"on {dev.name}" in err
    counts = _table(out, "count() by comm,disk", 3)
    assert counts == {("noisy", dev.name): str(NOISY), ("dd", dev.name): str(QUIET)}, out
    # DTrace's order in every table printed: ascending, the largest last
    blocks = out.split("count() by comm,disk")[1:]
    assert len(blocks) >= 2  # at least one full interval and the one Ctrl-C ended
    for b in blocks:
        values = [int(ln.split()[-1]) for ln in b.splitlines()[2:] if len(ln.split()) == 3]
        assert values == sorted(values), b

    # 2. what is it doing, and how slow is it? the same I/O, the next questions, all at once
    (tmp_path / "2").mkdir()
    out, err = _script_run(tmp_path / "2", ["-d", dev.name, "-e", "sum(bytes) by comm,op",
                                            "-e", "quantize(d2c) by comm", "-e",
                                            "count() by comm where bytes >= 16k and op == write"], workload)
    # d2c: made at completion (the probes). An I/O whose completion ran no BPF program (docs/lat.md) is
    # not counted and is said on stderr ('ioscope agg: lost N values (N completion_unseen (...))'), the
    # header's 'lost N' on stdout agreeing; nothing else may be lost. Exact when nothing was reported
    lost, unseen = text_losses(err)
    assert lost == unseen <= unreported_bound(NOISY + QUIET), err
    assert text_losses(out)[0] == lost, out
    sums = _table(out, "sum(bytes) by comm,op", 3)
    assert set(sums) == {("noisy", "write"), ("dd", "read")}, out
    assert int(sums[("noisy", "write")]) % 16384 == 0 and int(sums[("dd", "read")]) % 4096 == 0, sums
    n_noisy, n_quiet = int(sums[("noisy", "write")]) // 16384, int(sums[("dd", "read")]) // 4096
    assert_counted(n_noisy, NOISY, unseen)
    assert_counted(n_quiet, QUIET, unseen)
    assert n_noisy + n_quiet + unseen == NOISY + QUIET, (n_noisy, n_quiet, unseen)   # counted or reported
    # the other questions read the same records: exact against those
    assert _table(out, "count() by comm where bytes >= 16k and op == write", 2) == {("noisy",): str(n_noisy)}
    # the distribution of the outlier's device time: its counts add up to its I/Os
    text = out.split("quantize(d2c) by comm", 1)[1]
    block = text.split("comm=noisy", 1)[1].split("comm=", 1)[0]
    counts_in_dist = [int(m.group(1)) for m in re.finditer(r"\|[@ ]+ (\d+)", block)]
    assert sum(counts_in_dist) == n_noisy, block
    assert "p50" in block and "p99" in block


def test_where_in_the_code_as_a_flame_graph(loopdev: Any, tmp_path: Path) -> None:
    """The next question: which code path queued the outlier's I/O? The user asks for stacks as the
    flame-graph tools take them (stdout to a file) and for the picture, stops agg with Ctrl-C, and finds
    the outlier's writes under its name, the write(2) path root first, and the same count in the picture."""
    dev = loopdev(size_mb=64)
    noisy = tmp_path / "noisy"
    noisy.symlink_to("/bin/dd")
    workload = [[str(noisy), "if=/dev/zero", f"of={dev.path}", "bs=16k", f"count={NOISY}", "oflag=direct"],
                ["dd", f"if={dev.path}", "of=/dev/null", "bs=4k", f"count={QUIET}", "iflag=direct"]]
    picture = tmp_path / "flame.svg"
    (tmp_path / "1").mkdir()
    out, err = _script_run(tmp_path / "1", ["-d", dev.name, "-e", "count() by comm,kstack", "--folded",
                                            "--flamegraph", str(picture)], workload)
    per_comm: dict[str, int] = {}
    for line in out.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        per_comm[frames[0]] = per_comm.get(frames[0], 0) + int(n)
        if frames[0] == "noisy":
            funcs = [f.split("+")[0] for f in frames[1:]]
            assert funcs.index("ksys_write") < funcs.index("blkdev_write_iter") < len(funcs) - 1, frames
    # the two processes' own I/O, exactly; a reader of the raw disk (udev's blkid after the writer closed
    # it) may add its own reads under its own name
    assert per_comm["noisy"] == NOISY and per_comm["dd"] == QUIET, out
    assert f"wrote {picture}" in err, err
    total = sum(per_comm.values())
    assert f"frame: all; count: {total}; % of all: 100.00" in picture.read_text()
