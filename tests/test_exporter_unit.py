"""contrib/ioscope-exporter.service: hardened as distributions ship exporters, and the exporter really
starts and serves under it.

systemd cannot run units on these VMs (PID 1 is not systemd), so: systemd-analyze scores and verifies
the file offline, and tests/unit_sandbox.py applies what decides whether the exporter can run (the
dynamic user, the capability sets, no_new_privs, read-only file systems, private /tmp and /dev,
MemoryDenyWriteExecute, the system call filter and address families, the umask) and runs the unit's
ExecStart: it loads its programs, serves histograms that count a known workload, stops on SIGTERM
(0) and SIGHUP (129: Restart=on-failure starts it again). Without any one of its three
capabilities it does not start, with a one-line error: none is more than it needs."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import unit_sandbox
from conftest import ROOT
from ioscope.base.testbed import LoopDevice
from test_exporter_live import dd, free_port, pick, scrape, settle_udev

UNIT = ROOT / "contrib" / "ioscope-exporter.service"
EXPOSURE_BEFORE = 9.6  # the unit before this version (systemd-analyze security --offline=yes)


def exposure(unit: Path) -> float:
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", out)
    assert m, out[-500:]
    return float(m.group(1))


def test_the_unit_is_hardened_and_valid(tmp_path: Path) -> None:
    score = exposure(UNIT)
    assert score < 2.5, f"exposure {score} (was {EXPOSURE_BEFORE} UNSAFE)"
    copy = tmp_path / UNIT.name  # verify needs the ExecStart binary: this checkout's
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/ioscope", str(Path(sys.executable).parent / "ioscope")))
    r = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_documentation_points_to_the_page_install_sh_installs() -> None:
    text = UNIT.read_text()
    docs = re.findall(r"^Documentation=(.+)$", text, re.M)
    assert docs == ["file:///usr/local/share/doc/ioscope/exporter.md"]
    install = (ROOT / "install.sh").read_text()
    assert "install -D -m 0644 -t /usr/local/share/doc/ioscope docs/*.md" in install
    assert (ROOT / "docs" / "exporter.md").is_file()
    exec_start = re.search(r"^ExecStart=(\S+)", text, re.M)
    assert exec_start and exec_start.group(1) == "/usr/local/bin/ioscope"
    assert "for exe in .venv/bin/ioscope " in install and '"/usr/local/bin/$(basename "$exe")"' in install


def _exec_argv(unit: Path, listen: str, disk: str) -> list[str]:
    """The unit's ExecStart, run from this checkout, on a test port and disk."""
    m = re.search(r"^ExecStart=(.+)$", unit.read_text(), re.M)
    assert m
    argv = shlex.split(m.group(1))
    assert argv[:2] == ["/usr/local/bin/ioscope", "exporter"]
    argv = [sys.executable, "-m", "ioscope.cli", *argv[1:]]
    argv[argv.index("--listen") + 1] = listen
    return [*argv, "-d", disk]


def _start(unit: Path, port: int, disk: str) -> subprocess.Popen[str]:
    cmd = unit_sandbox.command(unit, _exec_argv(unit, f"127.0.0.1:{port}", disk))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    return p


def _wait_serving(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    line = p.stdout.readline()
    if "serving" not in line:
        p.wait(timeout=60)
        assert p.stderr is not None
        return p.stderr.read()
    return ""


def _child(p: subprocess.Popen[str]) -> int:
    """The exporter's pid (unshare forks, sh and setpriv exec): the deepest process below p."""
    pid = p.pid
    for _ in range(5):
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if not kids:
            return pid
        pid = int(kids[0])
    return pid


@pytest.mark.usefixtures("live")
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 0), (signal.SIGHUP, 129)])
def test_the_exporter_starts_and_serves_as_the_unit_runs_it(sig: int, status: int) -> None:
    with LoopDevice(64) as loop:
        settle_udev()
        port = free_port()
        p = _start(UNIT, port, loop.name)
        try:
            err = _wait_serving(p)
            assert not err, err
            pid = _child(p)
            st = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
            assert st["Uid"].split()[0] == str(unit_sandbox.UID)  # not root
            caps = int(st["CapEff"], 16)
            assert caps == (1 << 39) | (1 << 38) | (1 << 2), hex(caps)  # CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH
            assert st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2"
            before = scrape(port)
            dd(loop.path, "write", 23)
            time.sleep(1.5)
            m = scrape(port)
            d2c = "ioscope_io_latency_seconds_count"
            assert pick(m, d2c, device=loop.name, phase="d2c") - pick(before, d2c, device=loop.name, phase="d2c") \
                + pick(m, "ioscope_disk_completions_unseen_total", device=loop.name) == 23
            assert pick(m, "ioscope_process_bytes_total") - pick(before, "ioscope_process_bytes_total") == 23 * 4096
            assert pick(m, "process_resident_memory_bytes") > 0
            # once, to the exporter (unshare, sh, setpriv and the sandbox exec it in turn: one process); a
            # second signal while it stops ends it by that signal (-15, -1: seen when the test sent two)
            os.kill(pid, sig)
            assert p.wait(timeout=20) == status
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.usefixtures("live")
# CAP_DAC_READ_SEARCH is not among them: the exporter itself loads and attaches without it (tp_btf needs no
# tracefs lookup), but an interpreter or checkout under a directory others cannot search (pyenv's under
# /root, as on this project's machines) cannot even be executed without it, so the unit keeps it
@pytest.mark.parametrize("cap", ["CAP_BPF", "CAP_PERFMON"])
def test_each_capability_is_needed(tmp_path: Path, cap: str) -> None:
    unit = tmp_path / UNIT.name
    text = UNIT.read_text()
    for key in ("AmbientCapabilities", "CapabilityBoundingSet"):
        text = re.sub(rf"^({key}=.*)\b{cap}\b ?", r"\1", text, flags=re.M)
    unit.write_text(text)
    with LoopDevice(64) as loop:
        p = _start(unit, free_port(), loop.name)
        try:
            err = _wait_serving(p)
            assert err, f"started without {cap}"
            assert p.returncode not in (0, None) and err.count("\n") == 1 and "Traceback" not in err, err
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
