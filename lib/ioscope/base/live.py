"""The life of a long-running tool: deadlines, worker threads, stop signals held off while output is
written, and the lines every tool prints on stderr (hooks this kernel lacks, data lost). Used by the
tools' run loops and by the engines that run one (the recording session). No numpy: --help needs this."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ioscope.base.errors import IoscopeError

if TYPE_CHECKING:
    from ioscope.base.losses import Losses


def warn_unavailable(tool: str, unavailable: list[str]) -> None:
    """The one banner for hooks this kernel does not have: one line each, on stderr."""
    for msg in unavailable:
        print(f"ioscope {tool}: {msg}; carrying on without it", file=sys.stderr)


def warn_lost(tool: str, losses: Losses) -> None:
    """The one line on stderr when data was lost in an interval."""
    if losses.lost:
        print(f"ioscope {tool}: lost {losses.lost} values ({losses.describe()})", file=sys.stderr)


def sleep_until(deadline: float) -> None:
    while True:
        left = deadline - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 0.5))


# The signal that delivers again a stop whose KeyboardInterrupt Python could not raise (it arrived while
# a finalizer or a weakref callback ran: "Exception ignored in ..."): cli.install_stop_signals.
REDELIVER = signal.SIGRTMIN + 1
_swallowed: list[BaseException] = []


def _raise_swallowed(signum: int, frame: Any) -> None:
    if _swallowed:
        raise _swallowed.pop()


def _unraisable(u: Any) -> None:
    """sys.unraisablehook: a KeyboardInterrupt a stop signal raised inside a finalizer is lost there and
    the tool would run on (seen: top beside agg, SIGINT inside WeakSet's callback, still running 60 s
    later); it is raised again, by REDELIVER's handler, once the finalizer has returned: the signal is sent
    10 ms later from a thread (sent now, its handler would run inside this hook and be lost again; a
    finalizer still running then loses it once more, and it comes back 10 ms later)."""
    if isinstance(u.exc_value, KeyboardInterrupt):
        _swallowed.append(u.exc_value)
        t = threading.Timer(0.01, os.kill, (os.getpid(), REDELIVER))
        t.daemon = True
        start_thread(t)
        return
    sys.__unraisablehook__(u)


def redeliver_swallowed_stops() -> None:
    """Install _unraisable and REDELIVER's handler (cli.py, with the stop signals' own)."""
    signal.signal(REDELIVER, _raise_swallowed)
    sys.unraisablehook = _unraisable


def start_thread(t: threading.Thread) -> None:
    """Start t with the stop signals (and REDELIVER) blocked in it, so that the kernel delivers them to the
    main thread only, lowest number first, where Python runs their handlers. Delivered to any thread, two
    stop signals sent together (kill -TERM then kill -HUP to a stopped exporter) had their handlers run in
    either order, and the exit status changed from run to run (0 for 129 once in CI). Threads that t starts
    inherit its mask."""
    with signals_deferred():
        t.start()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait (blocked) until the block ends, then act as usual: output
    written inside is never cut by the KeyboardInterrupt they raise (see cli.py)."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, REDELIVER}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Flag:
    """threading.Event's set(), is_set() and wait(), safe in the main thread, where a stop signal's handler
    raises KeyboardInterrupt at any instruction. Event is not: its wait() and set() take a lock from Python
    code (Condition.__enter__, _acquire_restore), and a KeyboardInterrupt raised between taking and guarding
    it leaves the lock held, or released twice (measured with a timer signal raising in Event.wait(100 us):
    62 of 26,511 interrupted waits). A worker thread's done.set() then blocks for ever and so does the main
    thread joining it: a flight recorder that never stopped on SIGINT in CI. Here waiting is poll() on an
    eventfd, which a signal interrupts with nothing held; setting is a write to it."""

    def __init__(self) -> None:
        self._set = False
        self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def set(self) -> None:
        if not self._set:
            self._set = True
            os.eventfd_write(self._fd, 1)

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Until set() or timeout seconds (None: no limit); whether it is set. A signal's exception
        raised meanwhile goes up from here, and the flag works on."""
        if not self._set:
            p = select.poll()   # not select(): it refuses a descriptor above 1023 (a tool with many maps open)
            p.register(self._fd, select.POLLIN)
            p.poll(None if timeout is None else max(0, timeout * 1000.0))
        return self._set

    def __del__(self) -> None:
        with contextlib.suppress(AttributeError, OSError):
            os.close(self._fd)


def wait_or_deadline(done: Flag, deadline: float | None) -> bool:
    """Wait up to a second for done or the deadline (time.monotonic()); True once the
    deadline has passed (the long-running loops of record and its flight recorder)."""
    done.wait(1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic())))
    return deadline is not None and time.monotonic() >= deadline


def join_uninterrupted(join: Callable[[], None]) -> None:
    """join() to the end whatever Ctrl-C comes meanwhile: a second Ctrl-C must not cut short what the first
    one began (a capture's end record, a flight recorder's save)."""
    while True:
        try:
            join()
            return
        except KeyboardInterrupt:
            continue


def raise_thread_error(error: BaseException | None, what: str) -> None:
    """A worker thread's error, raised in the main thread: an IoscopeError as it is, anything else as one
    line saying what failed."""
    if error is None:
        return
    if isinstance(error, IoscopeError):
        raise error
    raise IoscopeError(f"{what} failed: {error}") from error
