"""What pages read from a capture, in one place: the per-I/O table (engines/pairing/ios.py, report's pairing) and the
raw events beside it, for every capture kind report reads (record, flight-recorder saves, collect bundles,
blktrace files and their imports). The only module of engines/pages and tools/web reading captures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ioscope.capture.events import EV_NOTE_PROCESS
from ioscope.capture.offline import Source, open_source
from ioscope.engines.pairing.ios import capture_id, ios_batches

EventSink = Callable[[npt.NDArray[np.void]], None]


def open_capture(path: str) -> Source:
    """A capture, a collect bundle or blktrace files (IoscopeError with a hint when it is none of them)."""
    return open_source(path)


def io_batches(src: Source, on_events: EventSink | None = None) -> Iterator[pa.RecordBatch]:
    """The capture's per-I/O rows (docs/ios-table.md) as Arrow batches, streaming; on_events(ev): each
    chunk's block events (process notes left out), before the rows they complete."""
    def sink(ev: npt.NDArray[np.void], _comms: dict[int, str]) -> None:
        if on_events is None or not len(ev):
            return
        notes = (ev["flags"] & EV_NOTE_PROCESS) != 0
        on_events(ev[~notes] if notes.any() else ev)

    yield from ios_batches(src, capture_id(src), sink)


def chunk_losses(src: Source) -> list[tuple[int, int, dict[str, Any]]]:
    """(first_ts, last_ts, loss counters so far) of each chunk whose loss counters changed: where in the
    capture losses were counted. Captures keep the counters in each chunk's metadata (capture-format.md);
    blktrace files have none."""
    out: list[tuple[int, int, dict[str, Any]]] = []
    for info in src.chunk_infos():
        lost = info.get("lost")
        if isinstance(lost, dict) and info.get("rows"):
            out.append((int(info.get("first_ts", 0)), int(info.get("last_ts", 0)), lost))
    return out


__all__ = ["Source", "chunk_losses", "io_batches", "open_capture"]
