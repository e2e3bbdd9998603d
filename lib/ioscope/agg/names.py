"""Key values between people and the kernel: disk, op, flags, cgroup and comm, both ways.

resolve() turns a WHERE literal into the number the kernel compares (a disk name into its dev_t,
"write" into the op code, "WS" into blktrace category bits, a cgroup path into its id);
name_rows() turns the kernel's key numbers into names, through a Namer (the live system's, or a
capture's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from ioscope import abi as core_abi
from ioscope import devices
from ioscope.agg import abi
from ioscope.agg.expr import Expr, ExprError, Literal
from ioscope.agg.model import NamedRow, RawRow
from ioscope.trace import events

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


def cgroup2_root(mounts: str = "/proc/self/mounts") -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1)."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


def cgroup_id(path: str) -> int:
    """A cgroup v2 path ('/system.slice/x.service', or a full path under the mount) -> its id (the
    inode number of its directory: what bpf_get_current_cgroup_id() returns)."""
    root = cgroup2_root()
    if root is None:
        raise ExprError("no cgroup v2 hierarchy is mounted", 1)
    p = Path(path)
    full = p if p.is_absolute() and str(p).startswith(str(root)) else root / str(p).lstrip("/")
    try:
        return os.stat(full).st_ino
    except OSError:
        from ioscope.errors import UsageError
        raise UsageError(f"cgroup '{path}' does not exist (looked for {full})") from None


class CgroupNames:
    """cgroup v2 id -> path relative to the mount ('/' for the root), by walking the hierarchy."""

    def __init__(self) -> None:
        self.root = cgroup2_root()
        self._names: dict[int, str] = {}

    def refresh(self) -> None:
        if self.root is None:
            return
        for dirpath, _dirs, _files in os.walk(self.root):
            try:
                ino = os.stat(dirpath).st_ino
            except OSError:
                continue
            rel = "/" + os.path.relpath(dirpath, self.root)
            self._names[ino] = "/" if rel == "/." else rel

    def name(self, cg: int) -> str:
        if cg not in self._names:
            self.refresh()
        return self._names.get(cg, f"cgroup:{cg}" if cg else "[unknown]")


def resolve(field: str, lit: Literal) -> int:
    """A WHERE string literal -> the number the kernel compares (the live system's names)."""
    text = str(lit.value)
    if field == "disk":
        try:
            return devices.resolve_disk(text).dev
        except Exception as exc:  # resolve_disk raises IoscopeError with its own words
            raise ExprError(f"disk '{text}': {exc}", lit.col) from None
    if field == "op":
        if text.lower() not in OP_CODES:
            raise ExprError(f"unknown op '{text}'", lit.col, f"ops are {', '.join(OP_CODES)}")
        return OP_CODES[text.lower()]
    if field == "flags":
        return flags_bits(text, lit.col)
    if field == "cgroup":
        return cgroup_id(text)
    raise ExprError(f"'{field}' cannot be compared with a string", lit.col)


class Namer(Protocol):
    def disk(self, dev: int) -> str: ...
    def comm(self, tgid: int) -> str: ...
    def cgroup(self, cg: int) -> str: ...


def name_rows(exprs: Sequence[Expr], raw: Sequence[RawRow], namer: Namer) -> list[list[NamedRow]]:
    """The kernel's rows -> rows keyed by names, per expression (rows that name alike merge later)."""
    out: list[list[NamedRow]] = [[] for _ in exprs]
    for r in raw:
        if r.expr >= len(exprs):
            continue
        e = exprs[r.expr]
        keys: dict[str, str | int] = {}
        for k in e.keys:
            v = r.key[abi.FIELDS[abi.KEY_FIELD[k]]]
            if k == "disk":
                keys[k] = namer.disk(v)
            elif k == "op":
                keys[k] = core_abi.OP_NAMES.get(v, "other")
            elif k == "flags":
                keys[k] = flags_name(v)
            elif k == "comm":
                keys[k] = namer.comm(v) if v else "[unknown]"
            elif k == "cgroup":
                keys[k] = namer.cgroup(v)
            else:
                keys[k] = v
        out[r.expr].append(NamedRow(keys, r.stat))
    return out


__all__ = ["CgroupNames", "Namer", "cgroup_id", "flags_bits", "flags_name", "name_rows", "resolve"]
