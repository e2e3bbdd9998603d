"""Kernel functions' addresses from /proc/kallsyms, for BPF programs that compare an address with them
(a completion callback, a caller on the stack). Root reads them; with addresses hidden (kptr_restrict,
or not root) every function is unknown: (0, 0), and the program's check is off."""

from __future__ import annotations

import bisect
from collections.abc import Iterable


def kernel_function_ranges(names: Iterable[str], kallsyms: str = "/proc/kallsyms") -> dict[str, tuple[int, int]]:
    """Each kernel text function's [start, end): its address and the next vmlinux text symbol's above
    it; (0, 0) for one that is not there (another kernel's name, inlined) or when addresses are hidden."""
    order = list(dict.fromkeys(names))   # the answer in the order asked
    wanted = set(order)
    starts: dict[str, int] = {}
    addrs: list[int] = []
    try:
        with open(kallsyms) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 3 or parts[1] not in "tT":   # 4 fields: a [module] symbol, not vmlinux
                    continue
                a = int(parts[0], 16)
                if parts[2] in wanted and parts[2] not in starts:
                    starts[parts[2]] = a
                addrs.append(a)
    except (OSError, ValueError):
        return {n: (0, 0) for n in order}
    addrs.sort()
    out: dict[str, tuple[int, int]] = {}
    for n in order:
        start = starts.get(n, 0)
        i = bisect.bisect_right(addrs, start) if start else len(addrs)
        out[n] = (start, addrs[i]) if start and i < len(addrs) else (0, 0)
    return out


def kernel_function_range(name: str, kallsyms: str = "/proc/kallsyms") -> tuple[int, int]:
    """One function's [start, end) (kernel_function_ranges)."""
    return kernel_function_ranges([name], kallsyms)[name]


def kernel_function(name: str, kallsyms: str = "/proc/kallsyms") -> int:
    """A kernel function's address; 0 when it is not there or addresses are hidden."""
    return kernel_function_range(name, kallsyms)[0]


__all__ = ["kernel_function", "kernel_function_range", "kernel_function_ranges"]
