"""ioscope exporter scraped by a real Prometheus server (the Debian package), 1 s scrape interval:
the server's own query API must see the workload's I/O count and a sane p99."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from ioscope.testbed import LoopDevice
from test_exporter_live import READS, WRITES, dd, free_port, start, stop

pytestmark = pytest.mark.usefixtures("live")  # skips locally, fails in CI, when BPF cannot run


def _need_prometheus() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed (scripts/bootstrap.sh --test installs the Debian package)")
        pytest.skip("prometheus is not installed (scripts/bootstrap.sh --test installs it)")
    return exe


def query(port: int, q: str) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def value(port: int, q: str) -> float | None:
    r = query(port, q)
    return float(r[0]["value"][1]) if r else None  # type: ignore[index]


def test_prometheus_sees_the_workload() -> None:
    exe = _need_prometheus()
    with LoopDevice(64) as loop:
        eport, pport = free_port(), free_port()
        tmp = tempfile.mkdtemp(prefix="ioscope-prom-")
        server = None
        exporter = start(eport, "-d", loop.name)
        try:
            cfg = os.path.join(tmp, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "scrape_configs:\n  - job_name: ioscope\n"
                        f"    static_configs:\n      - targets: ['127.0.0.1:{eport}']\n")
            server = subprocess.Popen([exe, f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{pport}",
                                       f"--storage.tsdb.path={os.path.join(tmp, 'data')}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            q = f'sum(ioscope_io_latency_seconds_count{{phase="q2c",disk="{loop.name}"}})'
            deadline = time.monotonic() + 60
            up = None
            while up != 1.0 and time.monotonic() < deadline:  # the server has scraped the exporter
                time.sleep(0.5)
                try:
                    up = value(pport, 'up{job="ioscope"}')
                except OSError:
                    continue
            assert up == 1.0, "prometheus never scraped the exporter"
            time.sleep(1.5)  # one more scrape: any I/O from the loop device's creation is counted in base
            base = value(pport, q) or 0.0  # no series yet: no I/O on the disk since the exporter started
            dd(loop.path, "write", WRITES)
            dd(loop.path, "read", READS)
            got = base
            while got != base + READS + WRITES and time.monotonic() < deadline:
                time.sleep(0.5)
                got = value(pport, q) or base
            assert got - base == READS + WRITES
            # over the cumulative buckets (everything since the exporter started: the workload)
            p99 = value(pport, 'histogram_quantile(0.99, sum by (le) (ioscope_io_latency_seconds_bucket'
                               f'{{phase="q2c",disk="{loop.name}"}}))')
            assert p99 is not None and 0 < p99 < 10  # a 4 KiB I/O on a tmpfs loop device: well under 10 s
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            shutil.rmtree(tmp, ignore_errors=True)
            assert stop(exporter) == 0
