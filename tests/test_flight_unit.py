"""The flight recorder's pure parts (no root): --ring and durations, the ring's time and memory bounds,
the saved window's events, names and losses, the save names, the trigger conditions, and the options'
one-line errors."""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ioscope_cmd
from ioscope.base.errors import UsageError
from ioscope.capture.events import EVENT
from ioscope.engines.aggregate.expr import ExprError
from ioscope.tools.record.flight import (
    DEFAULT_RING_MEMORY,
    EventRing,
    lost_delta,
    parse_duration,
    parse_ring,
    parse_triggers,
    save_path,
)

ROOT = Path(__file__).resolve().parent.parent


def events(ts: list[int] | np.ndarray, pid: int = 100, action: int = 1) -> np.ndarray:
    ev = np.zeros(len(ts), dtype=EVENT)
    ev["ts"] = ts
    ev["pid"] = pid
    ev["tgid"] = pid
    ev["action"] = action
    ev["bytes"] = 4096
    return ev


def note(ts: int, pid: int, comm: str) -> np.ndarray:
    """A process note (action 0): the name in sector and aux, as record.bpf.c writes it."""
    ev = events([ts], pid, action=0)
    raw = comm.encode().ljust(16, b"\0")
    ev["sector"] = int.from_bytes(raw[:8], "little")
    ev["aux"] = int.from_bytes(raw[8:], "little")
    ev["flags"] = 1
    return ev


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("500ms", 0.5), ("10m", 600), ("10min", 600), ("2h", 7200),
                                           ("1d", 86400), ("45", 45), ("1.5s", 1.5)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text, "--after") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "-5s", "0s", "inf", "5x"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--after"):
        parse_duration(text, "--after")


@pytest.mark.parametrize("text, window, size", [
    ("60s", 60.0, None), ("10m", 600.0, None), ("256M", None, 256 << 20), ("1G", None, 1 << 30),
    ("10m,1G", 600.0, 1 << 30), ("512MiB,30s", 30.0, 512 << 20), ("2g", None, 2 << 30),
])
def test_parse_ring(text: str, window: float | None, size: int | None) -> None:
    spec = parse_ring(text)
    assert (spec.window_s, spec.max_bytes) == (window, size)
    assert spec.memory == (size or DEFAULT_RING_MEMORY)


@pytest.mark.parametrize("text, why", [("", "DURATION"), ("60s,", "DURATION"), ("1G,2G", "two sizes"),
                                       ("10s,20s", "two durations"), ("100K", "at least 1M"), ("a,b,c", "DURATION")])
