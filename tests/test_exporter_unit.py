"""contrib/ioscope-exporter.service: hardened as distributions ship exporters, and the exporter really
starts and serves under it.

systemd cannot run units on these VMs (PID 1 is not systemd), so: systemd-analyze scores and verifies
the file offline, and tests/unit_sandbox.py applies what decides whether the exporter can run (the
dynamic user, the capability sets, no_new_privs, read-only file systems, private /tmp and /dev,
MemoryDenyWriteExecute, the system call filter and address families, the umask) and runs the unit's
ExecStart: it loads its programs, serves histograms that count a known workload, stops on SIGTERM
(0) and SIGHUP (129: Restart=on-failure starts it again). Without any one of its three
capabilities it does not start, with a one-line error: none is more than it needs.

The unit run is the one install.sh installs (`install.sh --exporter-unit`: contrib's, with the directories
the install runs from bound read-only), for this checkout and for the same install made again at other
places: under /tmp (hidden by PrivateTmp), in a path with a space, under a home directory others cannot
enter, under /root and under /opt."""

from __future__ import annotations

import importlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import unit_sandbox
from conftest import ROOT
from ioscope.base.testbed import LoopDevice
from test_exporter_live import dd, free_port, pick, scrape, settle_udev

UNIT = ROOT / "contrib" / "ioscope-exporter.service"
# the dependencies' directory, this venv's site-packages (its real path: in a checkout under /tmp too)
DEPS = Path(importlib.import_module("prometheus_client").__file__ or "").resolve().parents[1]
EXPOSURE_BEFORE = 9.6  # the unit before this version (systemd-analyze security --offline=yes)


def exposure(unit: Path) -> float:
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", out)
    assert m, out[-500:]
    return float(m.group(1))


def generated_unit(checkout: Path, out_dir: Path) -> Path:
    """The unit install.sh installs for the install at checkout (`install.sh --exporter-unit`), in out_dir."""
    text = subprocess.run(["bash", str(checkout / "install.sh"), "--exporter-unit"], capture_output=True, text=True,
                          check=True).stdout
    out_dir.mkdir(parents=True, exist_ok=True)
    unit = out_dir / UNIT.name
    unit.write_text(text)
    return unit


def relocated_install(where: Path) -> Path:
    """This checkout installed again at `where`, as install.sh leaves an install, but for the build (which
    takes minutes): lib/ with its built extensions and BPF objects, install.sh and contrib/ copied; a venv
    made there by the base interpreter (its python links to it); the editable install's .pth naming
    where/lib, and the console script written by pip's own script maker (distlib, as pip calls it: a path
    with a space gets its /bin/sh shebang). The dependencies are this venv's (DEPS, 1.6 GB: not copied),
    through a link under the venv, where they would lie; the unit gets them bound (_with_deps). Nothing
    else in it names this checkout, so it runs only if `where` is reachable."""
    distlib: Any = importlib.import_module("pip._vendor.distlib.scripts")  # untyped: Any

    where.mkdir(parents=True)
    shutil.copytree(ROOT / "lib", where / "lib", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "install.sh", where)
    (where / "contrib").mkdir()
    shutil.copy2(UNIT, where / "contrib")
    venv = where / ".venv"
    subprocess.run([str(Path(sys.base_prefix) / "bin" / "python3"), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    pure = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (pure / "__editable__.ioscope-0.1.0.pth").write_text(f"{where / 'lib'}\n")
    (venv / "deps").symlink_to(DEPS)
    (pure / "zz-ioscope-deps.pth").write_text(f"{venv / 'deps'}\n")
    maker = distlib.ScriptMaker(None, str(venv / "bin"))
    maker.executable = distlib.enquote_executable(str(venv / "bin" / "python"))
    maker.variants = {""}
    maker.make("ioscope = ioscope.cli:main")
    return venv / "bin" / "ioscope"


def test_the_unit_is_hardened_and_valid(tmp_path: Path) -> None:
    """contrib's unit and the one install.sh makes of it, for this checkout and for one in a path with a space
    (quoted), score alike and verify clean."""
    spaced = relocated_install(tmp_path / "a clone")
    for unit, ioscope in ((UNIT, Path(sys.executable).parent / "ioscope"),
                          (generated_unit(ROOT, tmp_path / "here"), Path(sys.executable).parent / "ioscope"),
                          (generated_unit(spaced.parents[2], tmp_path / "spaced"), spaced)):
        score = exposure(unit)
        assert score < 2.5, f"{unit}: exposure {score} (was {EXPOSURE_BEFORE} UNSAFE)"
        copy = tmp_path / "verify" / UNIT.name  # verify needs the ExecStart binary: the install's
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(unit.read_text().replace("/usr/local/bin/ioscope", shlex.quote(str(ioscope))))
        r = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), (unit, r.stderr)
    binds = unit_sandbox.bind_paths(unit_sandbox.service(generated_unit(spaced.parents[2], tmp_path / "spaced")))
    assert (str(spaced.parents[2]), str(spaced.parents[2])) in binds, binds


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
    assert "/usr/local/lib/systemd/system/ioscope-exporter.service <<<\"$unit\"" in install


def _exec_argv(unit: Path, ioscope: Path, listen: str, disk: str) -> list[str]:
    """The unit's ExecStart, /usr/local/bin/ioscope being what install.sh links it to (the install's
    .venv/bin/ioscope), on a test port and disk."""
    m = re.search(r"^ExecStart=(.+)$", unit.read_text(), re.M)
    assert m
    argv = shlex.split(m.group(1))
    assert argv[:2] == ["/usr/local/bin/ioscope", "exporter"]
    argv[0] = str(ioscope)
    argv[argv.index("--listen") + 1] = listen
    return [*argv, "-d", disk]


def _start(unit: Path, port: int, disk: str, ioscope: Path | None = None) -> subprocess.Popen[str]:
    ioscope = ioscope or Path(sys.executable).parent / "ioscope"
    cmd = unit_sandbox.command(unit, _exec_argv(unit, ioscope, f"127.0.0.1:{port}", disk),
                               python=str(ioscope.parent / "python"))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")


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


def _counts_writes(port: int, loop: LoopDevice, n: int) -> tuple[Any, Any]:
    """n direct 4 KiB writes to loop between two scrapes: each one a d2c of the disk's histogram (or a
    completion the exporter reports unseen); returns the two scrapes."""
    before = scrape(port)
    dd(loop.path, "write", n)
    time.sleep(1.5)
    m = scrape(port)
    d2c = "ioscope_io_latency_seconds_count"
    assert pick(m, d2c, device=loop.name, phase="d2c") - pick(before, d2c, device=loop.name, phase="d2c") \
        + pick(m, "ioscope_disk_completions_unseen_total", device=loop.name) == n
    return before, m


@pytest.mark.usefixtures("live")
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 0), (signal.SIGHUP, 129)])
def test_the_exporter_starts_and_serves_as_the_unit_runs_it(sig: int, status: int, tmp_path: Path) -> None:
    unit = generated_unit(ROOT, tmp_path)  # this checkout's, wherever it is (a clone under /tmp too)
    with LoopDevice(64) as loop:
        settle_udev()
        port = free_port()
        p = _start(unit, port, loop.name)
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
            before, m = _counts_writes(port, loop, 23)
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
    text = generated_unit(ROOT, tmp_path / "generated").read_text()
    unit = tmp_path / UNIT.name
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


