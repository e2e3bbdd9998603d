"""Key values between people and the kernel: disk, op, flags, cgroup and comm, both ways.

resolve() turns a WHERE literal into the number the kernel compares (a disk name into its dev_t,
"write" into the op code, "WS" into blktrace category bits, a cgroup path into its id);
name_rows() turns the kernel's key numbers into names, through a Namer (the live system's, or a
capture's).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ioscope.base import cgroups, devices
from ioscope.base.errors import IoscopeError
from ioscope.capture import events
from ioscope.engines.aggregate import abi
from ioscope.engines.aggregate.expr import Expr, ExprError, Literal, glob_match
from ioscope.engines.aggregate.model import NamedRow, RawRow, cut_cycle
from ioscope.kernel import abi as core_abi

# the process and cgroup of a flush request of the block layer's own (no bio: made in no process's name, charged
# to no cgroup; btt names pid 0 "kernel", lat says [kernel] too), where the row says it is one (keyed by op);
# other records without them (I/O queued before the tool started) are [unknown]
KERNEL = "[kernel]"
UNKNOWN = "[unknown]"

OP_CODES = {name: code for code, name in core_abi.OP_NAMES.items() if name != "all"}
RWBS_BITS = {"A": events.TC_AHEAD, "S": events.TC_SYNC, "M": events.TC_META}


def flags_name(cat: int) -> str:
    """blktrace category bits -> blkparse's RWBS ("WS", "RA", "FN", ...)."""
    nodata = bool(cat & events.TC_FLUSH) and not cat & (events.TC_WRITE | events.TC_DISCARD)
    return events.rwbs(cat, 0 if nodata else 1)


def flags_bits(text: str, col: int) -> int:
    """RWBS -> blktrace category bits, the inverse of flags_name()."""
    s = text.upper()
    cat = 0
    if s.startswith("F") and len(s) > 1 and s[1] in "DWRN":
        cat |= events.TC_FLUSH
        s = s[1:]
    if not s or s[0] not in "DWRN":
        raise ExprError(f"flags '{text}' is not an RWBS string (R, W, D or N, then F, A, S, M: 'WS', 'RA')", col)
    cat |= {"D": events.TC_DISCARD | events.TC_WRITE, "W": events.TC_WRITE, "R": events.TC_READ,
            "N": events.TC_READ}[s[0]]
    for ch in s[1:]:
        if ch == "F":
            cat |= events.TC_FUA
        elif ch in RWBS_BITS:
            cat |= RWBS_BITS[ch]
        else:
            raise ExprError(f"flags '{text}': unknown letter '{ch}' (F, A, S, M follow R, W, D or N)", col)
    return cat


def resolve(field: str, lit: Literal) -> int:
    """A WHERE string literal -> the number the kernel compares (the live system's names)."""
    text = str(lit.value)
    if field == "disk":
        try:
            return devices.resolve_disk(text).dev
        except IoscopeError as exc:
            raise ExprError(f"unknown disk '{text}'", lit.col, exc.hint) from None
    if field == "op":
        if text.lower() not in OP_CODES:
            raise ExprError(f"unknown op '{text}'", lit.col, f"ops are {', '.join(OP_CODES)}")
        return OP_CODES[text.lower()]
    if field == "flags":
        return flags_bits(text, lit.col)
    if field == "cgroup":
        return cgroups.cgroup_id(text)
    raise ExprError(f"'{field}' cannot be compared with a string", lit.col)


class Namer(Protocol):
    def disk(self, dev: int) -> str: ...
    def comm(self, tgid: int) -> str: ...
    def cgroup(self, cg: int) -> str: ...
    def kstack(self, sid: int) -> str: ...
    def ustack(self, sid: int, tgid: int) -> str: ...
    def file(self, ip: int) -> str: ...


def mount_points(mountinfo: str = "/proc/self/mountinfo") -> dict[int, str]:
    """kernel dev_t -> where the file system's root is mounted (the first such mount)."""
    out: dict[int, str] = {}
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 5 or parts[3] != "/":
            continue
        ma, _, mi = parts[2].partition(":")
        if ma.isdigit() and mi.isdigit():
            out.setdefault(devices.kdev(int(ma), int(mi)), parts[4].replace("\\040", " "))
    return out


