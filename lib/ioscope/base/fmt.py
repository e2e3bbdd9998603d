"""Numbers as the tools print them, without the renderer (rich): what JSON-only and batch paths need."""

from __future__ import annotations

import datetime
import math


def fmt_ns(ns: float, unit: str | None = None) -> str:
    """A duration with 3 significant digits: '812ns', '64.2us', '1.05ms', '2.31s'; unit forces one."""
    if unit == "ms":
        return f"{ns / 1e6:.3f}ms"
    if unit == "us":
        return f"{ns / 1e3:.1f}us"
    for div, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if ns >= div:
            return _sig3(ns / div) + suffix
    return _sig3(ns) + "ns"


def fmt_bytes(n: float, prose: bool = False, unit: bool = False) -> str:
    """A byte count: '1.05M' for table columns (3 significant digits; K, M, G are 1024-based), with
    unit=True '1.05MiB' (the unit written out, for lines of text), or with prose=True '1.0 MiB', one
    decimal and the unit spelled, for sentences and status lines."""
    for div, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if n >= div:
            if prose:
                return f"{n / div:.1f} {suffix}iB"
            return _sig3(n / div) + suffix + ("iB" if unit else "")
    return f"{n:.0f} B" if prose else f"{int(n)}" + ("B" if unit else "")


def _sig3(x: float) -> str:
    if x == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    s = f"{x:.{digits}f}"
    return s


__all__ = ["fmt_bytes", "fmt_ns"]


def comm_str(raw: bytes) -> str:
    """A task's comm as the kernel stores it (16 bytes, NUL-padded) -> str."""
    return raw.split(b"\0")[0].decode(errors="replace")


def iso_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).astimezone().isoformat(timespec="milliseconds")
