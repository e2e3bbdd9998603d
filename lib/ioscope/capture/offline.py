"""Open what the offline tools read: an ioscope capture or blktrace binaries.

parse, report and export take either; a file is a blktrace stream when it
starts with blktrace's magic (or is one of NAME.blktrace.N), else a capture.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base.devices import kdev_str
from ioscope.base.errors import IoscopeError
from ioscope.capture import blktrace


@dataclass
class Source:
    path: str
    kind: str                                   # "capture" or "blktrace"
    meta: dict[str, Any] = field(default_factory=dict)
    comms: dict[int, str] = field(default_factory=dict)
    cgroups: dict[int, str] = field(default_factory=dict)   # cgroup id -> path (a capture's, EV_CGROUP)
    truncation: str | None = None
    files: list[str] = field(default_factory=list)
    _capture: Any = None
    wall_stamps: list[tuple[int, int]] = field(default_factory=list)

    def chunks(self) -> Iterator[npt.NDArray[np.void]]:
        """EVENT arrays in time order."""
        if self.kind == "capture":
            done = 0
            it = self._capture.iter_chunks()
            while True:
                try:
                    c = next(it)
                except StopIteration:
                    return
                except (ValueError, KeyError, IndexError, TypeError) as exc:   # the reader's own checks missed it
                    raise IoscopeError(f"{self.path}: corrupt capture ({type(exc).__name__}: {exc})".split("\n")[0],
                                       "the file is damaged after its last readable chunk") from None
                yield c
                done += c.nbytes
                if done >= RELEASE_EVERY:
                    self._capture.drop_read_pages()
                    done = 0
        for ev, _seq in self.chunks_with_seq():
            yield ev

    def chunks_with_seq(self) -> Iterator[tuple[npt.NDArray[np.void], npt.NDArray[np.uint32] | None]]:
        """(EVENT array, blktrace sequence numbers or None for a capture), in time order."""
        if self.kind == "capture":
            for ev in self.chunks():
                yield ev, None
            return
        for d in blktrace.read_merged(self.files):
            self.comms.update(d.comms)
            self.wall_stamps.extend(d.timestamps)
            if len(d.events):
                yield d.events, d.seq

    def decoded(self) -> Iterator[blktrace.Decoded]:
        """A blktrace stream's decoded pieces, in file order, its messages as rows (names and wall-clock
        notes gathered); several files (per-CPU files read as streams) merged in time order, without."""
        if len(self.files) == 1:
            for d in blktrace.read_stream(self.files[0], messages=True):
                self.comms.update(d.comms)
                self.wall_stamps.extend(d.timestamps)
                yield d
            return
        for d in blktrace.read_merged(self.files):
            self.comms.update(d.comms)
            self.wall_stamps.extend(d.timestamps)
            yield d

    def chunk_infos(self) -> list[dict[str, Any]]:
        """Each chunk's metadata of a capture (Capture.chunk_infos); blktrace files have none."""
        return self._capture.chunk_infos if self._capture is not None else []

    def close(self) -> None:
        if self._capture is not None:
            self._capture.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def dev_name(self, dev: int) -> str | None:
        """The device's name from the capture header, if it has one."""
        devs = self.meta.get("devices") or {}
        info = devs.get(kdev_str(dev)) if isinstance(devs, dict) else None
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            return str(info["name"])
        return None


RELEASE_EVERY = 4 << 20   # bytes of events between two drop_read_pages calls (each costs ~0.01 ms)
def is_blktrace(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return ".blktrace." in os.path.basename(path) or os.path.exists(f"{path}.blktrace.0")
    if len(head) < 4:
        return ".blktrace." in os.path.basename(path)
    le = int.from_bytes(head, "little")
    be = int.from_bytes(head, "big")
    return (le & 0xFFFFFF00) == blktrace.MAGIC or (be & 0xFFFFFF00) == blktrace.MAGIC


def open_source(path: str) -> Source:
    """A capture or a blktrace file (or NAME for NAME.blktrace.0, .1, ...), ready to stream."""
    if not os.path.exists(path) and os.path.exists(f"{path}.blktrace.0"):
        return Source(path, "blktrace", files=blktrace.per_cpu_files(f"{path}.blktrace.0"))
    if is_blktrace(path):
        files = blktrace.per_cpu_files(path) if ".blktrace." in os.path.basename(path) else [path]
        return Source(path, "blktrace", files=files)
    from ioscope.capture.store import open_capture
    if not os.path.exists(path):
        raise IoscopeError(f"cannot open {path}: no such file", "give a capture written by ioscope record")
    try:
        cap = open_capture(path)
    except IoscopeError:
        raise
    except (ValueError, KeyError, IndexError, TypeError) as exc:   # the reader's own checks missed it
        raise IoscopeError(f"{path}: corrupt capture ({type(exc).__name__}: {exc})".split("\n")[0],
                           "it cannot be read; was it damaged in transfer?") from None
    cap.drop_read_pages()   # opening read every chunk's header: let those pages go too
    return Source(path, "capture", meta=dict(cap.meta), comms=dict(cap.comms), cgroups=dict(cap.cgroups),
                  truncation=cap.truncation, _capture=cap)


def wall_at(src: Source, mono_ns: int) -> int | None:
    """Wall-clock ns at a CLOCK_MONOTONIC time, from the capture's clock mapping."""
    for key in ("start", "clock"):
        c = src.meta.get(key)
        if isinstance(c, dict) and isinstance(c.get("mono_ns"), int) and isinstance(c.get("wall_ns"), int):
            return int(c["wall_ns"]) + (mono_ns - int(c["mono_ns"]))
    return None
