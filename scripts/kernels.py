#!/usr/bin/env python3
"""The kernel matrix: Debian's own kernels, fetched, booted and tested.

ioscope must work on the kernels its users run, not only on the machine it
was built on. This script fetches the kernel packages of Debian 11, 12 and
13 from Debian's archive (the mirror this machine already uses), boots each
one in a virtual machine over this machine's root file system (virtme-ng,
QEMU under software emulation: KVM does not work here), and runs ioscope's
guest suite inside it (tests/kernels/guest.sh: the live tests of every
tool, with exact counts). The running kernel is the matrix's last column;
./test.sh tests it directly.

    scripts/kernels.py list                  the matrix and what is cached
    scripts/kernels.py fetch [NAME...]       download and unpack (idempotent)
    scripts/kernels.py run [NAME...] [--cgroup v1|v2|both] [-- PYTEST ARGS]
                                             boot each, run the guest suite,
                                             print the tool x kernel table;
                                             exit 1 if any test failed or a
                                             kernel did not finish. Each kernel
                                             boots twice: the io controller on
                                             v1 blkio (the suite), then on
                                             cgroup v2 ("NAME v2": the cgroup
                                             tests); with PYTEST ARGS once (v1)
                                             unless --cgroup says otherwise
    scripts/kernels.py exec NAME -- CMD      boot one and run CMD in it (a
                                             developer's loop; output on the
                                             terminal, exit code CMD's)

Kernels are chosen by Debian release (the release's own `linux-image-amd64`
metapackage at its newest version), never by a pinned ABI number that the
archive drops when a newer one arrives. The cache (IOSCOPE_KERNEL_CACHE,
default /var/lib/ioscope/kernels) keeps packages and unpacked trees.
Needs root (loop devices and BPF in the guest), qemu-system-x86, busybox-static
and virtme-ng: scripts/bootstrap.sh --test installs them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
# Outside the tree: virtme-ng names the modules' directory on the guest kernel's command line, where a
# path with a space (a clone in "/tmp/io scope") cannot be written; and a fresh clone (CI's) finds the
# kernels already fetched. Not under /var/cache: the guest sees the host's files, but /var/cache is a
# tmpfs there.
CACHE = Path(os.environ.get("IOSCOPE_KERNEL_CACHE", "/var/lib/ioscope/kernels"))
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
GUEST = ROOT / "tests" / "kernels" / "guest.sh"
# a skip whose reason says this: the kernel lacks what the test compares (not a failure, "n/a")
NOT_APPLICABLE = "n/a on this kernel:"


@dataclass(frozen=True)
class Kernel:
    name: str          # the matrix's column: 5.10, 6.1, 6.1-rt, 6.12
    release: str       # Debian release whose kernel it is
    suites: tuple[str, ...]  # archive suites that carry it (security updates included)
    meta: str          # the release's metapackage, whose newest version names the kernel
    headers: bool = False  # also its linux-headers (bcc compiles against them: tests/kernels/test_bcc.py)


MATRIX = (
    Kernel("5.10", "Debian 11 (bullseye)", ("bullseye", "bullseye-updates"), "linux-image-amd64"),
    Kernel("6.1", "Debian 12 (bookworm)", ("bookworm", "bookworm-updates", "bookworm-security"),
           "linux-image-amd64", headers=True),
    Kernel("6.1-rt", "Debian 12 (bookworm), PREEMPT_RT", ("bookworm", "bookworm-updates", "bookworm-security"),
           "linux-image-rt-amd64"),
    Kernel("6.12", "Debian 13 (trixie)", ("trixie", "trixie-updates", "trixie-security"), "linux-image-amd64"),
)
# Not in the default matrix (./test.sh and CI do not boot it): Debian's newest upstream series, for
# what only newer kernels have beside fentry (the readahead tracepoints: fentry is checked against them)
EXTRA = (
    Kernel("13-bpo", "Debian 13 backports (newest upstream series)", ("trixie-backports",), "linux-image-amd64"),
)
BY_NAME = {k.name: k for k in (*MATRIX, *EXTRA)}


def die(msg: str) -> NoReturn:
    print(f"kernels: {msg}", file=sys.stderr)
    sys.exit(1)


def mirror() -> str:
    """The Debian mirror this machine's apt already uses (deb822 or one-line sources)."""
    for src in [Path("/etc/apt/sources.list.d/debian.sources"), *Path("/etc/apt/sources.list.d").glob("*.sources")]:
        if src.is_file():
            m = re.search(r"^URIs:\s*(\S+)", src.read_text(), re.M)
            if m and "security" not in m.group(1):
                return m.group(1).rstrip("/")
    sl = Path("/etc/apt/sources.list")
    if sl.is_file():
        m = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+\s", sl.read_text(), re.M)
        if m:
            return m.group(1).rstrip("/")
    return "http://deb.debian.org/debian"


