"""Helpers of the acceptance scenarios: a tool run from a script, and reading the numbers out of what the
tools print."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any


class ScriptJob:
    """`ioscope ARGS > DIR/out 2> DIR/err &` from a shell script, as a user's script runs a tool in the
    background (its SIGINT ignored, as a script's background job starts), its pid in DIR/pid and its exit
    status in DIR/rc once the script's `wait` returns. stop() is the script's `kill -INT $(cat DIR/pid)`."""

    def __init__(self, d: Path, args: str) -> None:
        self.d = d
        q = shlex.quote(str(d))
        script = (f"{shlex.quote(sys.executable)} -m ioscope.cli {args} > {q}/out 2> {q}/err &\n"
                  f"echo $! > {q}/pid\nwait $!\necho $? > {q}/rc\n")
        self.shell = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL)

    def wait_for(self, name: str, text: str, timeout: float = 60) -> None:
        """Until DIR/name (out or err) holds text."""
        path, deadline = self.d / name, time.monotonic() + timeout
        while text not in (path.read_text() if path.exists() else ""):
            assert time.monotonic() < deadline and self.shell.poll() is None, self.err()
            time.sleep(0.05)

    def stop(self, timeout: float = 60) -> str:
        """kill -INT from the script; the tool's exit status, as the script's wait saw it."""
        try:
            subprocess.run(["sh", "-c", f"kill -INT $(cat {shlex.quote(str(self.d))}/pid)"], check=True)
            assert self.shell.wait(timeout=timeout) == 0
        finally:
            self.kill()
        return (self.d / "rc").read_text().strip()

    def ended(self, timeout: float = 60) -> str:
        """The tool's exit status once it ended by itself (the script's wait returned)."""
        try:
            assert self.shell.wait(timeout=timeout) == 0
        finally:
            self.kill()
        return (self.d / "rc").read_text().strip()

    def kill(self) -> None:
        if self.shell.poll() is None:
            self.shell.kill()
            self.shell.wait()

    def out(self) -> str:
        return (self.d / "out").read_text()

    def err(self) -> str:
        return (self.d / "err").read_text() if (self.d / "err").exists() else ""

_SUMMARY_RE = re.compile(r"^Recorded ([\d,]+) events \(([^)]*)\) and (\d+) process notes in [\d.]+s to (.+?) "
                         r"\([^)]*\); lost (\d+)(?: \(.*\))?; stopped: (.+)\.$")


def record_summary(stderr: str) -> dict[str, Any]:
    """The summary line of `ioscope record`: events, per-action counts, notes, file, lost, stop reason."""
    lines = [ln for ln in stderr.splitlines() if ln.startswith("Recorded ")]
    assert len(lines) == 1, stderr
    m = _SUMMARY_RE.match(lines[0])
    assert m, lines[0]
    actions: Counter[str] = Counter()
    if m.group(2) != "none":
        for part in m.group(2).split(", "):
            letter, n = part.rsplit(" ", 1)
            actions[letter] = int(n)
    return {"events": int(m.group(1).replace(",", "")), "actions": actions, "notes": int(m.group(3)),
            "file": m.group(4), "lost": int(m.group(5)), "stopped": m.group(6)}


def _num(s: str) -> int:
    """blkparse's counts: plain, or with a K/M/G suffix above a million (never reached here)."""
    assert s[-1].isdigit(), f"count {s!r} printed in thousands: the scenario is too large to compare exactly"
    return int(s)


_BP_BLOCK_RE = re.compile(r"^(CPU\d+|Total) \((\d+),(\d+)\):$")
_BP_PAIR_RE = re.compile(r"^ (Reads|Writes|Read|Write) (Queued|Dispatches|Requeued|Completed|Merges):\s+(\d+\w?)"
                         r"(?:,\s+(\d+)KiB)?$")


def blkparse_totals(text: str) -> dict[str, dict[str, int]]:
    """Per device "maj,min", the sum over its CPU blocks of blkparse's per-CPU totals:
    {"Reads Completed": n, "Reads Completed KiB": k, "Writes Queued": ..., ...}."""
    out: dict[str, Counter[str]] = {}
    cur: Counter[str] | None = None
    for line in text.splitlines():
        m = _BP_BLOCK_RE.match(line)
        if m:
            # the Total block repeats the CPU blocks' sums: count the CPU blocks only
            cur = out.setdefault(f"{m.group(2)},{m.group(3)}", Counter()) if m.group(1) != "Total" else None
            continue
        if cur is None or not line.startswith(" "):
            if not line.startswith(" "):
                cur = None
            continue
        # two columns separated by a tab: " Reads Queued: 1009, 4036KiB\t Writes Queued: ..."
        for col in line.split("\t"):
            col = col.rstrip()
            if not col.strip():
                continue
            col = " " + col.strip()
            pm = _BP_PAIR_RE.match(col)
            if pm:
                key = f"{pm.group(1)} {pm.group(2)}"
                cur[key] += _num(pm.group(3))
                if pm.group(4) is not None:
                    cur[key + " KiB"] += int(pm.group(4))
    return {dev: dict(c) for dev, c in out.items()}


def report_iostat_text(text: str, interval_s: float = 1.0) -> dict[str, dict[str, float]]:
    """Per device name in the iostat table of `ioscope report` (text): completions and sectors per
    direction, summed over its intervals (rate * interval)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("==================== iostat per "))
    head = lines[start + 2].split()
    assert head[:2] == ["Device", "time"], lines[start + 2]
    cols = head[2:]
    out: dict[str, dict[str, float]] = {}
    for ln in lines[start + 3:]:
        if not ln.strip():
            break
        parts = ln.split()
        vals = dict(zip(cols, (float(x) for x in parts[-len(cols):])))
        name = " ".join(parts[:-len(cols) - 1])
        acc = out.setdefault(name, {"r": 0.0, "w": 0.0, "rsec": 0.0, "wsec": 0.0, "rows": 0})
        acc["r"] += vals["r/s"] * interval_s
        acc["w"] += vals["w/s"] * interval_s
        acc["rsec"] += vals["rkB/s"] * 2 * interval_s
        acc["wsec"] += vals["wkB/s"] * 2 * interval_s
        acc["rows"] += 1
    return out


def report_iostat_json(doc: dict[str, Any], interval_s: float = 1.0) -> dict[str, dict[str, float]]:
    """The same sums from `ioscope report --json`, per device key "maj,min"."""
    out: dict[str, dict[str, float]] = {}
    for row in doc["iostat"]:
        acc = out.setdefault(row["device"], {"r": 0.0, "w": 0.0, "rsec": 0.0, "wsec": 0.0, "rows": 0})
        acc["r"] += row["r/s"] * interval_s
        acc["w"] += row["w/s"] * interval_s
        acc["rsec"] += row["rsec/s"] * interval_s
        acc["wsec"] += row["wsec/s"] * interval_s
        acc["rows"] += 1
    return out


def btt_part(text: str) -> str:
    """The btt -A part of a report: everything before ioscope's own sections."""
    cut = text.find("==================== Latency percentiles (ioscope)")
    assert cut > 0, text[:2000]
    return text[:cut]
