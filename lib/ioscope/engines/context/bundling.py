"""A collect bundle being written: its manifest, the host's context at its start and end around the capture
streamed into it (compressed as it comes), and the line that says what it holds. `ioscope collect` and the
flight recorder's --context write their bundles with these; the file format is capture/bundle.py."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ioscope.capture.bundle import BundleWriter


def _iso(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


def _dump(doc: object) -> bytes:
    import json

    return json.dumps(doc, indent=1).encode()


def manifest(command: str, host: str, now: float, redacted: dict[str, int] | None) -> dict[str, object]:
    from ioscope import __version__
    from ioscope.capture.bundle import FORMAT, MEMBERS, VERSION

    doc: dict[str, object] = {"format": FORMAT, "version": VERSION, "members": list(MEMBERS),
                              "ioscope_version": __version__, "command": command, "host": host,
                              "started": _iso(now)}
    if redacted is not None:
        doc["redacted"] = redacted
    return doc


def begin_bundle(out: str, force: bool, now: float, man: dict[str, object], start: dict[str, object]) -> BundleWriter:
    """The bundle with its manifest and start context (always written first: they are what a full file
    system must not cost), and the space held back for the end context."""
    from ioscope.base.errors import IoscopeError
    from ioscope.capture.bundle import CAPTURE, BundleWriter, DiskFull

    w = BundleWriter(out, force, int(now))
    try:
        w.member("manifest.json", _dump(man))
        w.member("context-start.json", _dump(start))
        w.hold_reserve()
        w.begin_stream(CAPTURE)
    except DiskFull as exc:
        w.close()
        os.unlink(out)
        raise IoscopeError(f"{out}: no room for even the host's context ({exc})",
                           "free some space or write the bundle on another file system") from None
    return w


def finish_bundle(w: BundleWriter, out: str, command: str, end: dict[str, object], rc: int, classes: tuple[str, ...],
            error: BaseException | None, quiet: bool = False) -> int:
    """The bundle ended: the capture's member closed, the end context written; says what it holds (unless
    quiet: the flight recorder says it its own way) and raises the recorder's error, if any."""
    from ioscope.base.fmt import fmt_bytes
    from ioscope.capture.bundle import DiskFull

    w.end_stream()
    w.release_reserve()
    end["collect"] = {"ended": _iso(time.time()), "recorder_exit": rc, "recorder_error": str(error) if error else None,
                      "capture_bytes": w.kept, "capture_lost_bytes": w.lost, "capture_lost": w.full}
    try:
        w.member("context-end.json", _dump(end))
    except DiskFull as exc:
        w.close()
        print(f"ioscope collect: {out}: no room for the end context ({exc}); the bundle holds the start context "
              f"and {fmt_bytes(w.kept)} of the capture; free some space and collect again", file=sys.stderr)
        return 1
    w.close()
    if error is not None:
        if w.kept == 0 and w.lost == 0:   # the recorder never started: a bundle of contexts only is not kept
            os.unlink(out)
        raise error
    if w.full is not None:
        print(f"ioscope collect: {out}: the file system filled up ({w.full}): the bundle keeps "
              f"{fmt_bytes(w.kept)} of the capture and lost the last {fmt_bytes(w.lost)} (readers read its complete "
              "chunks); the host's context at the start and the end is whole", file=sys.stderr)
        rc = rc or 1
    if quiet:
        return rc
    print(f"Collected {out} ({fmt_bytes(os.path.getsize(out))}): the capture ({fmt_bytes(w.kept)} uncompressed) "
          f"and the host's context at its start and end" + (f"; redacted: {', '.join(classes)}" if classes else ""),
          file=sys.stderr)
    return rc


@contextmanager
def piped_into(w: BundleWriter) -> Iterator[str]:
    """A named pipe whose bytes stream into the bundle's open member as they come (compressed): whoever
    writes the capture (the recorder, the redaction) writes it there, so no file system needs room
    for the uncompressed capture."""
    import shutil
    import tempfile
    import threading

    from ioscope.base import live

    tmpd = tempfile.mkdtemp(prefix="ioscope-collect-")
    fifo = os.path.join(tmpd, "capture.ioscope")
    os.mkfifo(fifo, 0o600)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    hold = os.open(fifo, os.O_WRONLY)   # the pipe has a writer until the writer is done, opened or not
    os.set_blocking(rfd, True)

    def pump() -> None:
        while data := os.read(rfd, 1 << 20):
            w.stream_write(data)

    t = threading.Thread(target=pump, name="ioscope-collect-pump", daemon=True)
    live.start_thread(t)
    try:
        yield fifo
    finally:
        os.close(hold)
        t.join()
        os.close(rfd)
        shutil.rmtree(tmpd, ignore_errors=True)


def host_name(ctx: dict[str, object]) -> str:
    kern = ctx.get("kernel")
    return str(kern.get("hostname", "?")) if isinstance(kern, dict) else "?"