class Apt:
    """apt-get/apt-cache over the matrix's own sources list, state and cache (nothing installed)."""

    def __init__(self) -> None:
        self.dir = CACHE / "apt"
        (self.dir / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (self.dir / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        self.sources = self.dir / "sources.list"
        base = mirror()
        security = base.rsplit("/", 1)[0] + "/debian-security" if base.endswith("/debian") else base + "-security"
        lines = []
        for k in (*MATRIX, *EXTRA):
            for s in k.suites:
                uri = security if s.endswith("-security") else base
                lines.append(f"deb [signed-by={KEYRING}] {uri} {s} main")
        text = "\n".join(dict.fromkeys(lines)) + "\n"
        if not self.sources.is_file() or self.sources.read_text() != text:
            self.sources.write_text(text)
            (self.dir / "updated").unlink(missing_ok=True)  # new suites: their lists are not here yet
        self.opts = ["-o", f"Dir::Etc::sourcelist={self.sources}", "-o", "Dir::Etc::sourceparts=-",
                     "-o", f"Dir::State::Lists={self.dir / 'lists'}", "-o", f"Dir::Cache={self.dir}",
                     "-o", f"Dir::Cache::archives={self.dir / 'archives'}",
                     "-o", "APT::Sandbox::User=root", "-q"]

    def run(self, tool: str, *args: str) -> str:
        p = subprocess.run([tool, *self.opts, *args], capture_output=True, text=True)
        if p.returncode != 0:
            die(f"{tool} {' '.join(args)} failed: {p.stderr.strip().splitlines()[-1:] or p.returncode}")
        return p.stdout

    def update(self, max_age: float = 6 * 3600) -> None:
        stamp = self.dir / "updated"
        if stamp.exists() and time.time() - stamp.stat().st_mtime < max_age:
            return
        self.run("apt-get", "update")
        stamp.touch()

    def newest(self, k: Kernel) -> tuple[str, str]:
        """(version, ABI package name) of the release's kernel: its metapackage's newest version there."""
        best: str | None = None
        for line in self.run("apt-cache", "madison", k.meta).splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 3:
                continue
            ver, where = parts[1], parts[2]
            suite = where.split()[1].split("/")[0] if len(where.split()) > 1 else ""
            if suite not in k.suites:
                continue
            if best is None or subprocess.run(["dpkg", "--compare-versions", ver, "gt", best]).returncode == 0:
                best = ver
        if best is None:
            die(f"{k.meta} is not in {', '.join(k.suites)} on {mirror()}")
        deps = self.run("apt-cache", "depends", f"{k.meta}={best}")
        m = re.search(r"Depends:\s*(linux-image-\S+)", deps)
        if not m:
            die(f"{k.meta}={best} names no kernel package")
        return best, m.group(1)


def kernel_dir(name: str) -> Path:
    return CACHE / name


def installed(name: str) -> tuple[Path, str] | None:
    """(vmlinuz, uname -r) of an unpacked kernel, or None."""
    d = kernel_dir(name) / "root" / "boot"
    for vmlinuz in sorted(d.glob("vmlinuz-*")) if d.is_dir() else []:
        return vmlinuz, vmlinuz.name[len("vmlinuz-"):]
    # newer packaging: /usr/lib/modules/VERSION/vmlinuz
    for vmlinuz in sorted((kernel_dir(name) / "root" / "usr" / "lib" / "modules").glob("*/vmlinuz")):
        return vmlinuz, vmlinuz.parent.name
    return None


def fetch(names: list[str]) -> None:
    apt = Apt()
    apt.update()
    for name in names:
        k = BY_NAME[name]
        ver, pkg = apt.newest(k)
        d = kernel_dir(name)
        want = f"{pkg} {ver}"
        marker = d / "package"
        if marker.is_file() and marker.read_text().strip() == want and installed(name):
            if k.headers and not headers_dir(name):
                fetch_headers(apt, name, pkg, ver)
            continue
        # the -unsigned package is the same kernel without the secure-boot signature
        unsigned = pkg + "-unsigned"
        have = apt.run("apt-cache", "show", unsigned) if _exists(apt, unsigned) else ""
        target = unsigned if have else pkg
        print(f"kernels: {name}: fetching {target} {ver} ({k.release})", file=sys.stderr)
        dl = d / "deb"
        shutil.rmtree(d, ignore_errors=True)
        dl.mkdir(parents=True)
        # newer packaging splits the image into linux-binary-ABI and linux-base-ABI: take the parts of
        # the same ABI as well
        abi = pkg[len("linux-image-"):]
        deps = re.findall(r"Depends:\s*(\S+)", apt.run("apt-cache", "depends", f"{target}={ver}"))
        parts = [f"{target}={ver}", *sorted({m for m in deps if m.endswith(abi) and not m.startswith("<")})]
        subprocess.run(["apt-get", *apt.opts, "download", *parts], cwd=dl, check=True,
                       stdout=subprocess.DEVNULL)
        debs = list(dl.glob("*.deb"))
        root = d / "root"
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
            deb.unlink()
        # trixie ships modules under /usr/lib/modules; virtme-ng looks in /lib/modules
        usr_mods = root / "usr" / "lib" / "modules"
        if usr_mods.is_dir():
            (root / "lib" / "modules").mkdir(parents=True, exist_ok=True)
            for m in usr_mods.iterdir():
                link = root / "lib" / "modules" / m.name
                if not link.exists():
                    link.symlink_to(os.path.relpath(m, link.parent))
        if not installed(name):
            die(f"{target} {ver} has no /boot/vmlinuz-* nor /usr/lib/modules/*/vmlinuz")
        if k.headers:
            fetch_headers(apt, name, pkg, ver)
        marker.write_text(want + "\n")


def headers_dir(name: str) -> Path | None:
    """The kernel's headers as one tree (BCC_KERNEL_SOURCE for bcc in its guest), None if not fetched."""
    d = kernel_dir(name) / "root" / "usr" / "src" / "bcc-headers"
    return d if (d / "include" / "generated").is_dir() else None


def merge_headers(src: Path) -> None:
    """Debian splits a kernel's headers in two: linux-headers-ABI (generated files, a Makefile that
    includes the other by an absolute path) and linux-headers-...-common (the sources). bcc given
    one directory (BCC_KERNEL_SOURCE) needs both in it: src/bcc-headers, hard links to the common
    tree with the generated files over it."""
    out = src / "bcc-headers"
    shutil.rmtree(out, ignore_errors=True)
    common = next(d for d in src.glob("linux-headers-*-common"))
    flavour = next(d for d in src.glob("linux-headers-*") if d != common and not d.name.endswith("-common"))
    for tree, skip in ((common, ""), (flavour, "Makefile")):
        for path in tree.rglob("*"):
            rel = path.relative_to(tree)
            dest = out / rel
            if path.is_symlink():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.unlink(missing_ok=True)
                dest.symlink_to(os.readlink(path))
            elif path.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            elif str(rel) != skip:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.unlink(missing_ok=True)
                os.link(path, dest)


def fetch_headers(apt: Apt, name: str, pkg: str, ver: str) -> None:
    """linux-headers-ABI and the -common package it builds on, unpacked beside the kernel."""
    abi = pkg[len("linux-image-"):].removesuffix("-unsigned")
    headers = f"linux-headers-{abi}"
    deps = re.findall(r"Depends:\s*(\S+)", apt.run("apt-cache", "depends", f"{headers}={ver}"))
    parts = [f"{headers}={ver}", *sorted({m for m in deps if m.startswith("linux-headers-")})]
    print(f"kernels: {name}: fetching {', '.join(parts)} (for bcc)", file=sys.stderr)
    dl = kernel_dir(name) / "deb"
    dl.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", *apt.opts, "download", *parts], cwd=dl, check=True, stdout=subprocess.DEVNULL)
    for deb in list(dl.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(kernel_dir(name) / "root")], check=True)
        deb.unlink()
    merge_headers(kernel_dir(name) / "root" / "usr" / "src")
    if not headers_dir(name):
        die(f"{headers} {ver} has no /usr/src/linux-headers-*/include/generated")


def _exists(apt: Apt, pkg: str) -> bool:
    p = subprocess.run(["apt-cache", *apt.opts, "show", pkg], capture_output=True, text=True)
    return p.returncode == 0 and "Package:" in p.stdout


def vng() -> str:
    exe = shutil.which("vng") or str(Path(sys.executable).parent / "vng")
    if not Path(exe).exists():
        die("virtme-ng is not installed: run scripts/bootstrap.sh --test")
    return exe


def _with_headers(name: str, command: str) -> str:
    """The command, with BCC_KERNEL_SOURCE set where this kernel's headers were fetched (bcc compiles)."""
    hd = headers_dir(name)
    return f"env BCC_KERNEL_SOURCE={shlex.quote(str(hd))} {command}" if hd else command


STOPPING = threading.Event()  # a signal stopped the run: every guest is killed, no other boots


def _virtme_importable(env: dict[str, str]) -> None:
    """virtme-ng writes its guest init's path (inside the virtme package, in this venv) on the guest kernel's
    command line, where a space splits it: the guest panics with "no init= option". From a tree in a path
    with a space, the package is imported through a link without one (on the host's root, which the guest
    boots from)."""
    spec = importlib.util.find_spec("virtme")
    if spec is None or spec.origin is None:
        die("virtme-ng is not installed: run scripts/bootstrap.sh --test")
    site = Path(spec.origin).resolve().parent.parent
    if not any(c.isspace() for c in str(site)):
        return
    link = CACHE.parent / "virtme-site"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and Path(os.readlink(link)) == site):
        tmp = link.with_name(f"{link.name}.{os.getpid()}.{threading.get_ident()}")  # boots run in threads
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(site)
        os.replace(tmp, link)
    if any(c.isspace() for c in str(link)):
        die(f"{link}: the kernels' cache must be in a path without spaces (IOSCOPE_KERNEL_CACHE)")
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(link), env.get("PYTHONPATH", "")) if x)


