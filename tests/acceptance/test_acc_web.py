"""Acceptance: `ioscope web -d DISK --by comm --listen 127.0.0.1:PORT` as a user types it, the page opened in a browser.

fio makes 1013 direct 4 KiB reads on a loop disk and dd 31 direct writes; the page (headless Chromium,
nothing reachable but the tool's own address) draws, within a few seconds, heat-map cells adding up to
fio's reads (= /proc/diskstats) for process fio and to dd's writes for dd, with drill-down by process;
the tool listens on 127.0.0.1 only, and SIGHUP stops it (exit 0, its BPF programs gone).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from typing import Any

from conftest import bpf_prog_ids, ioscope_cmd, programs_left
from ioscope.base.testbed import run_fio


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_web_as_typed(loopdev: Any) -> None:
    disk = loopdev(size_mb=128)
    cmd = ioscope_cmd("web", "-d", disk.name, "--by", "comm", "--listen", f"127.0.0.1:{free_port()}")
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        m = re.search(r"at (http://127\.0\.0\.1:(\d+)/)", line)
        assert m, line
        url = m[1]
        ids = bpf_prog_ids(p.pid)
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{m[2]}"], capture_output=True, text=True).stdout
        local = [ln.split()[3] for ln in listening.splitlines() if ln.strip()]
        assert local == ["127.0.0.1:" + m[2]], listening   # the local address column: this host only
        s0 = disk.diskstats()
        run_fio(disk.path, number_ios=1013, iodepth=4, size="64m")
        subprocess.run(["dd", "if=/dev/zero", f"of={disk.path}", "bs=16k", "count=31", "oflag=direct",
                        "status=none"], check=True)
        s1 = disk.diskstats()
        assert (s1.reads - s0.reads, s1.writes - s0.writes) == (1013, 31)
        time.sleep(2.5)
        from ioscope.engines.pages.browser import chromium, open_page
        with chromium(offline=False, allow=(url,)) as ctx:
            o = open_page(ctx, url, "window.ioscopeLive && window.ioscopeLive.polls >= 1", allow=(url,))
            assert not o.errors and not o.requests, (o.errors, o.requests)
            o.page.select_option("select[name=split]", "comm")
            o.page.wait_for_timeout(300)
            per: dict[str, int] = {}
            for x in o.marks("live", "live"):
                per[x["part"]] = per.get(x["part"], 0) + int(x["n"])
            assert per.get("fio") == 1013 and per.get("dd") == 31, per
            o.page.select_option("select[name=f_comm]", "dd")
            o.page.wait_for_timeout(300)
            assert sum(int(x["n"]) for x in o.marks("live", "live")) == 31
    finally:
        os.killpg(p.pid, signal.SIGHUP)
        _out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "stopped" in err and "Traceback" not in err, err
    assert not programs_left(ids)
