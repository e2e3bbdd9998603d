"""Live: `ioscope agg --folded --flamegraph` on a real loop device, real BPF, a workload of known size.

A dd under a name of ours (flamewr) writes WRITES blocks of 4 KiB with O_DIRECT to the raw disk. Each
write() is one bio, submitted and waited for (submit_bio_wait) before the next, with nothing else writing
to the disk: one bio is one request, no merge, so agg's bios counted at queue, dd's writes and
/proc/diskstats' completed write requests of that disk are the same number, exactly.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ioscope_cmd
from ioscope.base.devices import read_diskstats

WRITES = 211   # a prime: no other count on the disk is it by chance


def agg_around(work: Callable[[], object], *args: str) -> tuple[str, str]:
    """Start `ioscope agg ARGS`, run work() once it traces, stop agg with SIGINT; (stdout, stderr) of a
    clean exit."""
    proc = subprocess.Popen(ioscope_cmd("agg", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("Tracing"), first + proc.communicate(timeout=30)[1]
        work()
        time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    return out, err


def _funcs(frames: list[str]) -> list[str]:
    return [f.split("+")[0] for f in frames]


def test_folded_stacks_and_flame_graph_count_every_write(loopdev: Any, tmp_path: Path) -> None:
    dev = loopdev(size_mb=64)
    dd = tmp_path / "flamewr"
    dd.symlink_to("/bin/dd")
    picture = tmp_path / "flame.html"
    seen: dict[str, Any] = {}

    def work() -> None:
        seen["before"] = read_diskstats()[dev.name]
        subprocess.run([str(dd), "if=/dev/zero", f"of={dev.path}", "bs=4k", f"count={WRITES}", "oflag=direct"],
                       check=True, stderr=subprocess.DEVNULL)
        seen["after"] = read_diskstats()[dev.name]

    out, err = agg_around(work, "-d", dev.name, "-e", "count() by comm,kstack where op == write", "--folded",
                          "--flamegraph", str(picture))
    before, after = seen["before"], seen["after"]
    assert after.writes - before.writes == WRITES and after.writes_merged == before.writes_merged

    # every line: frames separated by ';', a space, the count
    lines = out.splitlines()
    assert lines, err
    stacks = []
    for line in lines:
        text, _, n = line.rpartition(" ")
        assert n.isdigit() and text, line
        stacks.append((text.split(";"), int(n)))
    assert sum(n for _f, n in stacks) == WRITES == after.writes - before.writes, out
    for frames, _n in stacks:
        assert frames[0] == "flamewr", frames     # the process first
        funcs = _funcs(frames[1:])
        # root first: the system call's entry, then write(2)'s path, then where the bio was queued, last
        assert funcs[0].startswith("entry_SYSCALL_64"), frames
        assert funcs[-1].startswith("submit_bio"), frames
        assert funcs.index("ksys_write") < funcs.index("vfs_write") < funcs.index("blkdev_write_iter"), frames
        assert not any(f.startswith(("bpf_prog_", "bpf_trace_run")) for f in funcs), frames
    assert "lost 0" in err and f"wrote {picture}" in err and f"{WRITES} in all" in err, err

    # the picture: private, the same total at its root and under the process
    assert stat.S_IMODE(os.stat(picture).st_mode) == 0o600
    page = picture.read_text()
    nums = json.loads(page.split("id=numbers>", 1)[1].split("</script>", 1)[0])
    assert nums["total"] == WRITES and nums["stacks"] == len(stacks)
    spec = json.loads(page.split("const SPEC = ", 1)[1].split(";</script>", 1)[0])
    nodes = spec["data"]["values"]
    assert [(n["frame"], n["value"]) for n in nodes if n["depth"] <= 1] == [("all", WRITES), ("flamewr", WRITES)]
    leaves = sum(n["self"] for n in nodes)
    assert leaves == WRITES


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium") and not os.environ.get("CI"),
                    reason="no /usr/bin/chromium (scripts/bootstrap.sh --test installs it)")
def test_flame_graph_page_draws_offline(loopdev: Any, tmp_path: Path) -> None:
    """The page opens in Chromium with the network cut, draws a rectangle per frame, the root WRITES wide."""
    from ioscope.engines.pages.browser import chromium, open_page
    dev = loopdev(size_mb=64)
    picture = tmp_path / "flame.html"
    out, _err = agg_around(lambda: subprocess.run(["dd", "if=/dev/zero", f"of={dev.path}", "bs=4k", f"count={WRITES}",
                                                   "oflag=direct"], check=True, stderr=subprocess.DEVNULL),
                           "-d", dev.name, "-e", "sum(bytes) by comm,kstack where op == write",
                           "--flamegraph", str(picture))
    assert "sum(bytes) by comm,kstack" in out   # without --folded the table is printed as always
    with chromium() as ctx:
        o = open_page(ctx, picture.as_uri())
        assert not o.errors and not o.requests, (o.errors, o.requests)
        marks = o.marks("flame", "frames")
    root = [m for m in marks if m["depth"] == 0]
    assert [(m["frame"], m["value"]) for m in root] == [("all", WRITES * 4096)]
    assert {m["frame"] for m in marks if m["depth"] == 1} == {"dd"}
    assert len(marks) == len(json.loads(picture.read_text().split("const SPEC = ", 1)[1]
                                        .split(";</script>", 1)[0])["data"]["values"])