def boot(name: str, command: str, out: Path, timeout: float, console: Path | None, cpus: int = 2) -> int | None:
    """Boot kernel NAME with CPUS vCPUs and run command in it; None when it did not finish in time."""
    got = installed(name)
    if not got:
        die(f"kernel {name} is not fetched: scripts/kernels.py fetch {name}")
    vmlinuz, _release = got
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    _virtme_importable(env)
    # The root is the host's, over 9p, mounted by virtme-ng's initramfs with its own fixed options (no
    # cache: a rootflags= on the command line is not read there; seen in a 5.10 guest's /proc/mounts).
    # --force-9p: virtme-ng would first try Debian 12's C virtiofsd (/usr/lib/qemu/virtiofsd) with the Rust
    # daemon's options, which it refuses ("fuse: invalid argument"), twice per boot, 3 s each.
    # Measured in a 5.10 guest beside a loaded host: `python -c pass` 2.5 s, `import numpy` 19-21 s,
    # sum(range(3e6)) 5.3 s (about 100x the host): the guests' time is their CPU, not 9p nor the clock
    # (hpet and tsc=reliable gave the same). Fewer Python start-ups per test is what shortens a guest.
    args = [vng(), "-r", str(vmlinuz), "--cpus", str(cpus), "--memory", "4G", "--disable-kvm", "--verbose",
            "--force-9p", "--rwdir", str(out), "--exec", _with_headers(name, command)]
    log = open(console, "w") if console else None
    try:
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log or None, stderr=subprocess.STDOUT,
                             env=env, cwd="/", start_new_session=True)  # not the tree: virtme-ng writes
        # its cwd on the kernel's command line (a space would split it); guest.sh finds the tree itself
        deadline = time.monotonic() + timeout
        try:
            while True:  # in steps, so that a stop (STOPPING, set by run() on a signal) ends every guest
                try:
                    return p.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    if STOPPING.is_set() or time.monotonic() > deadline:
                        os.killpg(p.pid, 9)
                        p.wait()
                        return None
        except BaseException:
            os.killpg(p.pid, 9)
            p.wait()
            raise
    finally:
        if log:
            log.close()




