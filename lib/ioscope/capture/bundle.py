"""The bundle `ioscope collect` writes: a tar stream compressed with zstd (`CASE.tar.zst` in all but
name: `zstd -dc CASE | tar t` lists it), created 0600. Members, in this order:

  manifest.json        format, version, the command, the host, when, the members, the redaction applied
  context-start.json   the host's context when the recording started (context.py)
  capture.ioscope      the capture (ioscope's own format: docs/capture-format.md)
  context-end.json     the host's context when it ended, and what became of the capture (kept, lost)

Made to survive damage (version 2): the zstd stream is a run of independent frames, each tar header
in a frame of its own and the members' data in frames of at most 256 KiB, each frame carrying its
decompressed size; every member's tar header carries the SHA-256 of its data (PAX record
SCHILY.xattr.user.ioscope.sha256). A reader decodes frame after frame and stops at the first one that is cut or does
not decode, keeps every member before it (and the part of a cut member it holds), and checks each
member against its size and checksum: read_bundle() says what is intact and what is missing.

The capture is written as it is recorded (BundleWriter.begin_stream/stream_write/end_stream): its tar
header, whose size and checksum are known only at its end, is a frame of stored (not compressed)
bytes rewritten in place once the capture is complete. A file system that fills up keeps the part of
the capture that fits; space held back from the start (a reserve file) lets the end context in.

Every reader of captures opens a bundle directly: capture/store.py's Capture finds the zstd magic and
reads the capture member through extract_capture() below. Bundles of version 1 (one zstd frame
without sizes) are still read, with less to salvage when cut."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

from ioscope.base.errors import IoscopeError

FORMAT = "ioscope-bundle"
VERSION = 2
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CAPTURE = "capture.ioscope"
MEMBERS = ("manifest.json", "context-start.json", CAPTURE, "context-end.json")
SHA_KEY = "SCHILY.xattr.user.ioscope.sha256"   # a PAX record tar knows (an extended attribute)
FRAME_RAW = 256 << 10      # decompressed bytes per data frame: the most a cut costs of a member
MAX_FRAME_RAW = 16 << 20   # a frame claiming more is damaged (ours never do)
MAX_JSON = 256 << 20       # a JSON member larger than this is not one of ours


def is_bundle(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZSTD_MAGIC
    except OSError:
        return False


def _tar_header(name: str, size: int, sha: str, mtime: int) -> bytes:
    """The member's PAX and ustar headers: always the same length for the same name (the size and
    checksum are fixed-width PAX records), so the capture's can be rewritten in place."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o600
    info.mtime = mtime
    info.pax_headers = {SHA_KEY: sha, "size": f"{size:020d}"}
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _stored_frame(data: bytes) -> bytes:
    """A zstd frame of one raw (stored) block: its length depends only on len(data) (RFC 8878:
    single segment, a 4-byte content size, no checksum)."""
    assert len(data) < 128 << 10
    return (ZSTD_MAGIC + bytes([0xA0]) + len(data).to_bytes(4, "little")
            + (1 | (len(data) << 3)).to_bytes(3, "little") + data)


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 512)


class DiskFull(Exception):
    pass


