"""ioscope web, live: a known fio workload on a loop disk; the page's /data counts every I/O fio did (and
/proc/diskstats counted), the page drawn in headless Chromium adds up to the same, only / and /data are
served, and SIGTERM stops it cleanly with its BPF programs gone."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

from conftest import bpf_prog_ids, ioscope_cmd, programs_left
from ioscope.base.testbed import run_fio

NIOS = 1013


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def test_web_counts_fio_and_stops_clean(loopdev: Any) -> None:
    dev = loopdev(size_mb=128)
    p = subprocess.Popen(ioscope_cmd("web", "-d", dev.name, "--listen", f"127.0.0.1:{free_port()}"),
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        m = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        assert m, line + p.stderr.read()
        url = m.group(1)
        ids = bpf_prog_ids(p.pid)
        assert ids
        d0 = dev.diskstats()
        run_fio(dev.path, number_ios=NIOS, iodepth=4, size="64m")
        time.sleep(2.5)
        d1 = dev.diskstats()
        assert d1.reads - d0.reads == NIOS
        code, body = _get(url + "data")
        assert code == 200
        data = json.loads(body)
        sums = [0, 0, 0]
        for col in data["data"]:
            for ph, _k, _b, n in col["cells"]:
                sums[ph] += n
        assert sums == [NIOS, NIOS, NIOS], sums
        assert {k["disk"] for k in data["keys"]} == {dev.name}
        assert _get(url + "etc/passwd")[0] == 404 and _get(url + "../data")[0] in (200, 404)
        from ioscope.engines.pages.browser import chromium, open_page
        with chromium(offline=False, allow=(url,)) as ctx:
            o = open_page(ctx, url, "window.ioscopeLive && window.ioscopeLive.polls >= 1", allow=(url,))
            assert not o.errors and not o.requests, (o.errors, o.requests)
            cells = o.marks("live", "live")
            assert sum(int(x["n"]) for x in cells) == NIOS
            assert o.inked("#live", 0.001) > 0.001
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        _out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped" in err and "Traceback" not in err, err
    assert not programs_left(ids)
