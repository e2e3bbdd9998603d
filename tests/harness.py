"""The test harness: what a suite started from a shell that ignores SIGHUP and SIGINT needs
(`nohup ./test.sh &` over ssh, a CI agent), and what a failed test must not leave behind.

An ignored signal stays ignored in every program a test starts, so a tool under test would not stop on
the SIGHUP a test sends it (ioscope keeps a SIGHUP that nohup ignored: the user asked for that), nor
would `dd` or a shell stop on SIGINT. The runner keeps surviving a hang-up, but by catching these
signals with a handler that does nothing: exec resets a caught signal to its default, so the programs
the tests start begin with default dispositions, as from a terminal (a test that wants a signal ignored
says so: `nohup`, or a shell's background job, which ignores SIGINT itself). And whatever a test started
that is still running once the test is over (it failed, or forgot it: a tool was once left running for
17 minutes) is stopped: SIGTERM (a tool detaches its probes), then SIGKILL. The runner is made the "child
subreaper" of what it starts, so that a background job whose shell exited is found as well, and reaps
those that come back to it. conftest.py imports the hooks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HARNESS_SIGNALS = (signal.SIGHUP, signal.SIGINT)
_popen_pids: set[int] = set()


def _ignore_here(signum: int, frame: Any) -> None:
    """What SIG_IGN did for the runner, without being inherited by the programs it starts."""


def children_start_with_default_signals() -> None:
    for sig in HARNESS_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, _ignore_here)
    # a signal blocked here would be blocked in every program started: unblock those that have handlers
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HARNESS_SIGNALS)


_RUNNER_PID = 0


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    if os.getpid() != _RUNNER_PID:
        # a fork of the runner that has not exec'd (pyroute2's network-namespace helper): SIGTERM ends it as
        # by default. Raised there, the KeyboardInterrupt ran the whole session's end in the fork (its
        # summary on the suite's output, the test's namespace removed) and the runner waited for ever.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt("SIGTERM")


def _default_sigterm_in_fork() -> None:
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:   # not the main thread of the fork: the handler's pid check does it
        pass


def stop_on_sigterm() -> None:
    """SIGTERM stops the suite as Ctrl-C does: the test running is torn down (its loop devices, cgroups,
    servers), the summary printed. test.sh runs pytest in the background and passes it SIGTERM on any
    stop (a background job ignores SIGINT); killed as by default, it would leave its test's set-up.
    Only in the runner itself: a fork of it (not exec'd) gets the default back."""
    global _RUNNER_PID
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        _RUNNER_PID = os.getpid()
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        os.register_at_fork(after_in_child=_default_sigterm_in_fork)


def _become_subreaper() -> None:
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _track_popen() -> None:
    """Note the pid of every process subprocess starts here (those are reaped by their Popen objects)."""
    init = subprocess.Popen.__init__
    if getattr(init, "_ioscope_tracked", False):
        return

    def tracked(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _popen_pids.add(self.pid)

    tracked._ioscope_tracked = True   # type: ignore[attr-defined]
    subprocess.Popen.__init__ = tracked   # type: ignore[method-assign]


def _proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[19]), rest[0]


def descendants(root: int | None = None) -> dict[int, tuple[int, str]]:
    """Every process under root (default: this one): pid -> (start time, command line)."""
    root = os.getpid() if root is None else root
    kids: dict[int, list[int]] = {}
    info: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _proc_stat(int(name))
        if st is not None:
            kids.setdefault(st[0], []).append(int(name))
            info[int(name)] = st[1]
    out: dict[int, tuple[int, str]] = {}
    todo = list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out[pid] = (info[pid], cmd)
        todo += kids.get(pid, [])
    return out


def reap_orphans() -> None:
    """Reap the processes that came back to the runner (subreaper) and exited: zombies not started here."""
    for pid in list(descendants()):
        st = _proc_stat(pid)
        if st is not None and st[0] == os.getpid() and st[2] == "Z" and pid not in _popen_pids:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def stop_leftovers(left: dict[int, tuple[int, str]], grace: float = 2.0) -> list[str]:
    """SIGTERM, then after grace seconds SIGKILL, every process of left still running (same pid, same
    start time); returns their command lines."""
    alive = {pid: v for pid, v in left.items() if (st := _proc_stat(pid)) is not None and st[1] == v[0]
             and st[2] != "Z"}
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(
            (st := _proc_stat(p)) is not None and st[1] == v[0] and st[2] != "Z" for p, v in alive.items()):
        time.sleep(0.05)
    for pid, v in alive.items():
        st = _proc_stat(pid)
        if st is not None and st[1] == v[0] and st[2] != "Z":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    reap_orphans()
    return [v[1] for v in alive.values()]


def pytest_configure(config: pytest.Config) -> None:
    children_start_with_default_signals()
    stop_on_sigterm()
    _become_subreaper()
    _track_popen()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Note what the test starts (its body; fixtures manage their own)."""
    before = descendants()
    yield
    item.stash[_STARTED] = {p: v for p, v in descendants().items() if p not in before or before[p][0] != v[0]}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    # a test (or code it ran in this process) that left SIGTERM ignored or handled otherwise: the runner's
    # handler put back, and the test named (an ignored SIGTERM is inherited by every program started after
    # it: in a run beside the hogs, hog.sh and a runner of the harness's test then ignored it)
    if _RUNNER_PID == os.getpid() and signal.getsignal(signal.SIGTERM) is not _stop_on_sigterm:
        _SIGNALS_LEFT.append(f"{item.nodeid}: SIGTERM left {signal.getsignal(signal.SIGTERM)!r}")
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    started = item.stash.get(_STARTED, {})
    if not started:
        return
    # whatever the test started and is still running, with what those started since
    now = descendants()
    # the same process: the same pid and start time (not the command line: a job a shell forked may exec its
    # program after the test's snapshot, on a loaded host, and was then taken for another process and left
    # running: `sh -c "sleep 300 &"` in CI once)
    left = {p: v for p, v in now.items() if p in started and started[p][0] == v[0]}
    for p in list(left):
        left.update(descendants(p))
    stopped = stop_leftovers(left) if left else []
    if stopped:
        _LEFTOVERS.append(f"{item.nodeid}: {'; '.join(stopped)}")
    else:
        reap_orphans()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SIGNALS_LEFT:
        terminalreporter.section("signal dispositions tests changed (put back after the test)")
        for line in _SIGNALS_LEFT:
            terminalreporter.write_line(line)
    if _LEFTOVERS:
        terminalreporter.section("processes tests left running (stopped after the test)")
        for line in _LEFTOVERS:
            terminalreporter.write_line(line)


_STARTED = pytest.StashKey[dict[int, tuple[int, str]]]()
_LEFTOVERS: list[str] = []
_SIGNALS_LEFT: list[str] = []


__all__ = ["pytest_configure", "pytest_runtest_call", "pytest_runtest_teardown", "pytest_terminal_summary"]
