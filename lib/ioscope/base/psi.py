"""I/O pressure (PSI, Documentation/accounting/psi.rst): the share of time in which some (or all non-idle)
tasks of the host, or of a cgroup v2, were stalled waiting on I/O, as the kernel accounts it.

/proc/pressure/io (4.20+, CONFIG_PSI, not booted with psi=0) and a v2 cgroup's io.pressure both read

    some avg10=5.80 avg60=6.70 avg300=3.13 total=691182224
    full avg10=0.15 avg60=0.07 avg300=0.28 total=181745767

avg10/60/300 are the kernel's running averages in percent; total is the stall time in microseconds since
boot (or since the cgroup was made), which is what a tool turns into the share of its own interval: the
averages lag a short interval and are rounded to 0.01 %. A task is stalled on I/O while it sleeps with
in_iowait set (io_schedule and its kin: the same waits as delay accounting's blkio and top's IO>).

"some" and "full" are kept per CPU (a CPU has some stall while a task stalled on it, full while every
non-idle task of it is) and the host's (or cgroup's) figure is their average **weighted by each CPU's
non-idle time**: the share of the machine's productive capacity lost, not the time in which some task
waited. One task blocked on I/O all the time reads 100 % on a host whose other CPUs are idle, and 1/N of
it beside N-1 busy CPUs (measured: a service blocked 1.76 s of a 2-CPU host's run, the other CPU busy with
the test suite, made 0.94 s of "some"; tests/test_iowait_live.py bounds it between those two).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Line:
    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True)
class Pressure:
    some: Line
    full: Line | None   # absent in the host's cpu file before 5.13; io has it since PSI came


@dataclass(frozen=True)
class Share:
    """The pressure over one interval (from two reads' totals), with the kernel's averages at its end; the
    interval's share is None when there was no read at its start (a cgroup seen for the first time)."""
    some_pct: float | None
    full_pct: float | None
    some_s: float | None        # seconds stalled in the interval
    full_s: float | None
    end: Pressure


def parse(text: str) -> Pressure | None:
    """A pressure file's text; None when it is not one."""
    lines: dict[str, Line] = {}
    for raw in text.splitlines():
        words = raw.split()
        if not words or words[0] not in ("some", "full"):
            continue
        try:
            kv = dict(w.split("=", 1) for w in words[1:])
            lines[words[0]] = Line(float(kv["avg10"]), float(kv["avg60"]), float(kv["avg300"]), int(kv["total"]))
        except (KeyError, ValueError):
            return None
    some = lines.get("some")
    return None if some is None else Pressure(some, lines.get("full"))


def read(path: str | Path) -> Pressure | None:
    """A pressure file; None where it does not exist or cannot be read (no PSI, psi=0, a v1 cgroup)."""
    try:
        return parse(Path(path).read_text())
    except OSError:   # ENOENT, and EOPNOTSUPP when the kernel was booted with psi=0
        return None


def host_io(proc_root: str = "/proc") -> Pressure | None:
    return read(Path(proc_root) / "pressure" / "io")


def cgroup_io(v2_root: str | Path, cgroup: str) -> Pressure | None:
    """A cgroup's io.pressure, cgroup a path in the v2 hierarchy mounted at v2_root ("/" its root)."""
    rel = cgroup.strip("/")
    return read(Path(v2_root) / rel / "io.pressure" if rel else Path(v2_root) / "io.pressure")


def share(prev: Pressure | None, cur: Pressure | None, seconds: float) -> Share | None:
    """The interval's pressure between two reads seconds apart; None without the read at its end; the
    kernel's figures at its end alone without the one at its start (or when a total went back: a cgroup
    removed and made again under the same path)."""
    if cur is None:
        return None
    some_us = cur.some.total_us - prev.some.total_us if prev is not None else -1
    if some_us < 0 or seconds <= 0 or prev is None:
        return Share(None, None, None, None, cur)
    full_us = cur.full.total_us - prev.full.total_us if cur.full and prev.full else None
    if full_us is not None and full_us < 0:
        full_us = None
    return Share(min(100.0, some_us / 1e4 / seconds), None if full_us is None else min(100.0, full_us / 1e4 / seconds),
                 some_us / 1e6, None if full_us is None else full_us / 1e6, cur)


# -- triggers: the kernel's own (Documentation/accounting/psi.rst, "Userspace monitors") -------------------

def share_lines(pr: Share | None, span: str) -> list[str]:
    """The share of a span (an interval, a second) stalled on I/O, with the kernel's averages: one line."""
    if pr is None or pr.some_pct is None:
        return []
    full = "" if pr.full_pct is None else f", full {pr.full_pct:.1f}%"
    e = pr.end
    avgs = f"some {e.some.avg10:.2f}/{e.some.avg60:.2f}/{e.some.avg300:.2f}" + (
        f", full {e.full.avg10:.2f}/{e.full.avg60:.2f}/{e.full.avg300:.2f}" if e.full else "")
    return [f"I/O pressure (PSI): some {pr.some_pct:.1f}%{full} of the {span} (avg10/60/300 {avgs})"]


def share_json(pr: Share | None) -> dict[str, Any] | None:
    """A span's I/O pressure: the share of it (some, full: % and seconds stalled) and the kernel's averages
    and totals at its end (/proc/pressure/io's, or a cgroup's io.pressure)."""
    if pr is None:
        return None

    def line(pct: float | None, secs: float | None, ln: Line | None) -> dict[str, Any] | None:
        if ln is None:
            return None
        return {"interval_pct": None if pct is None else round(pct, 3), "interval_s": None if secs is None
                else round(secs, 6), "avg10": ln.avg10, "avg60": ln.avg60, "avg300": ln.avg300,
                "total_s": ln.total_us / 1e6}

    return {"some": line(pr.some_pct, pr.some_s, pr.end.some), "full": line(pr.full_pct, pr.full_s, pr.end.full)}


HOST_IO = "/proc/pressure/io"
WINDOW_MIN_S, WINDOW_MAX_S = 0.5, 10.0   # the kernel's bounds on a trigger's window
_TRIGGER = re.compile(r"^\s*(some|full)\s*>\s*([0-9]*\.?[0-9]+)\s*%\s*"
                      r"(?:(?:over|in)\s+([0-9]*\.?[0-9]+)\s*(ms|s)\s*)?"
                      r"(?:where\s+cgroup\s*==\s*(?:\"([^\"]*)\"|(\S+))\s*)?$")


@dataclass(frozen=True)
class TriggerSpec:
    """Fire when `kind` stall time exceeds pct % of a window of window_s seconds (the kernel's trigger:
    a threshold of stall microseconds within a moving window)."""
    kind: str          # some | full
    pct: float
    window_s: float
    cgroup: str | None = None   # a cgroup's io.pressure: its path in the v2 hierarchy ("/system.slice/x.service")

    @property
    def stall_us(self) -> int:
        return max(1, round(self.window_s * 1e6 * self.pct / 100))

    def kernel_text(self) -> str:
        return f"{self.kind} {self.stall_us} {round(self.window_s * 1e6)}"

    def describe(self) -> str:
        return f"{self.kind} > {self.pct:g}% over {self.window_s:g}s" + (f" in cgroup {self.cgroup}"
                                                                         if self.cgroup is not None else "")


def parse_trigger(text: str) -> TriggerSpec:
    """'some > 40%', 'full > 10% over 4s', 'some > 5% over 500ms' (the window 2 s when not given: windows
    that are not a multiple of 2 s need CAP_SYS_RESOURCE), and of a cgroup's io.pressure:
    'some > 50% where cgroup == "/system.slice/db.service"'; ValueError with what is wrong."""
    m = _TRIGGER.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a pressure condition: write 'some > 40%', 'full > 10% over 2s' or "
                         "'some > 50% where cgroup == \"/system.slice/db.service\"'")
    pct = float(m[2])
    window = 2.0 if m[3] is None else float(m[3]) / (1000 if m[4] == "ms" else 1)
    if not 0 < pct <= 100:
        raise ValueError(f"{text!r}: the share must be above 0% and at most 100%")
    if not WINDOW_MIN_S <= window <= WINDOW_MAX_S:
        raise ValueError(f"{text!r}: the kernel takes windows of {WINDOW_MIN_S * 1000:g}ms to {WINDOW_MAX_S:g}s")
    cgroup = m[5] if m[5] is not None else m[6]
    if cgroup is not None:
        if not cgroup.startswith("/") or "/../" in cgroup + "/" or "\0" in cgroup:
            raise ValueError(f"{text!r}: a cgroup is its path in the v2 hierarchy, from its root: '/' or "
                             "'/system.slice/db.service' (as top -G and the exporter name it)")
        cgroup = "/" + cgroup.strip("/")
    return TriggerSpec(m[1], pct, window, cgroup)


