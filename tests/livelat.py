"""Run `ioscope lat` around a workload, the way a user would (Ctrl-C ends it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from conftest import ioscope_cmd


class LatRun:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.stdout = ""
        self.stderr = ""
        self.returncode: int | None = None

    @property
    def doc(self) -> dict[str, Any]:
        lines = [ln for ln in self.stdout.splitlines() if ln.startswith("{")]
        assert len(lines) == 1, f"expected one JSON object, got {len(lines)}: {self.stdout[:500]} {self.stderr}"
        d: dict[str, Any] = json.loads(lines[0])
        return d

    def hists(self, phase: str, **match: Any) -> list[dict[str, Any]]:
        return [h for h in self.doc["hists"] if h["phase"] == phase and all(h[k] == v for k, v in match.items())]

    def count(self, phase: str, **match: Any) -> int:
        return sum(int(h["count"]) for h in self.hists(phase, **match))


@contextmanager
def lat_running(*args: str, env: dict[str, str] | None = None, wrap: Sequence[str] = ()) -> Iterator[LatRun]:
    """Start `ioscope lat ARGS` (under WRAP, e.g. setpriv), wait until it is tracing, yield, then SIGINT it
    and collect output."""
    run = LatRun()
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.Popen([*wrap, *ioscope_cmd("lat", *args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=e)
    run.proc = proc
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        if not first.startswith("Tracing"):
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"ioscope lat did not start: {first}{err}{out}")
        yield run
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        run.stdout, run.stderr, run.returncode = out, err, proc.returncode
