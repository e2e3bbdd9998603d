"""Fixtures of the kernel matrix's guest tests (tests/kernels/): the disks their workloads run on."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def disk(loopdev: Any) -> Any:
    return loopdev(size_mb=64, scheduler="mq-deadline")


@pytest.fixture
def fs(loopdev: Any, tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """An ext4 file system on a loop disk, with an 8 MiB file of random bytes, page cache dropped."""
    dev = loopdev(size_mb=64)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev.path], check=True)
    subprocess.run(["mount", dev.path, str(mnt)], check=True)
    try:
        for name in ("a", "b"):
            with open(mnt / name, "wb") as f:
                f.write(os.urandom(8 << 20))
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3")
        yield dev, mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
