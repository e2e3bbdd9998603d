"""The system calls fileslower follows: enum fs_call of bpf/fileslower.h, in order, and their numbers on
each architecture (the programs hook raw_syscalls:sys_enter and sys_exit, every call, and keep those
whose number user space marked in targ_nr_call). No numpy: the command line checks --calls with it."""

from __future__ import annotations

from ioscope.base import syscalls

CALLS = ("read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
         "fsync", "fdatasync", "sync_file_range", "io_submit", "io_uring_enter", "sendfile64", "copy_file_range",
         "splice")
# a call's name in the syscall tables where it differs (its tracepoint and SYSCALL_DEFINE are sendfile64's)
TABLE_NAME = {"sendfile64": "sendfile"}
MAX_NR = 512  # FS_MAX_NR, bpf/fileslower.h: the size of targ_nr_call


def numbers(machine: str | None = None) -> dict[str, int]:
    """Each call's number on this architecture (a 64-bit task's: the programs leave 32-bit tasks out)."""
    nrs = syscalls.numbers((TABLE_NAME.get(c, c) for c in CALLS), machine)
    return {c: nrs[TABLE_NAME.get(c, c)] for c in CALLS}


def nr_table(calls: tuple[str, ...], machine: str | None = None) -> tuple[int, ...]:
    """targ_nr_call: by syscall number, 1 + the call's index in CALLS for the calls followed, else 0."""
    table = [0] * MAX_NR
    nrs = numbers(machine)
    for c in calls:
        table[nrs[c]] = CALLS.index(c) + 1
    return tuple(table)
