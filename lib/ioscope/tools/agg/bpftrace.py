"""`ioscope agg --bpftrace PROGRAM`: the user's own bpftrace program, its maps shown as agg shows its own.

bpftrace reaches any probe; agg knows block I/O. This joins them: bpftrace runs the program with `-f json`;
ioscope appends one interval probe that prints every map of the program (and clears it, unless
--cumulative) followed by a marker line, so each interval's maps arrive as one group; at Ctrl-C (or
SIGTERM, SIGHUP) bpftrace is stopped with SIGINT and prints its maps a last time, which are the last
(partial) interval. Each map becomes an AggTable: counts, sums, min, max and avg as values, stats() as
its average with count and total beside it, hist() and lhist() as distributions with percentiles
interpolated in their buckets and kept between the smallest and largest value seen (bpftrace's buckets
do not tell them: ioscope adds a min() and a max() map beside every hist() and lhist(), hidden from the
output). bpftrace's lost-event records are agg's losses.

The collector here is the bpftrace process (BpftraceRun), the model is build_result(), the views are
agg's own (view.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ioscope.base import live
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.base.losses import Losses
from ioscope.engines.aggregate.model import AggResult, AggTable, ResultRow, buckets_percentiles

MARK = "ioscope-agg-interval-end"
STARTED = "ioscope-agg-started"
_BEGIN = re.compile(r"\bBEGIN\s*\{")
LOST = "bpftrace_lost_events"
_MAP = re.compile(r"@[A-Za-z_][A-Za-z0-9_]*|@(?![A-Za-z_0-9])")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# bpftrace warns on every run where it cannot raise RLIMIT_MEMLOCK (containers without CAP_SYS_RESOURCE);
# kernels since 5.11 charge BPF memory to the cgroup and do not need it
_MEMLOCK = "couldn't set RLIMIT_MEMLOCK"


def map_names(program: str) -> list[str]:
    """The maps the program writes or reads, in order of first appearance (strings and comments aside)."""
    text = _STRING.sub('""', _COMMENT.sub(" ", program))
    return list(dict.fromkeys(_MAP.findall(text)))


def _with_started_mark(program: str) -> str:
    """The program printing STARTED from BEGIN, which bpftrace runs once every probe is attached (its
    'attached_probes' line comes before the attaching): into the program's own BEGIN block, as bpftrace
    allows only one, or in one of ours."""
    m = _BEGIN.search(_masked(program))
    if m is None:
        return f'{program}\nBEGIN {{ printf("{STARTED}\\n"); }}\n'  # after it: its line numbers stay
    return f'{program[:m.end()]} printf("{STARTED}\\n"); {program[m.end():]}'


BOUND = "@__ioscope_"  # the min() and max() maps beside each hist() and lhist(): @__ioscope_lo_NAME, _hi_
_HIST_CALL = re.compile(r"(@[A-Za-z_0-9]*)\s*(\[)?")


def _masked(program: str) -> str:
    """The program with its comments and strings blanked, every offset kept."""
    return _STRING.sub(lambda m: "_" * len(m.group(0)), _COMMENT.sub(lambda m: " " * len(m.group(0)), program))


def _close(text: str, i: int) -> int:
    """Index just past the bracket that closes the one at text[i] (len(text) if none)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] in "([":
            depth += 1
        elif text[j] in ")]":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _first_arg(text: str, i: int, end: int) -> str:
    """The first argument of the call whose '(' is text[i] (the call ends at end)."""
    depth = 0
    for j in range(i + 1, end - 1):
        if text[j] in "([":
            depth += 1
        elif text[j] in ")]":
            depth -= 1
        elif text[j] == "," and depth == 0:
            return text[i + 1: j]
    return text[i + 1: end - 1]


def bound_name(m: str, which: str) -> str:
    return f"{BOUND}{which}_{m[1:]}"


