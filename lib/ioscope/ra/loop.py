"""The interval loop shared by readsize, readahead and fair (same life cycle as ioscope lat)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from ioscope import cli_common

# emit(interval_start_wall_time, reset, final) prints one report
Emit = Callable[[float, bool, bool], None]


def run_intervals(tool: str, what: str, interval: float | None, count: int | None, emit: Emit,
                  unavailable: list[str]) -> int:
    for msg in unavailable:
        print(f"ioscope {tool}: {msg}; carrying on without it", file=sys.stderr)
    when = "Ctrl-C to end" if interval is None else f"every {interval:g}s"
    print(f"Tracing {what}; {when}.", file=sys.stderr, flush=True)
    started = time.time()
    if interval is None:
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        emit(started, False, True)
        return 0
    done = 0
    try:
        while count is None or done < count:
            cli_common.sleep_until(started + interval * (done + 1))
            done += 1
            emit(started + interval * (done - 1), True, count is not None and done >= count)
    except KeyboardInterrupt:
        pass
    return 0
