"""Acceptance: ioscope exporter as an operator runs it.

1. Started in the background by a shell script with `--listen localhost:PORT` (as node_exporter takes
   it), its landing page opened, scraped over HTTP (urllib), a known workload (a prime number of direct
   4 KiB writes by dd), then `kill -TERM $!`: exit 0 within 2 s, nothing left loaded, the numbers right.
2. Exposed to a fleet: certificates made with openssl and a password hashed with htpasswd, as
   docs/exporter.md shows, a web configuration file, `--web.config.file --web.telemetry-path`; curl
   with the client certificate and the password gets the metrics, HEAD answers without a body and
   without a Server header, no password is 401, and `kill -HUP` stops it with status 129 (a service
   manager's Restart=on-failure starts it again)."""

from __future__ import annotations

import shlex
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


def _in_background(args: str, tmp: Path) -> subprocess.Popen[bytes]:
    """A shell script that starts `ioscope ARGS &` as an operator's would: its pid in tmp/pid, its output in
    tmp/out and tmp/err, its exit status in tmp/rc when it ends."""
    script = tmp / "run.sh"
    q = shlex.quote  # the interpreter's path may hold a space (a clone in "/tmp/io scope")
    script.write_text(f"#!/bin/sh\n{q(sys.executable)} -m ioscope.cli {args} > {q(f'{tmp}/out')} "
                      f"2> {q(f'{tmp}/err')} &\necho $! > {q(f'{tmp}/pid')}\nwait $!\necho $? > {q(f'{tmp}/rc')}\n")
    script.chmod(0o755)
    return subprocess.Popen([str(script)])


def test_exporter_background_scrape_and_term(live: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with LoopDevice(64) as loop, tempfile.TemporaryDirectory() as tmp:
        sh = _in_background(f"exporter -d {loop.name} --listen localhost:{port} --per-process 2", Path(tmp))
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
        key = f"ioscope_disk_ios_total{{device={loop.name},operation=write}}"
        assert m1[key] - m0.get(key, 0) == ds1.writes - ds0.writes == WRITES
        hkey = f"ioscope_io_latency_seconds_count{{device={loop.name},operation=write,phase=d2c}}"
        ukey = f"ioscope_disk_completions_unseen_total{{device={loop.name}}}"
        assert (m1[hkey] - m0.get(hkey, 0)) + (m1[ukey] - m0[ukey]) == WRITES
        procs = {k: v - m0.get(k, 0) for k, v in m1.items() if k.startswith("ioscope_process_bytes_total{")}
        assert sum(procs.values()) == WRITES * 4096 and "ioscope_process_bytes_total{comm=dd}" in procs
        t = time.monotonic()
        subprocess.run(["sh", "-c", f"kill -TERM {pid}"], check=True)
        while not Path(tmp, "rc").exists() and time.monotonic() - t < 10 * EMULATION_FACTOR:
            time.sleep(0.02)
        assert time.monotonic() - t < 2.0 * EMULATION_FACTOR
        sh.wait(timeout=10)
        assert Path(tmp, "rc").read_text().strip() == "0"
        assert not programs_left(progs)
        assert Path(tmp, "err").read_text() == ""


def _sh(cmd: str, cwd: Path) -> str:
    return subprocess.run(["sh", "-c", cmd], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_exporter_with_tls_and_basic_auth_as_an_operator_sets_it_up(live: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with LoopDevice(64) as loop, tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        # the commands of docs/exporter.md, 'TLS and basic auth'
        _sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj '/CN=ioscope ca' "
            "-keyout ca.key -out ca.crt", d)
        for name, san in (("server", "DNS:localhost,IP:127.0.0.1"), ("prometheus", "DNS:prometheus")):
            (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
            _sh(f"openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN={name}' "
                f"-keyout {name}.key -out {name}.csr && openssl x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key "
                f"-CAcreateserial -days 30 -extfile {name}.ext -out {name}.crt", d)
        hashed = _sh("htpasswd -nbBC 10 '' 'correct horse' | tr -d ':\\n'", d)
        web = d / "web.yml"
        web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                       "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
                       f"basic_auth_users:\n  prometheus: {hashed}\n")
        web.chmod(0o600)
        sh = _in_background(f"exporter -d {loop.name} --listen localhost:{port} --web.config.file {web} "
                            "--web.telemetry-path /ioscope/metrics", d)
        deadline = time.monotonic() + 180
        out = d / "out"
        while not (out.exists() and "serving" in out.read_text()) and not (d / "rc").exists() \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"serving https://localhost:{port}/ioscope/metrics" in out.read_text(), (d / "err").read_text()
        pid = int((d / "pid").read_text())
        url = f"https://localhost:{port}/ioscope/metrics"
        curl = "curl -s --cacert ca.crt --cert prometheus.crt --key prometheus.key"
        subprocess.run(["dd", "if=/dev/zero", f"of={loop.path}", "bs=4k", f"count={WRITES}", "oflag=direct"],
                       check=True, capture_output=True)
        time.sleep(0.3)
        text = _sh(f"{curl} -u 'prometheus:correct horse' {url}", d)
        m = {}
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                m[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
        d2c = sum(v for (n, ls), v in m.items() if n == "ioscope_io_latency_seconds_count"
                  and dict(ls).get("phase") == "d2c" and dict(ls).get("operation") == "write")
        assert d2c + m[("ioscope_disk_completions_unseen_total", (("device", loop.name),))] >= WRITES
        assert m[("process_open_fds", ())] > 0  # the exporter's own process metrics
        head = _sh(f"{curl} -I -u 'prometheus:correct horse' {url}", d)
        assert head.startswith("HTTP/1.1 200 OK") and "server:" not in head.lower(), head
        assert _sh(f"{curl} -o /dev/null -w '%{{http_code}}' {url}", d) == "401"
        assert _sh(f"{curl} -o /dev/null -w '%{{http_code}}' -u 'prometheus:wrong' {url}", d) == "401"
        r = subprocess.run(["sh", "-c", f"curl -s --cacert ca.crt -u 'prometheus:correct horse' {url}"], cwd=d,
                           capture_output=True)
        assert r.returncode != 0  # no client certificate: the handshake is refused
        subprocess.run(["sh", "-c", f"kill -HUP {pid}"], check=True)
        t = time.monotonic()
        while not (d / "rc").exists() and time.monotonic() - t < 10 * EMULATION_FACTOR:
            time.sleep(0.02)
        sh.wait(timeout=10)
        assert (d / "rc").read_text().strip() == "129"
