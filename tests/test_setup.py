"""The project's own set-up installs everything its code calls.

A fresh machine has only what scripts/bootstrap.sh installs (and what every Debian system has):
a program or Python package that a tool, test or bench uses but the set-up does not install
works on a developer's machine and fails on the next one. These tests find what the code
invokes and check each against the set-up.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT, readme_setup_commands

CODE_DIRS = ("lib", "tests", "bench", "tools")
PROGRAM = re.compile(r"^[a-z][a-z0-9_.+-]*$")


def _python_files() -> list[Path]:
    out: list[Path] = []
    for d in CODE_DIRS:
        for p in (ROOT / d).rglob("*"):
            if p.is_file() and (p.suffix == ".py" or (d == "tools" and p.read_bytes()[:2] == b"#!")):
                out.append(p)
    return out


def _bootstrap_packages() -> set[str]:
    text = (ROOT / "scripts" / "bootstrap.sh").read_text()
    lists = re.findall(r'^(?:TEST_)?PKGS="([^"]*)"', text, re.M)
    assert len(lists) == 2, "scripts/bootstrap.sh has no PKGS=\"...\" and TEST_PKGS=\"...\" lists"
    return set(" ".join(lists).split())


CALLS = {"run", "Popen", "check_output", "check_call", "call", "_run", "execvp", "execv", "execlp"}


def _program_of(node: ast.expr) -> str | None:
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        first = node.elts[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and PROGRAM.match(first.value):
            return first.value
    return None


def _invoked_programs() -> dict[str, list[str]]:
    """Programs the code starts: the first word of an argument list literal given to subprocess
    (run, Popen, check_output, ...) or to a wrapper of it, or assigned to a variable named *cmd*."""
    found: dict[str, list[str]] = {}
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            cands: list[ast.expr] = []
            if isinstance(node, ast.Call) and node.args:
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
                if name in CALLS or name.startswith("run_"):
                    cands.append(node.args[0])
            elif isinstance(node, ast.Assign):
                if any(isinstance(t, ast.Name) and "cmd" in t.id.lower() for t in node.targets):
                    cands.append(node.value)
            for c in cands:
                prog = _program_of(c)
                if prog:
                    found.setdefault(prog, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


@cache
def _package_of(program: str) -> tuple[str, str] | None:
    """(Debian package, priority) that ships the program found on PATH, or None if none does."""
    where = shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if where is None:
        return None
    for candidate in dict.fromkeys([where, os.path.realpath(where),
                                    where.replace("/usr/bin/", "/bin/").replace("/usr/sbin/", "/sbin/")]):
        p = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        owners = [line.split(":")[0] for line in p.stdout.splitlines()
                  if not line.startswith("diversion ") and ":" in line]
        if p.returncode == 0 and owners:
            pkg = owners[0].split(",")[0].strip()
            prio = subprocess.run(["dpkg-query", "-W", "-f=${Priority}", pkg], capture_output=True,
                                  text=True).stdout.strip()
            return pkg, prio
    return None


def test_the_scan_finds_what_the_tests_call() -> None:
    """The finder itself: programs known to be called are found (a scan that finds nothing proves nothing)."""
    found = _invoked_programs()
    for prog in ("fio", "blkparse", "btt", "bpftool", "losetup", "mkfs.ext4", "bpftrace", "iostat", "tmux"):
        assert prog in found, prog


def test_every_program_called_is_installed_by_the_setup() -> None:
    if shutil.which("dpkg") is None:
        pytest.skip("not a Debian system: the set-up is for Debian 12")
    wanted = _bootstrap_packages()
    venv_bin = str(Path(sys.executable).parent)
    problems = []
    for prog, where in sorted(_invoked_programs().items()):
        if shutil.which(prog, path=venv_bin):
            continue  # installed into .venv from requirements-dev.txt (ruff, mypy, pytest)
        owner = _package_of(prog)
        if owner is None:
            if shutil.which(prog) is None and prog not in ("python", "python3"):
                problems.append(f"{prog} (called at {where[0]}) is not installed at all")
            continue
        pkg, prio = owner
        if pkg in wanted or prio == "required":
            continue
        problems.append(f"{prog} (called at {where[0]}) comes from Debian package {pkg} (priority {prio}), "
                        "which scripts/bootstrap.sh does not install")
    assert not problems, "\n".join(problems)


def _declared_distributions() -> set[str]:
    names = set()
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.add(re.split(r"[<>=!~\[; ]", line)[0])
    setup = (ROOT / "setup.py").read_text()
    m = re.search(r"install_requires=\[([^\]]*)\]", setup)
    assert m
    names |= {re.split(r"[<>=!~\[; ]", s.strip().strip("\"'"))[0] for s in m.group(1).split(",") if s.strip()}
    return {n.lower().replace("_", "-") for n in names}


def test_every_python_package_imported_is_declared() -> None:
    # first-party: ioscope, and every module or package (a folder with __init__.py) of tests/ and bench/
    local = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    first_party = {"ioscope", "conftest"} | {p.stem for p in local} | \
                  {p.parent.name for p in local if p.name == "__init__.py"}
    dists = importlib.metadata.packages_distributions()
    declared = _declared_distributions()
    problems = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                mods = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module.split(".")[0]]
            else:
                continue
            for mod in mods:
                if mod in sys.stdlib_module_names or mod in first_party or mod.startswith("_"):
                    continue
                owners = {d.lower().replace("_", "-") for d in dists.get(mod, [])}
                if not owners & declared:
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {mod} "
                                    f"(from {', '.join(sorted(owners)) or 'nothing installed'}), "
                                    "which neither requirements-dev.txt nor setup.py declares")
    assert not problems, "\n".join(problems)


def test_ci_runs_the_readme_test_command() -> None:
    commands = readme_setup_commands()
    assert len(commands) == 2, commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^exec {re.escape(commands[1])}\s*$", ci, re.M), ci
