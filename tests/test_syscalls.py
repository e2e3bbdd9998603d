"""The syscall numbers the kernel filters use (base/syscalls.py, fileslower's calls.py) against the kernel's
own uapi headers (linux-libc-dev, installed by scripts/bootstrap.sh). No root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ioscope.base import syscalls
from ioscope.base.errors import IoscopeError
from ioscope.tools.fileslower import calls

X86_64 = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
GENERIC = Path("/usr/include/asm-generic/unistd.h")  # aarch64's and riscv64's table


def header_numbers(path: Path) -> dict[str, int]:
    """name -> number of every `#define __NR_name N` (and the generic table's __NR3264_name N)."""
    assert path.is_file(), f"{path} is missing: install linux-libc-dev (scripts/bootstrap.sh does)"
    out = {}
    for m in re.finditer(r"^#define __NR(?:3264)?_(\w+)\s+(\d+)\s*$", path.read_text(), re.M):
        out[m.group(1)] = int(m.group(2))
    return out


@pytest.mark.parametrize(("machine", "header"), [("x86_64", X86_64), ("aarch64", GENERIC), ("riscv64", GENERIC)])
def test_table_matches_uapi_header(machine: str, header: Path) -> None:
    nrs = header_numbers(header)
    table = syscalls.NRS[machine]
    assert {n: nrs.get(n) for n in table} == table


def test_fileslower_numbers() -> None:
    for machine in syscalls.NRS:
        nrs = calls.numbers(machine)
        assert set(nrs) == set(calls.CALLS)
        assert len(set(nrs.values())) == len(calls.CALLS), machine  # no two calls share a number
        assert max(nrs.values()) < calls.MAX_NR, machine
    assert calls.numbers("x86_64")["sendfile64"] == header_numbers(X86_64)["sendfile"]


def test_nr_table() -> None:
    t = calls.nr_table(("fsync", "pread64"), "x86_64")
    assert len(t) == calls.MAX_NR
    assert t[74] == calls.CALLS.index("fsync") + 1 and t[17] == calls.CALLS.index("pread64") + 1
    assert sum(1 for v in t if v) == 2
    full = calls.nr_table(calls.CALLS, "x86_64")
    assert sorted(v for v in full if v) == list(range(1, len(calls.CALLS) + 1))


def test_unknown_machine() -> None:
    with pytest.raises(IoscopeError, match="s390x"):
        calls.numbers("s390x")