class BundleWriter:
    """Writes a bundle member by member; the capture can stream in (begin_stream ...). Every write is
    whole frames: a write that fails (ENOSPC, EFBIG, EDQUOT) is cut back to the last whole frame, and
    the streamed member keeps what was written before it."""

    def __init__(self, out: str, force: bool, mtime: int) -> None:
        import pyarrow as pa

        from ioscope.base.outfile import create_private

        self.path = out
        self.fd = create_private(out, force)
        self.mtime = mtime
        self.codec = pa.Codec("zstd")
        self.reserve_path: str | None = None
        self.stream_name: str | None = None
        self.kept = self.lost = 0
        self.full: str | None = None          # why the streamed member stopped being written
        self._hpos = 0
        self._sha = hashlib.sha256()
        self._buf = bytearray()

    def _write(self, data: bytes) -> None:
        pos = os.lseek(self.fd, 0, os.SEEK_CUR)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            os.ftruncate(self.fd, pos)
            os.lseek(self.fd, pos, os.SEEK_SET)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise DiskFull(f"{exc.strerror}") from None
            raise IoscopeError(f"cannot write {self.path}: {exc.strerror}", "check the file system") from None

    def _frames(self, data: bytes) -> None:
        for i in range(0, len(data), FRAME_RAW):
            self._write(self.codec.compress(data[i:i + FRAME_RAW], asbytes=True))

    def member(self, name: str, data: bytes) -> None:
        """A whole member; DiskFull when it does not fit (the bundle is left as it was)."""
        pos = os.lseek(self.fd, 0, os.SEEK_CUR)
        try:
            self._write(self.codec.compress(_tar_header(name, len(data), hashlib.sha256(data).hexdigest(),
                                                        self.mtime), asbytes=True))
            self._frames(data + _pad(len(data)))
        except DiskFull:
            os.ftruncate(self.fd, pos)
            os.lseek(self.fd, pos, os.SEEK_SET)
            raise

    def hold_reserve(self) -> None:
        """Hold space back (a file beside the bundle) until release_reserve(): for the end context and the
        bundle's end, four times what the manifest and start context took, and at least 64 KiB."""
        nbytes = max(64 << 10, 4 * os.lseek(self.fd, 0, os.SEEK_CUR))
        path = f"{self.path}.reserve-{os.getpid()}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        self.reserve_path = path
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError:
            pass   # what it got is still held
        finally:
            os.close(fd)

    def release_reserve(self) -> None:
        if self.reserve_path is not None:
            try:
                os.unlink(self.reserve_path)
            except FileNotFoundError:
                pass
            self.reserve_path = None

    def begin_stream(self, name: str) -> None:
        self.stream_name = name
        self._hpos = os.lseek(self.fd, 0, os.SEEK_CUR)
        self._write(_stored_frame(_tar_header(name, 0, "0" * 64, self.mtime)))

    def stream_write(self, data: bytes) -> None:
        if self.full is not None:
            self.lost += len(data)
            return
        self._buf += data
        while len(self._buf) >= FRAME_RAW:
            self._flush(bytes(self._buf[:FRAME_RAW]))
            del self._buf[:FRAME_RAW]

    def _flush(self, chunk: bytes) -> None:
        if self.full is not None:
            self.lost += len(chunk)
            return
        try:
            self._write(self.codec.compress(chunk, asbytes=True))
        except (DiskFull, IoscopeError) as exc:
            self.full = str(exc)
            self.lost += len(chunk)
            return
        self._sha.update(chunk)
        self.kept += len(chunk)

    def end_stream(self) -> None:
        """The rest of the streamed member, its padding, and its header rewritten with its size and
        checksum (of the bytes kept)."""
        assert self.stream_name is not None
        if self._buf:
            self._flush(bytes(self._buf))
            self._buf.clear()
        self.release_reserve()   # the padding and the end context must get in
        pad = _pad(self.kept)
        if pad:
            try:
                self._write(self.codec.compress(pad, asbytes=True))
            except DiskFull as exc:
                raise IoscopeError(f"{self.path}: no room left to end the capture's member ({exc})",
                                   "free some space; the bundle holds the start context and the capture "
                                   "before it") from None
        # in place, over the frame of the same length written by begin_stream: no new space needed
        head = _stored_frame(_tar_header(self.stream_name, self.kept, self._sha.hexdigest(), self.mtime))
        try:
            if os.pwrite(self.fd, head, self._hpos) != len(head):
                raise OSError(errno.EIO, "short write")
        except OSError as exc:
            raise IoscopeError(f"cannot write {self.path}: {exc.strerror}", "check the file system") from None
        self.stream_name = None

    def close(self) -> None:
        """The tar stream's end (two zero blocks) and the file closed."""
        try:
            self._write(self.codec.compress(b"\0" * 1024, asbytes=True))
            os.fsync(self.fd)
        except DiskFull:
            pass   # without its end: readers say so, and read every member
        finally:
            os.close(self.fd)
            self.release_reserve()