def trigger_path(spec: TriggerSpec, v2_root: str | Path | None) -> str:
    """The pressure file a trigger goes on: the host's, or its cgroup's io.pressure under v2_root (the v2
    hierarchy's mount; None: not mounted). ValueError saying what is missing."""
    if spec.cgroup is None:
        return HOST_IO
    if v2_root is None:
        raise ValueError("no cgroup v2 hierarchy is mounted: a cgroup's io.pressure is a v2 file (mount cgroup2, "
                         "or watch the host's pressure: leave 'where cgroup' out)")
    d = Path(v2_root) / spec.cgroup.strip("/")
    if not d.is_dir():
        raise ValueError(f"cgroup {spec.cgroup} does not exist in the v2 hierarchy at {v2_root}: give its path "
                         "there, as top -G names it (e.g. /system.slice/db.service)")
    return str(d / "io.pressure")


def open_trigger(spec: TriggerSpec, path: str = HOST_IO) -> int:
    """A file descriptor of path with the kernel's trigger set on it: poll() it for POLLPRI, which the kernel
    raises (at most once a window) when the stall exceeds the threshold; POLLERR when the file went away (a
    cgroup removed). OSError with the kernel's reason (ENOENT: no PSI; EOPNOTSUPP: booted with psi=0;
    EINVAL: a bound; EPERM: unprivileged and a window not a multiple of 2 s)."""
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.write(fd, spec.kernel_text().encode() + b"\0")
    except OSError:
        os.close(fd)
        raise
    return fd


