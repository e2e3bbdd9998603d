"""A stop signal that lands while Python runs a finalizer still stops the tool (base/live.py: REDELIVER).

Python cannot raise the handler's KeyboardInterrupt out of a finalizer or a weakref callback: it prints
"Exception ignored in ..." and goes on. top, stopped with SIGINT beside agg, ran on for 60 s that way
(tests/test_iowait_live.py, 2026-11-29). The script below makes that moment on purpose: a __del__ that
signals its own process and runs on while the handler fires inside it."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import os, signal, sys, time
from ioscope import cli
from ioscope.base import live
cli.install_stop_signals()           # what cli.main() does when ioscope runs as a program
if sys.argv[1] == "ioscope":
    live.redeliver_swallowed_stops()
class Fin:
    def __del__(self):
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
        for _ in range(200000):      # the handler runs here, inside the finalizer
            pass
try:
    f = Fin()
    del f
    time.sleep(3)
    print("ran on")
except KeyboardInterrupt:
    print("stopped")
"""


def run(hook: str, sig: str) -> str:
    p = subprocess.run([sys.executable, "-c", SCRIPT, hook, sig], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_a_stop_inside_a_finalizer_stops() -> None:
    for sig in ("SIGINT", "SIGTERM", "SIGHUP"):
        assert run("ioscope", sig) == "stopped", sig


def test_without_the_hook_the_same_stop_is_lost() -> None:
    """The scenario is real: with Python's own hook (cli.main() inside another program, or before the fix)
    the same signal is swallowed and the script runs on."""
    assert run("python", "SIGINT") == "ran on"
