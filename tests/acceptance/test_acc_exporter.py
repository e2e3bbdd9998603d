"""Acceptance: ioscope exporter as an operator runs it: started in the background by a shell script with
`--listen localhost:PORT` (as node_exporter takes it), its landing page opened, scraped over HTTP (urllib,
as curl would), a known workload (a prime number of direct 4 KiB writes by dd), then `kill -TERM $!`:
exit 0 within 2 s, nothing left loaded, the numbers right."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from conftest import EMULATION_FACTOR, bpf_prog_ids, programs_left
from ioscope.base.devices import read_diskstats
from ioscope.base.testbed import LoopDevice

WRITES = 23


def _metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://localhost:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
            out[key] = s.value
    return out


def test_exporter_background_scrape_and_term(live: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with LoopDevice(64) as loop, tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "run.sh")
        script.write_text(
            "#!/bin/sh\n"
            f"{sys.executable} -m ioscope.cli exporter -d {loop.name} --listen localhost:{port} "
            f"--per-process 2 > {tmp}/out 2> {tmp}/err &\n"
            f"echo $! > {tmp}/pid\n"
            f"wait $!\necho $? > {tmp}/rc\n")
        script.chmod(0o755)
        sh = subprocess.Popen([str(script)])
        # generous: the kernel matrix's guests run under emulation, where a start takes many seconds
        deadline = time.monotonic() + 180
        pidfile = Path(tmp, "pid")
        while not (pidfile.exists() and pidfile.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)  # the shell creates the file before echo writes the pid into it
        pid = int(pidfile.read_text())
        out = Path(tmp, "out")  # created by the background job, maybe after the pid was written
        while not (out.exists() and "serving" in out.read_text()) and not Path(tmp, "rc").exists() \
                and time.monotonic() < deadline:  # rc: the exporter ended (its error is in err)
            time.sleep(0.1)
        progs = bpf_prog_ids(pid)
        assert progs, Path(tmp, "err").read_text()
        page = urllib.request.urlopen(f"http://localhost:{port}/", timeout=10).read().decode()
        assert '<a href="metrics">' in page
        m0 = _metrics(port)
        ds0 = read_diskstats()[loop.name]
        subprocess.run(["dd", "if=/dev/zero", f"of={loop.path}", "bs=4k", f"count={WRITES}", "oflag=direct"],
                       check=True, capture_output=True)
        ds1 = read_diskstats()[loop.name]
        m1 = _metrics(port)
        key = f"ioscope_disk_ios_total{{device={loop.name},op=write}}"
        assert m1[key] - m0.get(key, 0) == ds1.writes - ds0.writes == WRITES
        hkey = f"ioscope_io_latency_seconds_count{{device={loop.name},op=write,phase=d2c}}"
        ukey = f"ioscope_disk_completions_unseen_total{{device={loop.name}}}"
        assert (m1[hkey] - m0.get(hkey, 0)) + (m1[ukey] - m0[ukey]) == WRITES
        dd = [v for k, v in m1.items() if k.startswith("ioscope_process_bytes_total{comm=dd,")]
        assert dd == [WRITES * 4096]
        t = time.monotonic()
        subprocess.run(["sh", "-c", f"kill -TERM {pid}"], check=True)
        while not Path(tmp, "rc").exists() and time.monotonic() - t < 10 * EMULATION_FACTOR:
            time.sleep(0.02)
        assert time.monotonic() - t < 2.0 * EMULATION_FACTOR
        sh.wait(timeout=10)
        assert Path(tmp, "rc").read_text().strip() == "0"
        assert not programs_left(progs)
        assert Path(tmp, "err").read_text() == ""