# ---- reading


class _Frames(io.RawIOBase):
    """The decompressed stream of a bundle, frame by frame; at the first frame that is cut or does not
    decode it ends, and .damage says where and why."""

    def __init__(self, path: str, start: int = 0, frames: int = 0) -> None:
        import pyarrow as pa

        self.path = path
        self.f = open(path, "rb")
        self.size = os.fstat(self.f.fileno()).st_size
        self.codec = pa.Codec("zstd")
        self.off = start
        self.buf = b""
        self.pos = 0
        self.damage: str | None = None
        self.bad_at: int | None = None   # where the frame that is cut or does not decode starts
        self.dec = 0                     # decompressed bytes so far
        self.last_header_at: int | None = None   # where the frame of the last member header read starts
        self.table: list[tuple[int, int, int, bool]] = []
        self.stream: Any = None   # version 1: one frame without its size, read as a stream
        self.frames = frames
        self.ended = False   # the last frame read is the tar stream's end (zero blocks)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.f.close()
        super().close()

    def readinto(self, b: Any) -> int:
        while self.pos >= len(self.buf):
            if not self._next():
                return 0
        n = min(len(b), len(self.buf) - self.pos)
        b[:n] = self.buf[self.pos:self.pos + n]
        self.pos += n
        return n

    def _bytes(self, off: int, n: int) -> bytes:
        self.f.seek(off)
        return self.f.read(n)

    def _next(self) -> bool:
        import pyarrow as pa

        if self.damage is not None:
            return False
        if self.stream is not None:
            try:
                data = self.stream.read(FRAME_RAW)
            except (OSError, pa.ArrowException) as exc:
                self.damage = f"the compressed stream does not decode: {str(exc).splitlines()[0]}"
                return False
            self.buf, self.pos = bytes(data), 0
            return bool(data)
        if self.off >= self.size:
            return False
        start = self.off
        try:
            end, fcs = self._frame_end(start)
        except ValueError as exc:
            self.damage = f"zstd frame {self.frames + 1} at byte {start:,} of {self.size:,}: {exc}"
            self.bad_at = start
            return False
        if fcs is None:   # a version 1 bundle: one frame, its size unknown
            self.f.seek(start)
            self.stream = pa.CompressedInputStream(pa.PythonFile(self.f, mode="r"), "zstd")
            return self._next()
        try:
            data = self.codec.decompress(self._bytes(start, end - start), decompressed_size=fcs, asbytes=True)
        except (OSError, ValueError, pa.ArrowException) as exc:
            self.damage = (f"zstd frame {self.frames + 1} at byte {start:,} of {self.size:,} does not decode: "
                           f"{str(exc).splitlines()[0]}")
            self.bad_at = start
            return False
        self.frames += 1
        self.off = end
        self.ended = len(data) >= 1024 and not any(data)
        # (decompressed offset, file offset, length, all zero) of each frame: where a header tar refused is
        self.table.append((self.dec, start, len(data), self.ended))
        self.dec += len(data)
        self.buf, self.pos = data, 0
        return True

    def frame_at(self, dec_off: int) -> tuple[int, int, int, bool] | None:
        return next((t for t in self.table if t[0] <= dec_off < t[0] + t[2]), None)

    def next_header_frame(self, after: int) -> int | None:
        """Where the first zstd frame after byte `after` starts that decodes to a member's tar header (a
        version 2 bundle has each header in a frame of its own): reading resumes there after damage."""
        import mmap

        import pyarrow as pa

        if self.size == 0:
            return None
        if self.f.closed:   # (the buffered reader tar read through closed it)
            self.f = open(self.path, "rb")
        with mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            at = mm.find(ZSTD_MAGIC, after)
            while at >= 0:
                try:
                    end, fcs = self._frame_end(at)
                    if fcs is not None and fcs >= 512:
                        data = self.codec.decompress(mm[at:end], decompressed_size=fcs, asbytes=True)
                        info = tarfile.TarInfo.frombuf(data[:512], "utf-8", "surrogateescape")
                        if info.type in (tarfile.XHDTYPE, tarfile.REGTYPE):
                            return at
                except (ValueError, OSError, pa.ArrowException, tarfile.TarError):
                    pass
                at = mm.find(ZSTD_MAGIC, at + 1)
        return None

    def _frame_end(self, start: int) -> tuple[int, int | None]:
        """(offset after the frame, its decompressed size or None), from its header and block headers
        (RFC 8878, 3.1.1); ValueError when the bytes there are not a whole zstd frame."""
        h = self._bytes(start, 18)
        if len(h) < 6:
            raise ValueError("cut inside a frame header")
        if h[:4] != ZSTD_MAGIC:
            raise ValueError("no zstd frame where one should start")
        fhd = h[4]
        if fhd & 0x08:
            raise ValueError("a zstd frame header with its reserved bit set")
        single = (fhd >> 5) & 1
        fcs_size = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
        fcs: int | None = None
        if fcs_size:
            if len(h) < pos + fcs_size:
                raise ValueError("cut inside a frame header")
            fcs = int.from_bytes(h[pos:pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
            if fcs > MAX_FRAME_RAW:
                raise ValueError(f"a zstd frame claiming {fcs} bytes")
        if fcs is None:   # version 1: one frame streamed without its size; read as a stream
            return start, None
        pos += fcs_size
        off = start + pos
        while True:
            bh = self._bytes(off, 3)
            if len(bh) < 3:
                raise ValueError("cut inside a frame")
            v = int.from_bytes(bh, "little")
            btype, bsize = (v >> 1) & 3, v >> 3
            if btype == 3 or bsize > 128 << 10:
                raise ValueError("a damaged zstd block header")
            off += 3 + (1 if btype == 1 else bsize)
            if off > self.size:
                raise ValueError("cut inside a frame")
            if v & 1:
                break
        off += 4 if fhd & 0x04 else 0
        if off > self.size:
            raise ValueError("cut inside a frame")
        return off, fcs


@dataclass
class MemberState:
    name: str
    size: int                 # as its header says
    got: int = 0              # bytes read
    sha256: str | None = None  # as its header says (version 2)
    intact: bool | None = None  # every byte read and its checksum matches (None: no checksum to check)
    problem: str | None = None


@dataclass
class BundleRead:
    path: str
    members: list[MemberState] = field(default_factory=list)
    docs: dict[str, Any] = field(default_factory=dict)   # the JSON members that are intact
    damage: str | None = None                             # where reading stopped, and why
    capture: str | None = None                            # the capture member, copied to this file

    @property
    def expected(self) -> list[str]:
        man = self.docs.get("manifest.json")
        got = man.get("members") if isinstance(man, dict) else None
        return [str(m) for m in got] if isinstance(got, list) else list(MEMBERS)

    def member(self, name: str) -> MemberState | None:
        return next((m for m in self.members if m.name == name), None)

    def problems(self) -> list[str]:
        out = [f"{m.name} {m.problem}" for m in self.members if m.problem]
        names = {m.name for m in self.members}
        out += [f"{n} missing" for n in self.expected if n not in names]
        if self.damage and not out:   # every member whole, the end of the tar stream not
            out.append("its last bytes (the end of the tar stream) missing, every member intact")
        return out

    def note(self) -> str | None:
        """One line: what is missing or damaged, where reading stopped, and what is read; None when
        the bundle is whole."""
        probs = self.problems()
        if not probs:
            return None
        ok = [m.name for m in self.members if not m.problem]
        return (f"{self.path}: damaged bundle: {'; '.join(probs)}"
                + (f" ({self.damage})" if self.damage else "")
                + f"; read: {', '.join(ok) if ok else 'nothing'}")


def read_bundle(path: str, capture_to: IO[bytes] | None = None) -> BundleRead:
    """Every member that can be read, each checked; the capture member's bytes (up to any damage)
    written to capture_to. After a zstd frame that is cut or does not decode, reading resumes at the
    next member's header frame (what follows the damage is read too). Never raises for damage: what
    is wrong is in .problems()/.note()."""
    res = BundleRead(path)
    damages: list[str] = []
    start = frames = 0
    while True:
        try:
            raw = _Frames(path, start, frames)
        except OSError as exc:
            raise IoscopeError(f"cannot open bundle {path}: {exc.strerror}") from None
        try:
            _read_members(res, raw, capture_to)
            if raw.damage is None or raw.bad_at is None:
                break
            # the next member's header: after the last header read (a member whose size was damaged
            # leads tar past the next header), else after the damage
            cands = [raw.next_header_frame(raw.last_header_at + 1)] if raw.last_header_at is not None else []
            cands.append(raw.next_header_frame(raw.bad_at + 1))
            nxt = next((c for c in cands if c is not None and c > start), None)
        finally:
            raw.close()
        if nxt is None:
            break
        damages.append(raw.damage)
        raw.damage = None
        start, frames = nxt, raw.frames + 1
    if raw.damage is not None:
        damages.append(raw.damage)
    man = res.docs.get("manifest.json")
    if not damages and not raw.ended and isinstance(man, dict) and man.get("version", 1) >= 2:
        damages.append(f"no tar end after zstd frame {raw.frames} (the file is {raw.size:,} bytes)")
    if not damages and [n for n in res.expected if n not in {m.name for m in res.members}]:
        # tar ends its listing silently at a header that does not check
        after = f"after {res.members[-1].name}" if res.members else "at its start"
        damages.append(f"its tar stream ends {after}" if raw.ended
                       else f"its tar stream ends, or has a damaged header, {after}")
    res.damage = "; ".join(damages) or None
    return res


class _TarInfo(tarfile.TarInfo):
    """A member header that keeps its ustar size field (which the header's checksum covers) beside the
    PAX size record (which nothing covers): a flipped digit there would send tar past the next members."""
    ustar_size = 0

    @classmethod
    def frombuf(cls, buf: bytes, encoding: str, errors: str) -> _TarInfo:  # type: ignore[override]
        obj = super().frombuf(buf, encoding, errors)
        obj.ustar_size = obj.size
        return obj


def _sizes_disagree(m: tarfile.TarInfo) -> str | None:
    """Why the PAX size cannot be trusted: it differs from the ustar field written with it (which is 0
    only for a member too large for it)."""
    ustar = getattr(m, "ustar_size", 0)
    if "size" in m.pax_headers and ustar and ustar != m.size:
        return f"{m.name}: its PAX size {m.pax_headers['size']!r} differs from its header's {ustar:,}"
    return None


def _read_members(res: BundleRead, raw: _Frames, capture_to: IO[bytes] | None) -> None:
    import pyarrow as pa

    cur: MemberState | None = None
    t: tarfile.TarFile | None = None
    try:
        t = tarfile.open(fileobj=io.BufferedReader(raw, 1 << 16), mode="r|", tarinfo=_TarInfo)
        for m in t:
            if not m.isfile():
                continue
            hf = raw.frame_at(m.offset)
            raw.last_header_at = hf[1] if hf is not None else None
            why = _sizes_disagree(m)
            if why is not None:   # read on at the next member's header frame
                _bad_header(raw, m.offset, why)
                break
            cur = MemberState(m.name, m.size, sha256=m.pax_headers.get(SHA_KEY))
            res.members.append(cur)
            f = t.extractfile(m)
            assert f is not None
            h = hashlib.sha256()
            keep = m.name.endswith(".json") and m.size <= MAX_JSON
            parts: list[bytes] = []
            while True:
                chunk = f.read(16 << 10)
                if not chunk:
                    break
                cur.got += len(chunk)
                h.update(chunk)
                if keep:
                    parts.append(chunk)
                elif m.name == CAPTURE and capture_to is not None:
                    capture_to.write(chunk)
            _check(res, cur, h.hexdigest(), b"".join(parts) if keep else None)
            cur = None
        _bad_header(raw, t.offset, None)   # tar ends its listing silently at a header that does not check
    except (tarfile.TarError, OSError, EOFError, ValueError, UnicodeError, pa.ArrowException) as exc:
        if cur is not None:
            cur.problem = f"cut short ({cur.got:,} of {cur.size:,} bytes read)"
        if raw.damage is None:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if cur is None:   # a header refused (the first one: while tar opens the stream)
                _bad_header(raw, t.offset if t is not None else 0, why)
            if raw.damage is None:
                raw.damage = why
    finally:
        if t is not None:
            t.close()


def _bad_header(raw: _Frames, offset: int, why: str | None) -> None:
    """Where tar stopped (offset in the decompressed stream), if not at its end (a frame of zeros): the
    frame of the header it refused, from which reading resumes at the next header frame."""
    fr = raw.frame_at(offset)
    if raw.damage is None and fr is not None and not fr[3] and raw.stream is None:
        raw.damage = (f"a damaged tar header in zstd frame {raw.table.index(fr) + 1} at byte {fr[1]:,}"
                      + (f" ({why})" if why else ""))
        raw.bad_at = fr[1]


def _check(res: BundleRead, m: MemberState, digest: str, data: bytes | None) -> None:
    if m.got < m.size:
        m.problem = f"cut short ({m.got:,} of {m.size:,} bytes read)"
        return
    if m.sha256 is not None:
        m.intact = m.sha256 == digest
        if not m.intact:
            m.problem = "damaged (its SHA-256 differs from the one written with it)"
            return
    if data is not None:
        try:
            res.docs[m.name] = json.loads(data)
        except (ValueError, UnicodeError):
            m.problem = "damaged (not JSON)"


def read_json_members(path: str) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """The intact JSON members by name, and (name, size) of every member read: for readers."""
    res = read_bundle(path)
    return res.docs, [(m.name, m.got) for m in res.members]


_NOTED: set[str] = set()


def note_damage(res: BundleRead) -> None:
    """Say once per process, on one line on stderr, what a damaged bundle lacks."""
    note = res.note()
    if note and res.path not in _NOTED:
        _NOTED.add(res.path)
        sys.stderr.write(f"ioscope: note: {note}\n")


def extract_capture(path: str) -> str:
    """The capture member copied to a private temporary file (the caller unlinks it). A bundle cut
    short inside the capture gives what it holds up to the cut: the capture reader then reports it
    as cut short and reads its complete chunks (nothing already captured is lost). A bundle damaged
    anywhere is named on one line on stderr (note_damage). IoscopeError when the bundle has no
    capture, or a capture whose checksum does not match."""
    fd, tmp = tempfile.mkstemp(prefix="ioscope-bundle-", suffix=".ioscope")
    try:
        with os.fdopen(fd, "wb") as out:
            res = read_bundle(path, capture_to=out)
        cap = res.member(CAPTURE)
        if cap is not None and cap.size == 0 and cap.problem is None:
            end = res.docs.get("context-end.json")
            col = end.get("collect") if isinstance(end, dict) else None
            why = f" ({col.get('capture_lost')})" if isinstance(col, dict) and col.get("capture_lost") else ""
            raise IoscopeError(f"{path}: its {CAPTURE} is empty: none of it was written into the bundle{why}",
                               "ioscope collect --list shows what it holds (the host's context)")
        if cap is None or cap.got == 0:
            what = f"has no {CAPTURE}" if cap is None else f"has its {CAPTURE} cut before its first byte"
            raise IoscopeError(f"{path}: the bundle {what}" + (f" ({res.damage})" if res.damage else ""),
                               "ioscope collect --list shows what it holds; get the bundle again")
        if cap.intact is False:
            raise IoscopeError(f"{path}: its {CAPTURE} is damaged: its SHA-256 differs from the one written with it",
                               "get the bundle again (compare sha256sum at both ends); ioscope collect --list "
                               "shows what else it holds")
        note_damage(res)
        return tmp
    except BaseException:
        os.unlink(tmp)
        raise
