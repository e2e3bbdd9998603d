"""The interactive ioscope top screen, driven in tmux (send-keys, capture-pane): renders in 80x24 and 200x50,
sort and filter keys work, q and SIGTERM exit with the terminal restored and every BPF program detached.
Plus the terminal handling on a pseudo-terminal (no root)."""

from __future__ import annotations

import os
import pty
import re
import shlex
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, programs_left
from ioscope.tools.top import view
from top_live_util import bpf_prog_ids, loaded_prog_ids, start_fio, stop_fio


class Tmux:
    def __init__(self, width: int, height: int) -> None:
        self.name = f"ioscope-top-test-{os.getpid()}-{width}x{height}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
                        "env PS1='$ ' bash --norc --noprofile"], check=True)
        self.shell = int(subprocess.run(["tmux", "list-panes", "-t", self.name, "-F", "#{pane_pid}"],
                                        capture_output=True, text=True, check=True).stdout.split()[0])

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *(["-l"] if literal else []), *keys], check=True)

    def screen(self) -> list[str]:
        out = subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True,
                             check=True).stdout
        return out.split("\n")[:-1]

    def wait_for(self, pred: Callable[[list[str]], bool], what: str, timeout: float = 15) -> list[str]:
        end = time.monotonic() + timeout
        while True:
            s = self.screen()
            if pred(s):
                return s
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what}; screen:\n" + "\n".join(s))
            time.sleep(0.2)

    def child(self) -> int | None:
        try:
            kids = Path(f"/proc/{self.shell}/task/{self.shell}/children").read_text().split()
        except OSError:
            return None
        return int(kids[0]) if kids else None

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def tmux_factory() -> Iterator[Callable[[int, int], Tmux]]:
    made: list[Tmux] = []

    def make(w: int, h: int) -> Tmux:
        t = Tmux(w, h)
        made.append(t)
        return t

    yield make
    for t in made:
        t.kill()


def _start_top(t: Tmux, *args: str) -> int:
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ioscope.cli", "top", *args])
    t.keys(f"cd {shlex.quote(str(ROOT))} && {cmd}", "Enter")
    end = time.monotonic() + 10
    while time.monotonic() < end:
        pid = t.child()
        if pid:
            return pid
        time.sleep(0.1)
    raise AssertionError("ioscope top did not start")


def _gone(pid: int, timeout: float = 10) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.1)
    return False


def _stty_sane(t: Tmux, tmp: Path) -> str:
    out = tmp / "stty.txt"
    t.keys(f"stty -a > {out}", "Enter")
    end = time.monotonic() + 10
    while time.monotonic() < end and not (out.exists() and out.read_text().strip()):
        time.sleep(0.1)
    text = out.read_text()
    words = text.split()
    assert "icanon" in words and "echo" in words, text  # not -icanon / -echo
    return text


def _column(screen: list[str], header: str) -> int:
    """The column's index counted from the end of a row (COMM may hold spaces; the columns after it do not)."""
    head = next(ln.split() for ln in screen if ln.lstrip().startswith("PID "))
    return head.index(header) - len(head)


def _proc_rows(screen: list[str]) -> list[list[str]]:
    start = next(i for i, ln in enumerate(screen) if ln.lstrip().startswith("PID "))
    rows = []
    for ln in screen[start + 1:]:
        if not re.match(r"^\s*\d+ ", ln):
            break
        rows.append(ln.split())
    return rows


