"""Acceptance: workers forked by a shell that exec a program, and a worker that renames itself.

What a user's script does: `sh worker.sh &` several times, where the worker reads the disk as the
shell (the shell's own `read` from the device: block I/O queued by "sh") and then `exec dd ...`.
Every tool must name that process `dd` (its name when it did its I/O), not `sh`; a capture names
each event by the name the process had then (sh before the exec, dd after). A Python worker that
calls prctl(PR_SET_NAME) between two phases of I/O is named by its new name after the rename.

About 1 in 20,000 completions runs no BPF program on this kernel (docs/lat.md, "Completions no BPF
program saw"): counts made at completion may fall short by as many as the tool reports (lat's
completion_unseen, snoop's completions check), never more, and are exact when it reports none.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_counted, ioscope_cmd, json_lines, run_ioscope, unreported_bound

NWORKERS = 3
DD_IOS = 101          # direct 4 KiB reads each exec'd dd does
RENAMED = "renamed-wrk"
RENAME_IOS = 53       # direct reads the Python worker does after renaming itself

WORKER = """\
echo $$ > "$2"
read -r x < "$1"          # the shell reads the disk itself (buffered): I/O queued by "sh"
exec dd if="$1" of=/dev/null bs=4k count={n} skip="$3" iflag=direct status=none
"""

RENAMER = """\
import ctypes, os, sys
dev, n = sys.argv[1], int(sys.argv[2])
fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
buf = __import__("mmap").mmap(-1, 4096)
os.preadv(fd, [buf], 8 << 20)                                  # once under its own name
ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(sys.argv[3].encode()), 0, 0, 0)  # PR_SET_NAME
for i in range(n):
    os.preadv(fd, [buf], (16 << 20) + i * 4096)
