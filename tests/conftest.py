"""Shared fixtures. Live tests need root, BPF and loop devices.

Without them a live test is skipped on a developer's machine, but fails when
CI is set: CI must never pass by skipping the real tests.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the interpreter in a shell line: quoted (a clone under "/tmp/io scope" has a space in it)
PY = shlex.quote(sys.executable)


def _bpf_problem() -> str | None:
    if os.geteuid() != 0:
        return "live tests need root"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "live tests need kernel BTF (/sys/kernel/btf/vmlinux)"
    try:
        from ioscope.kernel import _libbpf  # noqa: F401
    except ImportError as exc:
        return f"ioscope.kernel._libbpf is not built: {exc}"
    if not Path("/dev/loop-control").exists():
        return "live tests need loop devices (/dev/loop-control)"
    return None


@pytest.fixture(scope="session")
def live() -> None:
    """Use in every live test: skips locally, fails in CI, when BPF cannot run."""
    problem = _bpf_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"{problem} (CI is set: live tests must run, not skip)")
        pytest.skip(problem)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from kernels.selection import CGROUP_V2, tool_of

    v2_boot = os.environ.get("IOSCOPE_GUEST_CGROUP") == "v2"
    for item in items:
        if "live" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.live)
        rel = Path(str(item.fspath)).resolve().relative_to(ROOT / "tests").as_posix()
        tool, tool_v2 = tool_of(rel, item.name), tool_of(rel, item.name, CGROUP_V2)
        if tool:
            item.add_marker(pytest.mark.kernels)
        if tool_v2:
            item.add_marker(pytest.mark.kernels_v2)
        if tool_v2 if v2_boot else tool:  # the table's row (scripts/kernels.py)
            item.user_properties.append(("tool", tool_v2 if v2_boot else tool))


@pytest.fixture
def loopdev(live: None) -> Iterator[Callable[..., Any]]:
    """Factory: loopdev(size_mb=..., scheduler=...) -> an entered LoopDevice, removed after the test."""
    from ioscope.base.testbed import LoopDevice

    made: list[LoopDevice] = []

    def make(**kw: Any) -> LoopDevice:
        d = LoopDevice(**kw)
        made.append(d)   # before it is made: a stop that lands as it returns still has it removed
        return d.__enter__()

    yield make
    for d in reversed(made):
        d.__exit__(None, None, None)


def drain(p: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """The rest of a tool's stdout and stderr, and its exit. Popen.communicate() reads the pipes' file
    descriptors, not their file objects: what a readline() before it buffered (a note printed right after
    the start line) is lost. This reads through the file objects, each in a thread of its own."""
    import threading

    got: dict[str, str] = {}

    def read(name: str) -> None:
        f = getattr(p, name)
        got[name] = f.read() if f is not None else ""

    readers = [threading.Thread(target=read, args=(n,)) for n in ("stdout", "stderr")]
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout)
    p.wait(timeout)
    return got.get("stdout", ""), got.get("stderr", "")


def ioscope_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ioscope.cli", *args]


def run_ioscope(*args: str, timeout: float = 60, env: dict[str, str] | None = None,
                check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess and capture its output."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(ioscope_cmd(*args), capture_output=True, text=True, timeout=timeout, env=e)
    if check and p.returncode != 0:
        raise AssertionError(f"ioscope {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def bpf_prog_ids(pid: int) -> set[int]:
    """IDs of the BPF programs a process holds open (from /proc/PID/fdinfo)."""
    ids = set()
    base = Path(f"/proc/{pid}/fdinfo")
    for fd in os.listdir(base):
        try:
            text = (base / fd).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("prog_id:"):
                ids.add(int(line.split()[1]))
    return ids


def loaded_prog_ids() -> set[int]:
    """IDs of every BPF program loaded in the kernel."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {int(p["id"]) for p in json.loads(out)}


def programs_left(ids: set[int], timeout: float = 10.0) -> set[int]:
    """Which of these BPF programs are still loaded, waiting up to timeout for them to go: the kernel
    frees a program when its last link is released, after an RCU grace period (tens of ms; a raw
    tracepoint link waits for RCU Tasks Trace), not when the process that held it exits. The timeout
    is for a host busy with emulated guests, where a grace period can take seconds; it returns as soon
    as they are gone."""
    deadline = time.monotonic() + timeout
    left = ids & loaded_prog_ids()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = ids & loaded_prog_ids()
    return left


def unreported_bound(nios: int) -> int:
    """The most completions that may run no BPF program among nios I/Os and a test still pass: 0.25%
    plus 2. On these VMs a completion whose softirq runs on top of another task's thread reaches the
    kernel's own blk tracer and no BPF program (docs/lat.md, "Completions no BPF program saw"): from
    1 in 120,000 to 1 in 20,000 at 5,000 IOPS on a quiet host, at most 312 in ~500,000 at full
    rate, and 24 in 19,997 (0.12%) at 6,000 IOPS in CI of 2026-11-29, when two emulated guests of the
    kernel matrix kept both CPUs busy beside the host suite (softirqs then run on top of their
    threads more often than in ksoftirqd). The bound is twice that worst rate. This is the platform's
    loss, not the tool's: a tool that loses or miscounts I/O itself fails the exact identities the
    tests check beside this bound (timed + reported == the workload's count)."""
    return 2 + nios // 400