def test_tui_80x24_sort_filter_quit(live: None, loopdev: Callable[..., Any], tmux_factory: Callable[..., Tmux],
                                    tmp_path: Path) -> None:
    dev = loopdev(size_mb=64)
    fio = start_fio(dev.path, 30, 1009, 409)
    try:
        t = tmux_factory(80, 24)
        top = _start_top(t)
        s = t.wait_for(lambda s: any(ln.split()[:1] == [str(fio.pid)] for ln in s), "the fio row")
        assert len(s) == 24 and max(len(ln) for ln in s) <= 80
        assert s[0].startswith("ioscope top - ") and re.search(r"\blost \d+\b", s[1])
        for col in ("Device", "r/s", "w/s", "rkB/s", "wkB/s", "r_await", "w_await", "%util", "p99ms"):
            assert col in s[2]
        assert any(ln.startswith(f" {dev.name} ") for ln in s)
        progs = bpf_prog_ids(top)
        assert progs and progs <= loaded_prog_ids()

        # sort: > moves from the default (rkB/s + wkB/s) one column on the screen right at a time: wkB/s, then
        # (avgKB and avg_ms left out at 80 columns) p99ms; every row has all columns (a process that only
        # waited has '-' for its I/O's)
        t.keys(">", ">")
        s = t.wait_for(lambda s: "sort p99ms desc" in s[1], "sort by p99ms")
        at = _column(s, "p99ms")
        p99 = [float(r[at]) for r in _proc_rows(s) if r[at] != "-"]
        assert p99 and p99 == sorted(p99, reverse=True)
        t.keys(">")
        s = t.wait_for(lambda s: "sort IO> desc" in s[1], "sort by IO>")
        at = _column(s, "IO>")
        io = [float(r[at]) for r in _proc_rows(s)]
        assert io == sorted(io, reverse=True)
        t.keys("r")
        s = t.wait_for(lambda s: "sort IO> asc" in s[1], "ascending")

        # filter by disk, then by pid
        t.keys("t", "d")
        t.keys(dev.name, literal=True)
        t.keys("Enter")
        s = t.wait_for(lambda s: f"disk={dev.name}" in s[1] and _proc_rows(s), "the disk filter")
        assert all(r[2] == dev.name for r in _proc_rows(s))
        assert "latency heat map " + dev.name in "\n".join(s)
        t.keys("p")
        t.keys(str(fio.pid), literal=True)
        t.keys("Enter")
        s = t.wait_for(lambda s: f"pid={fio.pid}" in s[1] and _proc_rows(s), "the pid filter")
        assert [r[0] for r in _proc_rows(s)] == [str(fio.pid)]
        # a bigger window: the screen follows (all device columns from 119 columns on)
        subprocess.run(["tmux", "resize-window", "-t", t.name, "-x", "130", "-y", "30"], check=True)
        s = t.wait_for(lambda s: len(s) == 30 and "rrqm/s" in s[2], "the resized screen")
        assert max(len(ln) for ln in s) <= 130 and "aqu-sz" in s[2] and "wareq-sz" in s[2]
        t.keys("?")
        t.wait_for(lambda s: any("ioscope top keys" in ln for ln in s), "the help")
        t.keys("q")  # leaves the help and quits

        assert _gone(top), "q did not end ioscope top"
        _stty_sane(t, tmp_path)
        assert not programs_left(progs), "BPF programs left attached"
        assert "$ " in "\n".join(t.screen())  # back at the shell, out of the alternate screen
    finally:
        stop_fio(fio)


def test_tui_200x50_and_sigterm(live: None, loopdev: Callable[..., Any], tmux_factory: Callable[..., Tmux],
                                tmp_path: Path) -> None:
    dev = loopdev(size_mb=64)
    fio = start_fio(dev.path, 30, 503, 0)
    try:
        t = tmux_factory(200, 50)
        top = _start_top(t, "-d", dev.name)
        s = t.wait_for(lambda s: any(ln.split()[:1] == [str(fio.pid)] for ln in s)
                       and any("latency heat map" in ln for ln in s), "the fio row and the heat map")
        assert len(s) == 50 and max(len(ln) for ln in s) <= 200
        for col in ("rrqm/s", "wrqm/s", "aqu-sz", "rareq-sz", "wareq-sz", "%util", "p99ms"):
            assert col in s[2]
        # the wide screen shows 200 - 16 intervals of history and the latency bands of the data
        assert any(f"latency heat map {dev.name}: last 184 x" in ln for ln in s)
        start = next(i for i, ln in enumerate(s) if "latency heat map" in ln)
        bands = [ln for ln in s[start + 1:] if re.match(r"^ *[\d.]+(ns|us|ms|s) +.*\| *\d+$", ln)]
        assert len(bands) >= 3
        progs = bpf_prog_ids(top)
        assert progs
        os.kill(top, signal.SIGTERM)
        assert _gone(top), "SIGTERM did not end ioscope top"
        _stty_sane(t, tmp_path)
        assert not programs_left(progs), "BPF programs left attached"
    finally:
        stop_fio(fio)