def with_bounds(program: str) -> tuple[str, list[str]]:
    """The program with `@lo = min(v); @hi = max(v)` after each `@m[k] = hist(v)` (and lhist), keyed
    alike, so that percentiles stay between the values really seen; and the maps it added."""
    text = _masked(program)
    out: list[str] = []
    added: list[str] = []
    last = 0
    for m in _HIST_CALL.finditer(text):
        if m.start() < last:
            continue
        key_end = _close(text, m.end() - 1) if m.group(2) else m.end()
        call = re.compile(r"\s*=\s*(l?hist)\s*\(").match(text, key_end)
        if call is None:
            continue
        paren = call.end() - 1
        end = _close(text, paren)
        arg = program[paren + 1: paren + 1 + len(_first_arg(text, paren, end))]
        key = program[m.end() - 1: key_end] if m.group(2) else ""
        lo, hi = bound_name(m.group(1), "lo"), bound_name(m.group(1), "hi")
        out.append(program[last:end])
        out.append(f"; {lo}{key} = min({arg}); {hi}{key} = max({arg})")
        added += [lo, hi]
        last = end
    out.append(program[last:])
    return "".join(out), list(dict.fromkeys(added))


def wrap(program: str, maps: list[str], interval_s: float | None, cumulative: bool) -> str:
    """The program with ioscope's start mark, the min and max maps beside its histograms, and the
    interval probe (none without an interval: the maps are printed once, when bpftrace stops)."""
    program, bounds = with_bounds(program)
    maps = maps + bounds
    program = _with_started_mark(program)
    if interval_s is None:
        return program
    ms = max(1, round(interval_s * 1000))
    body = " ".join(f"print({m});" for m in maps)
    if not cumulative:
        body += " " + " ".join(f"clear({m});" for m in maps)
    return f'{program}\ninterval:ms:{ms} {{ {body} printf("{MARK}\\n"); }}\n'


@dataclass
class Interval:
    """What bpftrace printed for one interval: map name -> (bpftrace's type, data)."""

    maps: dict[str, tuple[str, Any]] = field(default_factory=dict)
    bounds: dict[str, Any] = field(default_factory=dict)  # BOUND maps: their name -> data
    lost: int = 0
    printed: list[str] = field(default_factory=list)   # the program's own printf output