def guest_tests(v2: bool = False) -> list[str]:
    """The guest suite: the tests tests/kernels/selection.py marks (each with its tool as a junit
    property), given by file, so that collection imports no other test module (seconds each under TCG);
    v2: those of its cgroup v2 boot (CGROUP_V2, marked kernels_v2)."""
    sys.path.insert(0, str(ROOT / "tests"))
    sel = importlib.import_module("kernels.selection")
    selection: dict[str, object] = sel.CGROUP_V2 if v2 else sel.SELECTION
    return ["-m", "kernels_v2" if v2 else "kernels", *sorted(f"tests/{f}" for f in selection)]


V2 = " v2"  # the label of a kernel's cgroup v2 boot: "6.12 v2"


def kernel_of(label: str) -> str:
    return label.removesuffix(V2)


def tool_of(case: ET.Element) -> str:
    for prop in case.iter("property"):
        if prop.get("name") == "tool":
            return prop.get("value") or "?"
    return case.get("classname", "?").split(".")[-1].removeprefix("test_")


def results(junit: Path) -> list[tuple[str, str, str, str]]:
    """(tool, test id, outcome, message) of every test case in a junit file."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                msg = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
                break
        out.append((tool_of(case), f"{cls}::{name}", outcome, msg))
    return out


def durations(junit: Path) -> list[tuple[str, float]]:
    """(test id, seconds) of every test case in a junit file, slowest first (pytest's own timing of each
    test, its set-up and tear-down included)."""
    got = [(f"{c.get('classname', '')}::{c.get('name', '')}", float(c.get("time") or 0))
           for c in ET.parse(junit).getroot().iter("testcase")]
    return sorted(got, key=lambda t: -t[1])


@dataclass
class Outcome:
    name: str
    rows: list[tuple[str, str, str, str]]
    problem: str | None
    seconds: float
    times: list[tuple[str, float]]  # (test id, seconds), slowest first


def budget_line(o: Outcome, n: int = 5) -> str:
    """Where a boot's time went: in its tests (the slowest n named) and outside them (boot, the guest's
    set-up, pytest's start-up and collection, power-off)."""
    inside = sum(t for _, t in o.times)
    slow = ", ".join(f"{tid.rsplit('::', 1)[-1]} {t:.0f}" for tid, t in o.times[:n])
    return (f"kernels: {o.name}: {o.seconds:.0f} s = {inside:.0f} s in {len(o.times)} tests + "
            f"{max(0.0, o.seconds - inside):.0f} s outside them (boot, set-up, collection); slowest: {slow}")