def test_parse_ring_rejects(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        parse_ring(text)


def test_lost_delta_subtracts_counters_and_per_cpu_lists() -> None:
    before = {"total": 3, "ringbuf_full_events": 3, "per_cpu": {"ringbuf_full_events": [1, 2]}}
    now = {"total": 10, "ringbuf_full_events": 9, "recursion_misses": 1,
           "per_cpu": {"ringbuf_full_events": [4, 5]}}
    assert lost_delta(now, before) == {"total": 7, "ringbuf_full_events": 6, "recursion_misses": 1,
                                       "per_cpu": {"ringbuf_full_events": [3, 3]}}


def test_ring_keeps_the_window_by_time() -> None:
    s = 1_000_000_000
    ring = EventRing(keep_ns=5 * s, max_bytes=64 << 20)
    for sec in range(20):   # one block per second: 100 events each
        ring.add(events(np.arange(100) * 1000 + sec * s))
        ring.seal()
        ring.trim(sec * s + 999 * 1000)
    # blocks wholly older than now - 5 s (14.000999 s) are gone: seconds 15..19 stay
    assert [b.first_ts // s for b in ring.blocks] == [15, 16, 17, 18, 19]
    assert ring.aged_out == 15 * 100
    assert ring.events_seen == 2000
    assert ring.bytes == 500 * EVENT.itemsize
    assert ring.squeezed_out == 0


def test_ring_keeps_the_memory_bound() -> None:
    ring = EventRing(keep_ns=None, max_bytes=1 << 20)
    per = ring.block_rows
    total = 0
    for i in range(50):
        ring.add(events(np.arange(per) + i * per))
        total += per
        assert ring.bytes <= 1 << 20
    assert ring.bytes > (1 << 20) - per * EVENT.itemsize   # full up to one block
    assert ring.squeezed_out + ring.nevents == total
    assert ring.nevents == sum(len(b.ev) for b in ring.blocks)
    # the newest events are the ones kept
    assert int(ring.blocks[-1].last_ts) == total - 1


def test_one_large_poll_is_cut_into_blocks() -> None:
    """A poll at full rate brings more than a block: it is cut, so that the memory bound drops a block's
    worth at a time and the ring stays full up to one block (a 1 MiB poll left a 2 MiB ring half full)."""
    ring = EventRing(keep_ns=None, max_bytes=2 << 20)
    per = ring.block_rows
    ring.add(events(np.arange(40 * per + 7)))
    ring.seal()
    assert max(len(b.ev) for b in ring.blocks) <= per
    assert (2 << 20) - per * EVENT.itemsize <= ring.bytes <= 2 << 20
    assert int(ring.blocks[-1].last_ts) == 40 * per + 6
    assert ring.events_seen == 40 * per + 7


def test_window_cuts_blocks_names_processes_and_counts_its_own_losses() -> None:
    s = 1_000_000_000
    ring = EventRing(keep_ns=None, max_bytes=64 << 20, zero_lost={"total": 0})
    ring.add(note(1, 7, "old"))
    ring.add(note(2, 8, "fio"))
    ring.set_lost({"total": 2})     # lost before the window's block
    ring.seal()
    ring.add(events(np.arange(10) * s // 10 + s, pid=8))   # 1.0 .. 1.9 s
    ring.seal()
    ring.set_lost({"total": 5})
    ring.add(events(np.arange(10) * s // 10 + 2 * s, pid=8))
    ring.seal()
    parts, lost, comms = ring.window(int(1.5 * s), int(2.5 * s))
    ts = np.concatenate([p["ts"] for p in parts])
    assert len(ts) == 10 and ts.min() >= 1.5 * s and ts.max() < 2.5 * s
    assert comms == {8: "fio"}           # only the processes in the window
    assert lost == {"total": 3}          # the losses since the first block it takes from


def test_save_names_do_not_collide(tmp_path: Path) -> None:
    wall = time.mktime((2026, 11, 27, 14, 15, 2, 0, 0, 0)) - time.timezone
    assert save_path(str(tmp_path / "io"), wall, 1) == str(tmp_path / "io-20261127T141502Z-1.ioscope")
    assert save_path(str(tmp_path / "io"), wall, 2) != save_path(str(tmp_path / "io"), wall, 1)
    assert save_path(str(tmp_path), wall, 3) == str(tmp_path / "ioscope-20261127T141502Z-3.ioscope")


def test_trigger_conditions_become_aggregations() -> None:
    q, d, c = parse_triggers(['q2c > 500ms', 'd2c > 100ms where disk == "sda" and op == "write"', 'bytes >= 1M'])
    assert (q.func, q.value, q.keys) == ("max", "q2c", ("disk", "op", "comm", "cgroup"))
    assert (d.func, d.value) == ("max", "d2c")
    assert d.where is not None and {"d2c", "disk", "op"} <= {f for f in d.fields()}
    assert (c.func, c.value) == ("count", None)


@pytest.mark.parametrize("text, msg", [
    ("q2c >", "expected a key, a value or a literal"),
    ("q2c > 5 parsecs", "expected 'and', 'or', 'where' or the end, found 'parsecs'"),
    ("", "empty condition"),
    ("latency > 5ms", "unknown key or value 'latency'"),
    ("q2c > 5ms where", "expected a key, a value or a literal"),
    ("kstack == 1", "'kstack' is a key only: it cannot be compared"),
])
def test_bad_trigger_is_one_line(text: str, msg: str) -> None:
    with pytest.raises((ExprError, UsageError), match=msg) as exc:
        parse_triggers([text])
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("argv, msg, rc", [
    (["--trigger", "q2c > 1s", "-o", "x"], "--trigger goes with --ring", 2),
    (["--ring", "lots", "-o", "x"], "--ring takes DURATION, SIZE or DURATION,SIZE", 2),
    (["--ring", "60s", "--after", "never", "-o", "x"], "--after must be a duration", 2),
    (["--ring", "60s", "--max-size", "1G", "-o", "x"], "--max-size goes with a plain recording", 2),
    (["--ring", "60s", "-o", "/nonexistent/dir/io"], "directory /nonexistent/dir does not exist", 1),
    (["--ring", "60s", "--trigger", "q2c >> 1", "-o", "x"], "--trigger 'q2c >> 1'", 2),
    (["--ring", "100T", "-o", "x"], "more than half of this host's available memory", 2),
])
def test_option_errors_are_one_line(argv: list[str], msg: str, rc: int, tmp_path: Path) -> None:
    """Wrong options: one line that says what is wrong, a non-zero exit (2 for usage), no traceback, nothing
    attached (these fail before the privilege check, so they run unprivileged too)."""
    argv = [a if a != "x" else str(tmp_path / "io") for a in argv]
    run = subprocess.run(ioscope_cmd("record", *argv), capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == rc, run.stderr
    assert msg in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and not ln.startswith("usage:")
             and not ln.startswith(" ")]
    assert len(lines) <= 2, run.stderr   # the error and, at most, the hint


class _Attached:
    """What FlightSession reads of its recorder before any save: when the programs were attached, and the
    loss counters (the window bookkeeping below runs without a kernel; the live tests run it with one)."""
    attached_ns = 0

    def capture_lost(self) -> dict[str, int]:
        return {"total": 0}


def test_a_window_the_memory_bound_cut_says_so(tmp_path: Path) -> None:
    """--ring 20s,1M under more than 1 MiB of events in 20 s: the save starts at the oldest event kept (not
    20 s before the trigger), and its line says how much of the window the memory bound kept."""
    from ioscope.tools.record.flight import FlightSession, Pending, RingSpec, Trigger
    s = 1_000_000_000
    sess = FlightSession(_Attached(), RingSpec(20.0, 1 << 20, "20s,1M"), prefix=str(tmp_path / "m"),  # type: ignore[arg-type]
                         meta={}, after_s=0.0, say=lambda _line: None)
    per = sess.ring.block_rows
    for i in range(40):   # 40 blocks over 20 s: about 2.5 MiB, twice the bound
        sess.ring.add(events(np.linspace(i * s // 2, (i + 1) * s // 2 - 1, per).astype(np.uint64)))
        sess.ring.seal()
    assert sess.ring.squeezed_out > 0
    trig = 20 * s
    sess.pending = Pending(Trigger("SIGUSR1", trig, time.time(), "signal"), trig)
    sess._hand_over(trig + 50_000_000)
    (job,) = sess.saves
    assert job.start_ns == sess.ring.oldest_ts() > 0
    assert job.asked_start_ns == 0   # 20 s before the trigger: the recorder's start (attached at 0)
    assert sum(len(p) for p in job.parts) * EVENT.itemsize <= 1 << 20
    job.events = sum(len(p) for p in job.parts)
    line = sess.save_line(job)
    assert "the 1.0 MiB memory bound kept" in line and "of the 20.0 s asked (--ring 20s,SIZE keeps more)" in line, line


def test_a_baseline_condition_parses_and_bad_ones_are_one_line() -> None:
    from ioscope.tools.record.flight import parse_baseline
    s = parse_baseline("p99(q2c) > 3x usual")
    assert (s.pct, s.phase, s.factor, s.name, s.min_ios) == (99.0, "q2c", 3.0, "p99(q2c)", 200)
    assert parse_baseline("p99.9(D2C) > 2.5 times usual").phase == "d2c"
    assert parse_baseline("p50(q2d) > 4x").min_ios == 4
    assert parse_baseline("p90(q2c)>3 x").min_ios == 20
    for bad, said in (("p99(q2c) > 3", "usual"), ("p100(q2c) > 3x", "p100"), ("p99(q2c) > 1x usual", "above"),
                      ("avg(q2c) > 3x usual", "PCT(TIME)"), ("p99(bytes) > 3x", "PCT(TIME)")):
        if bad == "p99(q2c) > 3":   # the factor's x may be left out: 3 is 3x
            assert parse_baseline(bad).factor == 3.0
            continue
        with pytest.raises(UsageError) as e:
            parse_baseline(bad)
        assert said in str(e.value) and "\n" not in str(e.value), e.value


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _second(watch: object, clock: _Clock, disk: str, values_ns: list[int],
            more: dict[str, list[int]] | None = None) -> list[str]:
    """One second of I/Os (values_ns on disk, and more's on other disks), then the watch's tick."""
    from ioscope.base.hist import Hist
    from ioscope.tools.record.flight import BaselineWatch
    assert isinstance(watch, BaselineWatch)
    for d, vals in {disk: values_ns, **(more or {})}.items():
        if vals:
            watch.add("q2c", d, Hist.from_values(vals))
    clock.t += 1.0
    return watch.tick()


def test_the_baseline_learns_then_fires_once_per_episode() -> None:
    """300 I/Os a second of 100-200 us: the usual p99 is ~200 us; nothing fires while it learns (half of
    --baseline 60s) or while the disk stays as usual; 10% of the I/Os at 50 ms then make the p99 of the last
    second 250x the usual: it fires once, not again while it lasts (5 s), and again after the disk was back
    to its usual for 30 s and slowed down once more. Another disk, always slow, never fires: slow is its usual."""
    from ioscope.tools.record.flight import BaselineWatch, parse_baseline
    clock = _Clock()
    w = BaselineWatch([parse_baseline("p99(q2c) > 3x usual")], baseline_s=60, clock=clock)
    fast = [100_000 + (i * 337) % 100_000 for i in range(300)]
    slow = fast[:270] + [50_000_000] * 30
    other = {"sdb": slow}
    fired: list[tuple[int, str]] = []
    for s in range(40):
        fired += [(s, x) for x in _second(w, clock, "sda", fast, other)]
    assert fired == []
    for s in range(40, 45):
        fired += [(s, x) for x in _second(w, clock, "sda", slow, other)]
    assert len(fired) == 1 and fired[0][0] == 40, fired
    line = fired[0][1]
    assert line.startswith("'p99(q2c) > 3x usual': sda p99(q2c) ") and " over the last 1 s (300 I/Os), " in line, line
    assert "x its usual " in line and "(p99(q2c) of 12,000 I/Os in the 40 s before)" in line, line
    for s in range(45, 75):
        fired += [(s, x) for x in _second(w, clock, "sda", fast, other)]
    for s in range(75, 77):
        fired += [(s, x) for x in _second(w, clock, "sda", slow, other)]
    # the second episode: 150 slow I/Os of the 18,000 in the 60 s before are under 1%: its usual is fast again
    assert [s for s, _ in fired] == [40, 75], fired
    assert w.fired == 2


def test_the_baseline_decides_nothing_while_it_learns() -> None:
    """Slow at second 20 of a --baseline 60s: the usual spans 20 s of the 30 it needs, nothing fires; the
    same slowdown at second 31 fires."""
    from ioscope.tools.record.flight import BaselineWatch, parse_baseline
    fast = [100_000 + (i * 337) % 100_000 for i in range(300)]
    slow = fast[:270] + [50_000_000] * 30
    for at, fires in ((20, False), (31, True)):
        clock = _Clock()
        w = BaselineWatch([parse_baseline("p99(q2c) > 3x usual")], baseline_s=60, clock=clock)
        got = [x for s in range(at + 1) for x in _second(w, clock, "sda", slow if s == at else fast)]
        assert bool(got) == fires, (at, got)


def test_the_baseline_needs_enough_ios_and_says_nothing_on_a_quiet_disk() -> None:
    """A p99 needs 200 I/Os: at 15 a second the current value spans 10 s (150 I/Os: not enough), so a disk
    that slow never fires, whatever its latencies; at 25 a second it spans 8 s and does."""
    from ioscope.tools.record.flight import BaselineWatch, parse_baseline
    clock = _Clock()
    quiet = BaselineWatch([parse_baseline("p99(q2c) > 3x usual")], baseline_s=100, clock=clock)
    for _ in range(200):
        assert _second(quiet, clock, "sda", [100_000] * 15) == []
    for _ in range(20):
        assert _second(quiet, clock, "sda", [90_000_000] * 15) == []
    clock2 = _Clock()
    busy = BaselineWatch([parse_baseline("p99(q2c) > 3x usual")], baseline_s=100, clock=clock2)
    for _ in range(120):
        assert _second(busy, clock2, "sda", [100_000] * 25) == []
    got = [x for _ in range(10) for x in _second(busy, clock2, "sda", [100_000] * 24 + [90_000_000])]
    assert len(got) == 1 and " over the last 8 s (200 I/Os)" in got[0], got


def test_baseline_options_are_for_the_flight_recorder(tmp_path: Path) -> None:
    p = subprocess.run(ioscope_cmd("record", "-o", str(tmp_path / "x"), "--trigger-baseline", "p99(q2c) > 3x"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--trigger-baseline goes with --ring" in p.stderr, p.stderr
    p = subprocess.run(ioscope_cmd("record", "--ring", "10s", "-o", str(tmp_path / "x"),
                                   "--trigger-baseline", "p99(q2c) > 0.5x usual"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "a factor of 0.5 is not above the usual" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 2, p.stderr
