"""ioscope exporter scraped by a real Prometheus server (the Debian package), 1 s scrape interval, every
answer checked through the server's own query API:

- every request the kernel completed is counted or reported (completion_unseen), exactly, with a
  second scraper reading beside the server; no counter ever went down; series never left a scrape;
- a host with churn (the issue's case): 300 short-lived dd processes in 20 cgroups and fio at a known
  rate in a cgroup of its own: fio and the heavy cgroups get their series, PromQL's topk answers them,
  fio's rate and its cgroup's latency histogram count what fio did, every byte is in a series or
  `other`, the number of series stays bounded; the Grafana dashboards of contrib/ query only metrics
  that this scrape has, and every one of their queries runs;
- hostile clients: 50 scrapers back to back and a flood of 1,000 idle sockets for 30 s: `up` never 0;
- TLS and basic auth: Prometheus itself scraping over TLS with a client certificate and a password
  (and failing with a wrong password, or without the certificate)."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, unreported_bound
from ioscope.base.cgroups import io_cgroup_root
from ioscope.base.testbed import LoopDevice, TestCgroups, run_fio
from test_exporter_live import NIOS, free_port, scrape, settle_udev, start, stop
from test_exporter_server import HASH, make_pki, storm

pytestmark = pytest.mark.usefixtures("live")  # skips locally, fails in CI, when BPF cannot run

MIB = 1 << 20


def _need_prometheus() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed (scripts/bootstrap.sh --test installs the Debian package)")
        pytest.skip("prometheus is not installed (scripts/bootstrap.sh --test installs it)")
    return exe


class Prometheus:
    """A real Prometheus server with its own configuration and storage, on a free port."""

    def __init__(self, scrape_configs: str, tmp: Path) -> None:
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                       "scrape_configs:\n" + scrape_configs)
        self.proc = subprocess.Popen([_need_prometheus(), f"--config.file={cfg}",
                                      f"--web.listen-address=127.0.0.1:{self.port}",
                                      f"--storage.tsdb.path={tmp / 'data'}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def query(self, q: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            body = json.loads(urllib.request.urlopen(url, timeout=10).read())
        except urllib.error.HTTPError as e:  # a query Prometheus refuses: its own error
            raise AssertionError(f"{q}: {e.read().decode()[:300]}") from None
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value(self, q: str) -> float | None:
        r = self.query(q)
        return float(r[0]["value"][1]) if r else None

    def wait_up(self, job: str, want: float = 1.0, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        up = None
        while up != want and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                up = self.value(f'up{{job="{job}"}}')
            except OSError:
                continue
        assert up == want, f"up{{job={job!r}}} is {up}, not {want}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@contextmanager
def prometheus(scrape_configs: str) -> Iterator[Prometheus]:
    tmp = Path(tempfile.mkdtemp(prefix="ioscope-prom-"))
    p = Prometheus(scrape_configs, tmp)
    try:
        yield p
    finally:
        p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def job(name: str, port: int, extra: str = "") -> str:
    return f"  - job_name: {name}\n{extra}    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"


def test_prometheus_sees_every_completion_and_stable_series() -> None:
    with LoopDevice(256) as loop:
        loop.set_queue("nomerges", "2")  # one fio I/O, one request
        settle_udev()
        eport = free_port()
        exporter = start(eport, "-d", loop.name, "--per-process", "3", "--per-cgroup", "2")
        other = threading.Event()
        try:
            with prometheus(job("ioscope", eport)) as prom:
                dev = f'device="{loop.name}"'
                counted = (f'sum(ioscope_io_latency_seconds_count{{phase="d2c",{dev}}} or vector(0))'
                           f' + sum(ioscope_disk_completions_unseen_total{{{dev}}})')
                kernel = f"sum(ioscope_disk_ios_total{{{dev}}})"
                prom.wait_up("ioscope")
                time.sleep(1.5)  # one more scrape: the bases below are what the server holds before the workload
                base_counted, base_kernel = prom.value(counted), prom.value(kernel)
                assert base_counted is not None and base_kernel is not None
                started = time.time()

                def second_scraper() -> None:  # another reader of the same exporter, as a second server would be
                    while not other.is_set():
                        scrape(eport)
                        time.sleep(0.2)

                t = threading.Thread(target=second_scraper)
                t.start()
                run_fio(loop.path, rw="randrw", iodepth=32, number_ios=NIOS, size="200m",
                        extra=["--rate_iops=3000"])
                other.set()
                t.join()
                deadline = time.monotonic() + 60
                got_c, got_k = base_counted, base_kernel
                while (got_c - base_counted, got_k - base_kernel) != (NIOS, NIOS) and time.monotonic() < deadline:
                    time.sleep(0.5)
                    got_c, got_k = prom.value(counted) or 0.0, prom.value(kernel) or 0.0
                assert (got_c - base_counted, got_k - base_kernel) == (NIOS, NIOS)
                unseen = prom.value(f"sum(ioscope_disk_completions_unseen_total{{{dev}}})")
                assert unseen is not None and unseen <= unreported_bound(NIOS)
                assert prom.value(f'ioscope_lost_events_total{{reason="completion_unseen",{dev}}}') == unseen
                window = f"[{int(time.time() - started) + 5}s]"
                for name in ("ioscope_io_latency_seconds_count", "ioscope_io_latency_seconds_bucket",
                             "ioscope_process_bytes_total", "ioscope_cgroup_bytes_total", "ioscope_disk_ios_total"):
                    assert prom.value(f"max(resets({name}{window}))") == 0, name
                # every process and cgroup series, once exported, was in every later scrape the server made
                ups = [float(t) for t, _ in prom.query(f'up{{job="ioscope"}}{window}')[0]["values"]]
                named = prom.query(f'{{__name__=~"ioscope_(process|cgroup)_(bytes|ios)_total"}}{window}')
                assert {str(r["metric"].get("comm")) for r in named} >= {"fio", "(other processes)"}
                for r in named:
                    ts = [float(t) for t, _ in r["values"]]
                    assert ts == [u for u in ups if u >= ts[0]], r["metric"]
                p99 = prom.value('histogram_quantile(0.99, sum by (le) (ioscope_io_latency_seconds_bucket'
                                 f'{{phase="q2c",{dev}}}))')
                assert p99 is not None and 0 < p99 < 10  # a 4 KiB I/O on a tmpfs loop device: well under 10 s
        finally:
            other.set()
            assert stop(exporter) == 0


# ---- a host with churn ----

GROUPS = 20
HEAVY = ("g00", "g01", "g02")
FIO_RATE = 4 * MIB


def churn_cgroups(names: list[str]) -> TestCgroups:
    """Cgroups made for a test in the hierarchy the io controller is on (v1 blkio here, v2 elsewhere)."""
    io = io_cgroup_root()
    assert io is not None, "no cgroup hierarchy with the io (blkio) controller"
    return TestCgroups(io[0], "ioscope-churn", names)


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: an identifier followed by { or [ (the dashboards
    write every selector with braces), and label_values(NAME, ...)."""
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", expr))
    names |= set(re.findall(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", expr))
    return {n for n in names if n not in ("by", "without", "on", "ignoring")}


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable of contrib/grafana/*.json."""
    out = []
    for f in sorted((ROOT / "contrib" / "grafana").glob("*.json")):
        d = json.loads(f.read_text())
        for p in d["panels"]:
            for t in p.get("targets", []):
                out.append((f"{f.name}: {p['title']}", t["expr"]))
        for v in d["templating"]["list"]:
            if v.get("type") == "query":
                out.append((f"{f.name}: ${v['name']}", v["query"]["query"]))
    return out


def test_dashboards_are_grafana_json_with_queries() -> None:
    qs = dashboard_queries()
    assert len(qs) >= 20
    for where, q in qs:
        assert _metric_names(q), (where, q)
    titles = {w.split(": ", 1)[1] for w, _ in qs}
    assert any("heat map" in t for t in titles) and any("cgroup" in t.lower() for t in titles)


def _substitute(q: str, device: str) -> str:
    """A dashboard query as Grafana would send it, its variables given."""
    if q.startswith("label_values("):  # a variable's query: Grafana asks for the series
        m = re.match(r"label_values\((.*),\s*\w+\)$", q)
        assert m, q
        q = m.group(1)
    for var, v in (("$__rate_interval", "10s"), ("$datasource", ""), ("$job", ".*"), ("$instance", ".*"),
                   ("$device", device), ("$phase", "q2c"), ("$cgroup", ".*")):
        q = q.replace(var, v)
    return q


def test_churn_the_heaviest_get_series_and_topk_answers_them() -> None:
    """The issue's case, shortened to a minute: 20 cgroups, 300+ short-lived dd processes (three groups
    write 32 times more than the others), fio at 4 MiB/s in a cgroup of its own; --per-process 5
    --per-cgroup 5 --series-window 10."""
    with LoopDevice(512) as loop:
        settle_udev()
        groups = [f"g{i:02d}" for i in range(GROUPS)]
        cg = churn_cgroups([*groups, "fio"])
        eport = free_port()
        exporter = start(eport, "-d", loop.name, "--per-process", "5", "--per-cgroup", "5", "--series-window", "10")
        spawned: dict[str, int] = {}
        stop_spawning = threading.Event()

        def spawner() -> None:  # short-lived processes, one after another across the groups
            i = 0
            while not stop_spawning.is_set():
                g = groups[i % GROUPS]
                count, bs = (4, "64k") if g in HEAVY else (2, "4k")
                subprocess.run(cg.shell(g, f"dd if=/dev/zero of={loop.path} bs={bs} count={count} oflag=direct "
                                           f"seek={(i * 4) % 1000} status=none"), check=True)
                spawned[g] = spawned.get(g, 0) + 1
                i += 1
                time.sleep(0.12)

        fio = None
        spawn = threading.Thread(target=spawner)
        try:
            with prometheus(job("ioscope", eport)) as prom:
                prom.wait_up("ioscope")
                fio = subprocess.Popen(cg.shell("fio", f"fio --name=steady --filename={loop.path} --rw=write "
                                                       f"--bs=64k --direct=1 --ioengine=psync --rate={FIO_RATE} "
                                                       "--time_based --runtime=55 --size=256m --output-format=json"),
                                       stdout=subprocess.PIPE, text=True)
                spawn.start()
                time.sleep(50)
                sel = f'device="{loop.name}"'
                # PromQL's topk answers fio (4 MiB/s) among the processes, at its rate
                top = prom.query("topk(1, rate(ioscope_process_bytes_total[20s]))")
                assert top[0]["metric"]["comm"] == "fio", top
                assert float(top[0]["value"][1]) == pytest.approx(FIO_RATE, rel=0.1)
                assert {r["metric"]["comm"] for r in prom.query("topk(2, rate(ioscope_process_bytes_total[20s]))")} \
                    == {"fio", "dd"}
                # ... and fio's cgroup then the three heavy groups among the cgroups
                tops = prom.query("topk(4, rate(ioscope_cgroup_bytes_total[20s]))")
                assert {r["metric"]["name"] for r in tops} == {"fio", *HEAVY}, tops
                fio_cg = f'cgroup="{cg.top}/fio"'
                assert prom.value(f"rate(ioscope_cgroup_bytes_total{{{fio_cg}}}[20s])") == pytest.approx(FIO_RATE,
                                                                                                      rel=0.1)
                # its latency histograms count fio's I/O: 64 KiB bios (q2c) and requests (d2c), 64 a second
                for phase in ("q2c", "d2c"):
                    n = prom.value(f'rate(ioscope_cgroup_io_latency_seconds_count{{{fio_cg},phase="{phase}"}}[20s])')
                    assert n == pytest.approx(FIO_RATE / 65536, rel=0.1), phase
                p99 = prom.value("histogram_quantile(0.99, rate(ioscope_cgroup_io_latency_seconds_bucket"
                                 f'{{{fio_cg},phase="q2c"}}[20s]))')
                assert p99 is not None and 1e-6 < p99 < 1
                # every byte is in a series or other: the disk's written bytes (/proc/diskstats)
                written = prom.value(f'rate(ioscope_disk_bytes_total{{{sel},operation="write"}}[20s])')
                for what in ("process", "cgroup"):
                    total = prom.value(f"sum(rate(ioscope_{what}_bytes_total[20s]))")
                    assert total == pytest.approx(written, rel=0.05), what
                # bounded: at most 2 x 5 named (frozen ones included) + other, at every scrape
                for what in ("process", "cgroup"):
                    most = prom.value(f"max_over_time(count(ioscope_{what}_bytes_total)[55s:1s])")
                    assert most is not None and most <= 11, (what, most)
                # fio's cgroup series, once there, never left a scrape (no flapping)
                seen = prom.query(f"ioscope_cgroup_bytes_total{{{fio_cg}}}[55s]")[0]["values"]
                ups = [float(t) for t, _ in prom.query('up{job="ioscope"}[55s]')[0]["values"]]
                first = float(seen[0][0])
                assert [float(t) for t, _ in seen] == [u for u in ups if u >= first]
                # the churn ran: 300 to 400 processes on a quiet host, 258 beside two emulated guests and the
                # hogs (the claims need many more than the 5 places)
                assert sum(spawned.values()) >= 150, spawned
                # the labels: this host's hierarchy, the path, what it names
                info = prom.query("ioscope_cgroup_hierarchy_info")
                assert info and info[0]["metric"]["mountpoint"] == str(io_cgroup_root()[0])  # type: ignore[index]
                g0 = prom.query(f'ioscope_cgroup_bytes_total{{cgroup="{cg.top}/g00"}}')
                assert g0 and g0[0]["metric"]["kind"] == "cgroup" and g0[0]["metric"]["name"] == "g00"
                # the dashboards: every metric they query is in this scrape, every query runs
                have = {r["metric"]["__name__"] for r in prom.query('{__name__=~".+", job="ioscope"}')}
                for where, q in dashboard_queries():
                    for name in _metric_names(q):
                        assert name in have or f"{name}_bucket" in have, (where, name)
                    prom.query(_substitute(q, loop.name))  # raises on a query Prometheus refuses
                for q in ("sum by (le) (increase(ioscope_io_latency_seconds_bucket"
                          f'{{{sel}, phase="q2c"}}[10s]))',
                          "sum by (le) (increase(ioscope_cgroup_io_latency_seconds_bucket"
                          f'{{{fio_cg}, phase="q2c"}}[10s]))'):  # the heat maps have data
                    assert prom.query(q), q
        finally:
            stop_spawning.set()
            if spawn.is_alive():
                spawn.join()
            if fio is not None:
                fio.kill()
                fio.wait()
            assert stop(exporter) == 0
            cg.remove()


# ---- hostile clients ----

SCRAPE_S = 2   # the storm test's scrape interval and timeout (its docstring says why)


def test_up_never_zero_under_a_scraper_storm_and_an_idle_flood() -> None:
    """The issue: 50 concurrent scrapers for 30 s made Prometheus record 15 consecutive up=0, and 974
    idle sockets made every scrape fail. Both at once, for 30 s, the exporter as the unit runs it
    (defaults: --web.max-requests 40, --web.max-connections 512), Prometheus scraping every 2 s with a
    2 s timeout (Prometheus's default is 10 s): every scrape succeeds.

    Why 2 s and not 1: the storm keeps the exporter busy answering, so a scrape's time is the ~40 answers
    ahead of it over the CPU the exporter gets. Its slowest scrape, measured: 0.42 and 0.52 s beside four
    busy loops (scripts/hog.sh -c 4), 1.03 s in a CI-like run (two emulated guests, a busy loop and fio
    beside), 1.01 s with 14 of 33 scrapes timed out beside eight busy loops; never 2 s."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))  # this test's own 1,000 sockets
    with LoopDevice(128) as loop:
        settle_udev()
        eport = free_port()
        exporter = start(eport, "-d", loop.name, "--per-process", "50", "--per-cgroup", "20")
        stop_flood = threading.Event()
        held: list[socket.socket] = []

        def flood() -> None:  # 1,000 connections that say nothing, opened again as the server closes them
            while not stop_flood.is_set():
                while len(held) < 1000 and not stop_flood.is_set():
                    try:
                        held.append(socket.create_connection(("127.0.0.1", eport), timeout=5))
                    except OSError:
                        time.sleep(0.01)
                for s in list(held):
                    s.setblocking(False)
                    try:
                        if s.recv(1) == b"":
                            held.remove(s)
                            s.close()
                    except BlockingIOError:
                        pass
                    except OSError:
                        held.remove(s)
                        s.close()
                time.sleep(0.05)

        fl = threading.Thread(target=flood)
        try:
            every = f"    scrape_interval: {SCRAPE_S}s\n    scrape_timeout: {SCRAPE_S}s\n"
            with prometheus(job("ioscope", eport, every)) as prom:
                prom.wait_up("ioscope")
                start_t = time.time()
                fl.start()
                fio = subprocess.Popen(["fio", "--name=bg", f"--filename={loop.path}", "--rw=randread", "--bs=4k",
                                        "--direct=1", "--rate_iops=500", "--time_based", "--runtime=32",
                                        "--size=64m"], stdout=subprocess.DEVNULL)
                answers = storm(eport, 30.0)
                fio.wait()
                stop_flood.set()
                fl.join()
                time.sleep(2)
                span = f"[{int(time.time() - start_t)}s]"
                why = {"503s": prom.value('promhttp_metric_handler_requests_total{code="503"}'),
                       "200s": prom.value('promhttp_metric_handler_requests_total{code="200"}'),
                       "up": prom.value(f'sum_over_time(up{{job="ioscope"}}{span})'),
                       "slowest": prom.value(f"max_over_time(scrape_duration_seconds{span})")}
                assert prom.value(f'min_over_time(up{{job="ioscope"}}{span})') == 1, why
                assert (prom.value(f'count_over_time(up{{job="ioscope"}}{span})') or 0) >= 30 / SCRAPE_S - 1
                assert (prom.value(f"max_over_time(scrape_duration_seconds{span})") or SCRAPE_S) < SCRAPE_S
                assert (prom.value(f'max_over_time(ioscope_http_connections{span})') or 1e9) <= 512
                assert (prom.value('ioscope_http_connections_closed_total{reason="evicted"}') or 0) > 0
                # a flood of connects is accepted whole before the oldest idle ones are closed (peaks of
                # ~960 descriptors seen with 512 connections kept): the exporter raised its soft limit to
                # the hard one (the unit's 1,024 would not leave room); bounded by the connections kept, the
                # flood's 1,000 accepted at once, and the exporter's own (BPF objects, listener, pool)
                assert prom.value("process_max_fds") == resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                assert (prom.value(f"max_over_time(process_open_fds{span})") or 1e9) < 512 + 1000 + 128
                # the storm kept going (50 scrapers, each answered ten times or more: 828 to over 1,000 answers
                # in 30 s on this 2-CPU host, Prometheus, fio and the flood sharing it) and was answered
                assert len(answers) >= 50 * 10 and sum(code == 200 for _, code in answers) > 0.95 * len(answers)
        finally:
            stop_flood.set()
            if fl.is_alive():
                fl.join()
            for s in held:
                s.close()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert stop(exporter) == 0


# ---- TLS and basic auth, Prometheus as the client ----

def test_prometheus_scrapes_over_tls_with_a_client_certificate_and_a_password(tmp_path: Path) -> None:
    make_pki(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                   f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
                   f"basic_auth_users:\n  prometheus: '{HASH}'\n")
    web.chmod(0o600)
    with LoopDevice(64) as loop:
        eport = free_port()
        exporter = start(eport, "-d", loop.name, "--web.config.file", str(web))
        tls = (f"    scheme: https\n    tls_config:\n      ca_file: {tmp_path}/ca.crt\n"
               f"      server_name: localhost\n")
        cert = f"      cert_file: {tmp_path}/client.crt\n      key_file: {tmp_path}/client.key\n"
        configs = (job("good", eport, tls + cert + "    basic_auth:\n      username: prometheus\n"
                                                      "      password: s3cret\n")
                   + job("wrong_password", eport, tls + cert + "    basic_auth:\n      username: prometheus\n"
                                                                "      password: nope\n")
                   + job("no_certificate", eport, tls + "    basic_auth:\n      username: prometheus\n"
                                                         "      password: s3cret\n")
                   + job("plain_http", eport))
        try:
            with prometheus(configs) as prom:
                prom.wait_up("good")
                for bad in ("wrong_password", "no_certificate", "plain_http"):
                    prom.wait_up(bad, want=0.0)
                assert prom.value('ioscope_build_info{job="good"}') == 1
                assert prom.query('ioscope_build_info{job!="good"}') == []
        finally:
            assert stop(exporter) == 0