def test_resize_wakes_the_key_wait() -> None:
    """No root: SIGWINCH ends the wait for keys at once with a RESIZE (the screen is redrawn)."""
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as out, view.Terminal(fd_in=slave, out=out) as term:
            assert term.read_keys(0.01) == []
            os.write(master, b">q")
            assert term.read_keys(1.0) == [">", "q"]
            os.kill(os.getpid(), signal.SIGWINCH)
            assert term.read_keys(5.0) == ["RESIZE"]  # not [] after the 5 s timeout
    finally:
        os.close(master)
        os.close(slave)


def test_terminal_restored_after_a_crash() -> None:
    """No root: on a pseudo-terminal, an exception inside the screen gives the terminal back."""
    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        with open(slave, "w", closefd=False) as out:
            with pytest.raises(RuntimeError):
                with view.Terminal(fd_in=slave, out=out):
                    inside = termios.tcgetattr(slave)
                    assert not inside[3] & termios.ICANON and not inside[3] & termios.ECHO
                    raise RuntimeError("boom")
        after = termios.tcgetattr(slave)
        assert after[:6] == before[:6], (before, after)
        os.set_blocking(master, False)
        written = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            written += chunk
        assert b"\x1b[?1049h" in written and written.rstrip().endswith(b"\x1b[?1049l"), written
    finally:
        os.close(master)
        os.close(slave)


def test_heat_map_follows_the_disk_filter(live: None, loopdev: Callable[..., Any],
                                          tmux_factory: Callable[..., Tmux]) -> None:
    """Issue 16: with a disk filter on, the heat map is that disk's, even while it is idle and other disks
    are busy, and Tab does not move it off the filter."""
    busy, idle = loopdev(size_mb=64), loopdev(size_mb=16)
    fio = start_fio(busy.path, 30, 503, 0)

    def maps(s: list[str]) -> set[str]:
        return {m.group(1) for ln in s if (m := re.search(r"latency heat map (\S+):", ln))}

    def filter_on(t: Tmux, disk: str) -> list[str]:
        t.keys("d")
        t.keys(disk, literal=True)
        t.keys("Enter")
        return t.wait_for(lambda s: f"disk={disk}" in s[1] and bool(maps(s)), f"the filter on {disk}")

    try:
        t = tmux_factory(100, 36)
        top = _start_top(t)
        t.wait_for(lambda s: any(ln.split()[:1] == [str(fio.pid)] for ln in s), "the fio row")
        s = filter_on(t, busy.name)
        assert maps(s) == {busy.name}
        s = filter_on(t, idle.name)
        assert maps(s) == {idle.name}, "\n".join(s)
        assert any(f"latency heat map {idle.name}: no I/O completed yet" in ln for ln in s)
        t.keys("Tab")
        s = t.wait_for(lambda s: any("the heat map shows the filtered disk" in ln for ln in s), "Tab's message")
        assert maps(s) == {idle.name}
        t.keys("c")
        t.wait_for(lambda s: "disk=" not in s[1], "the filter cleared")
        t.keys("q")
        assert _gone(top), "q did not end ioscope top"
    finally:
        stop_fio(fio)
