"""The system calls fileslower follows: enum fs_call of bpf/fileslower.h, in order (the tracepoints are
syscalls:sys_enter_<name> and sys_exit_<name>). No numpy: the command line checks --calls with it."""

from __future__ import annotations

CALLS = ("read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
         "fsync", "fdatasync", "sync_file_range", "io_submit", "io_uring_enter", "sendfile64", "copy_file_range",
         "splice")
