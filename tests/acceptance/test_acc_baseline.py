"""Acceptance: a cron-like script leaves a flight recorder watching a disk against its own usual, and acts
on its exit status. `ioscope record --ring 60s --trigger-baseline 'p99(q2c) > 10x usual' --baseline 20s
--until-trigger -o PREFIX -q &`; fio reads at 100 IOPS from the slow disk of the tests outside its
throttled cgroup (the usual); once the recorder has learned (20 s), reads in the cgroup wait ~1 s each in
the throttle. The script's `wait` gets 3, the one saved window names the disk, and `ioscope agg -r` on it
counts the slow reads that fired it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from acc_util import ScriptJob

from slowdisk import SlowDisk


def test_a_script_gets_status_3_when_the_disk_leaves_its_usual(live: None) -> None:
    with SlowDisk(iops=2) as sd, tempfile.TemporaryDirectory(prefix="ioscope-acc-") as tmp:
        t = Path(tmp)
        fio = subprocess.Popen(["fio", "--name=usual", f"--filename={sd.upper_path}", "--rw=randread", "--bs=4k",
                                "--direct=1", "--ioengine=psync", "--rate_iops=100", "--time_based", "--runtime=60",
                                "--thread"],  # the job a thread of this process: kill() ends it
                               stdout=subprocess.DEVNULL)
        job = ScriptJob(t, f"record --ring 60s --after 1s -d {sd.upper} --trigger-baseline "
                           f"'p99(q2c) > 10x usual' --baseline 20s --until-trigger -o {t}/svc -q")
        slow = None
        try:
            job.wait_for("err", "Flight recorder: keeping")
            time.sleep(21.0)
            loop = (f"for i in $(seq 40); do dd if={sd.upper_path} of=/dev/null bs=4k count=1 iflag=direct "
                    "skip=$((i * 7 + K)) 2>/dev/null; done")
            slow = sd.popen(["sh", "-c", f"{loop.replace('K', '1')} & {loop.replace('K', '3')}; wait"])
            rc = job.ended(timeout=60)
        finally:
            job.kill()
            for p in (slow, fio):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        assert rc == "3", (rc, job.err())
        said = rf"^ioscope record: saved (\S+): 'p99\(q2c\) > 10x usual': {sd.upper} p99\(q2c\) "
        saved = re.findall(said, job.out(), re.M)
        assert len(saved) == 1, job.out()
        agg = subprocess.run([sys.executable, "-m", "ioscope.cli", "agg", "-r", saved[0], "-j", "-e",
                              "count() where q2c > 300ms"], capture_output=True, text=True, timeout=120)
        assert agg.returncode == 0, agg.stderr
        rows = [r for ln in agg.stdout.splitlines() if ln.strip() for a in json.loads(ln)["aggs"] for r in a["rows"]]
        assert rows and rows[0]["count"] >= 2, rows   # the throttled reads the p99 became
