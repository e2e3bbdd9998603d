"""Acceptance: a hung read caught by a flight recorder that a cron-like script runs until it fires. The
script starts `ioscope record --ring 30s --trigger 'q2c > 2s' --until-trigger -o PREFIX -q &` on a loop disk
over a FUSE file system; its daemon then stops replying and dd reads one block with O_DIRECT. The recorder
saves while dd is still blocked and ends by itself with status 3, which the script's `wait` sees; the saved
window, read back by `ioscope parse`, holds dd's queued read and no completion for it; the file is its
owner's only. Then the daemon replies and dd completes."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from acc_util import ScriptJob

from hung_util import HeldDisk


def test_a_script_waits_for_the_hung_read_and_gets_status_3(held_disk: HeldDisk) -> None:
    d = held_disk
    with tempfile.TemporaryDirectory(prefix="ioscope-acc-") as tmp:
        t = Path(tmp)
        job = ScriptJob(t, f"record --ring 30s --after 1s -d {d.name} --trigger 'q2c > 2s' --until-trigger "
                           f"-o {t}/case -q")
        dd: subprocess.Popen[str] | None = None
        try:
            job.wait_for("err", "Flight recorder: keeping")
            t0 = time.monotonic()
            dd = d.held_read()
            rc = job.ended(timeout=30)
            took = time.monotonic() - t0
            assert dd.poll() is None, "dd completed before the recorder ended"
            assert rc == "3", (rc, job.err())
            assert 2.0 <= took <= 2.0 + 1.0 + 1.0 + 10, took   # 2 s, a table read, --after, the save
        finally:
            d.release()
            job.kill()
            if dd is not None:
                dd.wait(timeout=10)
        assert dd.returncode == 0
        out, err = job.out(), job.err()
        saved = re.findall(r"^ioscope record: saved (\S+): 'q2c > 2s': an I/O in flight for \S+ on "
                           rf"{d.name}, by dd \(pid {dd.pid}\);", out, re.M)
        assert len(saved) == 1, out
        assert "stopped: --until-trigger: a window was saved." in err, err
        path = saved[0]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        # the window read back: dd's read queued at sector 8000, never completed in it
        parse = subprocess.run([sys.executable, "-m", "ioscope.cli", "parse", path], capture_output=True, text=True,
                               timeout=120)
        assert parse.returncode == 0, parse.stderr
        mine = [ln.split() for ln in parse.stdout.splitlines() if " 8000 + 8 " in ln]
        actions = [f[5] for f in mine if len(f) > 6]
        assert "Q" in actions and "C" not in actions, parse.stdout[-3000:]
        assert any(ln[-1] == "[dd]" for ln in mine if ln[5] == "Q"), mine
