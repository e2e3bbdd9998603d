"""The option vocabulary and helpers every tool shares."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ioscope.base.collector import Tick
from ioscope.base.live import sleep_until, warn_lost, warn_unavailable
from ioscope.base.phases import PHASES

if TYPE_CHECKING:  # rich and numpy are imported when used, so that --help starts fast
    from rich.console import Console

    from ioscope.base.losses import Losses



def positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"interval must be a number of seconds, not '{s}'") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"interval must be a positive number of seconds, not '{s}'")
    return v


def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"count must be a whole number, not '{s}'") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"count must be at least 1, not '{s}'")
    return v


def pid_type(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"PID must be a number, not '{s}'") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"PID must be positive, not '{s}'")
    return v


def phases_type(s: str) -> list[str]:
    out = [p.strip().lower() for p in s.split(",") if p.strip()]
    bad = [p for p in out if p not in PHASES]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"unknown phase '{','.join(bad) or s}' (choose from q2c, q2d, d2c)")
    return list(dict.fromkeys(out))


def parse_size(text: str, what: str = "size") -> int:
    """'64M', '1g', '4096', '512KiB' -> bytes."""
    s = text.strip().lower().removesuffix("ib").removesuffix("b")
    mult = 1
    for suffix, m in (("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40)):
        if s.endswith(suffix):
            s, mult = s[:-1], m
            break
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a size like 64M or 1G, not '{text}'") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{what} must be positive, not '{text}'")
    return int(v * mult)


def size_type(what: str) -> Callable[[str], int]:
    """An argparse type for a size option named what ('--buffer')."""
    def conv(text: str) -> int:
        return parse_size(text, what)
    return conv


def add_disk_pid(p: argparse.ArgumentParser) -> None:
    p.add_argument("-d", "--disk", action="append", metavar="DISK",
                   help="trace only this disk (name, /dev/name or major:minor); repeatable")
    p.add_argument("-p", "--pid", type=pid_type, help="trace only I/O queued by this process")


def add_proc_filters(p: argparse.ArgumentParser) -> None:
    """-d, -p and --comm, filtered in the kernel (readsize and fair share the BPF object)."""
    add_disk_pid(p)
    p.add_argument("--comm", metavar="COMM", help="only processes with this command name (as in /proc/PID/comm)")


def add_process_cgroup(p: argparse.ArgumentParser) -> None:
    """-c CGROUP and -G where a tool's rows are processes (fair, readsize): a process's cgroup is the one
    /proc/PID/cgroup names, read in user space (-c was --comm's letter in these two tools before)."""
    p.add_argument("-c", "--cgroup", metavar="CGROUP",
                   help="only processes in this cgroup or one under it: its path in the io controller's "
                        "hierarchy, as /proc/PID/cgroup gives it (/system.slice/x.service, /kubepods.slice/...); "
                        "for a command name use --comm")
    p.add_argument("-G", "--cgroups", action="store_true",
                   help="a CGROUP column: each process's cgroup (containers, services and pods named)")


def process_cgroup_arg(path: str | None) -> str | None:
    """-c CGROUP of add_process_cgroup, resolved to its path (a one-line error when it does not exist,
    which names --comm: -c was that option's letter in these tools)."""
    from ioscope.base.cgroups import cgroup_filter
    from ioscope.base.errors import UsageError
    if path is None:
        return None
    try:
        return cgroup_filter(path).path
    except UsageError as e:
        raise UsageError(e.what, "give a path as in /proc/PID/cgroup; for a command name use --comm "
                                         "(-c was its letter before)") from None


def add_cgroup(p: argparse.ArgumentParser) -> None:
    """-c CGROUP: the I/O charged to a cgroup and to every cgroup under it, filtered in the kernel."""
    p.add_argument("-c", "--cgroup", metavar="CGROUP",
                   help="only I/O charged to this cgroup or one under it: its path in the io controller's "
                        "hierarchy, as /proc/PID/cgroup gives it (/system.slice/x.service, /kubepods.slice/...)")


DEFAULT_INTERVAL = 1.0  # seconds, with -n N and no interval (iotop's delay; top's own refresh)


def add_interval_count(p: argparse.ArgumentParser) -> None:
    """[interval [count]] and -n N: -n is the number of reports, as in top -n and iotop -n (the same as the
    positional COUNT; finish_args reconciles them after parsing)."""
    p.add_argument("-n", "--count", dest="count_n", type=positive_int, metavar="N", action=_CountN,
                   help=f"stop after N reports, as top -n and iotop -n (the same as COUNT; every "
                        f"{DEFAULT_INTERVAL:g}s unless an INTERVAL is given)")
    p.add_argument("interval", nargs="?", type=positive_float, help="print every INTERVAL seconds")
    p.add_argument("count", nargs="?", type=positive_int, help="stop after COUNT intervals (or -n COUNT)")


class _CountN(argparse.Action):
    """Stores -n N and which spelling gave it (finish_args notes only the short -n, rows' old letter)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.count_n_spelling = option_string


def finish_args(p: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """After parsing: fold -n N into the positional count (an interval of DEFAULT_INTERVAL when none was
    given); -n and a different COUNT is a usage error. A tool that also shows rows says once on stderr that
    -n counts reports now and rows are -r (scripts written when -n meant rows), unless rows were given too.
    A tool that sets the default rows_note_when_cut (top) is handed the note as ns.rows_note = (N, line)
    instead, to say it only when a report shows more than N rows (rows_note_if_cut): procps' top -b -n 1
    on a host with one busy process says nothing. Idempotent."""
    if not hasattr(ns, "count_n"):
        return
    n, spelling = ns.count_n, getattr(ns, "count_n_spelling", None)
    del ns.count_n
    if spelling is not None:
        del ns.count_n_spelling
    if n is None:
        return
    if ns.count is not None and ns.count != n:
        p.error(f"-n {n} and COUNT {ns.count} disagree (both are the number of reports); give one of them")
    ns.count = n
    if ns.interval is None:
        ns.interval = DEFAULT_INTERVAL
    rows = next((a for a in p._actions if a.dest == "rows" and a.help != argparse.SUPPRESS), None)
    if spelling == "-n" and rows is not None and getattr(ns, "rows", None) == rows.default:
        line = (f"{p.prog}: note: -n {n} is the number of reports (as in top and iotop), no longer rows; "
                f"for at most N rows use {'/'.join(rows.option_strings)} N")
        if getattr(ns, "rows_note_when_cut", False):
            ns.rows_note = (n, line)
        else:
            print(line, file=sys.stderr)


def rows_note_if_cut(ns: argparse.Namespace, rows: int) -> None:
    """Say finish_args' -n note (once) when a report shows more rows than the N that -n used to cut it to:
    only then does the old meaning differ from what is printed."""
    note = getattr(ns, "rows_note", None)
    if note is not None and rows > note[0]:
        print(note[1], file=sys.stderr, flush=True)
        ns.rows_note = None


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per line (per interval)")


def add_rows(p: argparse.ArgumentParser, what: str = "rows", default: int | None = None, letter: bool = True
             ) -> None:
    """-r N, --rows N: how many rows a table shows (the largest first), as biotop's -r MAXROWS; never a
    count of reports (that is -n). letter=False: --rows only (agg, whose -r reads a capture)."""
    p.add_argument(*(("-r", "--rows") if letter else ("--rows",)), type=positive_int, metavar="N",
                   default=default, help=f"show at most N {what}" + (f" (default {default})" if default else ""))


def finish_parser(p: argparse.ArgumentParser) -> None:
    """After a tool's parser is built: where -n does not count reports (a tool without [interval [count]]),
    -n N keeps its old meaning, rows, with a note on stderr (add_deprecated_flag)."""
    rows = next((a for a in p._actions if a.dest == "rows" and a.help != argparse.SUPPRESS), None)
    if rows is not None and "-n" not in p._option_string_actions:
        add_deprecated_flag(p, "-n", dest="rows", instead="/".join(rows.option_strings) + " N", takes_value=True,
                            type=positive_int)


def add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true", help="no status lines on stderr")


class _Deprecated(argparse.Action):
    """An old spelling kept working: stores like the new option and says once what to type now."""

    def __init__(self, option_strings: list[str], dest: str, instead: str, const: Any = True,
                 nargs: int | str | None = 0, **kw: Any) -> None:
        self.instead = instead
        super().__init__(option_strings, dest, nargs=nargs, const=const, help=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: note: {option_string} is deprecated, use {self.instead}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_deprecated_flag(p: argparse.ArgumentParser, *spellings: str, dest: str, instead: str,
                        const: Any = True, takes_value: bool = False, type: Callable[[str], Any] | None = None
                        ) -> None:
    """Keep an old option spelling working (hidden from --help, a note on stderr when used)."""
    if takes_value:
        p.add_argument(*spellings, dest=dest, action=_Deprecated, instead=instead, nargs=None, const=None,
                       type=type or str, default=argparse.SUPPRESS)
    else:
        p.add_argument(*spellings, dest=dest, action=_Deprecated, instead=instead, const=const,
                       default=argparse.SUPPRESS)


def print_result(tool: str, result: Any, as_json: bool, to_json: Callable[[Any], Any],
                 renderables: Callable[[Any], Iterable[Any]], losses: Losses | None = None) -> None:
    """One interval's result, the same way in every tool: the lost line on stderr (warn_lost), then one
    JSON line, or the view's rich renderables on the console."""
    if losses is not None:
        warn_lost(tool, losses)
    if as_json:
        print(json.dumps(to_json(result)), flush=True)
    else:
        out = console()
        for r in renderables(result):
            out.print(r)


def console() -> Console:
    """rich on a terminal; plain text (no colour, no wrapping surprises) otherwise."""
    from rich.console import Console
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(file=sys.stdout, color_system=None, force_terminal=False, width=200, highlight=False,
                   soft_wrap=True)


# emit(tick) prints one report (base/collector.py: Tick says since when, and whether to reset or settle)
Emit = Callable[[Tick], None]


def run_intervals(tool: str, what: str, interval: float | None, count: int | None, emit: Emit,
                  unavailable: list[str], tick: Callable[[], None] | None = None,
                  tick_every: float = 10.0) -> int:
    """The life cycle every aggregating tool shares, after its programs are attached.

    Without an interval: wait for Ctrl-C/SIGTERM, then report once. With one: report (and
    reset) every interval, count times. Ctrl-C or SIGTERM may arrive at any moment, even
    before the "Tracing" line is out: what was measured is still reported. tick() runs every
    tick_every seconds while waiting (housekeeping such as sweeping stale state).
    """
    started = time.time()
    try:
        warn_unavailable(tool, unavailable)
        when = "Ctrl-C to end" if interval is None else f"every {interval:g}s"
        print(f"Tracing {what}; {when}.", file=sys.stderr, flush=True)
        if interval is None:
            while True:
                time.sleep(tick_every)
                if tick:
                    tick()
    except KeyboardInterrupt:
        if interval is None:
            emit(Tick(started, reset=False, final=True))
        return 0
    done = 0
    try:
        while count is None or done < count:
            deadline = started + interval * (done + 1)
            while tick and time.time() + tick_every < deadline:  # housekeeping within long intervals
                time.sleep(tick_every)
                tick()
            sleep_until(deadline)
            done += 1
            emit(Tick(started + interval * (done - 1), reset=True, final=count is not None and done >= count))
            if tick:
                tick()
    except KeyboardInterrupt:
        pass
    return 0
