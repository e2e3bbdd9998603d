"""ioscope exporter scraped by a real Prometheus server (the Debian package), 1 s scrape interval, while
~20,000 I/Os run and a second scraper reads too: through the server's own query API, every request the
kernel completed is counted or reported (completion_unseen), exactly; no counter ever went down
(resets() 0); the process and cgroup series never left a scrape (count_over_time equal to the scrapes);
p99 is sane."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from conftest import unreported_bound
from ioscope.base.testbed import LoopDevice, run_fio
from test_exporter_live import NIOS, free_port, scrape, settle_udev, start, stop

pytestmark = pytest.mark.usefixtures("live")  # skips locally, fails in CI, when BPF cannot run


def _need_prometheus() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed (scripts/bootstrap.sh --test installs the Debian package)")
        pytest.skip("prometheus is not installed (scripts/bootstrap.sh --test installs it)")
    return exe


def query(port: int, q: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def value(port: int, q: str) -> float | None:
    r = query(port, q)
    return float(r[0]["value"][1]) if r else None


def test_prometheus_sees_every_completion_and_stable_series() -> None:
    exe = _need_prometheus()
    with LoopDevice(256) as loop:
        loop.set_queue("nomerges", "2")  # one fio I/O, one request
        settle_udev()
        eport, pport = free_port(), free_port()
        tmp = tempfile.mkdtemp(prefix="ioscope-prom-")
        server = None
        exporter = start(eport, "-d", loop.name, "--per-process", "3", "--per-cgroup", "2")
        other = threading.Event()
        try:
            cfg = os.path.join(tmp, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "scrape_configs:\n  - job_name: ioscope\n"
                        f"    static_configs:\n      - targets: ['127.0.0.1:{eport}']\n")
            server = subprocess.Popen([exe, f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{pport}",
                                       f"--storage.tsdb.path={os.path.join(tmp, 'data')}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            dev = f'device="{loop.name}"'
            counted = (f'sum(ioscope_io_latency_seconds_count{{phase="d2c",{dev}}} or vector(0))'
                       f' + sum(ioscope_disk_completions_unseen_total{{{dev}}})')
            kernel = f"sum(ioscope_disk_ios_total{{{dev}}})"
            deadline = time.monotonic() + 90
            up = None
            while up != 1.0 and time.monotonic() < deadline:  # the server has scraped the exporter
                time.sleep(0.5)
                try:
                    up = value(pport, 'up{job="ioscope"}')
                except OSError:
                    continue
            assert up == 1.0, "prometheus never scraped the exporter"
            time.sleep(1.5)  # one more scrape: the bases below are what the server holds before the workload
            base_counted, base_kernel = value(pport, counted), value(pport, kernel)
            assert base_counted is not None and base_kernel is not None
            started = time.time()

            def second_scraper() -> None:  # another reader of the same exporter, as a second server would be
                while not other.is_set():
                    scrape(eport)
                    time.sleep(0.2)

            t = threading.Thread(target=second_scraper)
            t.start()
            run_fio(loop.path, rw="randrw", iodepth=32, number_ios=NIOS, size="200m", extra=["--rate_iops=3000"])
            other.set()
            t.join()
            got_c, got_k = base_counted, base_kernel
            while (got_c - base_counted, got_k - base_kernel) != (NIOS, NIOS) and time.monotonic() < deadline:
                time.sleep(0.5)
                got_c, got_k = value(pport, counted) or 0.0, value(pport, kernel) or 0.0
            assert (got_c - base_counted, got_k - base_kernel) == (NIOS, NIOS)
            unseen = value(pport, f"sum(ioscope_disk_completions_unseen_total{{{dev}}})")
            assert unseen is not None and unseen <= unreported_bound(NIOS)
            assert value(pport, 'ioscope_lost_events_total{reason="completion_unseen"}') == unseen
            window = f"[{int(time.time() - started) + 5}s]"
            for name in ("ioscope_io_latency_seconds_count", "ioscope_io_latency_seconds_bucket",
                         "ioscope_process_bytes_total", "ioscope_cgroup_bytes_total", "ioscope_disk_ios_total"):
                assert value(pport, f"max(resets({name}{window}))") == 0, name
            # every process and cgroup series, once exported, was in every later scrape the server made
            ups = [float(t) for t, _ in query(pport, f'up{{job="ioscope"}}{window}')[0]["values"]]
            named = query(pport, f'{{__name__=~"ioscope_(process|cgroup)_(bytes|ios)_total"}}{window}')
            assert {str(r["metric"].get("comm")) for r in named} >= {"fio", "other"}
            for r in named:
                ts = [float(t) for t, _ in r["values"]]
                assert ts == [u for u in ups if u >= ts[0]], r["metric"]
            p99 = value(pport, 'histogram_quantile(0.99, sum by (le) (ioscope_io_latency_seconds_bucket'
                               f'{{phase="q2c",{dev}}}))')
            assert p99 is not None and 0 < p99 < 10  # a 4 KiB I/O on a tmpfs loop device: well under 10 s
        finally:
            other.set()
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            shutil.rmtree(tmp, ignore_errors=True)
            assert stop(exporter) == 0