def error_line(stderr: str) -> str:
    """bpftrace's error, on one line: 'stdin:1:50-51: syntax error, unexpected }'."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and _MEMLOCK not in ln]
    errors = [i for i, ln in enumerate(lines) if "ERROR:" in ln]
    line = lines[errors[0]] if errors else (lines[0] if lines else "exited without a message")
    line = re.sub(r"\s*ERROR:\s*", " ", line).strip()
    # an attach failure: the kernel's reason is the line before ('create_probe_event: open(...): ...')
    before = lines[errors[0] - 1] if errors and errors[0] else ""
    if "attaching probe" in line.lower() and ": " in before and "WARNING" not in before:
        line += f" ({before})"
    return line


class BpftraceRun:
    """The bpftrace process: started in its own session (a terminal's Ctrl-C reaches ioscope, which stops
    bpftrace itself and still reads its last output), read line by line as JSON."""

    def __init__(self, program: str, bpftrace: str = "bpftrace") -> None:
        try:
            self.p = subprocess.Popen([bpftrace, "-f", "json", "-e", program], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True)
        except FileNotFoundError:
            raise IoscopeError("bpftrace is not installed", "install it (apt-get install bpftrace)") from None
        self.attached = 0
        self.started = False  # BEGIN ran: every probe attached
        self.err_lines: list[str] = []
        self.killed_late = False   # did not exit within STOP_GRACE_S of its SIGINT: killed
        self._late: threading.Timer | None = None
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        live.start_thread(self._err)

    def _read_stderr(self) -> None:
        """bpftrace's messages: kept for the error line, and its warnings passed on once it runs."""
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.err_lines.append(line)
            if self.started and line.strip() and _MEMLOCK not in line:
                print(f"ioscope agg: bpftrace: {line.rstrip()}", file=sys.stderr, flush=True)

    def events(self) -> Iterator[dict[str, Any]]:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # not bpftrace's JSON: nothing to aggregate
            if isinstance(doc, dict):
                yield doc

    STOP_GRACE_S = 30.0   # bpftrace's own stop (detach, print its maps) took over 60 s beside a CPU hog

    def stop(self) -> None:
        """SIGINT: bpftrace detaches and prints its maps a last time. Should it not exit within STOP_GRACE_S
        (its detach waits on the kernel: once more than 600 s on a loaded CI host), it is killed, and
        killed_late says so."""
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGINT)
            if self._late is None:
                self._late = threading.Timer(self.STOP_GRACE_S, self._kill_late)
                self._late.daemon = True
                live.start_thread(self._late)

    def _kill_late(self) -> None:
        if self.p.poll() is None:
            self.killed_late = True
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stderr(self) -> str:
        self._err.join(timeout=5)
        return "".join(self.err_lines)

    def close(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()
        if self._late is not None:
            self._late.cancel()
        if self.p.stdout is not None:
            self.p.stdout.close()
        self._err.join(timeout=5)


def intervals(run: BpftraceRun) -> Iterator[tuple[str, Interval]]:
    """("attached", empty) once the probes are attached, then ("interval", maps) at each marker, and
    ("end", maps) with what bpftrace printed when it stopped."""
    cur = Interval()
    for doc in run.events():
        kind, data = doc.get("type"), doc.get("data")
        if kind == "attached_probes":  # printed before bpftrace attaches: not yet a start
            run.attached = int((data or {}).get("probes", 0))
        elif kind in ("map", "hist", "stats") and isinstance(data, dict):
            for name, value in data.items():
                if name.startswith(BOUND):
                    cur.bounds[name] = value
                else:
                    cur.maps[name] = (str(kind), value)
        elif kind == "lost_events" and isinstance(data, dict):
            cur.lost += int(data.get("events", 0))
        elif kind == "printf":
            if str(data).strip() == STARTED:
                run.started = True
                yield "attached", Interval()
            elif str(data).strip() == MARK:
                yield "interval", cur
                cur = Interval()
            else:
                cur.printed.append(str(data))
    yield "end", cur


# -- the model: bpftrace's maps -> agg's tables -------------------------------------------------

def _keys(key: str | None) -> dict[str, Any]:
    return {} if key is None else {"key": key}


def _bound(bounds: dict[str, Any], name: str, which: str, key: str | None) -> int | None:
    data = bounds.get(bound_name(name, which))
    if isinstance(data, dict):
        data = data.get(key) if key is not None else None
    return int(data) if isinstance(data, (int, float)) else None


def _hist_row(key: str | None, raw: list[dict[str, Any]], lo: int | None = None, hi: int | None = None
              ) -> ResultRow:
    buckets = []
    for b in raw:
        low = int(b.get("min", 0))
        # lhist's last bucket holds everything from its min up: high == low marks it open-ended, and a
        # percentile that falls in it is its low (a lower bound)
        high = int(b["max"]) + 1 if "max" in b else low
        buckets.append((low, high, int(b.get("count", 0))))
    nz = [i for i, b in enumerate(buckets) if b[2]]
    buckets = buckets[nz[0]: nz[-1] + 1] if nz else []
    count = sum(b[2] for b in buckets)
    return ResultRow(_keys(key), None, buckets, buckets_percentiles(buckets, lo, hi), count)


def _table(name: str, kind: str, data: Any, limit: int | None, bounds: dict[str, Any] | None = None) -> AggTable:
    keyed = isinstance(data, dict) and not (kind == "stats" and "average" in data)
    if kind == "hist" and isinstance(data, list):
        keyed = False
    items: list[tuple[str | None, Any]] = [(str(k), v) for k, v in data.items()] if keyed else [(None, data)]
    keys: tuple[str, ...] = ("key",) if keyed else ()
    if kind == "hist":
        b = bounds or {}
        rows = [_hist_row(k, v, _bound(b, name, "lo", k), _bound(b, name, "hi", k)) for k, v in items]
        rows.sort(key=lambda r: (r.count, str(r.keys)))
        func = "hist"
    elif kind == "stats" and all(isinstance(v, dict) for _k, v in items):
        rows = [ResultRow(_keys(k), v.get("average", 0), count=int(v.get("count", 0)),
                          extra={"count": int(v.get("count", 0)), "total": int(v.get("total", 0))})
                for k, v in items]
        rows.sort(key=lambda r: (r.value or 0, str(r.keys)))
        func = "avg"
    else:
        rows = [ResultRow(_keys(k), v if isinstance(v, (int, float)) else 0) for k, v in items]
        rows.sort(key=lambda r: (r.value or 0, str(r.keys)))
        func = "avg" if kind == "stats" else "value"
    cut = 0
    if limit is not None and len(rows) > limit:
        cut = len(rows) - limit
        rows = rows[cut:]
    return AggTable(name, func, None, "count", keys, rows, cut)


def build_result(iv: Interval, wall: float, started: float, limit: int | None, final: bool,
                 lost_total: int) -> AggResult:
    tables = [_table(name, kind, data, limit, iv.bounds) for name, (kind, data) in iv.maps.items()]
    losses = Losses({LOST: iv.lost}, frozenset({LOST}),
                    {LOST: f"events bpftrace could not read ({lost_total} since the start)"})
    return AggResult(wall, wall - started, losses, tables, final)


# -- the command ------------------------------------------------------------------------------

def read_program(program: str | None, path: str | None) -> str:
    if path is not None:
        try:
            with open(path) as f:
                return f.read()
        except OSError as exc:
            raise UsageError(f"cannot read --bpftrace-file {path}: {exc.strerror}") from None
    assert program is not None
    return program


def run(args: Any, emit: Any) -> int:
    """Run the program; emit(result) for each interval, and the last one when it stops."""
    program = read_program(args.bpftrace, args.bpftrace_file)
    maps = map_names(program)
    if not maps:
        raise UsageError("the bpftrace program has no maps (@name) to aggregate",
                         "aggregate into maps, e.g. '@[comm] = count()'")
    from ioscope.base import system

    system.require_bpf_privileges("agg")
    bt = BpftraceRun(wrap(program, maps, args.interval, args.cumulative))
    started = time.time()
    done = 0
    lost_total = 0
    stopping = False
    try:
        try:
            for kind, iv in intervals(bt):
                if kind == "attached":
                    started = time.time()
                    when = "Ctrl-C to end" if args.interval is None else f"every {args.interval:g}s"
                    print(f"Tracing bpftrace's maps {', '.join(maps)} ({bt.attached} probes); {when}.",
                          file=sys.stderr, flush=True)
                    continue
                if kind == "end" and not bt.started:
                    break  # bpftrace did not start: its error follows
                lost_total += iv.lost
                final = kind == "end" or (args.count is not None and done + 1 >= args.count)
                if kind == "end" and (stopping and args.count is not None and done >= args.count):
                    break  # the count was reached: what bpftrace prints at exit is not another interval
                if kind == "end" and not iv.maps and done:
                    break
                now = time.time()
                emit(build_result(iv, now, started, args.rows, final, lost_total))
                started = now
                done += 1
                if final and kind != "end":
                    stopping = True
                    bt.stop()
        except KeyboardInterrupt:
            stopping = True
            bt.stop()
            for kind, iv in intervals(bt):
                if kind == "end" or kind == "interval":
                    lost_total += iv.lost
                    now = time.time()
                    emit(build_result(iv, now, started, args.rows, True, lost_total))
                    started = now
                    break
        rc = bt.p.wait()
        if bt.killed_late:
            raise IoscopeError(f"bpftrace did not exit within {bt.STOP_GRACE_S:g} s of its SIGINT (its detach waits "
                               "on the kernel): killed, its last maps are lost; the intervals before were printed",
                               "a loaded host can take long to detach probes: run it again when the host is quieter")
        if rc != 0 and (not bt.started or not stopping):
            # an attach failure comes after bpftrace's attached_probes line: only BEGIN's mark says it ran
            line = error_line(bt.stderr())
            hint = ("this kernel refused the probe; tracepoints (tracepoint:block:*) attach where kprobes "
                    "cannot" if "attaching probe" in line.lower() else None)
            raise IoscopeError(f"bpftrace: {line}", hint)
        return 0
    finally:
        bt.close()


__all__ = ["BpftraceRun", "build_result", "error_line", "intervals", "map_names", "run", "wrap"]