def _with_deps(unit: Path) -> Path:
    """A relocated install's unit, with the dependencies it links to (DEPS) bound too, as their real place
    (a venv's site-packages, inside the install) would be: a line of the test's, after install.sh's."""
    text = unit.read_text()
    unit.write_text(text.replace("\n[Install]", f'\nBindReadOnlyPaths="{DEPS}"\n\n[Install]', 1))
    return unit


@pytest.fixture
def elsewhere(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A place to install at: under this test's /tmp directory, or a new directory (removed after) under
    /home (a home directory of mode 0700, as useradd makes them), /root or /opt."""
    place = str(request.param)
    if place.startswith("/tmp/"):
        yield tmp_path / place.removeprefix("/tmp/")
        return
    Path(place).mkdir(exist_ok=True)  # /home may be absent on a minimal system
    top = Path(tempfile.mkdtemp(prefix="ioscope-unit-test-", dir=place))  # mode 0700
    try:
        yield top / "ioscope"
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.usefixtures("live")
@pytest.mark.parametrize("elsewhere", ["/tmp/ioscope", "/tmp/ioscope clone", "/home", "/root", "/opt"],
                         indirect=True)
def test_the_unit_starts_wherever_it_was_installed_from(elsewhere: Path, tmp_path: Path) -> None:
    """The same install at another place, its unit as install.sh makes it: it starts there, as the dynamic
    user, runs the install's code (its extension mapped from there), counts a known workload and stops
    with 0. Under /tmp (PrivateTmp) contrib's unit alone cannot even execute the install's python."""
    ioscope = relocated_install(elsewhere)
    unit = _with_deps(generated_unit(elsewhere, tmp_path / "unit"))
    with LoopDevice(64) as loop:
        settle_udev()
        port = free_port()
        p = _start(unit, port, loop.name, ioscope)
        try:
            err = _wait_serving(p)
            assert not err, err
            pid = _child(p)
            assert f"{elsewhere}/lib/ioscope/kernel/_libbpf" in Path(f"/proc/{pid}/maps").read_text()
            assert Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0] == str(unit_sandbox.UID)
            _counts_writes(port, loop, 19)
            os.kill(pid, signal.SIGTERM)
            assert p.wait(timeout=20) == 0
            assert p.stderr is not None and not p.stderr.read().strip()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