"""


@dataclass
class Run:
    outputs: dict[str, tuple[str, str]]
    workers: list[int]      # tgids of the exec'd workers
    capture: Path


TOOLS = {
    "lat": ["lat", "-P", "-j"],
    "top": ["top", "-j", "1"],
    "readsize": ["readsize", "-j"],
    "fair": ["fair", "-j"],
    "snoop": ["snoop", "-j"],
}


@pytest.fixture(scope="module")
def run(live: None) -> Iterator[Run]:
    from ioscope.base.testbed import LoopDevice

    with LoopDevice(size_mb=64) as ld, tempfile.TemporaryDirectory(prefix="ioscope-acc-exec-",
                                                                  dir="/dev/shm") as tmp:
        d = Path(tmp)
        script = d / "worker.sh"
        script.write_text(WORKER.format(n=DD_IOS))
        cap = d / "case.ioscope"
        with open(ld.path, "r+b") as dev:   # a line for the shell's `read` to stop at
            dev.write(b"ioscope\n")
        procs = {name: subprocess.Popen(ioscope_cmd(*args, "-d", ld.name), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for name, args in TOOLS.items()}
        procs["record"] = subprocess.Popen(ioscope_cmd("record", "-d", ld.name, "-o", str(cap)),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        early: dict[str, tuple[str, str]] = {}
        try:
            # every tool attached: its start line (top -j: its first report, after 1 s), however long a
            # loaded machine takes to start it
            for name, p in procs.items():
                assert p.stdout is not None and p.stderr is not None
                line = p.stdout.readline() if name == "top" else p.stderr.readline()
                assert line, (name, p.communicate(timeout=30))
                early[name] = (line, "") if name == "top" else ("", line)
            # the user's script: each worker in the background, then wait for it; the disk's page cache
            # is emptied first so that every worker's shell reads the disk itself
            lines = [f"blockdev --flushbufs {ld.path}\nsh {script} {ld.path} {d}/w{i} {4096 + 512 * i} &\nwait"
                     for i in range(NWORKERS)]
            subprocess.run(["sh", "-c", "\n".join(lines)], check=True)
            subprocess.run([sys.executable, "-c", RENAMER, ld.path, str(RENAME_IOS), RENAMED], check=True)
            time.sleep(2.5)   # top: an interval closes over the workload
        finally:
            for p in procs.values():
                p.send_signal(signal.SIGINT)
            outputs = {name: p.communicate(timeout=30) for name, p in procs.items()}
            outputs = {name: (early.get(name, ("", ""))[0] + out, early.get(name, ("", ""))[1] + err)
                       for name, (out, err) in outputs.items()}
        workers = [int((d / f"w{i}").read_text()) for i in range(NWORKERS)]
        for name, p in procs.items():
            assert p.returncode == 0, (name, outputs[name][1])
        yield Run(outputs, workers, cap)


def _docs(run: Run, tool: str) -> list[dict[str, Any]]:
    out, err = run.outputs[tool]
    assert "Traceback" not in err, err
    docs = json_lines(out)
    assert docs, err
    return docs


def test_lat_names_exec_workers(run: Run) -> None:
    (doc,) = _docs(run, "lat")
    q2c = {h["pid"]: h for h in doc["hists"] if h["phase"] == "q2c" and h["pid"] is not None}
    # bios whose completion ran no BPF program: found when their address came back, or still waiting
    # at the final report
    unseen = int(doc["lost_detail"]["completion_unseen"])
    assert unseen <= unreported_bound(NWORKERS * (DD_IOS + 1) + RENAME_IOS + 1), doc["lost_detail"]
    for w in run.workers:
        # the shell's read and dd's, in one process named dd; short only by what lat reported
        assert q2c[w]["comm"] == "dd" and q2c[w]["count"] + unseen >= DD_IOS + 1, (q2c.get(w), unseen)
    assert not [h for h in q2c.values() if h["comm"] == "sh"]
    (renamed,) = [h for h in q2c.values() if h["comm"] == RENAMED]
    assert_counted(renamed["count"], RENAME_IOS + 1, unseen)
    # the gaps together are within what lat reported (a miss is one I/O of one process)
    assert (sum(q2c[w]["count"] for w in run.workers) + renamed["count"] + unseen
            >= NWORKERS * (DD_IOS + 1) + RENAME_IOS + 1), (q2c, unseen)


def test_top_names_exec_workers(run: Run) -> None:
    procs = [p for doc in _docs(run, "top") for p in doc["procs"]]
    for w in run.workers:
        mine = [p for p in procs if p["pid"] == w]
        assert mine and {p["comm"] for p in mine} == {"dd"}, mine
    assert RENAMED in {p["comm"] for p in procs}


def test_readsize_and_fair_name_exec_workers(run: Run) -> None:
    (doc,) = _docs(run, "readsize")
    procs = {(p["pid"], p["op"]): p for p in doc["procs"]}
    for w in run.workers:
        p = procs[(w, "read")]
        # the shell's read and dd's reads, all in one process now called dd
        assert p["comm"] == "dd" and p["app"]["count"] >= DD_IOS + 1 and p["dev"]["count"] >= DD_IOS + 1, p
    (doc,) = _docs(run, "fair")
    names = {p["pid"]: p["comm"] for p in doc["procs"]}
    for w in run.workers:
        assert names[w] == "dd"
    assert RENAMED in names.values()


def _snoop_unseen(err: str) -> int:
    """Completions snoop says the disk made while it traced and no BPF program saw: the number its
    completions check warns of on stderr (docs/record.md, 'Completions check'), 0 without a warning."""
    return sum(int(n.replace(",", "")) for n in
               re.findall(r"^ioscope snoop: warning: .* completions were seen: ([\d,]+) (?:was|were) not ", err, re.M))


def test_snoop_names_exec_workers(run: Run) -> None:
    lines = _docs(run, "snoop")
    # a line per completion: short only by the completions snoop warns no BPF program saw
    unseen = _snoop_unseen(run.outputs["snoop"][1])
    assert unseen <= unreported_bound(NWORKERS * (DD_IOS + 1) + RENAME_IOS + 1), run.outputs["snoop"][1]
    named = [len([x for x in lines if x["pid"] == w and x["comm"] == "dd"]) for w in run.workers]
    for w, n in zip(run.workers, named):
        assert n >= DD_IOS - unseen, [x for x in lines if x["pid"] == w][:3]
    renamed = len([x for x in lines if x["comm"] == RENAMED])
    assert renamed >= RENAME_IOS - unseen
    # the gaps together are within what snoop reported (a miss is one I/O of one process)
    assert sum(named) + renamed + unseen >= NWORKERS * DD_IOS + RENAME_IOS, (named, renamed, unseen)


def test_capture_names_each_io_as_it_was_named(run: Run) -> None:
    p = run_ioscope("parse", "--names", "ioscope", str(run.capture), check=True)   # each I/O under its name then
    queued: dict[tuple[int, str], int] = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) > 6 and f[5] == "Q":
            key = (int(f[4]), f[-1].strip("[]"))
            queued[key] = queued.get(key, 0) + 1
    for w in run.workers:
        assert queued.get((w, "dd")) == DD_IOS, queued    # every dd read, named dd
        assert queued.get((w, "sh"), 0) >= 1, queued        # the shell's own read, named sh
    assert sum(n for (_pid, c), n in queued.items() if c == RENAMED) == RENAME_IOS