def run_one(name: str, pytest_args: list[str], timeout: float, outroot: Path, cpus: int = 2) -> Outcome:
    """Boot one kernel and run the guest suite in it; its results from OUT/junit.xml and OUT/rc. name:
    the kernel's, or with V2 its cgroup v2 boot (guest.sh with IOSCOPE_GUEST_CGROUP=v2)."""
    v2 = name.endswith(V2)
    kernel = kernel_of(name)
    out = outroot / name.replace(" ", "-")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    os.chmod(out, 0o755)
    cmd = " ".join(shlex.quote(a) for a in [*(["env", "IOSCOPE_GUEST_CGROUP=v2"] if v2 else []), "sh", str(GUEST),
                                            str(out), *(pytest_args or guest_tests(v2))])
    got = installed(kernel)
    assert got is not None
    print(f"kernels: {name}: booting {got[1]} and running the guest suite (console: {out / 'console.log'})",
          file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = boot(kernel, cmd, out, timeout, out / "console.log", cpus)
    took = time.monotonic() - t0
    junit = out / "junit.xml"
    guest_rc = (out / "rc").read_text().strip() if (out / "rc").is_file() else None
    problem = None
    if rc is None:
        problem = f"did not finish in {timeout:.0f} s"
    elif not junit.is_file() or guest_rc is None:
        problem = "the guest suite did not run (see the console log)"
    elif guest_rc not in ("0", "1"):  # pytest: 0 all passed, 1 some failed (listed); else it broke
        problem = f"pytest exited {guest_rc} (see {out / 'pytest.log'})"
    return Outcome(name, results(junit) if junit.is_file() else [], problem, took,
                   durations(junit) if junit.is_file() else [])


def run(kernels: list[str], pytest_args: list[str], timeout: float, outroot: Path, jobs: int,
        cgroup: str = "both") -> int:
    """Every kernel named, in its v1 and/or cgroup v2 boot, jobs at a time (each guest one QEMU process,
    its vCPUs sharing the cores)."""
    fetch(kernels)
    # the v1 boots first (the long suites), the short v2 boots after them
    names = [k for k in kernels if cgroup != "v2"] + [k + V2 for k in kernels if cgroup != "v1"]
    outcomes: dict[str, Outcome] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        # a TCG vCPU is a host thread: guests that share the cores get one vCPU each (two guests of
        # two vCPUs on two cores: about 80 s a test; one vCPU each: 6.12's 22 tests in 288 s)
        cpus = max(1, (os.cpu_count() or 2) // max(1, min(jobs, len(names))))
        futures = {pool.submit(run_one, n, pytest_args, timeout, outroot, cpus): n for n in names}
        try:
            for fut in concurrent.futures.as_completed(futures):
                o = fut.result()
                outcomes[o.name] = o
                counts: dict[str, int] = {}
                for _tool, tid, outcome, msg in o.rows:
                    counts[outcome] = counts.get(outcome, 0) + 1
                    if outcome in ("failed", "error"):
                        print(f"kernels: {o.name}: FAILED {tid}: {msg}", file=sys.stderr)
                summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no tests"
                print(f"kernels: {o.name}: {summary} in {o.seconds:.0f} s" + (f"; {o.problem}" if o.problem else ""),
                      file=sys.stderr, flush=True)
                if o.times:
                    print(budget_line(o), file=sys.stderr, flush=True)
        except BaseException:  # SIGINT, SIGTERM, SIGHUP (_stop): no more boots, the running guests killed
            STOPPING.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    table: dict[str, dict[str, str]] = {}
    failed = False
    for name in names:
        o = outcomes[name]
        failed = failed or bool(o.problem)
        for tool, _tid, outcome, msg in o.rows:
            cell = table.setdefault(tool, {})
            if outcome in ("failed", "error"):
                failed = True
                cell[name] = "FAIL"
            elif outcome == "skipped" and NOT_APPLICABLE in msg:
                cell.setdefault(name, "n/a")  # a test that says what this kernel lacks for it
            elif outcome == "skipped":
                failed = True  # the matrix runs with CI set: a skip is a test that could not run
                cell[name] = "skip"
            elif cell.get(name) in (None, "n/a"):
                cell[name] = "ok"
    tools = sorted(table)
    if tools:
        width = max(len(t) for t in tools)
        print(f"{'tool':<{width}}  " + "  ".join(f"{n:>6}" for n in names))
        for t in tools:
            print(f"{t:<{width}}  " + "  ".join(f"{table[t].get(n, '-' if not outcomes[n].problem else '?'):>6}"
                                                for n in names))
    return 1 if failed else 0


def _stop(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP: end like Ctrl-C, so that boot() kills the guest (its own process group)."""
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    f = sub.add_parser("fetch")
    f.add_argument("names", nargs="*")
    r = sub.add_parser("run")
    r.add_argument("names", nargs="*")
    r.add_argument("--timeout", type=float, default=2400, help="seconds per kernel (default 2400)")
    r.add_argument("--out", type=Path, default=Path("/tmp/ioscope-kernels"), help="results (default %(default)s)")
    r.add_argument("-j", "--jobs", type=int, default=2, help="guests at once (default 2)")
    r.add_argument("--cgroup", choices=("v1", "v2", "both"), default=None,
                   help="the boots: v1 (io on v1 blkio: the suite), v2 (io on cgroup v2: the cgroup tests) or "
                        "both (the default without PYTEST ARGS; with them, v1)")
    e = sub.add_parser("exec")
    e.add_argument("name")
    e.add_argument("--timeout", type=float, default=1800)
    argv = sys.argv[1:]
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    if os.geteuid() != 0 and a.cmd != "list":
        die("run as root (the guest makes loop devices and loads BPF programs)")
    names = getattr(a, "names", None) or [k.name for k in MATRIX]
    for n in names:
        if n not in BY_NAME:
            die(f"unknown kernel {n!r}; the matrix: {', '.join(BY_NAME)}")
    if a.cmd == "list":
        for k in (*MATRIX, *EXTRA):
            marker = kernel_dir(k.name) / "package"
            have = marker.read_text().strip() if marker.is_file() else "not fetched"
            extra = "  (extra: not in the default matrix)" if k in EXTRA else ""
            print(f"{k.name:<7} {k.release:<36} {have}{extra}")
        print(f"{os.uname().release:<7} the running kernel (./test.sh tests it directly)")
        return 0
    if a.cmd == "fetch":
        fetch(names)
        return 0
    if a.cmd == "run":
        return run(names, rest, a.timeout, a.out, a.jobs, a.cgroup or ("v1" if rest else "both"))
    if a.cmd == "exec":
        fetch([a.name])
        if not rest:
            die("exec NAME -- COMMAND")
        out = Path(f"/tmp/ioscope-kernels/exec-{a.name}")
        out.mkdir(parents=True, exist_ok=True)
        cmd = f"sh {shlex.quote(str(GUEST))} --exec {shlex.quote(str(out))} {' '.join(shlex.quote(x) for x in rest)}"
        rc = boot(a.name, cmd, out, a.timeout, None)
        got = (out / "rc").read_text().strip() if (out / "rc").is_file() else None
        return int(got) if got is not None and rc is not None else 1
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (_stop): the guests are gone (boot kills them)
        print("kernels: interrupted; the guests were stopped", file=sys.stderr)
        sys.exit(130)
