"""The kernel's ftrace blk tracer: the independent reference the live tests (and bench/record_overhead.py)
compare ioscope's event streams with. Test code: not part of the ioscope package."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from ioscope.base.errors import IoscopeError


class BlkTracer:
    """The kernel's own ftrace blk tracer on one disk: the independent reference for event streams.

    tracefs has one blk tracer for the whole system, so users are serialised
    with a lock file, and every setting changed (current_tracer, buffer size,
    trace_clock, the disk's trace/enable) is restored on exit. Timestamps are
    CLOCK_MONOTONIC seconds (trace_clock mono). With output=FILE the events
    are streamed from trace_pipe into FILE while tracing (as an overhead
    reference); otherwise they are read from the buffer at the end (lines()).
    overruns() says whether the kernel dropped any (then the reference is void).
    """

    LOCK = "/dev/shm/ioscope-blk-tracer.lock"

    def __init__(self, disk: str, output: str | None = None, buffer_kb: int = 131072, cgroup: bool = False) -> None:
        """cgroup: the tracer's blk_cgroup option, each event with its bio's cgroup id after the device
        (`7,2   4c5,0  Q  WS 0 + 8 [dd]`: LOW32,HIGH32 in hex)."""
        self.disk = disk
        self.cgroup = cgroup
        self.output = output
        self.buffer_kb = buffer_kb
        self.tracefs = ""
        self._saved: dict[str, str] = {}
        self._lock_fd = -1
        self._reader: subprocess.Popen[bytes] | None = None
        self._out: Any = None
        self.text = ""

    def _w(self, rel: str, value: str) -> None:
        Path(self.tracefs, rel).write_text(value)

    def _r(self, rel: str) -> str:
        return Path(self.tracefs, rel).read_text().strip()

    def __enter__(self) -> BlkTracer:
        import fcntl

        from ioscope.base import system
        self.tracefs = system.ensure_tracefs()
        self._lock_fd = os.open(self.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            if self._r("current_tracer") != "nop":
                raise IoscopeError(f"the ftrace tracer is in use ({self._r('current_tracer')})")
            clock = [w[1:-1] for w in self._r("trace_clock").split() if w.startswith("[")]
            self._saved = {"buffer_size_kb": buffer_size_setting(self._r("buffer_size_kb")),
                           "tracing_on": self._r("tracing_on"),
                           "trace_clock": clock[0] if clock else "local"}
            self._w("buffer_size_kb", str(self.buffer_kb))
            self._w("trace_clock", "mono")  # timestamps on CLOCK_MONOTONIC, as BPF's bpf_ktime_get_ns()
            self._w("trace", "")
            self._w("tracing_on", "1")
            self._enable("1")
            self._saved["enable"] = "0"
            self._w("current_tracer", "blk")
            if self.cgroup:   # the option exists while the blk tracer is the current one
                self._saved["options/blk_cgroup"] = self._r("options/blk_cgroup")
                self._w("options/blk_cgroup", "1")
            if self.output:
                self._out = open(self.output, "wb")
                self._reader = subprocess.Popen(["cat", f"{self.tracefs}/trace_pipe"], stdout=self._out)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _enable(self, value: str) -> None:
        """Write the disk's trace/enable. 5.10 finds the disk's queue there through the block device's
        bd_disk, set only while the device is open (kernel/trace/blktrace.c: blk_trace_get_queue), and
        answers ENXIO otherwise: then the device is held open for the write."""
        enable = Path(f"/sys/block/{self.disk}/trace/enable")
        try:
            enable.write_text(value)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            fd = os.open(f"/dev/{self.disk}", os.O_RDONLY)
            try:
                enable.write_text(value)
            finally:
                os.close(fd)

    def stop(self) -> None:
        """Stop tracing this disk (idempotent); the buffer stays readable."""
        if "enable" in self._saved:
            self._enable("0")
            del self._saved["enable"]
        if self._reader is not None:
            last = -1
            while True:  # let cat drain trace_pipe
                time.sleep(0.3)
                size = os.fstat(self._out.fileno()).st_size
                if size == last:
                    break
                last = size
            self._reader.terminate()
            self._reader.wait()
            self._reader = None
            self._out.close()
        elif not self.text:
            self.text = Path(self.tracefs, "trace").read_text()

    def overruns(self) -> int:
        total = 0
        for stats in Path(self.tracefs, "per_cpu").glob("cpu*/stats"):
            for line in stats.read_text().splitlines():
                if line.startswith(("overrun:", "dropped events:")):
                    total += int(line.split(":")[1])
        return total

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self.tracefs:
                self.stop()
                if "options/blk_cgroup" in self._saved and self._r("current_tracer") == "blk":
                    self._w("options/blk_cgroup", self._saved.pop("options/blk_cgroup"))
                if self._r("current_tracer") == "blk":
                    self._w("current_tracer", "nop")
                for key in ("buffer_size_kb", "tracing_on", "trace_clock"):
                    if key in self._saved:
                        self._w(key, self._saved.pop(key))
        finally:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1


def buffer_size_setting(text: str) -> str:
    """What to write back to tracefs buffer_size_kb to restore what was read from it.

    A tracefs whose ring buffer was never used reads back as '7 (expanded: 1408)': 7 KiB now,
    1408 KiB as soon as a tracer starts. The kernel accepts only a number, and the size the
    buffer has when in use is the expanded one."""
    words = text.replace("(", " ").replace(")", " ").split()
    if "expanded:" in words:
        return words[words.index("expanded:") + 1]
    if not words or not words[0].isdigit():
        raise ValueError(f"unexpected buffer_size_kb in tracefs: {text!r}")
    return words[0]


def parse_blk_tracer(text: str, dev: str) -> list[dict[str, Any]]:
    """Lines of the blk tracer for device "maj,min" as dicts: cpu, ts, action, rwbs, sector, nsec, tail."""
    line_re = re.compile(r"\[(\d+)\]\s+\S+\s+(\d+\.\d+):\s+(\d+,\d+)\s+(\S+)\s+(\S+)\s*(.*)$")
    out = []
    for line in text.splitlines():
        m = line_re.search(line)
        if not m or m.group(3) != dev:
            continue
        cpu, ts, _dev, action, rwbs, tail = m.groups()
        sector = nsec = None
        sm = re.match(r"(\d+)(?: [+/] (\d+))?", tail)
        if sm:
            sector, nsec = int(sm.group(1)), int(sm.group(2) or 0)
        out.append({"cpu": int(cpu), "ts": float(ts), "action": action, "rwbs": rwbs, "sector": sector,
                    "nsec": nsec, "tail": tail})
    return out


def kworker_queues(text: str, dev: str) -> list[dict[str, Any]]:
    """The queue events (Q) on device "maj,min" whose task is a kworker ("[kworker/..]" ending the line)."""
    return [e for e in parse_blk_tracer(text, dev) if e["action"] == "Q" and e["tail"].endswith("]")
            and e["tail"].rsplit("[", 1)[1].startswith("kworker/")]


LAST_THROTTLED: dict[str, Any] = {}   # throttled_dd's last tracer text's kworker queue events (for diagnostics)


def throttle_released(text: str, dev: str) -> int:
    """Bios blk-throttle held and let go on device "maj,min", by the kernel's own blk tracer: the queue
    events (Q) its dispatch work made, whose task is the kworker running it ("[kworker/..]" at the end
    of the line). The throttle's own "throtl bios disp=N" messages count a bio once per level of a cgroup
    v2 hierarchy it is dispatched through (v2's throttle is hierarchical; v1's flat), so they equal this
    on v1 only."""
    return len(kworker_queues(text, dev))


def throttled_dd(cg: Any, group: str, disk: Any, count: int) -> tuple[int, float]:
    """dd's `count` direct 4 KiB writes to `disk` (a LoopDevice) from `group` of `cg` (a TestCgroups), while the
    blk tracer watches the disk: (the bios blk-throttle held, by the tracer (throttle_released); dd's own time
    for its writes, s)."""
    with BlkTracer(disk.name) as tracer:
        p = subprocess.run(cg.shell(group, f"dd if=/dev/zero of={disk.path} bs=4k count={count} oflag=direct"),
                           capture_output=True, text=True, timeout=600, env={**os.environ, "LC_ALL": "C"})
        assert p.returncode == 0, p.stderr
        time.sleep(0.5)
    m = re.search(r"copied, ([0-9.e+-]+) s", p.stderr)
    assert m, p.stderr
    dev = disk.device.majmin.replace(":", ",")
    LAST_THROTTLED["queues"] = [f"{e['ts']:.6f} {e['rwbs']} {e['tail']}" for e in kworker_queues(tracer.text, dev)]
    return throttle_released(tracer.text, dev), float(m.group(1))
