"""The bundle `ioscope collect` writes: a tar stream compressed with zstd (`CASE.tar.zst` in all but
name: `zstd -dc CASE | tar t` lists it), created 0600. Members, in this order:

  manifest.json        format, version, the command, the members, the redaction applied (counts only)
  context-start.json   the host's context when the recording started (context.py)
  capture.ioscope      the capture (ioscope's own format: docs/capture-format.md)
  context-end.json     the host's context when it ended

Every reader of captures opens a bundle directly: trace/capture.py's Capture finds the zstd magic and
reads the capture member through open_member() below."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from ioscope.errors import IoscopeError

FORMAT = "ioscope-bundle"
VERSION = 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CAPTURE = "capture.ioscope"
MEMBERS = ("manifest.json", "context-start.json", CAPTURE, "context-end.json")


def is_bundle(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZSTD_MAGIC
    except OSError:
        return False


def _add(t: tarfile.TarFile, name: str, data: bytes | None = None, path: str | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.mode = 0o600
    if path is not None:
        info.size = os.path.getsize(path)
        with open(path, "rb") as f:
            t.addfile(info, f)
    else:
        assert data is not None
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))


def write(out: str, capture: str, start: dict[str, Any], end: dict[str, Any], manifest: dict[str, Any],
          force: bool) -> None:
    import pyarrow as pa

    from ioscope.outfile import create_private

    fd = create_private(out, force)
    with os.fdopen(fd, "wb") as raw:
        z = pa.CompressedOutputStream(pa.PythonFile(raw, mode="w"), "zstd")
        with tarfile.open(fileobj=z, mode="w|", format=tarfile.PAX_FORMAT) as t:
            doc = {"format": FORMAT, "version": VERSION, "members": list(MEMBERS), **manifest}
            _add(t, "manifest.json", json.dumps(doc, indent=1).encode())
            _add(t, "context-start.json", json.dumps(start, indent=1).encode())
            _add(t, CAPTURE, path=capture)
            _add(t, "context-end.json", json.dumps(end, indent=1).encode())
        z.close()


@contextmanager
def _members(path: str) -> Iterator[Iterator[tuple[tarfile.TarInfo, IO[bytes]]]]:
    import pyarrow as pa

    try:
        src = pa.CompressedInputStream(pa.OSFile(path), "zstd")
    except (OSError, pa.ArrowException) as exc:
        raise IoscopeError(f"cannot open bundle {path}: {exc}") from None

    def gen() -> Iterator[tuple[tarfile.TarInfo, IO[bytes]]]:
        try:
            with tarfile.open(fileobj=src, mode="r|") as t:
                for m in t:
                    f = t.extractfile(m)
                    if f is not None:
                        yield m, f
        except (tarfile.TarError, OSError, pa.ArrowException, EOFError) as exc:
            raise IoscopeError(f"{path}: bundle cut short or damaged ({str(exc).splitlines()[0]})",
                               "what was read before the damage is listed by ioscope collect --list") from None
    try:
        yield gen()
    finally:
        src.close()


def read_json_members(path: str) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """The JSON members by name, and (name, size) of every member: for --list and for readers."""
    docs: dict[str, Any] = {}
    listing: list[tuple[str, int]] = []
    with _members(path) as ms:
        for m, f in ms:
            listing.append((m.name, m.size))
            if m.name.endswith(".json"):
                docs[m.name] = json.loads(f.read())
    return docs, listing


def extract_capture(path: str) -> str:
    """The capture member copied to a private temporary file (the caller unlinks it). A bundle cut
    short inside the capture gives what it holds up to the cut: the capture reader then reports it
    as cut short and reads its complete chunks (nothing already captured is lost). IoscopeError when
    the bundle has no capture or is damaged before it."""
    import pyarrow as pa

    fd, tmp = tempfile.mkstemp(prefix="ioscope-bundle-", suffix=".ioscope")
    try:
        with os.fdopen(fd, "wb") as out, _members(path) as ms:
            try:
                for m, f in ms:
                    if m.name == CAPTURE:
                        shutil.copyfileobj(f, out, 1 << 20)
                        return tmp
            except (tarfile.TarError, OSError, pa.ArrowException, EOFError, IoscopeError):
                if out.tell() > 0:
                    return tmp   # cut inside the capture: its complete chunks are still readable
                raise
        raise IoscopeError(f"{path}: the bundle has no {CAPTURE}",
                           "its other members: ioscope collect --list; was it written by ioscope collect?")
    except BaseException:
        os.unlink(tmp)
        raise
