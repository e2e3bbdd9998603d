"""Acceptance: the README's set-up commands, read from README.md and run as written.

The first command installs everything and runs `ioscope demo`; it runs here in a fresh clone of this
commit, so it builds its own .venv from nothing the way a new user's machine does (the machine's
Debian packages are already there: the suite cannot reinstall the machine, and test_setup.py
checks that every program the code calls is installed by scripts/bootstrap.sh). The second
command is the one running now; CI runs exactly it (test_setup.py checks .ci/run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, readme_setup_commands, unreported_bound

LINK = Path("/usr/local/bin/ioscope")


@pytest.fixture
def clone(live: None) -> Iterator[Path]:
    if not (ROOT / ".git").exists():
        pytest.fail("the README test needs the git checkout it runs from")
    tmp = Path(tempfile.mkdtemp(prefix="ioscope-readme-"))
    old_link = os.readlink(LINK) if LINK.is_symlink() else None
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(tmp / "ioscope")], check=True)
        yield tmp / "ioscope"
    finally:
        # the install command links /usr/local/bin/ioscope to the clone: put back what was there
        if LINK.is_symlink() and os.readlink(LINK).startswith(str(tmp)):
            LINK.unlink()
            if old_link is not None:
                LINK.symlink_to(old_link)
        shutil.rmtree(tmp, ignore_errors=True)


def test_readme_install_command_runs_as_written(clone: Path) -> None:
    install, test = readme_setup_commands()
    assert test == "./test.sh"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    p = subprocess.run(["bash", "-c", install], cwd=clone, capture_output=True, text=True, timeout=900,
                       stdin=subprocess.DEVNULL, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr
    # it installed ioscope into the clone's own .venv and linked the command
    assert (clone / ".venv" / "bin" / "ioscope").exists()
    assert os.path.realpath(LINK) == os.path.realpath(clone / ".venv" / "bin" / "ioscope")
    # and ran the demo: a latency report whose own cross-check (fio's I/Os, ioscope's, the kernel's) holds
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("cross-check")), None)
    assert line is not None, p.stdout[-3000:]
    ios, q2c, d2c, kernel = (int(w) for w in line.replace("(", " ").replace(";", " ").split() if w.isdigit())
    said = re.search(r"^(\d+) completions were not reported by the kernel", p.stdout, re.M)
    unreported = int(said.group(1)) if said else 0
    assert unreported <= unreported_bound(ios), p.stdout
    assert ios == kernel > 0 and q2c + unreported == ios and d2c + unreported == kernel, line
    v = subprocess.run([str(LINK), "--version"], capture_output=True, text=True, check=True)
    assert v.stdout.startswith("ioscope ")