def file_path(rec: np.void, mounts: dict[int, str]) -> str:
    """A files-map entry (struct agg_file) -> a path: its components joined from the file system's
    root, under its mount point; '.../' in front when the chain was longer than kept."""
    depth = int(rec["depth"])
    comps = [bytes(c).split(b"\0")[0].decode(errors="replace") for c in rec["comp"][:depth]]
    dev = int(rec["dev"])
    if not comps:
        ma, mi = devices.kdev_split(dev)
        return f"[inode {int(rec['ino'])} on {ma}:{mi}]"
    at_root = comps[-1] == "/"
    names = [c for c in reversed(comps) if c not in ("/", "")]
    if not names:  # a pseudo file system's inode: the block device's own page cache (file system metadata)
        return "[block device cache]"
    rel = "/".join(names)
    if not at_root:
        return ".../" + rel
    mnt = mounts.get(dev)
    if mnt is None:
        ma, mi = devices.kdev_split(dev)
        return f"[{ma}:{mi}]/{rel}"
    return mnt.rstrip("/") + "/" + rel


class KernelSymbols:
    """Kernel addresses -> 'function+0xoff', from /proc/kallsyms (read once, when first needed).
    An address it cannot place (no symbols readable: kptr_restrict) is printed as a number and counted."""

    def __init__(self, path: str = "/proc/kallsyms") -> None:
        self.path = path
        self._addrs: list[int] | None = None
        self._names: list[str] = []
        self.unresolved = 0

    def _load(self) -> None:
        rows = []
        try:
            with open(self.path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3 and parts[1] in "tTwW":
                        addr = int(parts[0], 16)
                        if addr:
                            rows.append((addr, parts[2]))
        except OSError:
            rows = []
        rows.sort()
        self._addrs = [a for a, _ in rows]
        self._names = [n for _, n in rows]

    def name(self, addr: int) -> str:
        if self._addrs is None:
            self._load()
        assert self._addrs is not None
        i = bisect.bisect_right(self._addrs, addr) - 1
        if i < 0:
            self.unresolved += 1
            return f"0x{addr:x}"
        return f"{self._names[i]}+0x{addr - self._addrs[i]:x}"


TRACING_FRAMES = ("bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_", "trace_")


def stack_text(frames: Sequence[int], syms: KernelSymbols) -> str:
    """A stack, leaf first, one frame a line (the key's value: rows of one stack merge), without the
    frames of the tracing itself (agg's program and the tracepoint's call into it)."""
    stack = cut_cycle([a for a in frames if a])
    names = [syms.name(a) for a in stack.frames]
    while len(names) > 1 and names[0].startswith(TRACING_FRAMES):
        names.pop(0)
    note = stack.note()
    return "\n".join(names + ([note] if note else []))


class ElfSymbols:
    """One ELF file's functions (.symtab, else .dynsym) and its loadable segments, read with pyelftools."""

    def __init__(self, path: str) -> None:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
        from elftools.elf.sections import SymbolTableSection

        self.loads: list[tuple[int, int, int]] = []   # (file offset, virtual address, size in the file)
        funcs: dict[int, tuple[int, str]] = {}
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                for seg in elf.iter_segments():
                    if seg["p_type"] == "PT_LOAD":
                        self.loads.append((seg["p_offset"], seg["p_vaddr"], seg["p_filesz"]))
                for name in (".symtab", ".dynsym"):
                    sec = elf.get_section_by_name(name)
                    if not isinstance(sec, SymbolTableSection):
                        continue
                    for sym in sec.iter_symbols():
                        if sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and sym["st_value"] and sym.name:
                            funcs.setdefault(sym["st_value"], (sym["st_size"], sym.name))
        except (OSError, ELFError):
            pass
        rows = sorted(funcs.items())
        self.addrs = [a for a, _ in rows]
        self.funcs = [f for _, f in rows]

    def name(self, offset: int) -> str | None:
        """The function holding this file offset, as 'name+0xoff'; None when no symbol covers it."""
        for off, vaddr, size in self.loads:
            if off <= offset < off + size:
                va = offset - off + vaddr
                break
        else:
            return None
        i = bisect.bisect_right(self.addrs, va) - 1
        if i < 0:
            return None
        size, name = self.funcs[i]
        if size and va >= self.addrs[i] + size:
            return None
        return f"{name}+0x{va - self.addrs[i]:x}"


class UserSymbols:
    """User addresses of a process -> 'function+0xoff (file)': the process's mappings from
    /proc/PID/maps, each address's file offset looked up in that file's ELF symbols (opened through
    /proc/PID/root, so that a process in a container is read from its own files). Read when a row is
    named, at the end of an interval: a process that has exited by then cannot be symbolised, and
    says so. Frames that cannot be placed are printed as addresses and counted in `unresolved`."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.unresolved = 0
        self._elves: dict[tuple[int, int, int], ElfSymbols] = {}
        self._maps: dict[int, list[tuple[int, int, int, str]] | None] = {}

    def forget_processes(self) -> None:
        """Mappings change (exec, dlopen, exit): read them again at the next interval."""
        self._maps.clear()

    def _mappings(self, tgid: int) -> list[tuple[int, int, int, str]] | None:
        if tgid not in self._maps:
            rows: list[tuple[int, int, int, str]] | None = []
            try:
                with open(f"{self.proc}/{tgid}/maps") as f:
                    for line in f:
                        parts = line.split(maxsplit=5)
                        if len(parts) == 6 and parts[5].startswith("/"):
                            lo, _, hi = parts[0].partition("-")
                            assert rows is not None
                            rows.append((int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5].rstrip("\n")))
            except OSError:
                rows = None
            self._maps[tgid] = rows
        return self._maps[tgid]

    def _elf(self, tgid: int, path: str) -> ElfSymbols | None:
        full = f"{self.proc}/{tgid}/root{path}"
        try:
            st = os.stat(full)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if key not in self._elves:
            self._elves[key] = ElfSymbols(full)
        return self._elves[key]

    def frames(self, tgid: int, addrs: Sequence[int]) -> list[str]:
        maps = self._mappings(tgid)
        if maps is None:
            self.unresolved += len(addrs)
            return [f"0x{a:x} [process {tgid} exited: not symbolised]" for a in addrs]
        out = []
        for n, a in enumerate(addrs):
            # a caller's frame holds the return address, just past its call: look up the call itself
            look = a if n == 0 else a - 1
            m = next((m for m in maps if m[0] <= look < m[1]), None)
            if m is None:
                self.unresolved += 1
                out.append(f"0x{a:x} [no file mapped]")
                continue
            lo, _hi, off, path = m
            elf = self._elf(tgid, path)
            name = elf.name(look - lo + off) if elf is not None else None
            base = os.path.basename(path)
            if name is None:
                self.unresolved += 1
                out.append(f"{base}+0x{a - lo + off:x} [no symbol]")
            else:
                if n:  # the offset of the return address, as perf and bpftrace print it
                    fn, _, hexoff = name.rpartition("+0x")
                    name = f"{fn}+0x{int(hexoff, 16) + 1:x}"
                out.append(f"{name} ({base})")
        return out


def ustack_text(frames: Sequence[int], tgid: int, syms: UserSymbols) -> str:
    """A user stack, leaf first, one frame a line (the kernel's frame-pointer walk: code built without
    frame pointers, as most distributions' libc, shows its caller's frames missing or wrong)."""
    stack = cut_cycle([a for a in frames if a])
    if not stack.frames:
        return "[no user stack]"
    note = stack.note()
    return "\n".join(syms.frames(tgid, stack.frames) + ([note] if note else []))


def name_rows(exprs: Sequence[Expr], raw: Sequence[RawRow], namer: Namer) -> list[list[NamedRow]]:
    """The kernel's rows -> rows keyed by names, per expression (rows that name alike merge later)."""
    out: list[list[NamedRow]] = [[] for _ in exprs]
    for r in raw:
        if r.expr >= len(exprs):
            continue
        e = exprs[r.expr]
        if e.globs:  # comm == "kworker*": the rows carry the process (key_mask), its name decides
            tgid = r.key[abi.FIELDS["tgid"]]
            if not glob_match(e.globs, namer.comm(tgid) if tgid else UNKNOWN):
                continue
        keys: dict[str, str | int] = {}
        flush = "op" in e.keys and r.key[abi.FIELDS["op"]] == core_abi.OP_FLUSH
        for k in e.keys:
            v = r.key[abi.FIELDS[abi.KEY_FIELD[k]]]
            if k == "disk":
                keys[k] = namer.disk(v)
            elif k == "op":
                keys[k] = core_abi.OP_NAMES.get(v, "other")
            elif k == "flags":
                keys[k] = flags_name(v)
            elif k == "comm":
                keys[k] = namer.comm(v) if v else KERNEL if flush else UNKNOWN
            elif k == "cgroup":
                keys[k] = namer.cgroup(v) if v or not flush else cgroups.NO_CGROUP
            elif k == "kstack":
                keys[k] = namer.kstack(v - 1) if v else "[no stack]"
            elif k == "ustack":
                tgid = r.key[abi.FIELDS["tgid"]]
                keys[k] = namer.ustack(v - 1, tgid) if v else "[no user stack]"
            elif k == "file":
                keys[k] = namer.file(v) if v else "[no file]"
            else:
                keys[k] = v
        out[r.expr].append(NamedRow(keys, r.stat))
    return out


__all__ = [
    "ElfSymbols",
    "KernelSymbols",
    "Namer",
    "UserSymbols",
    "file_path",
    "flags_bits",
    "flags_name",
    "mount_points",
    "name_rows",
    "resolve",
    "stack_text",
    "ustack_text",
]
