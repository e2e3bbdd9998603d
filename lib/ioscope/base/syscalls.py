"""System call numbers per architecture (`uname -m`), by the names of the kernel's syscall tables (x86_64:
arch/x86/entry/syscalls/syscall_64.tbl, as asm/unistd_64.h; aarch64 and riscv64: the generic table,
include/uapi/asm-generic/unistd.h). Only the calls some tool filters on in the kernel (readsize's raw
syscall hooks, the throttle's submit notes, fileslower's). tests/test_syscalls.py checks them against
linux-libc-dev's headers. These are a 64-bit task's numbers: a 32-bit (compat) task's calls have others.
No numpy: command lines check their options with it."""

from __future__ import annotations

import platform
from collections.abc import Iterable

from ioscope.base.errors import IoscopeError

_GENERIC = {"read": 63, "write": 64, "readv": 65, "writev": 66, "pread64": 67, "pwrite64": 68, "preadv": 69,
            "pwritev": 70, "sendfile": 71, "splice": 76, "fsync": 82, "fdatasync": 83, "sync_file_range": 84,
            "io_submit": 2, "io_getevents": 4, "copy_file_range": 285, "preadv2": 286, "pwritev2": 287,
            "io_pgetevents": 292, "io_uring_enter": 426}
NRS: dict[str, dict[str, int]] = {
    "x86_64": {"read": 0, "write": 1, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "sendfile": 40,
               "fsync": 74, "fdatasync": 75, "io_getevents": 208, "io_submit": 209, "splice": 275,
               "sync_file_range": 277, "preadv": 295, "pwritev": 296, "copy_file_range": 326, "preadv2": 327,
               "pwritev2": 328, "io_pgetevents": 333, "io_uring_enter": 426},
    "aarch64": _GENERIC,
    "riscv64": _GENERIC,
}


def numbers(names: Iterable[str], machine: str | None = None) -> dict[str, int]:
    """These calls' numbers (by their tables' names) on machine, this one (`uname -m`) by default."""
    m = machine or platform.machine()
    nrs = NRS.get(m)
    if nrs is None:
        raise IoscopeError(f"ioscope does not know the syscall numbers of {m}", f"supported: {', '.join(NRS)}")
    return {n: nrs[n] for n in names}