def trigger_error(exc: OSError, path: str = HOST_IO) -> str:
    """Why the kernel refused a trigger, in words."""
    if exc.errno == errno.ENOENT:
        return f"{path} does not exist: this kernel has no PSI (CONFIG_PSI)"
    if exc.errno == errno.EOPNOTSUPP:
        return f"{path}: PSI is off on this kernel (booted with psi=0, or built with it off): boot it with psi=1"
    if exc.errno == errno.EINVAL and not has_sys_resource():
        return (f"{path}: the kernel refused the trigger: without CAP_SYS_RESOURCE (this process lacks it) a "
                "trigger's window must be a multiple of 2 s: give 'over 2s' or 'over 4s'")
    return f"{path}: the kernel refused the trigger: {exc.strerror}"


def has_sys_resource(status: str = "/proc/self/status") -> bool:
    """Whether this process has CAP_SYS_RESOURCE (the kernel lets it set any trigger window)."""
    try:
        for line in Path(status).read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 24 & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


__all__ = [
    "HOST_IO",
    "Line",
    "Pressure",
    "Share",
    "TriggerSpec",
    "cgroup_io",
    "has_sys_resource",
    "host_io",
    "open_trigger",
    "parse",
    "parse_trigger",
    "read",
    "share",
    "share_json",
    "share_lines",
    "trigger_error",
    "trigger_path",
]