# The kernel matrix's guests (tests/kernels/guest.sh) run under emulation, 5-10 times slower: a time
# budget meant for real hardware (how fast a tool stops) is scaled there, never dropped
EMULATION_FACTOR = 5.0 if os.environ.get("IOSCOPE_GUEST") else 1.0


def assert_counted(got: int, truth: int, reported: int) -> None:
    """A tool counted got of the workload's truth I/Os and reported `reported` completions that ran
    no BPF program: exact when it reported none, never more than the workload, never a gap it did
    not report (beyond what others' I/O on the disk could explain, which is never a shortfall)."""
    assert reported <= unreported_bound(truth), (got, truth, reported)
    if reported == 0:
        assert got == truth, (got, truth)
    else:
        assert truth - reported <= got <= truth, (got, truth, reported)


def assert_lost_only_unseen(lost: int, detail: Mapping[str, int], nios: int) -> int:
    """A tool's report lost nothing but completions that ran no BPF program (completion_unseen, docs/lat.md),
    and no more of those than unreported_bound(nios) for the nios I/Os it traced. Returns how many."""
    unseen = int(detail.get("completion_unseen", 0))
    assert lost == unseen, (lost, dict(detail))
    assert unseen <= unreported_bound(nios), (unseen, nios)
    return unseen


def text_losses(text: str) -> tuple[int, int]:
    """(lost, completion_unseen) summed over a text report's 'lost N' headers and its lines naming the losses
    ('lost: completion_unseen 1, ...' in top, 'lost: 1 completion_unseen (...)' in lat)."""
    lost = sum(int(n) for n in re.findall(r"\blost (\d+)", text))
    unseen = sum(int(a or b) for a, b in re.findall(r"\bcompletion_unseen (\d+)|\b(\d+) completion_unseen", text))
    return lost, unseen


def unreported_completions(capture_path: str, major: int, minor: int) -> int:
    """Completions the kernel made on a disk while recording that never reached the recorder.

    On this kernel a few completions in tens of thousands run no BPF program (docs/lat.md). The
    recorder compares /proc/diskstats with its C events and stores that in the capture; tests
    accept a gap only when the capture reports it, it matches the C events in the file, and it
    is within unreported_bound().
    """

    from ioscope.capture.events import EVENT
    from ioscope.capture.store import open_capture
    from ioscope.engines.recording.recorder import count_completions, flush_machines

    with open_capture(capture_path) as cap:
        assert cap.end is not None
        check = cap.end["completions_check"][f"{major},{minor}"]
        ev = cap.read_all()
        assert ev.dtype == EVENT
        dev = (major << 20) | minor
        counted: dict[int, int] = {}
        count_completions(ev[ev["dev"] == dev], counted, flush_machines(cap.meta["devices"]))
    assert check["recorded"] == counted.get(dev, 0), check
    missing = int(check["kernel"]) - int(check["recorded"])
    assert 0 <= missing <= unreported_bound(int(check["kernel"])), check
    return missing


def readme_setup_commands() -> list[str]:
    """The two commands of the README's set-up section (install, test), as written there."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```\n(.*?)```", section, re.S)]



# the harness (tests/harness.py): programs under test start with default signal dispositions however the
# suite was started, and whatever a test leaves running is stopped after it
def io_cgroup_of(pid: int | str = "self") -> str:
    """The cgroup a process's I/O is charged to, as a path of the io controller's hierarchy: its v1
    blkio cgroup, or in v2 its nearest cgroup whose parent enables io for its children (or the root)."""
    from ioscope.base.cgroups import io_cgroup_root

    io = io_cgroup_root()
    assert io is not None
    root, kind = io
    for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = ln.split(":", 2)
        if kind == "v1 blkio" and "blkio" in ctrls.split(","):
            return path
        if kind == "v2" and ctrls == "":
            p = Path(path)
            while p != Path("/") and "io" not in (root / str(p.parent).lstrip("/") / "cgroup.subtree_control"
                                                   ).read_text().split():
                p = p.parent
            return str(p)
    raise AssertionError(f"no {kind} cgroup in /proc/{pid}/cgroup")


@pytest.fixture
def io_cgroup(live: None) -> Iterator[tuple[Path, str]]:
    """A cgroup made for the test in the io controller's hierarchy (v1 blkio here, v2 on a pure-v2
    host): (its directory, its path relative to the mount)."""
    from ioscope.base.cgroups import io_cgroup_root

    io = io_cgroup_root()
    assert io is not None, "no cgroup hierarchy with the io controller mounted"
    d = io[0] / f"ioscope-agg-{os.getpid()}"
    d.mkdir()
    try:
        yield d, "/" + d.name
    finally:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError:  # a process of the test still in it: it is exiting
                time.sleep(0.1)


@pytest.fixture
def held_disk(live: None) -> Iterator[Any]:
    """A loop disk over a FUSE file system whose daemon stops replying on demand (hung_util.HeldDisk):
    hold() and a read on it hangs, release() and it completes; everything removed after the test."""
    from hung_util import HeldDisk, fuse_problem
    problem = fuse_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"{problem} (CI is set: live tests must run, not skip; scripts/bootstrap.sh --test "
                        "installs fusepy and libfuse2)")
        pytest.skip(problem)
    with HeldDisk() as d:
        yield d


from harness import (  # noqa: E402
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_teardown,
    pytest_terminal_summary,
)

__all__ = ["pytest_configure", "pytest_runtest_call", "pytest_runtest_teardown", "pytest_terminal_summary"]
