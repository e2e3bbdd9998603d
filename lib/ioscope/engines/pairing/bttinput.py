"""A source's records in the order btt reads them (blktrace per-CPU files as `blkparse -d` would dump them, a
dump as it is, an ioscope capture as its export writes it), for btt's view (engines/pairing/btt.py): shared by
`ioscope report` and `ioscope btt`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.capture.events import EV_MESSAGE, EV_NOTE_PROCESS, join_events
from ioscope.engines.pairing import btt

Chunk = tuple[npt.NDArray[np.void], npt.NDArray[np.uint32] | None, dict[int, str]]


def batched(chunks: Iterable[Chunk], rows: int = 1 << 15) -> Iterator[Chunk]:
    """Join small chunks (with their records' own devices, or None, and their messages' texts by row) into
    batches of about rows events (fewer numpy calls; memory stays bounded)."""
    held: list[Chunk] = []
    n = 0

    def join() -> Chunk:
        ev = join_events([c for c, _o, _t in held])
        texts: dict[int, str] = {}
        at = 0
        for c, _o, t in held:
            texts.update((at + i, x) for i, x in t.items())
            at += len(c)
        if all(o is None for _c, o, _t in held):
            return ev, None, texts
        return ev, np.concatenate([c["dev"].astype(np.uint32) if o is None else o for c, o, _t in held]), texts

    for c, own, texts in chunks:
        held.append((c, own, texts))
        n += len(c)
        if n >= rows:
            yield join()
            held, n = [], 0
    if held:
        yield join()


def btt_input(src: Any, path: str, warn: Callable[[str], object] | None = None) -> tuple[
        Iterator[Chunk], dict[str, Any]]:
    """A source's records in the order btt reads them, with each record's own device where it is not its
    event's (None) and the texts of the messages among them by row, and how to set btt's view up (Btt
    keyword arguments):

    - blktrace's per-CPU files, given directly or imported: what `blkparse -d` writes from them (btt needs
      that dump): blkparse's order, each note where blkparse reads it, times from its genesis;
    - a stream (a dump) given directly or imported: its records in its own order, times as they are;
    - a capture recorded by ioscope: its events as its export writes them (times from just before the
      first event, each pid named once, as at its first event)."""
    from ioscope.capture import importer
    if src.kind == "blktrace":
        whole = importer.read_file_sets(path, warn)
        if whole is None:   # a stream, read as btt reads it
            return ((d.events, d.own_dev, d.texts or {}) for d in src.decoded()), {"time_zero": 0}
        fs, chunks = whole.fs, whole.chunks()
    else:
        kept = importer.file_sets(src)
        chunks = src.chunks()
        if kept is None:
            imported = src.meta.get("source") == "blktrace"   # imported before the import kept its files
            return ((c, None, {}) for c in chunks), ({"time_zero": 0} if imported else {"first_names": True})
        fs = kept
    stream = ((ev, own, {row: fs.note_text(k) for row, k in notes.items()})
              for ev, own, notes in importer.btt_stream(fs, chunks, texts=True))
    first = next(stream, None)
    if first is None:
        return iter(()), {"time_zero": 0}
    blk = first[0]["ts"][(first[0]["flags"] & (EV_NOTE_PROCESS | EV_MESSAGE)) == 0]
    tz = importer.time_zero(fs, int(blk[0]) if len(blk) else None)
    return itertools.chain([first], stream), {"time_zero": tz}



def analyse(src: Any, path: str, warn: Callable[[str], object] | None = None,
            setup: Callable[[btt.Btt], None] | None = None, **kw: Any) -> btt.BttResult:
    """Feed an open source's records to btt's analysis in the order btt reads them (btt_input) and return its
    result. kw: Btt's keyword arguments; setup(engine): called once the engine is made, before the first chunk
    (to hand a sink the engine's names)."""
    records, how = btt_input(src, path, warn)
    engine = btt.Btt(src.comms, **kw, **how)
    if setup is not None:
        setup(engine)
    for chunk, own, texts in batched(records):
        for pid, comm in src.comms.items():   # pids not seen yet; renames come from the notes
            engine.comms.setdefault(pid, comm)
        engine.feed(chunk, own, texts)
    return engine.result()
